"""Every key transformers reads for rope, what arrayrope does with it, and the keys it refuses.

:data:`CONFIG_KEYS` says what arrayrope does with each key transformers reads for rope; keys that
change RoPE in transformers but that arrayrope does not read are refused with the reason instead of
being ignored. The rules here find the head dim and the rotary dim from the keys a
:class:`~arrayrope._config_view.View` looks up as a family's config class does.
:mod:`arrayrope._config_read` reads a whole config with them.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._config_view import GENERIC_ALIASES, LAYER_DIMS, ROPE_OR_HEAD, View
from ._lib import checks
from .families import Family
from .frequencies import RopeFrequencies

if TYPE_CHECKING:
    from .encodings.mrope import Interleaving

__all__ = [
    "CONFIG_KEYS",
    "HEAD_DIM_RULES",
    "ROTARY_DIM_RULES",
    "ROTARY_KEYS",
    "Settings",
    "legacy_parameters",
    "mrope",
    "nested_base",
    "refuse_unknown",
    "same_rope",
    "sub_config",
    "switched",
]

#: Every key transformers reads for rope, and what arrayrope does with it.
CONFIG_KEYS: dict[str, str] = {
    "model_type": "selects the family's facts (arrayrope.families): defaults, aliases, rules, layout; a model type "
    "transformers lacks is read from what the config states, with the layout from the caller",
    "rope_parameters": "the scaling dict (v5); per layer type when keyed by layer types (pass layer_type=)",
    "rope_scaling": "the scaling dict (v4); wins over rope_parameters when not empty",
    "rope_theta": "the base; inside the dict it wins over the top level; default: the family's",
    "partial_rotary_factor": "rotary_dim = int(head_dim * factor) where the family's rotary module reads it; the "
    "dict's value wins over the top level; refused with the default rope of a family whose default rope ignores it",
    "head_dim": "features per head; else hidden_size // num_attention_heads (the family's rule and default)",
    "hidden_size": "with num_attention_heads, the head dim where head_dim is missing",
    "num_attention_heads": "with hidden_size, the head dim where head_dim is missing",
    "max_position_embeddings": "the context length of dynamic (NTK) and of the yarn/longrope factor fallbacks",
    "original_max_position_embeddings": "top level (Phi-3) wins over the dict's for llama3, yarn and longrope",
    "layer_types": "names the layer type of each layer; layer_type= picks one, layer_idx= one layer",
    "per_layer_config": "per-layer overrides of transformers 5 (Gemma 4: the head dim of full-attention layers)",
    "qk_rope_head_dim": "MLA (DeepSeek-V2/V3 and kin): the rotary dim; the rotary features trail qk_nope_head_dim",
    "qk_nope_head_dim": "MLA: the unrotated features before the rotary ones in each query and key head",
    "rotary_dim": "GPT-J, CodeGen: the rotary dim (the leading features)",
    "no_rope_layers": "layers without RoPE (1: the layer rotates, 0: it does not); layer_idx= gives the identity there",
    "no_rope_layer_interval": "every interval-th layer has no RoPE where no_rope_layers is missing",
    "text_config": "a multimodal config's language model (the family says where: text_config, thinker_config...)",
    "rope_interleave": "a switch the family's attention reads (DeepSeek-V3: interleaved q_pe/k_pe, default true); "
    "for a model type without facts, the pair layout it states",
    # older keys of one family's config class (arrayrope.families: `legacy`), read for that family only
    "rope_local_base_freq": "Gemma 3 (v4): the base of the sliding-window layers (layer_type='sliding_attention')",
    "global_rope_theta": "ModernBERT (v4): the base of the full-attention layers",
    "local_rope_theta": "ModernBERT (v4): the base of the sliding-window layers",
    "global_head_dim": "Gemma 4: the head dim of the full-attention layers (default 512)",
}
#: Keys of one family's own (read through its facts): a config of no known family that has them is refused.
_FAMILY_KEYS = frozenset({"rope_local_base_freq", "global_rope_theta", "local_rope_theta", "global_head_dim"})
# keys that configs of no model type (or of one transformers lacks) may use for the same settings
CONFIG_KEYS.update(
    {
        alias: f"read as {key} where the config names it so"
        for key, aliases in GENERIC_ALIASES.items()
        for alias in aliases
    }
)
#: Keys that change RoPE in transformers and that arrayrope does not read: refused, with the reason.
_REFUSED_KEYS = {
    "layer_rope_theta": "a base per layer index, read for the model types whose model reads it (Granite SWA, Muse)",
    "rope_scaling_layers": "scaling of some layers only, read for the model types whose model reads it (Molmo 2)",
    "rotary_embedding_base": "the relative rotary position of speech conformers (Wav2Vec2-Conformer, SeamlessM4T)",
}
# keys that mention rope but change no frequency: the vision/memory encoders' own settings live in sub-configs
_IGNORED = frozenset({"use_rope", "rope_type"})
_ROPE_LIKE = re.compile(r"rope|rotary|theta")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a config says about its rotary embedding, in :func:`~arrayrope.rope_frequencies` terms.

    ``freqs`` are the frequencies these settings give (at the model's starting length; the identity for a
    layer without RoPE), computed once when the config is read: everything built from a config takes them
    from here. They follow from the other fields, so they take no part in comparisons or the repr.
    """

    head_dim: int
    base: float
    rotary_dim: int | None
    partial_rotary_factor: float | None
    scaling: dict[str, Any] | None
    max_position_embeddings: int | None
    rotary_features: str = "leading"
    layout: str | None = None
    nope: bool = False
    model_type: str | None = None
    why_no_layout: str = ""
    mrope: tuple[tuple[int, ...], Interleaving] | None = None  # M-RoPE: the sections, and how the axes take turns
    mrope_refused: str = ""  # M-RoPE of the family that arrayrope does not compute, and why (positions (axes, B, S))
    freqs: RopeFrequencies = dataclasses.field(kw_only=True, repr=False, compare=False)


def _head_dim_or_division(v: View) -> int:
    head = v.get("head_dim")
    if head is not None:
        return checks.positive_int(head, f"{v.where}: {v.stated('head_dim')}")
    hidden, heads = v.get("hidden_size"), v.get("num_attention_heads")
    if hidden is None or heads is None:
        missing = [v.stated(k) for k, x in (("hidden_size", hidden), ("num_attention_heads", heads)) if x is None]
        raise ValueError(f"{v.where} needs 'head_dim', or 'hidden_size' and 'num_attention_heads'; missing {missing}")
    return v.size("hidden_size") // v.size("num_attention_heads")


#: How a family's rotary module and attention find the kernel's head dim (``tools/families.py`` picks one).
HEAD_DIM_RULES: dict[str, Callable[[View], int]] = {
    "head_dim": _head_dim_or_division,
    "hidden_size": lambda v: v.size("hidden_size") // v.size("num_attention_heads"),
    # Zamba2: its shared attention takes the hidden states and the embeddings, 2 * hidden_size, over its heads
    "attention_hidden_size": lambda v: 2 * v.size("hidden_size") // v.size("num_attention_heads"),
    "qk_head_dim": lambda v: (
        checks.non_negative_int(v.get("qk_nope_head_dim") or 0, f"{v.where}: qk_nope_head_dim")
        + checks.positive_int(v.get("qk_rope_head_dim"), f"{v.where}: qk_rope_head_dim", even=True)
    ),
}
#: How it finds the features its default rope rotates, from the head dim and ``partial_rotary_factor``.
ROTARY_DIM_RULES: dict[str, Callable[[View, int, float | None], int]] = {
    "head_dim": lambda v, head, prf: head,
    "partial": lambda v, head, prf: int(head * prf) if prf is not None else head,
    "rotary_dim": lambda v, head, prf: checks.positive_int(
        v.get("rotary_dim") or v.size("hidden_size"), f"{v.where}: rotary_dim", even=True
    ),
    "qk_rope_head_dim": lambda v, head, prf: checks.positive_int(
        v.get("qk_rope_head_dim"), f"{v.where}: qk_rope_head_dim", even=True
    ),
}

#: The rotary-dim rules that read the rotary dim from a key of its own.
ROTARY_KEYS = ("rotary_dim", "qk_rope_head_dim")


def refuse_unknown(cfg: Mapping[str, Any], where: str, fam: Family | None) -> None:
    """Refuse a key that changes RoPE in transformers but that arrayrope does not read (or not for this family)."""
    if fam is not None:
        known = set(CONFIG_KEYS) | set(fam.legacy) | set(fam.switches)
    else:
        known = set(CONFIG_KEYS) - _FAMILY_KEYS
    for key in cfg:
        if cfg[key] is None:
            continue
        if fam is not None and key == fam.per_layer.get("key"):
            continue  # read layer by layer (arrayrope._config_layers.per_layer)
        if key == "layer_rope_theta" and _one_base(cfg):
            continue  # transformers 5 saves the base of every layer; one base for all is the base
        if key in _REFUSED_KEYS:
            raise ValueError(f"{where}: {key!r} is not supported: {_REFUSED_KEYS[key]}")
        if key in _FAMILY_KEYS and key not in known:
            raise ValueError(
                f"{where}: {key!r} is a key of one family ({CONFIG_KEYS[key].split(':')[0]}), which reads it its "
                f"own way; the config's model_type {cfg.get('model_type')!r} is not one that does"
            )
        if (
            _ROPE_LIKE.search(key)
            and key not in known
            and key not in _IGNORED
            and (fam is None or key not in fam.defaults)
        ):
            raise ValueError(
                f"{where}: key {key!r} looks like a rotary setting that arrayrope does not read; rather than ignore "
                f"it, arrayrope stops (the keys it reads: {sorted(known)})"
            )


def _one_base(cfg: Mapping[str, Any]) -> bool:
    """Whether a ``layer_rope_theta`` list gives every layer the config's own base."""
    values = cfg["layer_rope_theta"]
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    base = params.get("rope_theta", cfg.get("rope_theta")) if isinstance(params, Mapping) else cfg.get("rope_theta")
    return isinstance(values, (list, tuple)) and base is not None and all(x == base for x in values)


def switched(cfg: Mapping[str, Any], fam: Family | None, where: str) -> None:
    """Refuse a config whose switch turns transformers' rotation off or into one arrayrope does not know."""
    if fam is None:
        return
    for key, cases in fam.switches.items():
        value = cfg.get(key, fam.defaults.get(key))
        case = cases.get(str(value).lower()) if value is not None else None
        if case and case.get("refused"):
            raise ValueError(f"{where}: {key}={value!r}: {case['refused']}")


def mrope(
    params: dict[str, Any], fam: Family | None, where: str, layer_type: str | None = None
) -> tuple[tuple[int, ...], Interleaving] | None:
    """Multimodal RoPE: the sections the family's rotary module uses (``mrope_section`` as stated, else the
    family's default, or the default alone where the family's code ignores a stated one) and whether its axes
    take turns pair by pair (``"spatial"``: ERNIE 4.5 VL's, whose ``[h, w, t]`` are read as sections per axis
    ``(t, h, w)``); None for 1-D RoPE and for M-RoPE the table records as one arrayrope does not model
    (its text positions, the same on every axis, are 1-D RoPE). The keys are taken out of ``params``.
    ``mrope_interleaved`` (in Qwen3-VL's files) is not read by transformers: the family's code decides."""
    from .encodings.mrope import interleaving, stated_sections  # the one rule (encodings imports this module)

    stated = params.pop("mrope_section", None)
    params.pop("mrope_interleaved", None)
    for alias in fam.mrope.get("aliases", ()) if fam is not None and fam.mrope else ():  # HunYuan-VL's xdrope
        older = params.pop(alias, None)
        if older is not None and stated is not None and _sections_of(older) != _sections_of(stated):
            raise ValueError(
                f"{where}: rope_parameters states mrope_section={stated!r} and its older name {alias}={older!r}, "
                "which differ (transformers refuses them too); state one"
            )
        stated = stated if stated is not None else older
    if fam is None or not fam.mrope:
        if stated is not None:  # read as 1-D RoPE, as before: the sections go to mrope_tables
            params["mrope_section"] = stated
        return None
    if fam.mrope.get("refused"):  # M-RoPE arrayrope does not model (its text positions are 1-D RoPE)
        return None
    if stated is None and fam.mrope.get("required"):  # the family's code has no default sections (HunYuan-VL)
        raise ValueError(
            f"{where}: this model type's rotary module needs rope_parameters['mrope_section'] (the rotary pairs "
            "each position axis drives, summing to rotary_dim // 2), which the config does not state; a "
            "checkpoint's config states it"
        )
    if stated is None or fam.mrope.get("stated") is False:  # none stated, or the family's code ignores them
        sections = (fam.mrope.get("layer_types") or {}).get(layer_type or "", fam.mrope["sections"])
        return tuple(sections), interleaving(fam.mrope["interleaved"], "the table's interleaved")
    if not isinstance(stated, (list, tuple)) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in stated
    ):
        raise ValueError(f"{where}: mrope_section must be a list of positive ints (pairs per axis), got {stated!r}")
    form = interleaving(fam.mrope["interleaved"], "the table's interleaved")
    if form == "spatial" and len(set(stated[:-1])) > 1:
        raise ValueError(
            f"{where}: mrope_section={list(stated)} states [h, w, t] (ERNIE 4.5 VL's order): h and w must be equal, "
            "as its rotary module takes their pairs in turns"
        )
    return stated_sections(stated, form), form


def _sections_of(value: Any) -> Any:
    """Sections as a tuple of floats (transformers compares a section's older name so), else as given."""
    try:
        return tuple(float(n) for n in value)
    except (TypeError, ValueError):
        return value


def sub_config(cfg: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The sub-config at ``path`` (None where the config has none there)."""
    sub: Any = cfg
    for key in path:
        sub = sub.get(key) if isinstance(sub, Mapping) else None
    return sub


def same_rope(sub: Any, other: Any, where: str, path: tuple[str, ...], other_path: tuple[str, ...]) -> None:
    """Refuse a composite config whose sub-configs of one rotary module give it different rope settings."""
    if not isinstance(sub, Mapping) or not isinstance(other, Mapping):
        return
    keys = sorted(k for k in {*sub, *other} if ROPE_OR_HEAD.search(k) and sub.get(k) != other.get(k))
    if keys:
        first, second = ("".join(f"[{k!r}]" for k in p) for p in (path, other_path))
        raise ValueError(
            f"{where}: {where}{first} and {where}{second} give their rotary embeddings different settings "
            f"({', '.join(keys)}); arrayrope reads one of them: pass {where}{second} (or {where}{first}) itself"
        )


def legacy_parameters(v: View, layer_type: str, stated: bool = True) -> dict[str, Any]:
    """Rope parameters of ``layer_type`` ('' for all layers) that the config states outside the rope dict;
    ``stated``: whether the config states a rope dict (some older keys go into a stated one only)."""
    out: dict[str, Any] = {}
    if v.fam is None:
        for key in ("rope_theta", "partial_rotary_factor"):
            value = v.raw(key)
            if value is not None:
                out[key] = value
        return out
    for key, targets in v.fam.legacy.items():
        value = v.cfg.get(key)
        if value is None or (not stated and key in v.fam.legacy_stated):
            continue
        if stated:
            targets = v.fam.legacy_when_stated.get(key, targets)
        for target_type, param in targets:
            if target_type != layer_type:
                continue
            if param in LAYER_DIMS:  # a per-layer override: the layer's View reads it (View.layer)
                continue
            if param == "rotary_dim" and key == v.fam.rotary_dim:  # the rotary dim its rule reads (Dots3 Note's
                continue  # qk_rope_head_dim, which its class also writes as qk_rope_head_dim / head_dim)
            if param == "rotary_dim":  # the family converts it: partial_rotary_factor = rotary_dim / head_dim
                width = checks.positive_int(value, f"{v.where}: {key}", even=True)
                head = HEAD_DIM_RULES[v.fam.head_dim](v)
                out.setdefault("partial_rotary_factor", width / head)
            else:
                out.setdefault(param, value)
    return out


_NOT_OPTIONS = frozenset({"rope_parameters", "rope_scaling", "per_layer_config"})


def nested_base(cfg: Mapping[str, Any], base: float, where: str, model_type: Any) -> None:
    """Refuse a base stated in a dict of options (DBRX's ``attn_config``) that the rotary module does not turn by.

    transformers 5's DBRX attention keeps ``attn_config['rope_theta']`` (500000 in databricks' config) while its
    rotary module turns by the base of ``rope_parameters`` (10000 by default): arrayrope follows neither silently.
    """
    for key, options in cfg.items():
        if key in _NOT_OPTIONS or not isinstance(options, Mapping) or "hidden_size" in options:
            continue
        stated = options.get("rope_theta")
        if isinstance(stated, numbers.Real) and not isinstance(stated, bool) and float(stated) != base:
            raise ValueError(
                f"{where}: {key}['rope_theta'] is {stated}, but transformers' {model_type} rotary module turns by "
                f"the base of rope_parameters, {base}; state rope_parameters' rope_theta ({stated} if that is the "
                f"checkpoint's base), or remove {key}['rope_theta']"
            )
