"""Hugging Face transformers: every rope type, and the model families with rope settings of their own.

Each case is a config dict as a ``config.json`` holds it. transformers loads it
(``CONFIG_MAPPING[model_type].from_dict``) and runs its own rotary module and apply function;
arrayrope reads the same dict (:func:`arrayrope.rope_frequencies_from_config`,
:meth:`arrayrope.RotaryEmbedding.from_config`). Compared: ``inv_freq`` and the attention
factor, cos/sin tables, rotated q and k in float32, float16 and bfloat16 (transformers computes
its tables in float32 only), and :func:`identify_rope` on the module. Tolerances: see
``_conformance``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _conformance import EPS, inv_freq_rtol, rotate64, rotation_bound, table_bound

import arrayrope
from arrayrope.testing import identify_rope

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")
from transformers import CONFIG_MAPPING  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

transformers.logging.set_verbosity_error()
DTYPES = ("float32", "float16", "bfloat16")
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def models(name: str) -> Any:
    import importlib

    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


@dataclasses.dataclass
class Case:
    """One config and how transformers applies it."""

    family: str
    cfg: dict
    layout: str = "half"
    layer_type: str | None = None
    positions: tuple[int, ...] = (*range(48), 1000, 4095, 20000)
    # (config, layer_type) -> fn(q, k, positions) -> (cos (S, r/2), sin (S, r/2), q_rot, k_rot, inv_freq, att); bhsd
    run: Callable[..., Any] | None = None
    trailing: bool = False

    @property
    def rope_type(self) -> str:
        params = self.cfg.get("rope_scaling") or self.cfg.get("rope_parameters") or {}
        if self.layer_type is not None and self.layer_type in params:
            params = params[self.layer_type]
        return params.get("rope_type", params.get("type", "default"))


def llama_style(module: str, cls: str, *, layer_arg: bool = False, interleave: str | None = None, one: bool = False):
    """Modules returning ``(cos, sin)`` for ``(x, position_ids[, layer_type])`` and an ``apply_rotary_pos_emb``."""

    def run(config, layer_type, q, k, positions):
        mod = models(module)
        rot = getattr(mod, cls)(config)
        pos = torch.from_numpy(positions)[None]
        cos, sin = rot(q, pos, layer_type) if layer_arg else rot(q, pos)
        inv = getattr(rot, f"{layer_type}_inv_freq" if layer_arg else "inv_freq")
        att = getattr(rot, f"{layer_type}_attention_scaling" if layer_arg else "attention_scaling")
        h = cos.shape[-1] // 2
        if interleave == "deepseek":  # q_pe trails q_nope; the kernel writes its output in half-split order
            r = 2 * h
            qr, kr = mod.apply_rotary_pos_emb_interleave(q[..., -r:], k[..., -r:], cos, sin)
            q_rot, k_rot = torch.cat([q[..., :-r], qr], -1), torch.cat([k[..., :-r], kr], -1)
        elif one:  # apply_rotary_pos_emb(x, cos, sin)
            q_rot, k_rot = mod.apply_rotary_pos_emb(q, cos, sin), mod.apply_rotary_pos_emb(k, cos, sin)
        else:
            q_rot, k_rot = mod.apply_rotary_pos_emb(q, k, cos, sin)
        tab = (cos[0, :, ::2], sin[0, :, ::2]) if interleave == "repeat" else (cos[0, :, :h], sin[0, :, :h])
        return (*(t.float().numpy().astype(np.float64) for t in tab), q_rot, k_rot, inv.double().numpy(), float(att))

    return run


def llama4_run(config, layer_type, q, k, positions):
    mod = models("llama4")
    rot = mod.Llama4TextRotaryEmbedding(config)
    cis = rot(q, torch.from_numpy(positions)[None])
    qr, kr = mod.apply_rotary_emb(q.transpose(1, 2), k.transpose(1, 2), cis)  # it takes (B, S, H, D)
    tab = cis[0]
    return (
        tab.real.double().numpy(),
        tab.imag.double().numpy(),
        qr.transpose(1, 2),
        kr.transpose(1, 2),
        rot.inv_freq.double().numpy(),
        float(rot.attention_scaling),
    )


def gptj_run(config, layer_type, q, k, positions):
    """GPT-J's attention: a table of n_positions rows (built once), indexed by the positions (beyond: IndexError)."""
    mod = models("gptj")
    r = config.rotary_dim
    if not hasattr(config, "_sincos"):
        config._sincos = mod.create_sinusoidal_positions(config.max_position_embeddings, r)
    table = config._sincos[torch.from_numpy(positions)]
    sin, cos = table[None, :, : r // 2], table[None, :, r // 2 :]

    def rot(x):
        x = x.transpose(1, 2)
        out = torch.cat([mod.apply_rotary_pos_emb(x[..., :r], sin, cos), x[..., r:]], -1)
        return out.transpose(1, 2).to(x.dtype)

    inv = 1.0 / (10000 ** (torch.arange(0, r, 2, dtype=torch.int64) / r))
    return cos[0].double().numpy(), sin[0].double().numpy(), rot(q), rot(k), inv.double().numpy(), 1.0


LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 2,
    "head_dim": 128,
    "max_position_embeddings": 4096,
}
LONG = (*range(24), 1000, 5000, 9000)  # past max_position_embeddings (dynamic) and the original length (longrope)
_rng = np.random.default_rng(7)
SHORT_F, LONG_F = (_rng.uniform(1.0, 1.5, 64).round(3).tolist(), _rng.uniform(1.0, 8.0, 64).round(3).tolist())
LLAMA_RUN = llama_style("llama", "LlamaRotaryEmbedding")

CASES = [
    Case("Llama", {**LLAMA, "rope_theta": 500000.0}, run=LLAMA_RUN),
    Case("Llama", {**LLAMA, "rope_theta": 1e7}, run=LLAMA_RUN),
    Case("Llama", {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}, run=LLAMA_RUN),
    Case("Llama", {**LLAMA, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, run=LLAMA_RUN),
    Case("Llama", {**LLAMA, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, run=LLAMA_RUN, positions=LONG),
    Case(
        "Llama",
        {
            **LLAMA,
            "rope_theta": 1e6,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
        },
        run=LLAMA_RUN,
    ),
    Case(
        "Llama",
        {
            **LLAMA,
            "rope_theta": 1e4,
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 4.0,
                "beta_fast": 16,
                "original_max_position_embeddings": 1024,
                "truncate": False,
                "attention_factor": 1.2,
            },
        },
        run=LLAMA_RUN,
    ),
    Case(
        "Llama",
        {
            **LLAMA,
            "rope_scaling": {
                "rope_type": "longrope",
                "short_factor": SHORT_F,
                "long_factor": LONG_F,
                "original_max_position_embeddings": 2048,
            },
        },
        run=LLAMA_RUN,
        positions=tuple(range(48)),
    ),
    Case(
        "Llama",
        {
            **LLAMA,
            "rope_scaling": {
                "rope_type": "longrope",
                "short_factor": SHORT_F,
                "long_factor": LONG_F,
                "original_max_position_embeddings": 2048,
            },
        },
        run=LLAMA_RUN,
        positions=LONG,
    ),
    Case(
        "Llama 3.1",
        {
            **LLAMA,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
        run=LLAMA_RUN,
    ),
    Case(
        "Llama 4",
        {
            **LLAMA,
            "model_type": "llama4_text",
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "intermediate_size_mlp": 64,
            "intermediate_size": 64,
            "num_hidden_layers": 4,
            "no_rope_layers": [1, 1, 1, 0],
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 16.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
            },
        },
        layout="interleaved",
        run=llama4_run,
    ),
    Case(
        "Qwen2", {**LLAMA, "model_type": "qwen2", "rope_theta": 1e6}, run=llama_style("qwen2", "Qwen2RotaryEmbedding")
    ),
    Case(
        "Phi-3",
        {
            "model_type": "phi3",
            "hidden_size": 192,
            "num_attention_heads": 2,
            "max_position_embeddings": 8192,
            "original_max_position_embeddings": 2048,
            "partial_rotary_factor": 0.5,
            "rope_scaling": {"type": "longrope", "short_factor": SHORT_F[:24], "long_factor": LONG_F[:24]},
        },
        run=llama_style("phi3", "Phi3RotaryEmbedding"),
        positions=LONG,
    ),
    Case(
        "GPT-NeoX",
        {
            "model_type": "gpt_neox",
            "hidden_size": 256,
            "num_attention_heads": 2,
            "rotary_pct": 0.25,
            "rotary_emb_base": 20000,
            "max_position_embeddings": 4096,
        },
        run=llama_style("gpt_neox", "GPTNeoXRotaryEmbedding"),
    ),
    Case(
        "GPT-J",
        {"model_type": "gptj", "n_embd": 256, "n_head": 2, "rotary_dim": 64, "n_positions": 32768},
        layout="interleaved",
        run=gptj_run,
    ),
    Case(
        "Cohere",
        {**LLAMA, "model_type": "cohere", "rope_theta": 8e6},
        layout="interleaved",
        run=llama_style("cohere", "CohereRotaryEmbedding", interleave="repeat"),
    ),
    Case(
        "Gemma 3 (v4)",
        {
            **LLAMA,
            "model_type": "gemma3_text",
            "rope_theta": 1e6,
            "rope_local_base_freq": 10000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "sliding_window": 512,
        },
        layer_type="full_attention",
        run=llama_style("gemma3", "Gemma3RotaryEmbedding", layer_arg=True),
    ),
    Case(
        "Gemma 3 (v4)",
        {
            **LLAMA,
            "model_type": "gemma3_text",
            "rope_theta": 1e6,
            "rope_local_base_freq": 10000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "sliding_window": 512,
        },
        layer_type="sliding_attention",
        run=llama_style("gemma3", "Gemma3RotaryEmbedding", layer_arg=True),
    ),
    Case(
        "Gemma 3 (v5)",
        {
            **LLAMA,
            "model_type": "gemma3_text",
            "layer_types": ["sliding_attention", "full_attention"],
            "num_hidden_layers": 2,
            "sliding_window": 512,
            "rope_parameters": {
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
        },
        layer_type="sliding_attention",
        run=llama_style("gemma3", "Gemma3RotaryEmbedding", layer_arg=True),
    ),
    Case(
        "ModernBERT",
        {
            "model_type": "modernbert",
            "hidden_size": 256,
            "num_attention_heads": 2,
            "global_rope_theta": 160000.0,
            "local_rope_theta": 10000.0,
            "max_position_embeddings": 8192,
        },
        layer_type="full_attention",
        run=llama_style("modernbert", "ModernBertRotaryEmbedding", layer_arg=True),
    ),
    Case(
        "ModernBERT",
        {
            "model_type": "modernbert",
            "hidden_size": 256,
            "num_attention_heads": 2,
            "global_rope_theta": 160000.0,
            "local_rope_theta": 10000.0,
            "max_position_embeddings": 8192,
        },
        layer_type="sliding_attention",
        run=llama_style("modernbert", "ModernBertRotaryEmbedding", layer_arg=True),
    ),
    Case(
        "Gemma 4",
        {
            **LLAMA,
            "model_type": "gemma4_text",
            "head_dim": 64,
            "global_head_dim": 128,
            "layer_types": ["sliding_attention", "full_attention"],
            "num_hidden_layers": 2,
            "rope_parameters": {
                "full_attention": {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
        },
        layer_type="full_attention",
        run=llama_style("gemma4", "Gemma4TextRotaryEmbedding", layer_arg=True, one=True),
    ),
    Case(
        "DeepSeek-V3",
        {
            "model_type": "deepseek_v3",
            "hidden_size": 256,
            "num_attention_heads": 2,
            "qk_nope_head_dim": 32,
            "qk_rope_head_dim": 64,
            "v_head_dim": 32,
            "kv_lora_rank": 32,
            "q_lora_rank": 48,
            "max_position_embeddings": 163840,
            "rope_interleave": True,
            "rope_scaling": {
                "type": "yarn",
                "factor": 40.0,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
        },
        layout="interleaved",
        trailing=True,
        run=llama_style("deepseek_v3", "DeepseekV3RotaryEmbedding", interleave="deepseek"),
    ),
]
IDS = [f"{c.family}-{c.rope_type}-{c.layer_type or c.layout}-{len(c.positions)}pos" for c in CASES]


def _hf_config(case: Case) -> Any:
    cfg = copy.deepcopy(case.cfg)
    return CONFIG_MAPPING[cfg["model_type"]].from_dict(cfg)


def _torch(x: np.ndarray, dtype: str) -> Any:
    return torch.from_numpy(x).to(TORCH[dtype])


def _np(t: Any) -> np.ndarray:
    return t.float().numpy().astype(np.float64) if t.dtype == torch.bfloat16 else t.numpy().astype(np.float64)


def _seq_len(case: Case) -> int:
    return max(case.positions) + 1


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_frequencies_and_tables(case, record):
    hf = _hf_config(case)
    pos = np.array(case.positions, dtype=np.int64)
    q = np.zeros((1, 1, pos.size, 8), dtype=np.float32)
    f = arrayrope.rope_frequencies_from_config(case.cfg, layer_type=case.layer_type, seq_len=_seq_len(case))
    d = f.head_dim
    q = np.zeros((1, 1, pos.size, d), dtype=np.float32)
    cos_l, sin_l, _, _, inv_l, att_l = case.run(hf, case.layer_type, _torch(q, "float32"), _torch(q, "float32"), pos)

    # inv_freq (after the call: dynamic and longrope pick theirs by length) and the attention factor
    inv = f.inv_freq
    assert inv_l.shape == inv.shape, (inv_l.shape, inv.shape)
    rel_inv = float(np.max(np.abs(inv_l - inv) / np.where(inv == 0, 1.0, inv)))
    assert rel_inv <= inv_freq_rtol(f.base * 4), rel_inv
    assert math.isclose(att_l, f.attention_factor, rel_tol=1e-12), (att_l, f.attention_factor)

    # cos/sin at the case's positions: arrayrope's (float64) against the float64 formula and the library's
    cos, sin = arrayrope.rope_tables(f, pos, dtype=np.float64)
    angles = pos[:, None].astype(np.float64) * inv
    exact_c, exact_s = f.attention_factor * np.cos(angles), f.attention_factor * np.sin(angles)
    ours = max(float(np.max(np.abs(cos - exact_c))), float(np.max(np.abs(sin - exact_s))))
    assert ours <= 4 * EPS["float64"] * max(1.0, float(np.max(np.abs(angles))))
    bound = table_bound(angles, rel_inv, f.attention_factor)
    diff = np.maximum(np.abs(cos_l - cos), np.abs(sin_l - sin))
    assert np.all(diff <= bound), float(np.max(diff - bound))
    lib = max(float(np.max(np.abs(cos_l - exact_c))), float(np.max(np.abs(sin_l - exact_s))))
    record(
        library="transformers",
        family=case.family,
        rope_type=case.rope_type,
        layout=case.layout,
        compared="inv_freq, attention factor, cos/sin",
        dtype="float32",
        max_error=float(np.max(diff)),
        library_error=lib,
        arrayrope_error=ours,
        tolerance=float(np.max(bound)),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_rotated_q_and_k(case, dtype, record):
    hf = _hf_config(case)
    pos = np.array(case.positions, dtype=np.int64)
    rope = arrayrope.RotaryEmbedding.from_config(case.cfg, layer_type=case.layer_type)
    assert rope.layout == case.layout and (rope.rotary_features == "trailing") == case.trailing
    d = rope.head_dim
    rng = np.random.default_rng(0)
    q64 = rng.standard_normal((2, 3, pos.size, d))
    k64 = rng.standard_normal((2, 1, pos.size, d))  # grouped-query keys
    qt, kt = _torch(q64, dtype), _torch(k64, dtype)
    q_in, k_in = _np(qt), _np(kt)  # the values both libraries see, rounded to dtype
    _, _, q_l, k_l, inv_l, _ = case.run(hf, case.layer_type, qt, kt, pos)
    assert q_l.dtype == TORCH[dtype]
    f = (
        rope.freqs
        if case.rope_type not in ("dynamic", "longrope")
        else arrayrope.rope_frequencies_from_config(case.cfg, layer_type=case.layer_type, seq_len=_seq_len(case))
    )
    q_a, k_a = rope(qt, kt, positions=torch.from_numpy(pos), seq_len=_seq_len(case))
    assert q_a.dtype == TORCH[dtype] and q_a.shape == qt.shape

    angles = pos[:, None] * f.inv_freq
    rel_inv = float(np.max(np.abs(inv_l - f.inv_freq) / np.where(f.inv_freq == 0, 1.0, f.inv_freq)))
    lib_table = table_bound(angles, rel_inv, f.attention_factor) + (EPS[dtype] if dtype != "float32" else 0.0)
    worst = {"max_error": 0.0, "library_error": 0.0, "arrayrope_error": 0.0, "tolerance": 0.0}
    layout = case.layout
    for x_in, lib, ours in ((q_in, q_l, q_a), (k_in, k_l, k_a)):
        exact = rotate64(
            x_in,
            angles,
            "half" if case.family == "DeepSeek-V3" else layout,
            att=f.attention_factor,
            trailing=case.trailing,
        )
        if case.family == "DeepSeek-V3":  # transformers' output is the half-split order of the interleaved pairs
            exact_ours = rotate64(x_in, angles, "interleaved", att=f.attention_factor, trailing=True)
            r = 2 * angles.shape[-1]
            x_half = np.concatenate([x_in[..., :-r], arrayrope.to_half_split(x_in[..., -r:])], -1)
            exact = rotate64(x_half, angles, "half", att=f.attention_factor, trailing=True)
        else:
            exact_ours = exact
        ours_err = np.abs(_np(ours) - exact_ours)
        ours_bound = rotation_bound(x_in, np.zeros_like(angles), dtype, layout, trailing=case.trailing)
        assert np.all(ours_err <= ours_bound), float(np.max(ours_err - ours_bound))
        if case.family == "DeepSeek-V3":  # same result after the checkpoint permutation of q_pe / k_pe
            ours_h = rope.__class__.from_config(case.cfg, layout="half")(
                torch.from_numpy(x_half).to(TORCH[dtype]), positions=torch.from_numpy(pos)
            )
            ours = ours_h
        lib_err = np.abs(_np(lib) - exact)
        x_lib = x_half if case.family == "DeepSeek-V3" else x_in
        bound = (
            rotation_bound(
                x_lib, lib_table, dtype, "half" if case.family == "DeepSeek-V3" else layout, trailing=case.trailing
            )
            + ours_bound
        )
        diff = np.abs(_np(lib) - _np(ours))
        assert np.all(diff <= bound), float(np.max(diff - bound))
        for key, v in (
            ("max_error", diff),
            ("library_error", lib_err),
            ("arrayrope_error", ours_err),
            ("tolerance", bound),
        ):
            worst[key] = max(worst[key], float(np.max(v)))
    record(
        library="transformers",
        family=case.family,
        rope_type=case.rope_type,
        layout=case.layout,
        compared="rotated q, k (GQA)",
        dtype=dtype,
        **worst,
    )


# identify_rope in float32 on every module whose frequencies a probe can see (dynamic and longrope pick theirs by
# length), and in float16 and bfloat16 on the ones of the issue (Llama 3.1, Llama 4, YaRN, DeepSeek, base 1e7)
IDENTIFY = [
    pytest.param(c, dtype, id=f"{c.family}-{c.rope_type}-{c.layer_type or c.layout}-{dtype}")
    for c in CASES
    if c.rope_type not in ("dynamic", "longrope")
    for dtype in DTYPES
    if dtype == "float32" or c.family in ("Llama 3.1", "Llama 4", "DeepSeek-V3") or c.cfg.get("rope_theta") == 1e7
]


@pytest.mark.parametrize("case, dtype", IDENTIFY)
def test_identify_rope_names_the_module(case, dtype, record):
    hf = _hf_config(case)
    f = arrayrope.rope_frequencies_from_config(case.cfg, layer_type=case.layer_type)
    tdt = TORCH[dtype]

    def fn(x, positions):
        if case.family == "DeepSeek-V3":  # the checkpoint's q_pe in its interleaved order (rope_interleave)
            r = f.rotary_dim
            x = np.concatenate([x[..., :-r], arrayrope.to_interleaved(x[..., -r:])], axis=-1)
        t = torch.from_numpy(np.ascontiguousarray(x)).to(tdt)
        return case.run(hf, case.layer_type, t, t, positions)[2]

    found = identify_rope(fn, head_dim=f.head_dim, dtype="float32", seq_len=8)
    assert found.matched, found
    assert found.layout == ("half" if case.family == "DeepSeek-V3" else case.layout), found
    assert found.rotary_features == ("trailing" if case.trailing else "leading")
    assert found.base == f.base and found.offset == 0
    inv = arrayrope.RotaryEmbedding(**found.embedding_kwargs()).freqs.inv_freq
    np.testing.assert_allclose(inv, f.inv_freq, rtol=1e-6, atol=1e-12)
    assert math.isclose(found.attention_factor, f.attention_factor, rel_tol=1e-6)
    record(
        library="transformers",
        family=case.family,
        rope_type=case.rope_type,
        layout=case.layout,
        compared="identify_rope on the module",
        dtype=dtype,
        max_error=found.max_error,
        library_error=float("nan"),
        arrayrope_error=float("nan"),
        tolerance=float("nan"),
    )


def test_every_rope_type_of_transformers_is_known_or_refused():
    from arrayrope.scaling import ALIASES, REFUSED, ROPE_TYPES

    known = set(ROPE_TYPES) | set(REFUSED) | set(ALIASES)
    assert set(ROPE_INIT_FUNCTIONS) <= known, set(ROPE_INIT_FUNCTIONS) - known


def test_multimodal_rope_sections_of_qwen2_vl(record):
    """mrope_section: the pairs of each section turn by that axis' positions (temporal, height, width)."""
    cfg = {
        "model_type": "qwen2_vl_text",
        "hidden_size": 256,
        "num_attention_heads": 2,
        "rope_theta": 1e6,
        "max_position_embeddings": 4096,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    }
    hf = CONFIG_MAPPING["qwen2_vl_text"].from_dict(copy.deepcopy(cfg))
    rot = models("qwen2_vl").Qwen2VLRotaryEmbedding(hf)
    rng = np.random.default_rng(1)
    pos = rng.integers(0, 3000, size=(3, 2, 20))
    x = torch.zeros(2, 20, 128)
    cos_l, sin_l = rot(x, torch.from_numpy(pos))
    f = arrayrope.rope_frequencies_from_config(cfg)  # the family's mrope_section is read, not ignored
    cos, sin = arrayrope.mrope_tables(f, pos, sections=(16, 24, 24), dtype=np.float64)
    rel = float(np.max(np.abs(rot.inv_freq.double().numpy() - f.inv_freq) / f.inv_freq))
    assert rel <= inv_freq_rtol(1e6)
    axis = np.repeat([0, 1, 2], [16, 24, 24])
    angles = pos[axis, :, :].transpose(1, 2, 0) * f.inv_freq  # (B, S, 64): pair i takes its section's axis
    bound = table_bound(angles, rel)
    diff = np.maximum(np.abs(cos_l[..., :64].double().numpy() - cos), np.abs(sin_l[..., :64].double().numpy() - sin))
    assert np.all(diff <= bound)
    ours = max(float(np.max(np.abs(cos - np.cos(angles)))), float(np.max(np.abs(sin - np.sin(angles)))))
    assert ours <= 1e-12
    record(
        library="transformers",
        family="Qwen2-VL",
        rope_type="mrope",
        layout="half",
        compared="M-RoPE cos/sin, 3 position axes up to 3000",
        dtype="float32",
        max_error=float(diff.max()),
        library_error=float(np.max(np.abs(cos_l[..., :64].double().numpy() - np.cos(angles)))),
        arrayrope_error=ours,
        tolerance=float(bound.max()),
    )


def test_every_config_key_transformers_reads_is_compared():
    """Each key of arrayrope's list of the keys transformers reads for rope appears in a compared config."""
    from arrayrope.config import CONFIG_KEYS

    seen: set[str] = {"model_type"}
    for case in CASES:
        seen |= set(case.cfg)
        for value in case.cfg.values():
            if isinstance(value, dict):
                seen |= set(value)
                seen |= {k for v in value.values() if isinstance(v, dict) for k in v}
    # hidden_size / num_attention_heads / rope_scaling-with-mrope_section: compared in the tests above as well;
    # layer indices, sub-configs and per-layer overrides: in test_families (every family's configs)
    seen |= {"mrope_section", "no_rope_layer_interval", "per_layer_config", "text_config"}
    missing = sorted(set(CONFIG_KEYS) - seen)
    assert not missing, missing
