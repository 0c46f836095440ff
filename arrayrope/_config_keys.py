"""How transformers reads the rotary settings of a ``config.json``: every key it reads, and arrayrope's answer.

A config of a model type in :mod:`arrayrope.families` is read as that family's config class reads it:
its keys under their aliases, the class's defaults for keys the file leaves out, the rules by which
its rotary module finds the head dim and the rotary dim, its parameters per layer type, its layers
without RoPE. A config of any other model type (or none) gives what it states and nothing more:
sizes and the base must be in it, and the pair layout comes from the caller. :data:`CONFIG_KEYS` says
what arrayrope does with each key transformers reads for rope; keys that change RoPE in transformers
but that arrayrope does not read are refused with the reason instead of being ignored.
"""

from __future__ import annotations

import dataclasses
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

from ._lib import checks
from .families import TRANSFORMERS_VERSION, Family, family
from .scaling import rope_type

__all__ = ["CONFIG_KEYS", "HEAD_DIM_RULES", "ROTARY_DIM_RULES", "Settings", "View", "read", "text_config"]

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
_GENERIC_ALIASES = {
    "hidden_size": ("n_embd",),
    "num_attention_heads": ("n_head",),
    "max_position_embeddings": ("n_positions",),
    "partial_rotary_factor": ("rotary_pct",),
    "rope_theta": ("rotary_emb_base",),
}
CONFIG_KEYS.update(
    {
        alias: f"read as {key} where the config names it so"
        for key, aliases in _GENERIC_ALIASES.items()
        for alias in aliases
    }
)
#: Keys that change RoPE in transformers and that arrayrope does not read: refused, with the reason.
_REFUSED_KEYS = {
    "layer_rope_theta": "a base per layer index (Granite SWA, Muse), which arrayrope has no layer_type for",
    "rope_scaling_layers": "scaling applied to some layers only (Molmo 2)",
    "rotary_embedding_base": "the relative rotary position of speech conformers (Wav2Vec2-Conformer, SeamlessM4T)",
}
# keys that mention rope but change no frequency: the vision/memory encoders' own settings live in sub-configs
_IGNORED = frozenset({"use_rope", "rope_type"})
_ROPE_LIKE = re.compile(r"rope|rotary|theta")
_LAYER_TYPES = ("full_attention", "sliding_attention")


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
    nope: bool = False
    model_type: str | None = None
    why_no_layout: str = ""


class View:
    """A config as its family's config class reads it: a key under its alias, the layer's override, the default."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        fam: Family | None,
        where: str,
        layer_idx: int | None = None,
        layer_type: str | None = None,
    ) -> None:
        self.cfg, self.fam, self.where = cfg, fam, where
        self.layer: Mapping[str, Any] = {}
        overrides = cfg.get("per_layer_config")
        types = cfg.get("layer_types")
        if layer_idx is None and layer_type is not None and isinstance(types, (list, tuple)) and layer_type in types:
            layer_idx = types.index(layer_type)  # the layers of a type share their overrides
        if layer_idx is not None and isinstance(overrides, Mapping):
            entry = overrides.get(str(layer_idx), overrides.get(layer_idx))
            self.layer = entry if isinstance(entry, Mapping) else {}

    def names(self, key: str) -> tuple[str, ...]:
        """The config keys that give ``key``, first wins."""
        if self.fam is None:
            return (key, *_GENERIC_ALIASES.get(key, ()))
        alias = self.fam.aliases.get(key)
        return (alias, key) if alias else (key,)

    def raw(self, key: str) -> Any:
        """``key`` as the file states it (None where it does not)."""
        if key in self.layer and self.layer[key] is not None:
            return self.layer[key]
        for name in self.names(key):
            if self.cfg.get(name) is not None:
                return self.cfg[name]
        return None

    def get(self, key: str) -> Any:
        """``key`` as the file states it, else the family's default (None for a model type without facts)."""
        value = self.raw(key)
        if value is None and self.fam is not None:
            value = self.fam.defaults.get(key)
        return value

    def stated(self, key: str) -> str:
        """The name ``key`` has in the file, for messages."""
        return next((n for n in self.names(key) if self.cfg.get(n) is not None), key)

    def size(self, key: str) -> int:
        value = self.get(key)
        if value is None:
            raise ValueError(f"{self.where} needs {key!r}{self._no_default()}")
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            raise ValueError(f"{self.where}: {self.stated(key)} must be a positive int, got {value!r}")
        return int(value)

    def _no_default(self) -> str:
        if self.fam is None:
            return " (a model type arrayrope has no facts for states its sizes)"
        return ""


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


def text_config(cfg: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str, Family | None]:
    """The (sub-)config that holds a model's rotary settings, how messages name it, and its family.

    A composite model type's family says where its language model's settings are (``text_config``,
    ``thinker_config.text_config``...); a config that keeps them at the top level instead is read there.
    A model type the table lacks, without sizes of its own but with a ``text_config``, is read from it.
    """
    fam = family(cfg.get("model_type"))
    for _ in range(4):
        if fam is None or not fam.composite:
            break
        sub: Any = cfg
        for key in fam.config_path:
            sub = sub.get(key) if isinstance(sub, Mapping) else None
        nested = fam.config_model_type
        if isinstance(sub, Mapping):
            cfg, where = sub, where + "".join(f"[{k!r}]" for k in fam.config_path)
            nested = sub.get("model_type") or nested
        fam = family(nested)
        if fam is None:
            raise ValueError(
                f"{where}: model type {nested!r} of its language model is not among transformers "
                f"{TRANSFORMERS_VERSION}'s families"
            )
    if (
        fam is None
        and not any(k in cfg for k in ("head_dim", "hidden_size", "n_embd", "qk_rope_head_dim"))
        and (isinstance(cfg.get("text_config"), Mapping))
    ):
        cfg, where = cfg["text_config"], f"{where}['text_config']"
        fam = family(cfg.get("model_type"))
    return cfg, where, fam


def read(
    cfg: Mapping[str, Any], where: str, layer_type: str | None, layer_idx: int | None = None, fam: Family | None = None
) -> Settings:
    """The rotary settings of the (text) config ``cfg`` of family ``fam`` (None: what the config states)."""
    model_type = cfg.get("model_type")
    if fam is not None and (fam.out_of_scope or fam.refused):
        why = fam.out_of_scope or fam.refused
        raise ValueError(f"{where}: model type {model_type!r} is not read by arrayrope: {why}")
    _refuse_unknown(cfg, where, fam)
    _switched(cfg, fam, where)
    if layer_idx is not None:
        layer_idx = checks.non_negative_int(layer_idx, "layer_idx")
        own = _layer_type_of(cfg, where, layer_type, layer_idx, fam)
        if _per_type(cfg, fam):  # the layer's type picks its parameters; with one set it only says what it is
            layer_type = own
    v = View(cfg, fam, where, layer_idx, layer_type)
    params, layer = _parameters(v, layer_type)
    nested = layer is not None
    if params is None:  # a layer type without rope parameters: its layers use no RoPE
        head = HEAD_DIM_RULES[fam.head_dim if fam else "head_dim"](v)
        return Settings(head, 10_000.0, None, None, None, None, nope=True, model_type=model_type)
    base = params.pop("rope_theta", None)
    if base is None and fam is None and model_type is None:
        base = 10_000.0  # transformers' base default_theta, for a config of no model type
    if base is None:
        raise ValueError(
            f"{where}: no rope_theta, and model type {model_type!r} is not among transformers "
            f"{TRANSFORMERS_VERSION}'s families, whose default base arrayrope knows; state rope_theta"
        )
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise ValueError(f"{where}: rope_theta must be a real number, got {base!r}")
    base = checks.positive_real(base, f"{where}: rope_theta")

    prf = params.pop("partial_rotary_factor", None)
    if prf is not None and (isinstance(prf, bool) or not isinstance(prf, numbers.Real)):
        raise TypeError(f"{where}: partial_rotary_factor must be a number in (0, 1], got {prf!r}")
    stated = _variant(params, fam)  # the rope type the family's own code computes for these parameters
    entry = rope_type(stated)
    if fam is not None and entry.name != "default":
        _check_rope_type(fam, entry.name, where)

    head_dim, rotary_dim, features, prf = _dims(v, fam, layer, prf, entry.name)
    max_len = v.get("max_position_embeddings")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral)):
        raise TypeError(f"{where}: max_position_embeddings must be an int, got {max_len!r}")

    if entry.name == "yarn" and nested and params.get("truncate") is False:
        raise ValueError(
            f"{where}: rope_parameters[{layer!r}]['truncate'] is false, but transformers 5.x reads 'truncate' from the "
            "top level of rope_parameters, where a per-layer config has none, and truncates; arrayrope does not guess"
        )
    original = v.get("original_max_position_embeddings")  # Phi-3's top-level length (its class has a default)
    if entry.reads_original_length and original is not None and not nested:
        stated["original_max_position_embeddings"] = original
    scaling: dict[str, Any] | None = stated
    if entry.name == "default" and not (set(stated) - {"rope_type", "type"}):
        scaling = None
    layout, why = _layout(cfg, fam, model_type)
    nope = (layer_idx is not None and _no_rope(v, fam, layer_idx)) or bool(
        fam is not None and layer_type is not None and layer_type in fam.nope.get("layer_types", ())
    )
    max_len = None if max_len is None else int(max_len)
    return Settings(head_dim, float(base), rotary_dim, prf, scaling, max_len, features, layout, nope, model_type, why)


def _refuse_unknown(cfg: Mapping[str, Any], where: str, fam: Family | None) -> None:
    if fam is not None:
        known = set(CONFIG_KEYS) | set(fam.legacy) | set(fam.switches)
    else:
        known = set(CONFIG_KEYS) - _FAMILY_KEYS
    for key in cfg:
        if cfg[key] is None:
            continue
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


def _per_type(cfg: Mapping[str, Any], fam: Family | None) -> bool:
    """Whether the config (or its family's defaults) keeps rope parameters per layer type."""
    for params in (
        cfg.get("rope_scaling") or cfg.get("rope_parameters"),
        fam.defaults.get("rope_parameters") if fam is not None else None,
    ):
        if isinstance(params, Mapping) and params and all(isinstance(x, Mapping) or x is None for x in params.values()):
            return True
    return False


def layer_types(cfg: Mapping[str, Any], fam: Family | None, where: str) -> list[Any]:
    """The config's ``layer_types``, or the ones its family's config class fills in from its pattern key."""
    types = cfg.get("layer_types")
    if isinstance(types, (list, tuple)) and types:
        return list(types)
    rule = fam.layer_pattern if fam is not None else {}
    if not rule:
        return []
    v = View(cfg, fam, where)
    n = v.size("num_hidden_layers")
    period = checks.positive_int(cfg.get(rule["key"], rule["default"]), f"{where}: {rule['key']}")
    return [rule["every"] if (i + 1) % period == 0 else rule["else"] for i in range(n)]


def _layer_type_of(
    cfg: Mapping[str, Any], where: str, layer_type: str | None, layer_idx: int, fam: Family | None
) -> str | None:
    """The layer type of layer ``layer_idx`` from ``layer_types`` (and that it agrees with ``layer_type``)."""
    types = layer_types(cfg, fam, where)
    if not types:
        return layer_type
    layers = View(cfg, fam, where).get("num_hidden_layers")
    if layers is not None and layers != len(types):
        raise ValueError(
            f"{where}: layer_types names {len(types)} entries for num_hidden_layers={layers}, which "
            "arrayrope does not map to layer indices; pass layer_type= instead of layer_idx="
        )
    if layer_idx >= len(types):
        raise ValueError(f"{where}: layer_idx={layer_idx} but layer_types names {len(types)} layers")
    own = types[layer_idx]
    if layer_type is not None and layer_type != own:
        raise ValueError(f"{where}: layer_type={layer_type!r} but layer {layer_idx} is {own!r} in layer_types")
    return str(own)


def _parameters(v: View, layer_type: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The rope dict for ``layer_type`` as transformers standardises it, and the layer type it is for
    (None when the config has one set for every layer); ``(None, type)`` for a type without RoPE."""
    cfg, fam, where = v.cfg, v.fam, v.where
    found = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if found is not None and not isinstance(found, Mapping):
        raise TypeError(f"{where}: rope_scaling / rope_parameters must be an object, got {found!r}")
    raw: Mapping[str, Any] = found or {}
    nested_file = bool(raw) and all(isinstance(x, Mapping) or x is None for x in raw.values())
    defaults = fam.defaults.get("rope_parameters") if fam is not None else None
    per_type = (
        isinstance(defaults, Mapping)
        and bool(defaults)
        and all(isinstance(x, Mapping) or x is None for x in defaults.values())
    )
    if fam is None:
        if nested_file:
            chosen = _pick(raw, layer_type, where, sorted(raw))
            if chosen is None:
                return None, layer_type
            params = dict(chosen)
            for key, value in _legacy(v, "").items():
                params.setdefault(key, value)
            return params, layer_type
        _single_set(cfg, layer_type, where)
        params = dict(raw) if raw else {}
        for key, value in _legacy(v, "").items():
            params.setdefault(key, value)
        return params, None
    if per_type or nested_file:
        names = sorted(raw) if nested_file else sorted(defaults or {})
        _pick({name: {} for name in names}, layer_type, where, names)
        assert layer_type is not None
        if nested_file:
            entry = raw[layer_type]
            if entry is None:
                return None, layer_type
            params = dict(entry)
        else:
            assert isinstance(defaults, Mapping)
            base = defaults[layer_type]
            if base is None:
                return None, layer_type
            if not raw:  # nothing stated: the family's parameters of this layer type, older keys first
                params = _legacy(v, layer_type)
                for key, value in base.items():
                    params.setdefault(key, value)
                return params, layer_type
            params = {"rope_type": base.get("rope_type", "default")}  # a v4 rope_scaling: to the types it goes to
            if layer_type in fam.scaling_to:
                params.update(raw)
        for key, value in _legacy(v, layer_type).items():
            params.setdefault(key, value)
        fallback = fam.defaults.get("rope_fallback") or {}
        for key, value in (fallback.get(layer_type) or {}).items():
            params.setdefault(key, value)
        return params, layer_type
    _single_set(cfg, layer_type, where, fam)
    params = dict(raw) if raw else _legacy(v, "")
    if raw:
        for key, value in _legacy(v, "").items():
            params.setdefault(key, value)
        fallback = fam.defaults.get("rope_fallback") or {}
    else:
        fallback = defaults if isinstance(defaults, Mapping) else {}
    for key, value in fallback.items():
        params.setdefault(key, value)
    return params, None


def _single_set(cfg: Mapping[str, Any], layer_type: str | None, where: str, fam: Family | None = None) -> None:
    """A layer type asked of a config with one set of parameters must be one its ``layer_types`` names."""
    if layer_type is not None:
        declared = layer_types(cfg, fam, where)
        if layer_type not in declared:
            raise ValueError(
                f"{where}: layer_type={layer_type!r} given, but the config has one set of rope parameters and its "
                f"layer_types {sorted(set(declared))} do not name it"
            )


def _legacy(v: View, layer_type: str) -> dict[str, Any]:
    """Rope parameters of ``layer_type`` ('' for all layers) that the config states outside the rope dict."""
    out: dict[str, Any] = {}
    if v.fam is None:
        for key in ("rope_theta", "partial_rotary_factor"):
            value = v.raw(key)
            if value is not None:
                out[key] = value
        return out
    for key, targets in v.fam.legacy.items():
        value = v.cfg.get(key)
        if value is None:
            continue
        for target_type, param in targets:
            if target_type == layer_type and param != "head_dim":
                out.setdefault(param, value)
    return out


def _pick(options: Mapping[str, Any], layer_type: str | None, where: str, names: list[str]) -> Any:
    if layer_type is None:
        raise ValueError(f"{where}: the rope parameters differ per layer type {names}; pass layer_type=")
    if layer_type not in options:
        raise ValueError(f"{where}: layer_type {layer_type!r} not in the config's {names}")
    return options[layer_type]


def _check_rope_type(fam: Family, name: str, where: str) -> None:
    """A rope type the family's rotary module does not compute (GPT-J's fixed table) is refused."""
    if (
        name not in fam.variants.values()
        and fam.defaults.get("rope_types") is not None
        and name not in (fam.defaults["rope_types"])
    ):
        raise ValueError(
            f"{where}: transformers' {fam.model_type} rotary module does not compute rope_type {name!r} "
            f"(it computes {sorted(fam.defaults['rope_types'])}); arrayrope does not guess what it would do"
        )


def _variant(params: dict[str, Any], fam: Family | None) -> dict[str, Any]:
    """``params`` with the rope type the family's own code computes for them (Hunyuan's dynamic + alpha)."""
    if fam is None or not fam.variants:
        return params
    name = params.get("rope_type", params.get("type", "default"))
    for trigger, target in fam.variants.items():
        base_type, _, key = trigger.partition("+")
        if name == base_type and params.get(key) is not None:
            if not target:
                raise ValueError(
                    f"transformers' {fam.model_type} computes rope_type {name!r} with {key!r} in code of its own, "
                    "which arrayrope does not reproduce"
                )
            out = {k: x for k, x in params.items() if k != "type"}
            out["rope_type"] = target
            return out
    return params


def _dims(
    v: View, fam: Family | None, layer: str | None, prf: Any, rope: str
) -> tuple[int, int | None, str, float | None]:
    """``(head_dim, rotary_dim or None, rotary_features, partial_rotary_factor)`` of the query and key heads."""
    where = v.where
    if fam is None:
        return _stated_dims(v, prf, rope)
    head = HEAD_DIM_RULES[fam.head_dim](v)
    if layer and "head_dim" not in v.layer:  # an older key for the head dim of this layer type (Gemma 4)
        for key, targets in fam.legacy.items():
            if (layer, "head_dim") in targets:
                value = v.cfg.get(key, fam.defaults.get(key))
                head = checks.positive_int(value, f"{where}: {key}")
    if prf is not None and float(prf) == 1.0:
        prf = None
    reads = fam.rotary_dim == "partial" or rope != "default"
    if prf is not None and not reads:
        raise ValueError(
            f"{where}: partial_rotary_factor={prf} but transformers' default rope of model type {fam.model_type!r} "
            "ignores it and rotates the whole head; remove the key (whole head) or the model_type (partial rotary)"
        )
    if rope == "proportional" and fam.head_dim != "head_dim":
        raise ValueError(
            f"{where}: transformers computes rope_type 'proportional' of model type {fam.model_type!r} "
            "over its rotary features, arrayrope over the whole head; arrayrope does not read it"
        )
    if fam.rotary_dim in ("partial", "head_dim"):
        return head, None if prf is None else int(head * float(prf)), fam.rotary_features, None
    width = ROTARY_DIM_RULES[fam.rotary_dim](v, head, None)
    if prf is not None:
        width = int(width * float(prf))
    return head, width, fam.rotary_features, None


def _stated_dims(v: View, prf: Any, rope: str) -> tuple[int, int | None, str, float | None]:
    """Dims of a config without facts: MLA's qk_rope_head_dim, GPT-J's rotary_dim, else the head dim."""
    where = v.where
    if v.get("qk_rope_head_dim") is not None:  # MLA: q = [q_nope, q_pe] per head, only q_pe rotates
        head = HEAD_DIM_RULES["qk_head_dim"](v)
        rope_dim = checks.positive_int(v.get("qk_rope_head_dim"), f"{where}: qk_rope_head_dim", even=True)
        if prf is not None and float(prf) != 1.0:
            rope_dim = int(rope_dim * float(prf))
        return head, rope_dim, "trailing", None
    head = HEAD_DIM_RULES["head_dim"](v)
    if v.get("rotary_dim") is not None:
        return head, checks.positive_int(v.get("rotary_dim"), f"{where}: rotary_dim", even=True), "leading", None
    if prf is not None and float(prf) == 1.0:
        prf = None
    return head, None, "leading", None if prf is None else float(prf)


def _layout(cfg: Mapping[str, Any], fam: Family | None, model_type: Any) -> tuple[str | None, str]:
    """The family's pair layout (its switches applied), or None with why the caller must give it."""
    if fam is None:
        stated = cfg.get("rope_interleave")
        if isinstance(stated, bool):
            return ("interleaved" if stated else "half"), ""
        if model_type is None:
            return None, "the config has no model_type"
        return None, (
            f"model type {model_type!r} is not among transformers {TRANSFORMERS_VERSION}'s families, "
            "whose pair layouts arrayrope knows"
        )
    if fam.layout is None:
        return None, f"arrayrope has no facts for model type {fam.model_type!r}: {fam.refused}"
    if fam.direction != 1:
        return None, (
            f"transformers' {fam.model_type} turns each pair the other way (its rotate_half is "
            "(x2, -x1)); swap the two halves of the rotary features of its q and k rows "
            "(arrayrope.permute_rotary_rows) and pass layout='half'"
        )
    layout = fam.layout
    for key, cases in fam.switches.items():
        value = cfg.get(key, fam.defaults.get(key))
        if value is not None and str(value).lower() in cases:
            layout = cases[str(value).lower()].get("layout", layout)
    return layout, ""


def _switched(cfg: Mapping[str, Any], fam: Family | None, where: str) -> None:
    """Refuse a config whose switch turns transformers' rotation off or into one arrayrope does not know."""
    if fam is None:
        return
    for key, cases in fam.switches.items():
        value = cfg.get(key, fam.defaults.get(key))
        case = cases.get(str(value).lower()) if value is not None else None
        if case and case.get("refused"):
            raise ValueError(f"{where}: {key}={value!r}: {case['refused']}")


def _no_rope(v: View, fam: Family | None, layer_idx: int) -> bool:
    """Whether layer ``layer_idx`` has no RoPE (``no_rope_layers``, ``no_rope_layer_interval``)."""
    rule: Mapping[str, Any] = (
        fam.nope if fam is not None else ({"key": "no_rope_layers", "rope": 1} if "no_rope_layers" in v.cfg else {})
    )
    if not rule:
        return False
    if "layer_types" in rule:
        types = layer_types(v.cfg, v.fam, v.where)
        if not types:
            raise ValueError(
                f"{v.where}: layers of types {rule['layer_types']} use no RoPE in transformers, but the config has no "
                "layer_types to say which layer is of which type; pass layer_type= instead of layer_idx="
            )
        return layer_idx < len(types) and types[layer_idx] in rule["layer_types"]
    flags = v.cfg.get(rule["key"])
    if not flags:
        interval_key = rule.get("interval_key")
        if not interval_key:
            return False
        interval = v.cfg.get(interval_key, rule.get("interval"))
        interval = checks.positive_int(interval, f"{v.where}: {interval_key}")
        return (layer_idx + 1) % interval == 0
    if not isinstance(flags, (list, tuple)) or layer_idx >= len(flags):
        raise ValueError(f"{v.where}: {rule['key']} must list a flag for layer {layer_idx}, got {flags!r}")
    return bool(flags[layer_idx]) != bool(rule.get("rope", 1))
