"""Cases where arrayrope's reading of a config once differed from transformers without a word, or refused a
family that transformers runs with a checkpoint's config: each against transformers' own rotary module.

Every case builds the family's config class from a ``config.json``-like dict and its rotary module, and
compares that module's frequencies (and the kernel's head dim) with arrayrope's reading of the same dict;
a case arrayrope cannot read must be refused with a ValueError that says why, never read otherwise.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Any

import numpy as np
import pytest
from _conformance import inv_freq_rtol, transformers_probe

import arrayrope
from arrayrope.families import FAMILIES, family

hp = transformers_probe()
import torch  # noqa: E402

_USES: dict[str, Any] = {}


def _use(model_type: str) -> Any:
    if not _USES:
        for use in hp.rotary_uses():
            _USES.setdefault(use.model_type, use)
    return _USES[model_type]


def _config(model_type: str, cfg: dict[str, Any]) -> Any:
    """transformers' config of ``model_type`` from the dict a config.json holds."""
    use = _use(model_type)
    with hp.quiet():
        return use.config_cls(**copy.deepcopy({k: v for k, v in cfg.items() if k != "model_type"}))


def _module(model_type: str, config: Any) -> Any:
    use = _use(model_type)
    params = inspect.signature(use.rotary.__init__).parameters
    with hp.quiet():
        return use.rotary(config) if "device" not in params else use.rotary(config, device=None)


def _frequencies(model_type: str, cfg: dict[str, Any], layer_type: str | None = None) -> tuple[np.ndarray, float]:
    """transformers' inv_freq and attention factor for ``cfg`` (of ``layer_type`` where it keeps several)."""
    inv, factor = hp.module_frequencies(_module(model_type, _config(model_type, cfg)), layer_type)
    assert inv is not None
    return inv, factor


def _ours(cfg: dict[str, Any], **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return arrayrope.rope_frequencies_from_config(cfg, **kwargs)


def _assert_same(theirs: tuple[np.ndarray, float], f: Any) -> None:
    inv_t, factor = theirs
    ours, want = np.sort(f.inv_freq[f.inv_freq != 0]), np.sort(inv_t[inv_t != 0])
    assert ours.shape == want.shape, f"arrayrope turns {ours.size} pairs, transformers {want.size}"
    assert np.allclose(ours, want, rtol=inv_freq_rtol(f.base * 4), atol=0), (ours[:3], want[:3])
    assert f.attention_factor == pytest.approx(factor, rel=1e-6)


# ---- MiniMax-M2: the legacy rotary_dim key is partial_rotary_factor = rotary_dim / head_dim ----

MINIMAX = {"model_type": "minimax_m2", "head_dim": 128, "hidden_size": 256, "num_attention_heads": 2}


@pytest.mark.parametrize(
    "extra",
    [
        {"rotary_dim": 64, "rope_theta": 5e6},
        {"rotary_dim": 64, "rope_parameters": {"rope_type": "default", "rope_theta": 5e6}},
        {"rotary_dim": 32, "partial_rotary_factor": 0.5, "rope_theta": 5e6},  # the stated factor wins
    ],
    ids=["top-level", "with-rope-parameters", "factor-wins"],
)
def test_minimax_m2_rotary_dim(extra):
    cfg = {**MINIMAX, **extra}
    _assert_same(_frequencies("minimax_m2", cfg), _ours(cfg))


# ---- Ministral 3, Higgs Audio v2: a top-level base goes into a stated rope dict (v4 form), not the default one ----

YARN = {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 16384, "beta_fast": 32.0, "beta_slow": 1.0}
V4_CASES = [
    ("ministral3", 262144, 1e6, "rope_scaling"),
    ("ministral3", 262144, 1e6, "rope_parameters"),
    ("higgs_audio_v2", 2048, 5e5, "rope_scaling"),
    ("higgs_audio_v2", 2048, 5e5, "rope_parameters"),
]


@pytest.mark.parametrize("model_type, context, base, key", V4_CASES, ids=[f"{c[0]}-{c[3]}" for c in V4_CASES])
def test_yarn_in_the_v4_form(model_type, context, base, key):
    sizes = {"head_dim": 128, "hidden_size": 256, "num_attention_heads": 2, "max_position_embeddings": context}
    yarn = {**YARN, "factor": 4.0, "original_max_position_embeddings": context // 4}
    cfg = {"model_type": model_type, **sizes, key: yarn, "rope_theta": base}
    _assert_same(_frequencies(model_type, cfg), _ours(cfg))
    # without a rope dict, the class's own dict keeps its base: a top-level one changes nothing
    plain = {"model_type": model_type, **sizes, "rope_theta": 12345.0}
    _assert_same(_frequencies(model_type, plain), _ours(plain))


# ---- Nemotron 3.5 transcribe's audio encoder: a top-level partial_rotary_factor goes into a stated rope dict ----

NEMOTRON_AUDIO = "nemotron3_5_transcribe_asr_audio"


@pytest.mark.parametrize("key", ["rope_parameters", "rope_scaling"])
def test_nemotron_transcribe_audio_yarn(key):
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1000, "rope_theta": 1e4}
    sizes = {"hidden_size": 256, "num_attention_heads": 2, "max_position_embeddings": 5000}
    cfg = {"model_type": NEMOTRON_AUDIO, **sizes, "partial_rotary_factor": 0.5, key: yarn}
    _assert_same(_frequencies(NEMOTRON_AUDIO, cfg), _ours(cfg))
    # the composite audio config reads its speech encoder's settings alike
    composite = {"model_type": "nemotron3_5_transcribe_audio", "asr_config": cfg}
    _assert_same(_frequencies(NEMOTRON_AUDIO, cfg), _ours(composite))


# ---- Gemma 4: global_head_dim fills in per_layer_config only where the config states none ----

GEMMA4 = {
    "model_type": "gemma4_text",
    "head_dim": 64,
    "hidden_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 6,
    "global_head_dim": 128,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
}


@pytest.mark.parametrize(
    "overrides",
    [None, {}, {"5": {"num_key_value_heads": 1}}, {"5": {"head_dim": 256}}],
    ids=["none", "empty", "other-key", "head-dim"],
)
@pytest.mark.parametrize("by", ["layer_idx", "layer_type"])
def test_gemma4_per_layer_head_dim(overrides, by):
    cfg = dict(GEMMA4) if overrides is None else {**GEMMA4, "per_layer_config": overrides}
    theirs = _frequencies("gemma4_text", cfg, "full_attention")
    kwargs = {"layer_idx": 5} if by == "layer_idx" else {"layer_type": "full_attention"}
    f = _ours(cfg, **kwargs)
    _assert_same(theirs, f)
    config = _config("gemma4_text", cfg)
    assert f.head_dim == config.per_layer_config[5].head_dim  # the kernel's head dim of layer 5


def test_gemma4_saved_per_layer_config_of_ten_layers_or_more():
    # transformers saves the layer indices zero-padded ("05" of 12 layers); arrayrope reads layer 5's from "05"
    cfg = {**GEMMA4, "num_hidden_layers": 12, "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 2}
    saved = {"model_type": "gemma4_text", **_config("gemma4_text", cfg).to_dict()}
    assert "05" in saved["per_layer_config"]
    for idx in (5, 11):
        f = _ours(saved, layer_idx=idx)
        _assert_same(_frequencies("gemma4_text", saved, "full_attention"), f)
        assert f.head_dim == _config("gemma4_text", saved).per_layer_config[idx].head_dim


@pytest.mark.parametrize("model_type", ["gemma4_text", "embedding_gemma2_text"])
def test_gemma4_last_layer_is_full_attention_whatever_layer_types_says(model_type):
    # its config class forces the last layer to full_attention (with a warning); arrayrope reads it so too
    cfg = {**GEMMA4, "model_type": model_type, "layer_types": ["sliding_attention"] * 4 + ["full_attention"] * 2}
    cfg["layer_types"][-1] = "sliding_attention"
    config = _config(model_type, cfg)
    last = config.layer_types[-1]
    assert last != cfg["layer_types"][-1]
    f = _ours(cfg, layer_idx=5)
    _assert_same(_frequencies(model_type, cfg, last), f)
    assert f.head_dim == config.per_layer_config[5].head_dim


# ---- Dots3 Note: MLA whose sliding layers have head dims of their own (swa_* keys, per_layer_config) ----

# the keys dots3-note's config.json states, at small sizes; 12 layers: saved indices are "02".."11"
DOTS3: dict[str, Any] = {
    "model_type": "dots3_note_text",
    "hidden_size": 256,
    "intermediate_size": 32,
    "moe_intermediate_size": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 12,
    "index_n_heads": 2,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 32,
    "rope_theta": 8e7,
    "swa_num_attention_heads": 2,
    "swa_num_key_value_heads": 2,
    "swa_q_lora_rank": 32,
    "swa_kv_lora_rank": 16,
    "swa_qk_nope_head_dim": 192,
    "swa_qk_rope_head_dim": 64,
    "swa_v_head_dim": 32,
    "swa_rope_theta": 5e4,
    "layer_types": ["indexed_attention"] * 2
    + ["sliding_attention"] * 3
    + ["indexed_attention"]
    + ["sliding_attention"] * 6,
}


def _dots3_layer(cfg: dict[str, Any], idx: int) -> tuple[tuple[np.ndarray, float], int]:
    """transformers' frequencies of layer ``idx`` and its attention's query/key head dim."""
    config = _config("dots3_note_text", cfg)
    layer_type = config.layer_types[idx]
    from transformers.models.dots3_note import modeling_dots3_note as m

    with hp.quiet():
        attention = m.Dots3NoteTextAttention(config, idx)
    return hp.module_frequencies(_module("dots3_note_text", config), layer_type), attention.qk_head_dim


@pytest.mark.parametrize(
    "extra",
    [{}, {"swa_qk_nope_head_dim": 96, "swa_qk_rope_head_dim": 32, "swa_head_dim": 128}],
    ids=["released", "other-sliding-dims"],
)
@pytest.mark.parametrize("form", ["hub", "saved"])
@pytest.mark.parametrize("idx", [0, 2, 11])
def test_dots3_note_head_dims_per_layer_type(extra, form, idx):
    cfg = {**DOTS3, **extra}
    if form == "saved":  # per_layer_config with zero-padded indices, and the factor its class writes per type
        cfg = {"model_type": "dots3_note_text", **_config("dots3_note_text", cfg).to_dict()}
    theirs, head = _dots3_layer(cfg, idx)
    f = _ours(cfg, layer_idx=idx)
    _assert_same(theirs, f)
    assert f.head_dim == head


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
        {"rope_type": "default"},
    ],
    ids=["yarn", "default"],
)
@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
def test_dots3_note_swa_rope_theta_only_where_no_rope_dict_is_stated(rope, key):
    # with a rope dict stated, transformers turns the sliding layers by rope_theta, not by swa_rope_theta
    cfg = {**DOTS3, key: rope, "max_position_embeddings": 16384}
    for idx in (0, 2):
        theirs, head = _dots3_layer(cfg, idx)
        f = _ours(cfg, layer_idx=idx)
        _assert_same(theirs, f)
        assert f.base == DOTS3["rope_theta"] and f.head_dim == head


def test_dots3_note_legacy_layer_type_names_and_by_layer_type():
    # released files name the indexed layers "full_attention", which its config class renames
    cfg = {**DOTS3, "layer_types": [t.replace("indexed", "full") for t in DOTS3["layer_types"]]}
    assert _config("dots3_note_text", cfg).layer_types == DOTS3["layer_types"]
    for idx in (0, 2):
        theirs, head = _dots3_layer(cfg, idx)
        for f in (_ours(cfg, layer_idx=idx), _ours(cfg, layer_type=DOTS3["layer_types"][idx])):
            _assert_same(theirs, f)
            assert f.head_dim == head


def test_dots3_note_proportional_is_refused_as_transformers_fails():
    cfg = {**DOTS3, "rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4}}
    config = _config("dots3_note_text", cfg)
    from transformers.models.dots3_note import modeling_dots3_note as m

    with hp.quiet():
        model = m.Dots3NoteTextModel(config)
    with pytest.raises(RuntimeError), torch.no_grad():  # its table, over head_dim 256, does not fit 64 features
        model(input_ids=torch.zeros(1, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="which that table does not fit"):
        _ours(cfg, layer_idx=0)


def test_per_layer_config_head_dims_need_layer_types_to_be_read_by_layer_type():
    cfg = {**GEMMA4, "per_layer_config": {"5": {"head_dim": 128}}}
    del cfg["layer_types"]
    with pytest.raises(ValueError, match="no layer_types to say which layers are 'full_attention'"):
        _ours(cfg, layer_type="full_attention")
    _assert_same(
        _frequencies("gemma4_text", cfg, "full_attention"), _ours(cfg, layer_idx=5, layer_type="full_attention")
    )
    mixed = {**GEMMA4, "per_layer_config": {"3": {"head_dim": 128}}}  # one sliding layer of its own
    with pytest.raises(ValueError, match="layers different head dims; pass layer_idx="):
        _ours(mixed, layer_type="sliding_attention")
    with pytest.raises(ValueError, match=r"per_layer_config\[5\] states \['rope_theta'\]"):
        _ours({**GEMMA4, "per_layer_config": {"5": {"rope_theta": 1e3}}}, layer_idx=5)


def test_dots3_note_refuses_a_sliding_rotary_dim_its_class_would_compute():
    cfg = {k: v for k, v in DOTS3.items() if k != "swa_qk_rope_head_dim"} | {"swa_head_dim": 224}
    (inv, _), _ = _dots3_layer(cfg, 2)
    assert inv.size != DOTS3["qk_rope_head_dim"] // 2  # transformers: 224 - 192, not the full layers' 64
    with pytest.raises(ValueError, match="state swa_qk_rope_head_dim"):
        _ours(cfg, layer_idx=2)


def test_dots3_note_refuses_a_factor_its_class_overwrites():
    rope = {"rope_type": "default", "partial_rotary_factor": 0.5}
    cfg = {**DOTS3, "rope_parameters": {t: {**rope, "rope_theta": 1e4} for t in set(DOTS3["layer_types"])}}
    (inv, _), _ = _dots3_layer(cfg, 0)
    assert inv.size == DOTS3["qk_rope_head_dim"] // 2  # transformers ignores the stated 0.5
    with pytest.raises(ValueError, match=r"remove partial_rotary_factor or make it 0\.25"):
        _ours(cfg, layer_idx=0)


# ---- proportional of MLA families: over the head_dim their config classes set to qk_rope_head_dim ----


@pytest.mark.parametrize("prf", [0.5, 1.0, None])
@pytest.mark.parametrize("model_type", ["deepseek_v3", "hy_v4", "minicpm3"])
def test_mla_proportional_over_the_rotary_features(model_type, prf):
    rope = {"rope_type": "proportional", "rope_theta": 1e4, "factor": 2.0}
    if prf is not None:
        rope["partial_rotary_factor"] = prf
    cfg = {"model_type": model_type, "rope_parameters": rope}
    f = _ours(cfg)
    _assert_same(_frequencies(model_type, cfg), f)
    assert f.rotary_dim == 2 * f.inv_freq.size < f.head_dim  # the trailing rotary features of the MLA head
    with pytest.raises(ValueError, match="rope_frequencies cannot be asked for"):
        arrayrope.config.rope_config(cfg)


# ---- PhiMoE: its mscales replace the attention factor of any rope type, short up to the original length ----


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        {"rope_type": "yarn", "factor": 4.0},
    ],
    ids=["llama3", "yarn"],
)
def test_phimoe_mscales_of_llama3_and_yarn_on_both_sides_of_the_original_length(rope):
    rope = {**rope, "rope_theta": 1e4, "short_mscale": 1.1, "long_mscale": 1.3, "original_max_position_embeddings": 64}
    cfg = {"model_type": "phimoe", "hidden_size": 128, "num_attention_heads": 2, "max_position_embeddings": 256}
    cfg["rope_parameters"] = rope
    module = _module("phimoe", _config("phimoe", cfg))
    x = torch.zeros(1, 1, 64, dtype=torch.float32)
    for length in (64, 65, 200):  # at the original length, one past it, far past it
        positions = torch.arange(length)[None]
        with torch.no_grad():
            cos, sin = module(x, positions)
        ours = arrayrope.RotaryEmbedding.from_config(cfg)
        f = _ours(cfg, seq_len=length)
        assert f.attention_factor == (1.1 if length <= 64 else 1.3)
        assert float(cos[0, 0, 0]) == pytest.approx(f.attention_factor, rel=1e-6)  # position 0: cos is the factor
        np.testing.assert_allclose(f.inv_freq, module.inv_freq.double().numpy(), rtol=inv_freq_rtol(1e4))
        q = np.ones((1, 1, length, 64), dtype=np.float64)
        got = ours(q, seq_len=length)
        c, s = cos.double().numpy()[:, None], sin.double().numpy()[:, None]
        want = q * c + np.concatenate([-q[..., 32:], q[..., :32]], -1) * s
        # transformers' tables are float32: angles up to `length` radians off by ~2**-24 of theirs, twice
        np.testing.assert_allclose(got, want, atol=2 * 1.3 * (length + 1) * 2.0**-23)


# ---- a stated rope dict with top-level keys: the scaled types' rotary modules move the config's own in ----

STATED: dict[str, tuple[dict[str, Any], bool, list[Any]]] = {
    "cohere2_moe": ({"rope_theta": 5e5, "partial_rotary_factor": 0.5, "head_dim": 64}, False, [None]),
    "step3p5": ({"rope_theta": 12345.0}, True, ["full_attention"]),
    "deepseek_v4": ({"rope_theta": 12345.0}, True, ["main", "compress"]),
    "dots3_note_text": ({**DOTS3, "rope_theta": 12345.0}, False, ["indexed_attention", "sliding_attention"]),
}


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4096},
        {"rope_type": "linear", "factor": 2.0},
    ],
    ids=["yarn", "linear"],
)
@pytest.mark.parametrize("model_type", sorted(STATED))
def test_top_level_keys_with_a_stated_scaled_rope_dict(model_type, rope):
    extra, nested, layer_types = STATED[model_type]
    fam = family(model_type)
    assert fam is not None
    params = {t: dict(rope) for t in fam.defaults["rope_parameters"]} if nested else dict(rope)
    cfg = {"model_type": model_type, **extra, "rope_parameters": params}
    for layer_type in layer_types:
        _assert_same(_frequencies(model_type, cfg, layer_type), _ours(cfg, layer_type=layer_type))


def test_a_stated_default_dict_without_a_base_is_refused_where_transformers_fails():
    cfg = {"model_type": "cohere2_moe", "head_dim": 64, "rope_parameters": {"rope_type": "default"}}
    with pytest.raises(KeyError):
        _frequencies("cohere2_moe", cfg)
    with pytest.raises(ValueError, match="fills in none for the rope dict this config states"):
        _ours(cfg)


# ---- T5Gemma 2: a decoder with rope settings of its own is not read as the encoder's ----


def test_t5gemma2_decoder_with_scaling_is_refused_not_ignored():
    from transformers import CONFIG_MAPPING

    with hp.quiet():
        config = CONFIG_MAPPING["t5gemma2"]()
    saved = config.to_dict()
    decoder = saved["decoder"]
    decoder["rope_parameters"]["full_attention"] = {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6}
    with hp.quiet():
        module = _module("t5gemma2_text", CONFIG_MAPPING["t5gemma2_decoder"](**copy.deepcopy(decoder)))
    scaled, _ = hp.module_frequencies(module, "full_attention")
    assert scaled is not None and scaled[0] == pytest.approx(0.25)  # transformers' decoder scales its positions
    with pytest.raises(ValueError, match=r"\['decoder'\].*different settings.*rope_parameters"):
        _ours(saved, layer_type="full_attention")
    # the decoder's own config is read as transformers reads it
    f = _ours(decoder, layer_type="full_attention")
    _assert_same(hp.module_frequencies(module, "full_attention"), f)


# ---- families transformers runs with a checkpoint's config, once refused ----

ONCE_REFUSED = [
    "cohere_compass_text",
    "dbrx",
    "deepseek_ocr2_encoder",
    "deepseek_v4",
    "dots3_note_audio_encoder",
    "granite4_vision_text",
    "gradium_phonon_tts",
    "hunyuan_vl_text",
    "idefics",
    "moonshine_streaming",
    "pocket_tts",
    "qwen4_exp_text",
    "zamba2",
]
CHECKPOINT_KEYS = {  # the keys a checkpoint states that the default config leaves out (see tools/families.py)
    "dbrx": {"attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0}},
    "zamba2": {"use_mem_rope": True},
    "hunyuan_vl_text": {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [16] * 4}},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
}


@pytest.mark.parametrize("model_type", ONCE_REFUSED)
def test_families_transformers_runs_are_read(model_type):
    entry = FAMILIES[model_type]
    assert "refused" not in entry, entry.get("refused")
    config = next(hp.tiny_configs(_use(model_type).config_cls, **CHECKPOINT_KEYS.get(model_type, {})))
    cfg = {"model_type": model_type, **config.probe_kwargs}
    module = _module(model_type, config)
    labels = hp.rotary_labels(module)
    layer_type = labels[0] if labels else None
    _assert_same(hp.module_frequencies(module, layer_type), _ours(cfg, layer_type=layer_type))


def test_deepseek_v4_layers_by_the_rope_set_they_turn_by():
    """DeepSeek-V4 keeps its rope parameters per rope set ("main", "compress"), not per layer type: a layer index
    or a layer type is read with the set its attention takes."""
    config = next(hp.tiny_configs(_use("deepseek_v4").config_cls))
    cfg = {"model_type": "deepseek_v4", **config.probe_kwargs, "layer_types": list(config.layer_types)}
    theirs = hp.module_frequencies(_module("deepseek_v4", config), "compress")
    idx = next(i for i, t in enumerate(config.layer_types) if t != "sliding_attention")
    _assert_same(theirs, _ours(cfg, layer_idx=idx))
    _assert_same(theirs, _ours(cfg, layer_type=config.layer_types[idx]))
    _assert_same(theirs, _ours(cfg, layer_type="compress"))


def test_dbrx_base_of_its_attn_config():
    """DBRX's attention keeps attn_config's rope_theta, its rotary module turns by rope_parameters' base: a config
    where they differ is refused, naming both; one that states the base in rope_parameters is read as transformers
    reads it."""
    config = next(hp.tiny_configs(_use("dbrx").config_cls, **CHECKPOINT_KEYS["dbrx"]))
    attn = {"kv_n_heads": 2, "rope_theta": 500000.0}
    cfg = {"model_type": "dbrx", **config.probe_kwargs, "attn_config": attn}
    inv, _ = _frequencies("dbrx", cfg)
    assert inv[-1] > 1e-5  # transformers turns by 10000, not by attn_config's 500000
    with pytest.raises(ValueError, match=r"attn_config\['rope_theta'\].*rope_parameters"):
        _ours(cfg)
    stated = {**cfg, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}
    _assert_same(_frequencies("dbrx", stated), _ours(stated))


def test_zamba2_without_its_rope_switch_says_which_key():
    config = next(hp.tiny_configs(_use("zamba2").config_cls))
    with pytest.raises(ValueError, match="use_mem_rope"):
        _ours({"model_type": "zamba2", **config.probe_kwargs})


# ---- M-RoPE: the sections each position axis drives, as transformers' rotary module takes them ----

MROPE_POSITIONS = np.array([3, 50, 900])


@pytest.mark.parametrize(
    "model_type, layer_type",
    [
        ("hy_v4_vl_text", None),
        ("neomme", "full_attention"),
        ("neomme", "sliding_attention"),
        ("ernie4_5_vl_moe_text", None),
    ],
)
def test_mrope_sections(model_type, layer_type):
    config = next(hp.tiny_configs(_use(model_type).config_cls))
    module = _module(model_type, config)
    fam = family(model_type)
    assert fam is not None
    axes = len(fam.mrope["sections"])
    ids = torch.from_numpy(MROPE_POSITIONS[:axes]).reshape(axes, 1, 1)
    with torch.no_grad():
        cos, sin = module(torch.zeros(1, 1, 8), ids, layer_type) if layer_type else module(torch.zeros(1, 1, 8), ids)
    cfg = {"model_type": model_type, **config.probe_kwargs}
    s = arrayrope.config.settings(cfg, layer_type=layer_type)
    assert s.mrope is not None
    sections, interleaved = s.mrope
    c, z = arrayrope.mrope_tables(
        s.freqs, MROPE_POSITIONS[:axes, None], sections=sections, interleaved=interleaved, dtype="float64"
    )
    half = c.shape[-1]
    # a column per pair: the first half of the module's columns ([cos, cos]), or every other one where it repeats
    # each column for the two features of its pair (ERNIE 4.5 VL's)
    flat = cos.double().numpy().reshape(-1)
    pick = slice(None, None, 2) if np.array_equal(flat[0::2], flat[1::2]) else slice(None, half)
    theirs_c, theirs_s = cos.double().numpy().reshape(-1)[pick], sin.double().numpy().reshape(-1)[pick]
    assert np.allclose(c.reshape(-1), theirs_c, atol=2e-4) and np.allclose(z.reshape(-1), theirs_s, atol=2e-4)


def test_mrope_full_width_sections_are_the_module_s_columns():
    """HunYuan-VL's sections split the whole rotary width, so the two features of a pair turn by different axes:
    the tables of the pairs' first features and of their second are its module's two halves of columns."""
    from arrayrope.encodings.mrope import half_tables

    model_type = "hunyuan_vl_text"
    config = next(hp.tiny_configs(_use(model_type).config_cls, **CHECKPOINT_KEYS[model_type]))
    module = _module(model_type, config)
    ids = np.array([3, 50, 900, 200])
    with torch.no_grad():
        cos, sin = module(torch.zeros(1, 1, 8), torch.from_numpy(ids).reshape(4, 1, 1))
    s = arrayrope.config.settings({"model_type": model_type, **config.probe_kwargs})
    assert s.mrope == ((16, 16, 16, 16), "full_width")
    first, second = half_tables(s.freqs, ids[:, None], sections=s.mrope[0], interleaved="full_width", dtype="float64")
    assert second is not None
    ours_c = np.concatenate([first[0], second[0]], axis=-1).reshape(-1)
    ours_s = np.concatenate([first[1], second[1]], axis=-1).reshape(-1)
    assert np.allclose(ours_c, cos.double().numpy().reshape(-1), atol=2e-4)
    assert np.allclose(ours_s, sin.double().numpy().reshape(-1), atol=2e-4)
    assert not np.allclose(first[0], second[0], atol=1e-2)  # the halves differ: no rotation of pairs by one axis


def test_mrope_section_under_its_older_name_is_read_as_transformers_converts_it():
    """HunYuan-VL's config class turns ``xdrope_section`` (older checkpoints) into ``mrope_section``, and refuses
    both where they differ: arrayrope reads the same sections, and refuses the same config."""
    model_type = "hunyuan_vl_text"
    fam = family(model_type)
    assert fam is not None and fam.mrope.get("aliases") == ["xdrope_section"]
    config = next(hp.tiny_configs(_use(model_type).config_cls, **CHECKPOINT_KEYS[model_type]))
    rope = {k: v for k, v in config.probe_kwargs["rope_parameters"].items() if k != "mrope_section"}
    older = {**config.probe_kwargs, "rope_parameters": {**rope, "xdrope_section": [8, 24, 16, 16]}}
    theirs = next(hp.tiny_configs(_use(model_type).config_cls, **older))
    cfg = {"model_type": model_type, **older}
    assert arrayrope.config.settings(cfg).mrope == (tuple(theirs.rope_parameters["mrope_section"]), "full_width")
    both = {**rope, "xdrope_section": [8, 24, 16, 16], "mrope_section": [16] * 4}
    with pytest.raises(ValueError, match="differ"):
        next(hp.tiny_configs(_use(model_type).config_cls, **{**config.probe_kwargs, "rope_parameters": both}))
    with pytest.raises(ValueError, match=r"mrope_section=\[16, 16, 16, 16\] and its older name xdrope_section"):
        arrayrope.config.settings({**cfg, "rope_parameters": both})


# ---- nanochat: its rotate_half is (x2, -x1), so its pairs turn the other way ----

NANOCHAT = {"model_type": "nanochat", "hidden_size": 128, "num_attention_heads": 2, "num_hidden_layers": 2}
NANOCHAT_POSITIONS = np.array([0, 1, 2, 7, 100, 1000, 4097, 65535])


def _nanochat_oracle(x: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """transformers' own nanochat apply function, given float64 tables of the magnitudes ``inv_freq``."""
    from transformers.models.nanochat import modeling_nanochat

    angles = NANOCHAT_POSITIONS[:, None] * np.abs(inv_freq)[None, :]
    emb = torch.from_numpy(np.concatenate([angles, angles], axis=-1))[None]
    t = torch.from_numpy(x)
    q, _ = modeling_nanochat.apply_rotary_pos_emb(t, t, emb.cos(), emb.sin())
    return q.numpy()


def test_nanochat_turns_the_other_way():
    """Its frequencies are transformers' module's, negated; RotaryEmbedding.from_config rotates as its apply
    function does (float64), and so does the ONNX model of those frequencies on ONNX Runtime (float32)."""
    rope = arrayrope.RotaryEmbedding.from_config(NANOCHAT)
    theirs, _ = _frequencies("nanochat", NANOCHAT)
    assert np.all(rope.freqs.inv_freq < 0)
    assert np.allclose(-rope.freqs.inv_freq, theirs, rtol=inv_freq_rtol(1e4), atol=0)
    x = np.random.default_rng(0).standard_normal((1, 2, len(NANOCHAT_POSITIONS), 64))
    want = _nanochat_oracle(x, rope.freqs.inv_freq)
    got = rope(x, positions=NANOCHAT_POSITIONS)
    assert np.max(np.abs(got - want)) < 1e-9 * np.abs(x).max() * NANOCHAT_POSITIONS.max()
    with pytest.raises(ValueError, match="turns each pair the other way"):
        arrayrope.config.rope_config(NANOCHAT)  # rope_frequencies cannot be asked for them


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [1.0 + i / 8 for i in range(32)]},
    ],
    ids=["dynamic", "longrope"],
)
def test_nanochat_length_dependent_types_turn_the_other_way(rope):
    """The frequencies a length-dependent type recomputes for a longer sequence turn nanochat's way too: as its
    rotary module's after a call of that length, through its own apply function."""
    params: dict[str, Any] = {**rope, "rope_theta": 1e4}
    if rope["rope_type"] == "longrope":
        params["original_max_position_embeddings"] = 256
    cfg = {**NANOCHAT, "max_position_embeddings": 1024, "rope_parameters": params}
    length = int(NANOCHAT_POSITIONS.max()) + 1
    module = _module("nanochat", _config("nanochat", cfg))
    with torch.no_grad():
        module(torch.zeros(1, 1, 64), torch.arange(length)[None])  # its frequencies for this length
    theirs = module.inv_freq.double().numpy()
    f = _ours(cfg, seq_len=length)
    assert np.all(f.inv_freq < 0)
    assert np.allclose(-f.inv_freq, theirs, rtol=inv_freq_rtol(1e4 * 4), atol=0)
    rope_ = arrayrope.RotaryEmbedding.from_config(cfg)
    x = np.random.default_rng(2).standard_normal((1, 2, len(NANOCHAT_POSITIONS), 64))
    got = rope_(x, positions=NANOCHAT_POSITIONS, seq_len=length)
    want = _nanochat_oracle(x, f.inv_freq) * module.attention_scaling  # cos and sin scaled (longrope)
    assert f.attention_factor == pytest.approx(module.attention_scaling, rel=1e-12)
    assert np.all(rope_.freqs.inv_freq < 0)
    assert np.max(np.abs(got - want)) < 1e-9 * np.abs(x).max() * NANOCHAT_POSITIONS.max()
    # traced: the graph computes the frequencies of its length on the host, turned the same way
    fresh = arrayrope.RotaryEmbedding.from_config(cfg)
    compiled = torch.compile(lambda q, p: fresh(q, positions=p, seq_len=length), fullgraph=True, backend="aot_eager")
    traced = compiled(torch.from_numpy(x), torch.from_numpy(NANOCHAT_POSITIONS)).numpy()
    assert np.max(np.abs(traced - want)) < 1e-9 * np.abs(x).max() * NANOCHAT_POSITIONS.max()


@pytest.mark.parametrize(("target", "tables"), [("portable", "computed"), ("portable", "stored"), ("ort", "stored")])
def test_nanochat_exported_turns_the_other_way(target, tables):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    from arrayrope.export import rotary_model

    f = arrayrope.rope_frequencies_from_config(NANOCHAT)
    rows = {"max_positions": 1 << 16} if tables == "stored" else {}
    model = rotary_model(f, target=target, tables=tables, **rows)
    x = np.random.default_rng(1).standard_normal((1, 2, len(NANOCHAT_POSITIONS), 64)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"x": x, "position_ids": NANOCHAT_POSITIONS[None].astype(np.int64)})
    want = _nanochat_oracle(x.astype(np.float64), f.inv_freq)
    assert np.max(np.abs(got - want)) <= 8 * 2.0**-23 * np.abs(x).max(), np.max(np.abs(got - want))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_nanochat_in_low_precision_eager_compiled_and_exported(dtype):
    """float16/bfloat16 q and k: nanochat's float64 rotation (its own apply function) of the same values, rounded
    once, eagerly, under torch.compile and through torch.export, in q's dtype."""
    rope = arrayrope.RotaryEmbedding.from_config(NANOCHAT)
    dt = getattr(torch, dtype)
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((1, 2, len(NANOCHAT_POSITIONS), 64))).to(dt)
    pos = torch.from_numpy(NANOCHAT_POSITIONS)
    want = _nanochat_oracle(x.double().numpy(), rope.freqs.inv_freq)
    tol = float(torch.finfo(dt).eps) * np.abs(want).max()

    class Rotate(torch.nn.Module):
        def forward(self, q, k, positions):
            return rope(q, k, positions=positions)

    compiled = torch.compile(Rotate(), fullgraph=True, backend="aot_eager")
    exported = torch.export.export(Rotate(), (x, x, pos)).module()
    for run in (Rotate(), compiled, exported):
        q, k = run(x, x, pos)
        assert q.dtype == k.dtype == dt
        assert np.max(np.abs(q.double().numpy() - want)) <= tol
        assert np.max(np.abs(k.double().numpy() - want)) <= tol
