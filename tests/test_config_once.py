"""A config is read once: one computation of its frequencies per call, one warning per cause, and what is
built from it (``RotaryEmbedding.from_config``, ``rope_frequencies_from_config``) equal to the stages called
directly with the config's documented keys."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest

import arrayrope
import arrayrope.scaling
from arrayrope.config import settings

#: YaRN with a key it does not read (one warning) and a factor that differs from the ratio of the lengths
#: (another warning): two causes.
YARN = {
    "model_type": "qwen2",
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "max_position_embeddings": 8192,
    "rope_theta": 1e6,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "unused": 1},
}
UNUSED = "are not used by rope_type 'yarn'"
FACTOR = "differs from max_position_embeddings / original_max_position_embeddings"
LLAMA4 = {"model_type": "llama4_text", "head_dim": 128, "num_hidden_layers": 8, "rope_theta": 5e5}


def _warned(call):
    """The messages of the warnings ``call()`` gives, each one reported (no filter hides a repeat)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught]


def _causes(messages):
    return sorted(cause for cause in (UNUSED, FACTOR) for m in messages if cause in m)


@pytest.mark.parametrize(
    "call",
    [
        lambda: arrayrope.RotaryEmbedding.from_config(YARN),
        lambda: arrayrope.rope_frequencies_from_config(YARN),
        lambda: arrayrope.rope_frequencies_from_config(YARN, seq_len=100_000),
        lambda: settings(YARN),
    ],
    ids=["RotaryEmbedding.from_config", "rope_frequencies_from_config", "with seq_len", "settings"],
)
def test_each_cause_warns_once(call):
    messages = _warned(call)
    assert _causes(messages) == sorted([UNUSED, FACTOR]), messages
    assert len(messages) == 2, messages


def test_one_unused_key_warns_once_through_each_entry_point():
    cfg = {**YARN, "max_position_embeddings": 16384}  # factor = 16384 / 4096: only the unused key is a cause
    for call in (
        lambda: arrayrope.RotaryEmbedding.from_config(cfg),
        lambda: arrayrope.rope_frequencies_from_config(cfg),
    ):
        messages = _warned(call)
        assert len(messages) == 1 and UNUSED in messages[0], messages


def test_a_length_dependent_type_warns_once_however_long_the_calls():
    cfg = {
        "model_type": "llama",
        "head_dim": 64,
        "max_position_embeddings": 64,
        "rope_theta": 1e4,
        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0, "unused": 1},
    }

    def build_and_call():
        rope = arrayrope.RotaryEmbedding.from_config(cfg)
        for length in (16, 128, 256):  # beyond max_position_embeddings: new NTK frequencies, no new warning
            rope(np.ones((1, 1, length, 64), np.float32))

    assert len(_warned(build_and_call)) == 1
    assert len(_warned(lambda: arrayrope.rope_frequencies_from_config(cfg, seq_len=256))) == 1


@pytest.fixture
def scale_calls(monkeypatch):
    """How many times a scaling dict is applied (``arrayrope.scaling.scale``, which rope_frequencies calls)."""
    calls = []
    original = arrayrope.scaling.scale

    def counted(*args, **kwargs):
        calls.append(kwargs.get("seq_len"))
        return original(*args, **kwargs)

    monkeypatch.setattr(arrayrope.scaling, "scale", counted)
    return calls


LLAMA31 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


@pytest.mark.parametrize("cfg", [LLAMA31, YARN], ids=["llama3", "yarn"])
def test_the_frequencies_are_computed_once_per_call(cfg, scale_calls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rope = arrayrope.RotaryEmbedding.from_config(cfg)
        assert scale_calls == [None]
        assert arrayrope.rope_frequencies_from_config(cfg) == rope.freqs
        assert scale_calls == [None, None]
        assert arrayrope.rope_frequencies_from_config(cfg, seq_len=10**6) == rope.freqs  # no length rule: the same
        assert scale_calls == [None, None, None]


def test_a_length_dependent_type_is_computed_again_only_for_its_length(scale_calls):
    cfg = {**LLAMA31, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    start = arrayrope.rope_frequencies_from_config(cfg)
    longer = arrayrope.rope_frequencies_from_config(cfg, seq_len=300_000)
    assert scale_calls == [None, None, 300_000]  # the read, and the length asked for
    direct = arrayrope.rope_frequencies(128, base=5e5, scaling=cfg["rope_scaling"], max_position_embeddings=131072)
    assert start == direct and longer == arrayrope.rope_frequencies(
        128, base=5e5, scaling=cfg["rope_scaling"], max_position_embeddings=131072, seq_len=300_000
    )
    assert not np.array_equal(longer.inv_freq, start.inv_freq)


def test_seq_len_is_checked_for_every_rope_type():
    for cfg in (LLAMA31, {"head_dim": 64, "rope_theta": 1e4}):
        with pytest.raises(ValueError, match=r"seq_len must be .*-1"):
            arrayrope.rope_frequencies_from_config(cfg, seq_len=-1)


def test_a_layer_without_rope_is_the_identity():
    rope = arrayrope.RotaryEmbedding.from_config(LLAMA4, layer_idx=3)  # no_rope_layer_interval 4: layer 3 has none
    assert rope.freqs == arrayrope.rope_frequencies_from_config(LLAMA4, layer_idx=3)
    assert rope.freqs.rope_type == "none" and rope.rotary_dim == 128 and rope.max_position_embeddings is None
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 6, 128)).astype(np.float32)
    k = rng.standard_normal((2, 2, 6, 128)).astype(np.float32)
    for kwargs in ({}, {"offset": 1000}, {"offset": np.array([3, 2**40])}, {"positions": np.arange(6) * 7919}):
        q_rot, k_rot = rope(q, k, **kwargs)
        np.testing.assert_array_equal(q_rot, q)  # the oracle: x unchanged, to the bit
        np.testing.assert_array_equal(k_rot, k)
    for clone in (copy.copy(rope), pickle.loads(pickle.dumps(rope))):
        np.testing.assert_array_equal(clone(q, offset=5), q)
    bshd = arrayrope.RotaryEmbedding.from_config(LLAMA4, layer_idx=7, axes="bshd", layout="interleaved")
    np.testing.assert_array_equal(bshd(q.transpose(0, 2, 1, 3)), q.transpose(0, 2, 1, 3))
    assert repr(bshd).startswith("RotaryEmbedding(head_dim=128, base=10000.0, rotary_dim=128, rope_type='none'")


def test_a_layer_with_rope_of_the_same_config_rotates():
    rope = arrayrope.RotaryEmbedding.from_config(LLAMA4, layer_idx=2)
    assert rope.freqs == arrayrope.rope_frequencies(128, base=5e5)


#: Configs and the keyword arguments of rope_frequencies that their documented keys give.
DIRECT = [
    (LLAMA31, {"head_dim": 128, "base": 5e5, "scaling": LLAMA31["rope_scaling"], "max_position_embeddings": 131072}),
    (
        {**YARN, "max_position_embeddings": 16384},
        {
            "head_dim": 64,
            "base": 1e6,
            "scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
            "max_position_embeddings": 16384,
        },
    ),
    (
        {"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 8, "rotary_pct": 0.25},
        {"head_dim": 64, "base": 10000.0, "rotary_dim": 16, "max_position_embeddings": 2048},
    ),
    (
        {"head_dim": 96, "rope_theta": 1e4, "partial_rotary_factor": 0.5, "max_position_embeddings": 4096},
        {"head_dim": 96, "base": 1e4, "partial_rotary_factor": 0.5, "max_position_embeddings": 4096},
    ),
    (
        {
            "model_type": "llama",
            "head_dim": 32,
            "rope_theta": 1e4,
            "max_position_embeddings": 64,
            "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
        },
        {
            "head_dim": 32,
            "base": 1e4,
            "scaling": {"rope_type": "dynamic", "factor": 2.0},
            "max_position_embeddings": 64,
        },
    ),
]


@pytest.mark.parametrize(("cfg", "direct"), DIRECT, ids=["llama3", "yarn", "gpt_neox", "partial", "dynamic"])
def test_built_from_a_config_equals_the_stages_called_directly(cfg, direct):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = arrayrope.rope_frequencies(**direct)
        rope = arrayrope.RotaryEmbedding.from_config(cfg, layout="half")
        assert arrayrope.rope_frequencies_from_config(cfg) == expected
    assert rope.freqs == expected and rope.head_dim == expected.head_dim
    kwargs = {k: v for k, v in direct.items() if k != "partial_rotary_factor"}
    by_hand = arrayrope.RotaryEmbedding(**{**kwargs, "rotary_dim": expected.rotary_dim}, layout="half")
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 2, 7, expected.head_dim)).astype(np.float32)
    for offset in (0, 90, 5000):  # dynamic: beyond max_position_embeddings the frequencies follow the length
        np.testing.assert_array_equal(rope(q, offset=offset), by_hand(q, offset=offset))
        assert rope.freqs == by_hand.freqs
