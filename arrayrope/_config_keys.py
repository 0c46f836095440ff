"""How transformers reads the rotary settings of a ``config.json``: every key it reads, and arrayrope's answer.

The rules (transformers 5.x, ``RotaryEmbeddingConfigMixin`` and the model families'
configs) are applied by :func:`read`; :data:`KEYS` says what arrayrope does with each key
transformers reads for rope, and keys that change RoPE in transformers but that arrayrope
does not read are refused with the reason instead of being ignored.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
from collections.abc import Mapping
from typing import Any

from ._lib import checks
from .scaling import rope_type

__all__ = ["DEFAULT_THETA", "KEYS", "Settings", "read"]

#: ``rope_theta`` of the model types whose default is not 10000, for configs that leave it out
#: (transformers' ``default_theta``); a dict gives one per layer type.
DEFAULT_THETA: dict[str, float | dict[str, float]] = {
    **dict.fromkeys(("apertus",), 12_000_000.0),
    **dict.fromkeys(("bitnet", "blt", "blt_global_transformer", "blt_local_decoder", "blt_local_encoder", "cohere",
                     "csm", "csm_depth_decoder_model", "ernie4_5", "ernie4_5_moe", "ernie4_5_vl_moe_text", "evolla",
                     "flex_olmo", "llama4", "llama4_text", "mllama_text_model", "muse_glimmer_assistant", "olmo3",
                     "paddleocr_vl_text", "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text"), 500_000.0),
    **dict.fromkeys(("cwm", "emu3_text_model", "lfm2", "lfm2_moe", "lfm3", "lfm3_vl_vision", "minimax", "mixtral",
                     "phimoe", "qwen2_5_omni_talker", "qwen2_5_omni_text", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_vl",
                     "qwen2_vl_text", "qwen3_omni_moe_text", "solar_open"), 1_000_000.0),
    **dict.fromkeys(("cosmos3_edge_text",), 100_000_000.0),
    **dict.fromkeys(("dots3_note_text",), 80_000_000.0),
    **dict.fromkeys(("eomt_dinov3", "gemma4_vision"), 100.0),
    "fuyu": 25_000.0, "gpt_oss": 150_000.0, "openai_privacy_filter": 150_000.0, "gte": 160_000.0,
    "helium": 100_000.0, "hy_v3": 11_158_840.0, "jina_embeddings_v3": 20_000.0, "longcat_flash": 10_000_000.0,
    "minimax_m2": 5_000_000.0, "minimax_m3_vl_text": 5_000_000.0, "musicflamingo": 1200.0, "nomic_bert": 1000.0,
    "pe_audio_encoder": 20_000.0, "pe_audio_video_encoder": 20_000.0, "pe_video_encoder": 20_000.0,
    "smollm3": 2_000_000.0,
    **{key: {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}
       for key in ("gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "t5gemma2_decoder", "t5gemma2_text", "neomme")},
    **{key: {"full_attention": 160_000.0, "sliding_attention": 10_000.0}
       for key in ("modernbert", "modernbert-decoder")},
}

#: Families whose v4 configs give the sliding-window layers a base of their own:
#: model type -> (key of the full-attention base, key of the sliding base, whether rope_scaling
#: applies to the sliding layers too).
_TWO_BASES = {
    **dict.fromkeys(("gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "t5gemma2_decoder", "t5gemma2_text"),
                    ("rope_theta", "rope_local_base_freq", False)),
    **dict.fromkeys(("modernbert", "modernbert-decoder"), ("global_rope_theta", "local_rope_theta", True)),
}
_LAYER_TYPES = ("full_attention", "sliding_attention")
#: rope_parameters of model types whose configs may leave them out (transformers' defaults).
_DEFAULT_PARAMETERS: dict[str, dict[str, dict[str, Any]]] = {
    "gemma4_text": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
    },
}
#: model type -> (key, default) of the head dim of full-attention layers where it differs from head_dim.
_GLOBAL_HEAD_DIM = {"gemma4_text": ("global_head_dim", 512)}
#: Model types whose default rope reads partial_rotary_factor (the others' default rope ignores it).
_DEFAULT_READS_PARTIAL = frozenset({
    "bamba", "deepseek_v4", "diffusion_gemma", "dots3_note", "dots3_note_text", "efficientloftr", "glm", "glm4",
    "glm4_moe", "glm4_moe_lite", "glm4v", "glm4v_text", "glm4v_moe", "glm4v_moe_text", "glm_image", "glm_ocr",
    "glmasr", "gpt_neox", "gpt_neox_japanese", "laguna", "mellum", "mimo_v2_flash", "minimax_m2", "minimax_m3_vl",
    "minimax_m3_vl_text", "moonshine", "moonshine_streaming", "musicflamingo", "nemotron", "nemotron3_5_transcribe",
    "nemotron3_diarization", "neomme", "persimmon", "phi", "phi3", "phi4_multimodal", "qwen3_5", "qwen3_5_text",
    "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next", "qwen4_exp", "recurrent_gemma", "solar_open", "stablelm",
    "step3p7", "zaya",
})
#: Model types whose checkpoints pair features (2i, 2i + 1) (transformers applies them interleaved).
_INTERLEAVED = frozenset({"gptj", "codegen", "cohere", "cohere2", "llama4", "llama4_text"})

#: Every key transformers reads for rope, and what arrayrope does with it.
KEYS: dict[str, str] = {
    "rope_parameters": "the scaling dict (v5); per layer type when keyed by layer types (pass layer_type=)",
    "rope_scaling": "the scaling dict (v4); wins over rope_parameters when not empty",
    "rope_theta": "the base; inside the dict it wins over the top level; default 10000 or the model type's",
    "partial_rotary_factor": "rotary_dim = int(head_dim * factor); the dict's value wins over the top level; "
    "refused with the default rope of model types whose default rope ignores it (Llama and most others)",
    "head_dim": "features per head; else hidden_size // num_attention_heads",
    "global_head_dim": "Gemma 4: the head dim of the full-attention layers (default 512)",
    "hidden_size": "with num_attention_heads, the head dim where head_dim is missing",
    "num_attention_heads": "with hidden_size, the head dim where head_dim is missing",
    "max_position_embeddings": "the context length of dynamic (NTK) and of the yarn/longrope factor fallbacks",
    "n_embd": "GPT-J, CodeGen: hidden_size", "n_head": "GPT-J, CodeGen: num_attention_heads",
    "n_positions": "GPT-J, CodeGen: max_position_embeddings",
    "original_max_position_embeddings": "top level (Phi-3) wins over the dict's for llama3, yarn and longrope",
    "layer_types": "names the layer types a per-layer rope_parameters is keyed by; layer_type= picks one",
    "rope_local_base_freq": "Gemma 3 (v4): the base of the sliding-window layers (layer_type='sliding_attention')",
    "global_rope_theta": "ModernBERT (v4): the base of the full-attention layers",
    "local_rope_theta": "ModernBERT (v4): the base of the sliding-window layers",
    "qk_rope_head_dim": "MLA (DeepSeek-V2/V3 and kin): the rotary dim; the rotary features trail qk_nope_head_dim",
    "qk_nope_head_dim": "MLA: the unrotated features before the rotary ones in each query and key head",
    "rope_interleave": "DeepSeek-V3: the checkpoint's q_pe/k_pe are interleaved (RotaryEmbedding.from_config's layout)",
    "rotary_dim": "GPT-J, CodeGen, MiniMax-M2: the rotary dim (the leading features)",
    "rotary_pct": "GPT-NeoX: partial_rotary_factor (default 0.25 for this family)",
    "rotary_emb_base": "GPT-NeoX: the base",
    "no_rope_layers": "Llama 4, SmolLM3: which layers skip RoPE; the frequencies of the others are unchanged",
    "model_type": "selects the model type's default base and family keys above",
}
#: Keys that change RoPE in transformers and that arrayrope does not read: refused, with the reason.
_REFUSED_KEYS = {
    "layer_rope_theta": "a base per layer index (Granite SWA, Muse), which arrayrope has no layer_type for",
    "rope_scaling_layers": "scaling applied to some layers only (Molmo 2)",
    "rotary_embedding_base": "the relative rotary position of speech conformers (Wav2Vec2-Conformer, SeamlessM4T)",
}
# keys that mention rope but change no frequency: the vision/memory encoders' own settings live in sub-configs
_IGNORED = frozenset({"use_rope", "rope_type"})
_ROPE_LIKE = re.compile(r"rope|rotary|theta")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a config says about its rotary embedding, in :func:`~arrayrope.rope_frequencies` terms."""

    head_dim: int
    base: float
    rotary_dim: int | None
    partial_rotary_factor: float | None
    scaling: dict[str, Any] | None
    max_position_embeddings: int | None
    rotary_features: str = "leading"
    layout: str | None = None


def read(cfg: Mapping[str, Any], where: str, layer_type: str | None) -> Settings:
    """The rotary settings of the (text) config ``cfg``, for ``layer_type`` where they differ per layer type."""
    _refuse_unknown(cfg, where)
    model_type = cfg.get("model_type")
    params, layer = _parameters(cfg, where, layer_type, model_type)
    nested = layer is not None
    base = params.pop("rope_theta", None)
    if base is None:
        base = _default_theta(model_type, layer)
    base = checks.positive_real(base, f"{where}: rope_theta")

    prf = params.pop("partial_rotary_factor", None)
    if prf is None:
        prf = cfg.get("partial_rotary_factor", cfg.get("rotary_pct"))
    if prf is None and model_type in ("gpt_neox", "gpt_neox_japanese"):
        prf = 0.25
    if prf is not None and (isinstance(prf, bool) or not isinstance(prf, numbers.Real)):
        raise TypeError(f"{where}: partial_rotary_factor must be a number in (0, 1], got {prf!r}")

    head_dim, rotary_dim, features = _dims(cfg, where)
    if layer == "full_attention" and model_type in _GLOBAL_HEAD_DIM:
        key, default = _GLOBAL_HEAD_DIM[model_type]
        head_dim = checks.positive_int(cfg.get(key) or default, f"{where}: {key}")
    if prf is not None and features == "trailing" and rotary_dim is not None:
        rotary_dim = int(rotary_dim * float(prf))  # MLA: the factor applies to the rotary head (qk_rope_head_dim)
        prf = None
    if prf is not None and float(prf) == 1.0:
        prf = None

    if (prf is not None and isinstance(model_type, str) and model_type not in _DEFAULT_READS_PARTIAL
            and features == "leading" and cfg.get("rotary_dim") is None and rope_type(params).name == "default"):
        raise ValueError(
            f"{where}: partial_rotary_factor={prf} but transformers' default rope of model type {model_type!r} "
            "ignores it and rotates the whole head; remove the key (whole head) or the model_type (partial rotary)"
        )
    max_len = cfg.get("max_position_embeddings", cfg.get("n_positions"))
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral)):
        raise TypeError(f"{where}: max_position_embeddings must be an int, got {max_len!r}")

    scaling: dict[str, Any] | None = params
    entry = rope_type(params)
    if entry.name == "yarn" and nested and params.get("truncate") is False:
        raise ValueError(
            f"{where}: rope_parameters[{layer!r}]['truncate'] is false, but transformers 5.x reads 'truncate' from the "
            "top level of rope_parameters, where a per-layer config has none, and truncates; arrayrope does not guess"
        )
    original = cfg.get("original_max_position_embeddings")
    if entry.reads_original_length and original is not None and not nested:
        params["original_max_position_embeddings"] = original
    if entry.name == "default" and not (set(params) - {"rope_type", "type"}):
        scaling = None
    layout = "interleaved" if cfg.get("rope_interleave") or model_type in _INTERLEAVED else None
    max_len = None if max_len is None else int(max_len)
    return Settings(head_dim, float(base), rotary_dim, prf, scaling, max_len, features, layout)


def _refuse_unknown(cfg: Mapping[str, Any], where: str) -> None:
    for key in cfg:
        if key in _REFUSED_KEYS:
            raise ValueError(f"{where}: {key!r} is not supported: {_REFUSED_KEYS[key]}")
        if _ROPE_LIKE.search(key) and key not in KEYS and key not in _IGNORED:
            raise ValueError(
                f"{where}: key {key!r} looks like a rotary setting that arrayrope does not read; rather than ignore "
                f"it, arrayrope stops (the keys it reads: {sorted(KEYS)})"
            )


def _parameters(cfg: Mapping[str, Any], where: str, layer_type: str | None, model_type: Any
                ) -> tuple[dict[str, Any], str | None]:
    """The rope dict for ``layer_type`` as transformers standardises it, and the layer type it is for
    (None when the config has one set for every layer)."""
    raw = cfg.get("rope_scaling") or cfg.get("rope_parameters") or _DEFAULT_PARAMETERS.get(model_type) or {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"{where}: rope_scaling / rope_parameters must be an object, got {raw!r}")
    nested = bool(raw) and all(isinstance(v, Mapping) or v is None for v in raw.values())
    if nested:
        chosen = _pick(raw, layer_type, where, sorted(raw))
        params = dict(chosen)
        if params.get("rope_theta") is None:
            keys = _TWO_BASES.get(model_type, ("rope_theta", "rope_theta", False))
            params["rope_theta"] = cfg.get(keys[1] if layer_type == "sliding_attention" else keys[0])
        return params, layer_type
    two = _TWO_BASES.get(model_type)
    if two is None and isinstance(DEFAULT_THETA.get(model_type), Mapping):
        two = ("rope_theta", "rope_local_base_freq", False)
    if two is not None:  # v4 config of a family with a base per layer type
        _pick(dict.fromkeys(_LAYER_TYPES), layer_type, where, list(_LAYER_TYPES))
        global_key, local_key, scaled_locally = two
        if layer_type == "sliding_attention":
            params = dict(raw) if scaled_locally else {"rope_type": "default"}
            params["rope_theta"] = cfg.get(local_key)
        else:
            params = dict(raw) or {"rope_type": "default"}
            params.setdefault("rope_theta", cfg.get(global_key))
        return params, layer_type
    if layer_type is not None:
        declared = cfg.get("layer_types") or ()
        if layer_type not in declared:
            raise ValueError(
                f"{where}: layer_type={layer_type!r} given, but the config has one set of rope parameters and its "
                f"layer_types {sorted(set(declared))} do not name it"
            )
    params = dict(raw)
    if params.get("rope_theta") is None:
        params["rope_theta"] = cfg.get("rope_theta", cfg.get("rotary_emb_base"))
    return params, None


def _pick(options: Mapping[str, Any], layer_type: str | None, where: str, names: list[str]) -> Mapping[str, Any]:
    if layer_type is None:
        raise ValueError(f"{where}: the rope parameters differ per layer type {names}; pass layer_type=")
    if layer_type not in options:
        raise ValueError(f"{where}: layer_type {layer_type!r} not in the config's {names}")
    chosen = options[layer_type]
    if chosen is None and names != list(_LAYER_TYPES):
        raise ValueError(f"{where}: layer type {layer_type!r} has no rope parameters (its layers use no RoPE)")
    return chosen or {}


def _default_theta(model_type: Any, layer: str | None) -> float:
    default = DEFAULT_THETA.get(model_type, 10_000.0) if isinstance(model_type, str) else 10_000.0
    if isinstance(default, Mapping):
        return float(default["sliding_attention" if layer == "sliding_attention" else "full_attention"])
    return float(default)


def _dims(cfg: Mapping[str, Any], where: str) -> tuple[int, int | None, str]:
    """``(head_dim, rotary_dim or None, rotary_features)`` of the query and key heads."""
    rope = cfg.get("qk_rope_head_dim")
    if rope is not None:  # MLA: q = [q_nope, q_pe] per head, only q_pe rotates
        rope = checks.positive_int(rope, f"{where}: qk_rope_head_dim", even=True)
        nope = checks.non_negative_int(cfg.get("qk_nope_head_dim") or 0, f"{where}: qk_nope_head_dim")
        return nope + rope, rope, "trailing"
    head_dim = cfg.get("head_dim")
    if head_dim is not None:
        head = checks.positive_int(head_dim, f"{where}: head_dim")
    else:
        hidden, heads = cfg.get("hidden_size", cfg.get("n_embd")), cfg.get("num_attention_heads", cfg.get("n_head"))
        if hidden is None or heads is None:
            missing = [k for k, v in (("hidden_size", hidden), ("num_attention_heads", heads)) if v is None]
            raise ValueError(f"{where} needs 'head_dim', or 'hidden_size' and 'num_attention_heads'; missing {missing}")
        for name, v in (("hidden_size", hidden), ("num_attention_heads", heads)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
                raise ValueError(f"{where}: {name} must be a positive int, got {v!r}")
        head = int(hidden) // int(heads)
    rotary = cfg.get("rotary_dim")
    if rotary is not None:
        return head, checks.positive_int(rotary, f"{where}: rotary_dim", even=True), "leading"
    return head, None, "leading"
