"""The sub-models of composite families, read as transformers builds them: each against its own rotary module.

A composite config (Csm, Evolla, Nemotron 3.5 Transcribe, T5Gemma 2, Qwen3-Omni) keeps the configs of several
models, and transformers builds each model's rotary module from its own sub-config. Users hold those
sub-configs as transformers' config objects (``CsmConfig().depth_decoder_config``) or as the dicts a
``config.json`` nests. Each is compared here with the rotary module that transformers' model class builds
from it (``tools/_hf_probe.py``): frequencies, attention factor and the rotation of queries and keys at
positions past the default context, in float64 against the module's float32 tables.

A sub-config of no model type of its own (Evolla's protein encoder, Qwen3-Omni's code2wav) is saved by
transformers with ``model_type: ""``: its object is read by its class, and its dict by the key arrayrope's
table gives it (``composite.path``), or refused saying so.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import pytest
from _conformance import EPS32, inv_freq_rtol, table_bound, transformers_probe

import arrayrope
from arrayrope.families import FAMILIES, part_of_class

hp = transformers_probe()
import torch  # noqa: E402

# (composite model type, path of the sub-config): the sub-models the composite families' model classes build
SUB_MODELS = [
    ("csm", ("depth_decoder_config",)),
    ("evolla", ("protein_encoder_config",)),
    ("nemotron3_5_transcribe_word_timestamp", ()),
    ("t5gemma2", ("decoder",)),
    ("qwen3_omni_moe", ("code2wav_config",)),
    ("qwen3_omni_moe", ("talker_config", "text_config")),
    ("qwen3_omni_moe", ("talker_config", "code_predictor_config")),
]
POSITIONS = np.array([0, 1, 7, 100, 1000, 4097, 9000])


def _sub(composite: str, path: tuple[str, ...]) -> Any:
    """transformers' default config of ``composite`` and the sub-config object at ``path``."""
    from transformers import CONFIG_MAPPING

    with hp.quiet():
        config = CONFIG_MAPPING[composite]()
    for key in path:
        config = getattr(config, key)
    return config


_USES: dict[type, hp.Use] = {}


def _use(config_cls: type) -> hp.Use:
    if not _USES:
        for use in hp.rotary_uses():
            _USES.setdefault(use.config_cls, use)
    return _USES[config_cls]


def _ours(config: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stated key ignored with a warning is a failure here
        return arrayrope.RotaryEmbedding.from_config(config, **kwargs)


def _rotate(rope: Any, module: Any, q: np.ndarray, positions: Any, layer_type: str | None) -> tuple[Any, Any, Any]:
    """Ours (float64) and transformers' rotation of ``q`` (its module's float32 tables, applied in float64)."""
    ids = torch.from_numpy(np.asarray(positions, dtype=np.int64))
    x = torch.zeros(1, 1, 8)
    with hp.quiet(), torch.no_grad():
        out = module(x, ids, layer_type) if layer_type else module(x, ids)
    cos, sin = (t.double().numpy()[..., None, :, :] for t in out)  # (B, 1, S, W): one table for every head
    width = cos.shape[-1]  # the leading features rotate (a partial rotary width), the others pass
    half = width // 2
    part = q[..., :width]
    rotated = np.concatenate([-part[..., half:], part[..., :half]], axis=-1)
    theirs = np.concatenate([part * cos + rotated * sin, q[..., width:]], axis=-1)
    ours, _ = rope(q, q, positions=np.asarray(positions))
    return np.asarray(ours), theirs, np.max(np.abs(cos))


@pytest.mark.parametrize(("composite", "path"), SUB_MODELS, ids=[".".join((c, *p)) for c, p in SUB_MODELS])
def test_sub_model_is_read_as_transformers_builds_it(composite, path):
    config = _sub(composite, path)
    use = _use(type(config))
    module = use.rotary(config)
    labels = hp.rotary_labels(module)
    layer_type = labels[0] if labels else None
    rope = _ours(config, layer_type=layer_type)
    inv, factor = hp.module_frequencies(module, layer_type)
    assert inv is not None
    ours = np.sort(rope.freqs.inv_freq[rope.freqs.inv_freq != 0])
    assert ours.shape == inv.shape
    assert np.allclose(ours, np.sort(inv), rtol=inv_freq_rtol(rope.freqs.base * 4), atol=0)
    assert rope.freqs.attention_factor == pytest.approx(factor, rel=1e-6)
    assert rope.layout == "half"  # each of these models' attention pairs feature i with i + half
    head = rope.freqs.head_dim
    q = np.random.default_rng(0).standard_normal((1, 2, POSITIONS.size, head))
    positions = POSITIONS[None] if not FAMILIES[use.model_type].get("mrope") else np.stack([POSITIONS[None]] * 3)
    got, want, _ = _rotate(rope, module, q, positions, layer_type)
    angles = POSITIONS[:, None] * ours[None, ::-1]
    bound = 2 * np.abs(q).max() * table_bound(angles, 4 * EPS32, factor).max() + 1e-12
    assert np.max(np.abs(got - want)) <= bound, np.max(np.abs(got - want))


@pytest.mark.parametrize(("composite", "path"), SUB_MODELS, ids=[".".join((c, *p)) for c, p in SUB_MODELS])
def test_sub_model_dict_as_saved(composite, path):
    """The sub-config's dict as transformers saves it: read alike where it names a model type, refused saying what
    to pass where it is empty, and read alike with the table's key stated."""
    config = _sub(composite, path)
    saved = config.to_dict()
    labels = hp.rotary_labels(_use(type(config)).rotary(config))
    layer_type = labels[0] if labels else None
    want = _ours(config, layer_type=layer_type)
    if saved.get("model_type"):
        got = _ours(saved, layer_type=layer_type)
    else:
        key = part_of_class(type(config).__name__)
        assert key == ".".join((composite, *path))
        with pytest.raises(ValueError, match=r"model_type is empty.*config object"):
            _ours(saved, layer_type=layer_type)
        got = _ours({**saved, "model_type": key}, layer_type=layer_type)
    same = ("head_dim", "rotary_dim")
    assert [getattr(got.freqs, k) for k in same] == [getattr(want.freqs, k) for k in same]
    assert got.layout == want.layout
    assert np.array_equal(got.freqs.inv_freq, want.freqs.inv_freq)


def test_qwen3_omni_talker_mrope_sections_default_and_stated():
    """Qwen3-Omni's talker turns by M-RoPE of its module's default sections [24, 20, 20], axes taking turns, and by
    a stated ``mrope_section``: (3, B, S) positions that differ per axis, against its own rotary module."""
    base = _sub("qwen3_omni_moe", ("talker_config", "text_config"))
    rng = np.random.default_rng(1)
    ids = np.stack([rng.integers(0, 5000, (1, 9)) for _ in range(3)])
    ours = []
    for sections in (None, [48, 8, 8]):
        # the checkpoint's head dim 128: 64 pairs, which the default sections bound (the class's 64 has 32, all
        # of which any sections of at least 11 pairs per axis turn alike)
        saved = {**copy.deepcopy(base.to_dict()), "head_dim": 128}
        if sections is not None:
            saved["rope_parameters"]["mrope_section"] = sections
        with hp.quiet():
            config = type(base)(**{k: v for k, v in saved.items() if k != "model_type"})
        module = _use(type(config)).rotary(config)
        assert module.mrope_section == (sections or [24, 20, 20])
        rope = _ours(saved)
        q = np.random.default_rng(2).standard_normal((1, 2, 9, 128))
        got, want, _ = _rotate(rope, module, q, ids, None)
        angles = ids.max(axis=0)[0, :, None] * rope.freqs.inv_freq[None]
        bound = 2 * np.abs(q).max() * table_bound(angles, 4 * EPS32).max()
        assert np.max(np.abs(got - want)) <= bound, (sections, np.max(np.abs(got - want)))
        ours.append(got)
    assert np.max(np.abs(ours[0] - ours[1])) > 0.1  # the sections differ by order one: the comparison sees them
