"""``rope_frequencies_from_config``: v4 and v5 layouts, precedence rules and bad files."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import arrayrope

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

LLAMA31_V4 = {
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
LLAMA31_V5 = {
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "max_position_embeddings": 131072,
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


def test_v4_and_v5_layouts_agree_and_match_the_formula():
    a = arrayrope.rope_frequencies_from_config(LLAMA31_V4)
    b = arrayrope.rope_frequencies_from_config(LLAMA31_V5)
    assert a == b and a.rope_type == "llama3" and a.base == 500000.0 and a.head_dim == 128
    # first pair: wavelength 2 pi < 8192 / 4, kept; last pair: wavelength > 8192, divided by 8
    assert a.inv_freq[0] == 1.0
    assert a.inv_freq[-1] == pytest.approx(500000.0 ** (-126 / 128) / 8, rel=1e-14)


def test_path_and_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA31_V4))
    assert arrayrope.rope_frequencies_from_config(tmp_path / "config.json") == arrayrope.rope_frequencies_from_config(
        str(tmp_path)
    )


def test_head_dim_field_wins_and_partial_rotary():
    cfg = {
        "hidden_size": 2560,
        "num_attention_heads": 32,
        "head_dim": 128,
        "partial_rotary_factor": 0.5,
        "rope_theta": 1e6,
    }
    f = arrayrope.rope_frequencies_from_config(cfg)
    assert (f.head_dim, f.rotary_dim, f.rope_type) == (128, 64, "default")
    np.testing.assert_allclose(f.inv_freq, [1e6 ** (-2 * i / 64) for i in range(32)], rtol=1e-14)
    phi2 = {"hidden_size": 2560, "num_attention_heads": 32, "partial_rotary_factor": 0.4}
    assert arrayrope.rope_frequencies_from_config(phi2).rotary_dim == 32
    neox = {"hidden_size": 2048, "num_attention_heads": 16, "rotary_pct": 0.25, "rotary_emb_base": 10000}
    assert arrayrope.rope_frequencies_from_config(neox).rotary_dim == 32


def test_type_key_and_v5_partial_rotary_inside_parameters():
    cfg = {
        "head_dim": 64,
        "rope_parameters": {"type": "linear", "factor": 2.0, "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    }
    f = arrayrope.rope_frequencies_from_config(cfg)
    assert (f.rope_type, f.rotary_dim) == ("linear", 32)
    np.testing.assert_allclose(f.inv_freq, [1e4 ** (-2 * i / 32) / 2 for i in range(16)], rtol=1e-14)


def test_dynamic_follows_seq_len():
    cfg = {"head_dim": 64, "max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2.0}}
    short = arrayrope.rope_frequencies_from_config(cfg, seq_len=100)
    np.testing.assert_array_equal(short.inv_freq, arrayrope.rope_frequencies(64).inv_freq)
    f = arrayrope.rope_frequencies_from_config(cfg, seq_len=8192)
    new_base = 1e4 * (2 * 8192 / 4096 - 1) ** (64 / 62)
    np.testing.assert_allclose(f.inv_freq, [new_base ** (-2 * i / 64) for i in range(32)], rtol=1e-13)


def test_yarn_original_length_defaults_to_max_and_top_level_wins():
    # v5: a yarn dict without original_max_position_embeddings takes max_position_embeddings (factor used as given)
    cfg = {
        "head_dim": 128,
        "max_position_embeddings": 32768,
        "rope_theta": 1e6,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
    }
    f = arrayrope.rope_frequencies_from_config(cfg)
    g = arrayrope.rope_frequencies(
        128, base=1e6, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    )
    assert f == g
    cfg2 = dict(cfg, original_max_position_embeddings=8192, max_position_embeddings=32768)
    h = arrayrope.rope_frequencies_from_config(cfg2)
    k = arrayrope.rope_frequencies(
        128, base=1e6, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
    )
    assert h == k and h != f


def _transformers_rotary(cfg, seq_len, layer_type=None):
    """``(inv_freq, attention factor)`` of transformers' own rotary module for the config dict ``cfg``
    (loaded as ``config.json`` is), after a call on positions ``0 .. seq_len - 1``."""
    import copy
    import importlib

    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    transformers.logging.set_verbosity_error()
    model_type = cfg["model_type"]
    config = transformers.CONFIG_MAPPING[model_type].from_dict(copy.deepcopy(cfg))
    family, cls = {
        "llama": ("llama", "LlamaRotaryEmbedding"),
        "phi3": ("phi3", "Phi3RotaryEmbedding"),
        "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding"),
        "glm": ("glm", "GlmRotaryEmbedding"),
    }[model_type]
    rotary = getattr(importlib.import_module(f"transformers.models.{family}.modeling_{family}"), cls)(config)
    x, positions = torch.zeros(1, 1, 1, 8), torch.arange(seq_len)[None]
    if layer_type is None:
        rotary(x, positions)
        return rotary.inv_freq.double().numpy(), float(rotary.attention_scaling)
    rotary(x, positions, layer_type)
    return (
        getattr(rotary, f"{layer_type}_inv_freq").double().numpy(),
        float(getattr(rotary, f"{layer_type}_attention_scaling")),
    )


LLAMA_SMALL = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 2,
    "head_dim": 128,
    "max_position_embeddings": 32768,
}
_F = [1.0 + i / 64 for i in range(48)]
PRECEDENCE = {
    # a top-level original_max_position_embeddings against a different one in the dict: the top level wins
    "original-yarn": {
        **LLAMA_SMALL,
        "original_max_position_embeddings": 8192,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
    },
    "original-llama3": {
        **LLAMA_SMALL,
        "rope_theta": 500000.0,
        "original_max_position_embeddings": 8192,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 2048,
        },
    },
    # Phi-3 with the dict's 4096 and the top level's 2048, called at 3000: the long factors and the top
    # level's attention factor (no factor: sqrt(1 + ln(8192 / L0) / ln L0)) are the top level's
    "original-longrope": {
        "model_type": "phi3",
        "hidden_size": 192,
        "num_attention_heads": 2,
        "max_position_embeddings": 8192,
        "original_max_position_embeddings": 2048,
        "rope_scaling": {
            "type": "longrope",
            "short_factor": _F,
            "long_factor": [4 * f for f in _F],
            "original_max_position_embeddings": 4096,
        },
    },
    # rope_scaling against a different rope_parameters: a non-empty rope_scaling wins, whole
    "scaling-over-parameters": {
        **LLAMA_SMALL,
        "rope_scaling": {"rope_type": "linear", "factor": 4.0},
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0},
    },
    "scaling-over-parameters-theta": {
        **LLAMA_SMALL,
        "rope_theta": 700.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0},
    },
    "empty-scaling": {
        **LLAMA_SMALL,
        "rope_scaling": {},
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0},
    },
    "null-scaling": {
        **LLAMA_SMALL,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0},
    },
    # the dict's rope_theta and partial_rotary_factor over the top level's; its rope_type over its type
    "theta-in-the-dict": {
        **LLAMA_SMALL,
        "rope_theta": 500.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
    },
    "partial-in-the-dict": {
        **LLAMA_SMALL,
        "model_type": "glm",
        "partial_rotary_factor": 0.25,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
    },
    "rope_type-over-type": {**LLAMA_SMALL, "rope_scaling": {"rope_type": "linear", "type": "dynamic", "factor": 2.0}},
    # rope_parameters per layer type: the top-level original_max_position_embeddings is not read there (the
    # dict's, else max_position_embeddings)
    "original-per-layer": {
        **LLAMA_SMALL,
        "model_type": "gemma3_text",
        "num_hidden_layers": 2,
        "sliding_window": 512,
        "layer_types": ["sliding_attention", "full_attention"],
        "original_max_position_embeddings": 8192,
        "rope_parameters": {
            "full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
    },
}


@pytest.mark.parametrize("name", list(PRECEDENCE))
def test_where_two_places_disagree_the_one_transformers_reads_wins(name):
    """Configs holding one value in two places, the two different: arrayrope reads the one transformers' rotary
    module computes with (after a call at 3000 positions, where Phi-3's two lengths pick different factors)."""
    cfg = PRECEDENCE[name]
    layer_type = "full_attention" if "layer_types" in cfg else None
    theirs, their_att = _transformers_rotary(cfg, 3000, layer_type)
    f = arrayrope.rope_frequencies_from_config(cfg, seq_len=3000, layer_type=layer_type)
    # transformers computes in float32: a few float32 ulps (1.2e-7 each) from the float64 values
    np.testing.assert_allclose(f.inv_freq, theirs, rtol=1e-6, atol=0)
    assert f.attention_factor == pytest.approx(their_att, rel=1e-6)


def test_per_layer_parameters_and_text_config():
    cfg = {
        "text_config": {
            "head_dim": 256,
            "max_position_embeddings": 131072,
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        }
    }
    full = arrayrope.rope_frequencies_from_config(cfg, layer_type="full_attention")
    local = arrayrope.rope_frequencies_from_config(cfg, layer_type="sliding_attention")
    assert (full.rope_type, full.base, local.rope_type, local.base) == ("linear", 1e6, "default", 1e4)
    assert full.inv_freq[0] == 1 / 8
    with pytest.raises(ValueError, match=r"per layer type \['full_attention', 'sliding_attention'\]"):
        arrayrope.rope_frequencies_from_config(cfg)


def test_longrope_attention_factor_from_lengths():
    cfg = {
        "hidden_size": 3072,
        "num_attention_heads": 24,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "rope_type": "longrope",
            "short_factor": [1.0] * 64,
            "long_factor": [2.0] * 64,
            "original_max_position_embeddings": 8192,
        },
    }
    f = arrayrope.rope_frequencies_from_config(cfg)
    assert f.attention_factor == pytest.approx(math.sqrt(1 + math.log(16) / math.log(8192)), rel=1e-14)


@pytest.mark.parametrize(
    "content, exc, match",
    [
        ("{not json", ValueError, "not valid JSON"),
        ("[1, 2]", ValueError, "JSON object"),
        (json.dumps({"hidden_size": 4096}), ValueError, r"missing \['num_attention_heads'\]"),
        (json.dumps({"num_attention_heads": 32}), ValueError, r"missing \['hidden_size'\]"),
        (
            json.dumps({"hidden_size": 4096, "num_attention_heads": 0}),
            ValueError,
            "num_attention_heads must be a positive int, got 0",
        ),
        (json.dumps({"hidden_size": 0, "num_attention_heads": 32}), ValueError, "hidden_size must be a positive int"),
        (json.dumps({"head_dim": 64, "rope_scaling": {"rope_type": "ntk"}}), ValueError, "unknown rope_type 'ntk'"),
        (json.dumps({"head_dim": 64, "rope_theta": "big"}), ValueError, "rope_theta must be a real number"),
        (
            json.dumps(
                {
                    "head_dim": 64,
                    "rope_scaling": {
                        "rope_type": "llama3",
                        "factor": 8.0,
                        "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0,
                    },
                }
            ),
            ValueError,
            "original_max_position_embeddings",
        ),
    ],
)
def test_bad_config_files(tmp_path, content, exc, match):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(exc, match=match):
        arrayrope.rope_frequencies_from_config(path)


def test_missing_file_and_wrong_type(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        arrayrope.rope_frequencies_from_config(tmp_path / "nope.json")
    with pytest.raises(TypeError, match="a transformers config or the path"):
        arrayrope.rope_frequencies_from_config(42)


def test_old_type_names():
    phi3 = {
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "su", "short_factor": [1.0] * 48, "long_factor": [2.0] * 48},
    }
    f = arrayrope.rope_frequencies_from_config(phi3, seq_len=5000)
    assert f.rope_type == "longrope"
    np.testing.assert_allclose(f.inv_freq, [1e4 ** (-2 * i / 96) / 2 for i in range(48)], rtol=1e-14)
    qwen2vl = {
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "rope_theta": 1e6,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    }
    with pytest.warns(UserWarning, match="mrope_section"):
        g = arrayrope.rope_frequencies_from_config(qwen2vl)
    np.testing.assert_allclose(g.inv_freq, [1e6 ** (-2 * i / 128) for i in range(64)], rtol=1e-14)


# ---- model families with rope settings of their own (transformers 5.x semantics; tests/conformance runs them
# against transformers itself)


def theta(d, base):
    return np.array([base ** (-2.0 * i / d) for i in range(d // 2)])


DEEPSEEK_V3 = {  # the published config.json's rope fields: no head_dim, 7168 / 128 = 56 is not a head size here
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
}


def test_deepseek_mla_rotates_the_trailing_qk_rope_head_dim():
    f = arrayrope.rope_frequencies_from_config(DEEPSEEK_V3)
    assert (f.head_dim, f.rotary_dim, f.rope_type, f.attention_factor) == (192, 64, "yarn", 1.0)
    assert f.inv_freq[0] == 1.0 and f.inv_freq[-1] == pytest.approx(theta(64, 1e4)[-1] / 40, rel=1e-13)
    rope = arrayrope.RotaryEmbedding.from_config(DEEPSEEK_V3)  # transformers' rope_interleave defaults to true
    assert (rope.head_dim, rope.rotary_dim, rope.rotary_features, rope.layout) == (192, 64, "trailing", "interleaved")
    assert arrayrope.RotaryEmbedding.from_config(dict(DEEPSEEK_V3, rope_interleave=False)).layout == "half"
    saved_v5 = dict(DEEPSEEK_V3, head_dim=64)  # transformers 5 writes head_dim = qk_rope_head_dim
    assert arrayrope.rope_frequencies_from_config(saved_v5) == f


GEMMA3_V4 = {
    "model_type": "gemma3_text",
    "head_dim": 256,
    "hidden_size": 2560,
    "num_attention_heads": 8,
    "max_position_embeddings": 131072,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "sliding_window": 1024,
}


def test_gemma3_v4_keys_give_each_layer_type_its_base():
    full = arrayrope.rope_frequencies_from_config(GEMMA3_V4, layer_type="full_attention")
    local = arrayrope.rope_frequencies_from_config(GEMMA3_V4, layer_type="sliding_attention")
    np.testing.assert_allclose(full.inv_freq, theta(256, 1e6) / 8, rtol=1e-13)
    np.testing.assert_allclose(local.inv_freq, theta(256, 1e4), rtol=1e-13)
    assert (full.rope_type, local.rope_type) == ("linear", "default")
    with pytest.raises(ValueError, match=r"differ per layer type.*pass layer_type="):
        arrayrope.rope_frequencies_from_config(GEMMA3_V4)
    bare = {k: v for k, v in GEMMA3_V4.items() if k not in ("rope_theta", "rope_local_base_freq", "rope_scaling")}
    assert arrayrope.rope_frequencies_from_config(bare, layer_type="full_attention").base == 1e6  # Gemma 3 defaults
    assert arrayrope.rope_frequencies_from_config(bare, layer_type="sliding_attention").base == 1e4


def test_model_type_defaults_and_family_keys():
    assert arrayrope.rope_frequencies_from_config({"model_type": "llama4_text", "head_dim": 128}).base == 500000.0
    assert arrayrope.rope_frequencies_from_config({"model_type": "llama", "head_dim": 128}).base == 10000.0
    neox = {"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 4}
    assert arrayrope.rope_frequencies_from_config(neox).rotary_dim == 32  # rotary_pct defaults to 0.25
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64, "n_positions": 2048}
    assert arrayrope.RotaryEmbedding.from_config(gptj).layout == "interleaved"
    assert arrayrope.rope_frequencies_from_config(gptj).rotary_dim == 64
    gemma4 = {"model_type": "gemma4_text", "head_dim": 256, "global_head_dim": 512}
    g = arrayrope.rope_frequencies_from_config(gemma4, layer_type="full_attention")
    assert (g.head_dim, g.rotary_dim, g.rope_type) == (512, 512, "proportional")
    np.testing.assert_allclose(g.inv_freq[:64], [1e6 ** (-2 * i / 512) for i in range(64)], rtol=1e-13)
    assert not np.any(g.inv_freq[64:])


def test_llama4_equal_factors_are_a_step():
    cfg = {
        "model_type": "llama4_text",
        "head_dim": 128,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 16.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
    }
    f = arrayrope.rope_frequencies_from_config(cfg)
    t = theta(128, 5e5)
    np.testing.assert_allclose(f.inv_freq, np.where(2 * np.pi / t < 8192, t, t / 16), rtol=1e-14)


def test_single_parameter_set_answers_every_declared_layer_type():
    cfg = {"head_dim": 64, "rope_theta": 1e6, "layer_types": ["full_attention", "sliding_attention"]}
    assert arrayrope.rope_frequencies_from_config(cfg, layer_type="sliding_attention").base == 1e6
    with pytest.raises(ValueError, match=r"layer_type='chunked_attention'.*do not name it"):
        arrayrope.rope_frequencies_from_config(cfg, layer_type="chunked_attention")


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"head_dim": 64, "layer_rope_theta": [1e4, 1e6]}, "'layer_rope_theta' is not supported: a base per layer"),
        ({"head_dim": 64, "rope_scaling_layers": [1, 2]}, "'rope_scaling_layers' is not supported"),
        ({"head_dim": 64, "my_rope_trick": 3}, "'my_rope_trick' looks like a rotary setting"),
        ({"head_dim": 64, "rope_scaling": {"rope_type": "axial"}}, "rope_type 'axial' is not supported"),
        ({"model_type": "llama", "head_dim": 64, "partial_rotary_factor": 0.5}, "default rope of model type 'llama'"),
        (
            {
                "head_dim": 64,
                "layer_types": ["full_attention"],
                "rope_parameters": {
                    "full_attention": {
                        "rope_type": "yarn",
                        "factor": 4.0,
                        "original_max_position_embeddings": 64,
                        "truncate": False,
                    }
                },
            },
            "reads 'truncate' from the top level",
        ),
    ],
)
def test_keys_transformers_reads_but_arrayrope_does_not_are_refused(cfg, match):
    with pytest.raises(ValueError, match=match):
        arrayrope.rope_frequencies_from_config(cfg, layer_type="full_attention" if "layer_types" in cfg else None)


# -- files that are not configs: one ValueError naming the file, the key and the problem, at once --------


def _answer(path, timeout=10.0):
    """Load ``path`` in a subprocess with 512 MB of memory and ``timeout`` seconds: (seconds, outcome)."""
    code = textwrap.dedent(f"""
        import resource, time, arrayrope
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
        t = time.perf_counter()
        try:
            arrayrope.rope_frequencies_from_config({str(path)!r})
            outcome = "loaded"
        except ValueError as exc:
            outcome = "ValueError: " + str(exc)
        print(f"{{time.perf_counter() - t:.3f}}", outcome)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, outcome = done.stdout.strip().split(" ", 1)
    return float(seconds), outcome


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    seconds, outcome = _answer(fifo)
    assert outcome == f"ValueError: config file {str(fifo)!r} is not a regular file (a FIFO)" and seconds < 1


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_devices_and_folders_without_a_config_are_refused(tmp_path):
    seconds, outcome = _answer("/dev/zero")
    assert outcome == "ValueError: config file '/dev/zero' is not a regular file (a character device)" and seconds < 1
    with pytest.raises(ValueError, match="does not exist") as info:
        arrayrope.rope_frequencies_from_config(tmp_path)  # a folder without config.json
    assert isinstance(info.value, FileNotFoundError)  # also what open() would raise


def test_a_huge_file_is_refused_unread(tmp_path):
    big = tmp_path / "config.json"
    with open(big, "wb") as fh:  # 200 MB, sparse: nothing is written
        fh.truncate(200 << 20)
    seconds, outcome = _answer(big)
    assert (
        outcome
        == (
            f"ValueError: config file {str(big)!r} has 209715200 bytes, more than the "
            f"{arrayrope.config.MAX_CONFIG_BYTES} read at most"
        )
        and seconds < 1
    )


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests JSON arrays or objects too deeply to be a config"),
        (b'{"head_dim": 64, "x": "\xff"}', "is not UTF-8 text: 'utf-8' codec can't decode byte 0xff"),
        (
            b'{"head_dim": 64, "partial_rotary_factor": []}',
            r"partial_rotary_factor must be a number in \(0, 1\], got \[\]",
        ),
        (b'{"head_dim": "64"}', "head_dim must be an int, got '64'"),
        (b'{"head_dim": 63}', "head_dim must be even"),
        (b'{"head_dim": 64, "rope_theta": NaN}', "rope_theta must be a finite number > 0, got nan"),
        (b'{"head_dim": 64, "rope_theta": 1e999}', "rope_theta must be a finite number > 0, got inf"),
        (b'{"head_dim": 64, "max_position_embeddings": 4096.5}', "max_position_embeddings must be an int, got 4096.5"),
        (
            b'{"head_dim": 64, "rope_scaling": {"rope_type": "linear", "factor": "2"}}',
            r"scaling\['factor'\] \(rope_type 'linear'\) must be a finite number, got '2'",
        ),
        (
            b'{"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_slow": -1, '
            b'"original_max_position_embeddings": 4096}}',
            r"scaling\['beta_slow'\] \(rope_type 'yarn'\) must be > 0",
        ),
        (b'{"head_dim": 64, "rope_scaling": [1, 2]}', "rope_scaling / rope_parameters must be an object"),
        (b"", "is not valid JSON"),
    ],
)
def test_every_malformed_file_is_one_value_error_naming_file_and_key(tmp_path, raw, message):
    path = tmp_path / "config.json"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=rf"^config file {re.escape(repr(str(path)))}(:| ) ?.*{message}") as info:
        arrayrope.rope_frequencies_from_config(path)
    assert type(info.value) is ValueError
    with pytest.raises(ValueError, match=message):  # the same answer through the other entry points
        arrayrope.RotaryEmbedding.from_config(tmp_path)


def test_a_dict_config_names_the_key_and_keeps_the_error_type():
    with pytest.raises(TypeError, match=r"^config: partial_rotary_factor must be a number"):
        arrayrope.rope_frequencies_from_config({"head_dim": 64, "partial_rotary_factor": []})
    with pytest.raises(ValueError, match=r"^config: head_dim must be even"):
        arrayrope.rope_frequencies_from_config({"head_dim": 63})


# ---- the table of family facts (arrayrope.families, generated from transformers; test_families checks it
# against transformers itself): a model type's facts, one that transformers lacks, layers without RoPE


def test_a_model_type_transformers_lacks_gets_what_its_config_states_and_a_layout_from_the_caller():
    cfg = {"model_type": "my_remote_model", "head_dim": 64, "rope_theta": 5e5}
    assert arrayrope.rope_frequencies_from_config(cfg).base == 5e5
    with pytest.raises(ValueError, match=r"'my_remote_model' is not among transformers 5\.24.*pass layout='half'"):
        arrayrope.RotaryEmbedding.from_config(cfg)
    assert arrayrope.RotaryEmbedding.from_config(cfg, layout="interleaved").layout == "interleaved"
    with pytest.raises(ValueError, match=r"no rope_theta, and model type 'my_remote_model' is not among"):
        arrayrope.rope_frequencies_from_config({"model_type": "my_remote_model", "head_dim": 64})
    # a config of no model type: transformers' base default base, the layout from the caller or the config
    assert arrayrope.rope_frequencies_from_config({"head_dim": 64}).base == 10000.0
    assert arrayrope.RotaryEmbedding.from_config({"head_dim": 64, "rope_interleave": True}).layout == "interleaved"


@pytest.mark.parametrize(
    "model_type, layout",
    [
        ("glm", "interleaved"),
        ("glm4", "interleaved"),
        ("ernie4_5", "interleaved"),
        ("llama", "half"),
        ("qwen3", "half"),
    ],
)
def test_pair_layouts_come_from_the_family(model_type, layout):
    cfg = {"model_type": model_type, "hidden_size": 256, "num_attention_heads": 2, "head_dim": 128}
    assert arrayrope.RotaryEmbedding.from_config(cfg).layout == layout


def test_family_defaults_for_keys_a_config_leaves_out():
    # Qwen3's class default head_dim is 128 whatever hidden_size // num_attention_heads gives; GLM's default
    # rope rotates half of the head; DeepSeek-V2 applies its rope in complex form on interleaved pairs
    qwen3 = arrayrope.rope_frequencies_from_config(
        {"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16}
    )
    assert (qwen3.head_dim, qwen3.rotary_dim) == (128, 128)
    glm = arrayrope.rope_frequencies_from_config({"model_type": "glm", "hidden_size": 4096, "num_attention_heads": 32})
    assert (glm.head_dim, glm.rotary_dim) == (128, 64)
    np.testing.assert_allclose(glm.inv_freq, theta(64, 1e4), rtol=1e-14)
    v2 = {
        "model_type": "deepseek_v2",
        "hidden_size": 5120,
        "num_attention_heads": 128,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "rope_theta": 10000,
    }
    rope = arrayrope.RotaryEmbedding.from_config(v2)
    assert (rope.head_dim, rope.rotary_dim, rope.layout, rope.rotary_features) == (192, 64, "interleaved", "trailing")


def test_hunyuan_dynamic_alpha_is_a_fixed_ntk_alpha_stretch_of_the_base():
    cfg = {
        "model_type": "hunyuan_v1_dense",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "head_dim": 128,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0},
    }
    short, long = (arrayrope.rope_frequencies_from_config(cfg, seq_len=n) for n in (16, 100_000))
    stretched = 10000.0 * 1000.0 ** (128 / 126)  # the published Hunyuan formula, whatever the length
    assert short == long and short.rope_type == "ntk_alpha"
    np.testing.assert_allclose(short.inv_freq, theta(128, stretched), rtol=1e-13)


def test_phimoe_longrope_mscales_scale_cos_and_sin_and_refuse_past_the_original_length():
    factors = [1.0 + i / 32 for i in range(32)]
    cfg = {
        "model_type": "phimoe",
        "hidden_size": 128,
        "num_attention_heads": 2,
        "max_position_embeddings": 131072,
        "rope_theta": 1e4,
        "rope_scaling": {
            "type": "longrope",
            "short_factor": factors,
            "long_factor": factors,
            "short_mscale": 1.2431,
            "long_mscale": 1.3,
            "original_max_position_embeddings": 4096,
        },
    }
    f = arrayrope.rope_frequencies_from_config(cfg, seq_len=4096)
    assert (f.rope_type, f.attention_factor) == ("longrope_mscale", 1.2431)  # not sqrt(1 + ln 32 / ln 4096)
    np.testing.assert_allclose(f.inv_freq, theta(64, 1e4) / np.array(factors), rtol=1e-14)
    with pytest.raises(ValueError, match=r"transformers keeps short_factor and scales cos and sin by long_mscale"):
        arrayrope.rope_frequencies_from_config(cfg, seq_len=4097)


def test_layers_without_rope_get_the_identity():
    llama4 = {"model_type": "llama4_text", "head_dim": 128, "num_hidden_layers": 8, "rope_theta": 5e5}
    none = arrayrope.rope_frequencies_from_config(llama4, layer_idx=3)  # every 4th layer: no_rope_layer_interval 4
    assert none.rope_type == "none" and not np.any(none.inv_freq) and none.head_dim == 128
    assert arrayrope.rope_frequencies_from_config(llama4, layer_idx=2).inv_freq[1] == pytest.approx(5e5 ** (-2 / 128))
    flags = dict(llama4, no_rope_layers=[1, 0, 1, 1, 1, 1, 1, 1])  # 1: the layer rotates (transformers' meaning)
    assert arrayrope.rope_frequencies_from_config(flags, layer_idx=1).rope_type == "none"
    assert arrayrope.rope_frequencies_from_config(flags, layer_idx=3).rope_type == "default"
    rope = arrayrope.RotaryEmbedding.from_config(llama4, layer_idx=7)
    q = np.random.default_rng(0).standard_normal((1, 2, 5, 128)).astype(np.float32)
    np.testing.assert_array_equal(rope(q, offset=1000), q)  # cos 1, sin 0: exactly the input
    # Cohere 2: every 4th layer is full attention, which transformers' Cohere 2 rotates not at all
    cohere2 = {
        "model_type": "cohere2",
        "head_dim": 128,
        "num_hidden_layers": 8,
        "rope_theta": 5e4,
        "sliding_window_pattern": 4,
    }
    assert arrayrope.rope_frequencies_from_config(cohere2, layer_idx=3).rope_type == "none"
    assert arrayrope.rope_frequencies_from_config(cohere2, layer_idx=2).rope_type == "default"
    assert arrayrope.rope_frequencies_from_config(cohere2, layer_type="full_attention").rope_type == "none"
    with pytest.raises(ValueError, match="layer_idx=8 but layer_types names 8 layers"):
        arrayrope.rope_frequencies_from_config(cohere2, layer_idx=8)


def test_multimodal_configs_are_read_where_their_family_keeps_the_language_model():
    text = {"hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1e6}
    omni = {"model_type": "qwen2_5_omni", "thinker_config": {"text_config": text}}
    assert arrayrope.rope_frequencies_from_config(omni).head_dim == 128
    flat = {"model_type": "qwen2_vl", **text}  # older Qwen2-VL files keep the text settings at the top level
    assert arrayrope.rope_frequencies_from_config(flat).base == 1e6
    llava = {"model_type": "llava", "text_config": {"model_type": "mistral", "head_dim": 128, "rope_theta": 1e6}}
    assert arrayrope.RotaryEmbedding.from_config(llava).layout == "half"


def test_families_arrayrope_does_not_read_say_why():
    with pytest.raises(ValueError, match=r"'qwen2_5_omni_dit' is not read by arrayrope: .* some of its heads only"):
        arrayrope.RotaryEmbedding.from_config({"model_type": "qwen2_5_omni_dit", "head_dim": 64, "rope_theta": 1e4})
    with pytest.raises(ValueError, match=r"'pixtral' is not read by arrayrope: the 2-D \(axial\) rope"):
        arrayrope.rope_frequencies_from_config({"model_type": "pixtral", "head_dim": 64})
    with pytest.raises(ValueError, match=r"learned parameters \['alpha'\]"):
        arrayrope.rope_frequencies_from_config({"model_type": "mistral_large4_text", "head_dim": 64})


def test_mrope_sections_from_the_config_or_the_family():
    """M-RoPE families: mrope_section as stated, else the family's default; interleaving is the family's."""
    from arrayrope.config import settings

    assert settings({"model_type": "qwen3_vl", "text_config": {"head_dim": 128}}).mrope == ((24, 20, 20), True)
    glm = {"model_type": "glm4v_text", "head_dim": 128, "partial_rotary_factor": 0.5}
    assert settings(glm).mrope == ((8, 12, 12), False)
    stated = {
        "model_type": "qwen2_vl_text",
        "head_dim": 128,
        "rope_scaling": {"type": "mrope", "mrope_section": [32, 16, 16]},
    }
    assert settings(stated).mrope == ((32, 16, 16), False)
    assert settings({"model_type": "llama", "head_dim": 64}).mrope is None
    with pytest.raises(ValueError, match="mrope_section must be a list of positive ints"):
        settings({"model_type": "qwen2_vl_text", "head_dim": 128, "rope_parameters": {"mrope_section": [16, -24, 24]}})


def test_rope_parameters_of_one_layer_type_need_no_layer_type():
    """Cohere Compass keeps its rope parameters under its one layer type: nothing to choose, they are read; a
    config whose layer_types name another type (which transformers finds no parameters for) still asks."""
    from arrayrope.config import settings

    cfg = {
        "model_type": "cohere_compass_text",
        "hidden_size": 256,
        "num_attention_heads": 2,
        "rope_parameters": {"full_attention": {"rope_theta": 5e4, "mrope_section": [20, 6, 6]}},
    }
    s = settings(cfg)
    assert (s.base, s.mrope) == (5e4, ((20, 6, 6), True))
    assert settings(cfg, layer_type="full_attention").mrope == ((20, 6, 6), True)
    with pytest.raises(ValueError, match="pass layer_type="):
        settings({**cfg, "num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"]})


def test_mrope_of_a_refused_family_refuses_its_positions_with_the_reason(monkeypatch):
    """A family whose multimodal RoPE the table records as refused (none in this release; HunYuan-VL's once,
    given here as such an entry): positions (axes, B, S) are refused saying why; text positions are 1-D RoPE."""
    from arrayrope import families

    why = "its multimodal rope: the two features of its rotary pairs turn by the positions of different axes"
    entry = {**families.FAMILIES["hunyuan_vl_text"], "mrope": {"refused": why}}
    monkeypatch.setitem(families.FAMILIES, "hunyuan_vl_text", entry)
    monkeypatch.setattr(families, "_CACHE", {})
    rope = arrayrope.RotaryEmbedding.from_config(
        {"model_type": "hunyuan_vl_text", "hidden_size": 256, "num_attention_heads": 2}
    )
    q = np.ones((1, 2, 4, 128))
    assert rope(q, q, positions=np.arange(4)[None])[0].shape == q.shape
    with pytest.raises(ValueError, match=r"\(3, 1, 4\).*hunyuan_vl_text.*different axes"):
        rope(q, q, positions=np.zeros((3, 1, 4), dtype=np.int64))
    plain = arrayrope.RotaryEmbedding.from_config({"model_type": "llama", "head_dim": 64})
    with pytest.raises(ValueError, match="pass mrope_sections="):  # no M-RoPE at all: what to pass
        plain(q[..., :64], positions=np.zeros((3, 1, 4), dtype=np.int64))


@pytest.mark.parametrize(
    "stated", [{"partial_rotary_factor": 1.0}, {"rope_parameters": {"partial_rotary_factor": 1.0}}]
)
def test_a_partial_factor_of_1_where_the_family_ignores_the_key_reads_as_the_whole_head(stated):
    """Llama's default rope ignores partial_rotary_factor: 1.0 says the same as the code (the whole head), any other
    value contradicts it and is refused. Oracle: transformers' own rotary module for that config."""
    tf = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    sizes = {"hidden_size": 256, "num_attention_heads": 4, "rope_theta": 10000.0}
    rope = dict(stated.get("rope_parameters", {}), rope_type="default", rope_theta=10000.0)
    top = {k: v for k, v in stated.items() if k != "rope_parameters"}
    module = tf.models.llama.modeling_llama.LlamaRotaryEmbedding(
        config=tf.LlamaConfig(**sizes, **top, rope_parameters=rope)
    )
    config = {"model_type": "llama", **sizes, **stated}
    freqs = arrayrope.rope_frequencies_from_config(config)
    assert freqs.rotary_dim == freqs.head_dim == 2 * module.inv_freq.numel() == 64
    np.testing.assert_allclose(freqs.inv_freq, module.inv_freq.double().numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="ignores it and rotates the whole head"):
        arrayrope.rope_frequencies_from_config({"model_type": "llama", **sizes, "partial_rotary_factor": 0.5})


def test_transformers_config_objects_are_taken_wherever_a_config_is(tmp_path):
    """A PretrainedConfig, as users hold it: the same frequencies as its config.json and its dict (the oracle:
    transformers' own rotary module for the frequencies), from every entry point that takes a config."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = transformers.LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_hidden_layers=2,
        max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024,
        },
    )
    cfg.save_pretrained(tmp_path)
    want = LlamaRotaryEmbedding(config=cfg).inv_freq.to(torch.float64).numpy()
    for given in (cfg, cfg.to_dict(), tmp_path):
        freqs = arrayrope.rope_frequencies_from_config(given)
        assert np.allclose(freqs.inv_freq, want, rtol=1e-6, atol=0), given
        assert arrayrope.RotaryEmbedding.from_config(given).freqs.inv_freq.tolist() == freqs.inv_freq.tolist()
    with pytest.raises(TypeError, match=r"a transformers config or the path of a config\.json, got int"):
        arrayrope.rope_frequencies_from_config(3)


def test_a_model_type_without_rope_says_so():
    """A config of a family without RoPE (BERT's) is refused as describing no rotary embedding, not as an unknown
    model type."""
    with pytest.raises(ValueError, match=r"'bert' is not among transformers 5\.24\S* families with RoPE.*no rotary"):
        arrayrope.RotaryEmbedding.from_config({"model_type": "bert", "hidden_size": 768, "num_attention_heads": 12})
