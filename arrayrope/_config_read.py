"""Reading the rotary settings of a ``config.json`` as transformers does.

A config of a model type in :mod:`arrayrope.families` is read as that family's config class reads it:
its keys under their aliases, the class's defaults for keys the file leaves out, the rules by which
its rotary module finds the head dim and the rotary dim, its parameters per layer type, its layers
without RoPE. A config of any other model type (or none) gives what it states and nothing more:
sizes and the base must be in it, and the pair layout comes from the caller. The keys, and those
refused, are in :mod:`arrayrope._config_keys`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._config_keys import (
    HEAD_DIM_RULES,
    ROTARY_DIM_RULES,
    ROTARY_KEYS,
    Settings,
    mrope,
    nested_base,
    refuse_unknown,
    same_rope,
    sub_config,
    switched,
)
from ._config_layers import layer_type_of, layer_types, parameters, per_layer, per_type
from ._config_view import View
from ._lib import checks
from .families import FAMILIES, TRANSFORMERS_VERSION, Family, family
from .frequencies import RopeFrequencies, rope_frequencies, turned_back
from .scaling import rope_type

__all__ = ["layer_types", "no_rope", "read", "text_config"]


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
        sub: Any = sub_config(cfg, fam.config_path)
        for other in fam.config_also:  # a sub-config of the same rotary module (T5Gemma 2's decoder)
            same_rope(sub, sub_config(cfg, other), where, fam.config_path, other)
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
    """The rotary settings of the (text) config ``cfg`` of family ``fam`` (None: what the config states), and
    the frequencies they give, computed and checked here once."""
    model_type = cfg.get("model_type")
    if fam is not None and (fam.out_of_scope or fam.refused):
        why = fam.out_of_scope or fam.refused
        raise ValueError(f"{where}: model type {model_type!r} is not read by arrayrope: {why}")
    refuse_unknown(cfg, where, fam)
    switched(cfg, fam, where)
    if fam is not None and layer_type is not None:  # a layer type named by the rope set it turns by (DeepSeek-V4)
        layer_type = fam.rope_sets.get(layer_type, layer_type)
    if layer_idx is not None:
        layer_idx = checks.non_negative_int(layer_idx, "layer_idx")
        own = layer_type_of(cfg, where, layer_type, layer_idx, fam)
        if per_type(cfg, fam):  # the layer's type picks its parameters; with one set it only says what it is
            if own is None:
                raise ValueError(
                    f"{where}: the rope parameters differ per layer type, and the config has no layer_types to say "
                    f"which type layer {layer_idx} is (nor a pattern of model type {model_type!r} arrayrope knows); "
                    "state layer_types or pass layer_type="
                )
            layer_type = own
    # where per_layer_config is read by layer type, the layer types its class fills in for a config without them
    types = layer_types(cfg, fam, where) if "per_layer_config" in cfg and layer_idx is None else None
    v = View(cfg, fam, where, layer_idx, layer_type, types)
    params, layer = parameters(v, layer_type)
    nested = layer is not None
    if params is None:  # a layer type without rope parameters: its layers use no RoPE
        head = HEAD_DIM_RULES[fam.head_dim if fam else "head_dim"](v)
        return Settings(head, 10_000.0, None, None, None, None, nope=True, model_type=model_type, freqs=no_rope(head))
    base = params.pop("rope_theta", None)
    if base is None and fam is None and model_type is None:
        base = 10_000.0  # transformers' base default_theta, for a config of no model type
    if base is None and fam is not None:
        raise ValueError(
            f"{where}: no rope_theta, and transformers' {model_type} fills in none for the rope dict this config "
            "states (its own code fails on it); state rope_theta"
        )
    if base is None:
        raise ValueError(
            f"{where}: no rope_theta, and model type {model_type!r} is not among transformers "
            f"{TRANSFORMERS_VERSION}'s families with RoPE, whose default base arrayrope knows: a model of its own "
            "code states rope_theta, and one without RoPE (BERT) has no rotary embedding to read"
        )
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise ValueError(f"{where}: rope_theta must be a real number, got {base!r}")
    base = checks.positive_real(base, f"{where}: rope_theta")
    nested_base(cfg, base, where, model_type)

    prf = params.pop("partial_rotary_factor", None)
    if prf is not None and (isinstance(prf, bool) or not isinstance(prf, numbers.Real)):
        raise TypeError(f"{where}: partial_rotary_factor must be a number in (0, 1], got {prf!r}")
    m = mrope(params, fam, where, layer)  # M-RoPE's sections and interleaving, or None
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
    base, scaled, layer_nope = per_layer(cfg, fam, where, layer_idx, base)
    if not scaled:  # a layer the family's model turns by the unscaled base (Molmo 2's rope_scaling_layers)
        scaling = None
    nope = (
        layer_nope
        or (layer_idx is not None and _no_rope(v, fam, layer_idx))
        or bool(fam is not None and layer_type is not None and layer_type in fam.nope.get("layer_types", ()))
    )
    max_len = None if max_len is None else int(max_len)
    # both: proportional over the rotary features (MLA), their table; else rope_frequencies' own rules
    over = rotary_dim if rotary_dim is not None and prf is not None else head_dim
    freqs = (
        no_rope(head_dim)
        if nope
        else rope_frequencies(  # the one computation; it checks every value, and warns once per cause
            over,
            base=float(base),
            rotary_dim=rotary_dim if prf is None else None,
            partial_rotary_factor=prf,
            scaling=scaling,
            max_position_embeddings=max_len,
        )
    )
    if over != head_dim and not nope:
        freqs = dataclasses.replace(freqs, head_dim=head_dim)
    if fam is not None and fam.direction != 1 and not nope:  # nanochat's rotate_half is (x2, -x1)
        freqs = turned_back(freqs)
    fields = (head_dim, float(base), rotary_dim, prf, scaling, max_len, features, layout, nope, model_type, why, m)
    refused = (fam.mrope or {}).get("refused") if fam is not None else None
    why_not = f"model type {model_type!r}: {refused}" if refused else ""
    return Settings(*fields, mrope_refused=why_not, freqs=freqs)


def no_rope(head_dim: int) -> RopeFrequencies:
    """The frequencies of a layer without RoPE: every pair turns by 0 (cos 1, sin 0), ``rope_type "none"``.

    Parameters
    ----------
    head_dim : int
        The layer's head dim (even).

    Returns
    -------
    RopeFrequencies
        ``head_dim // 2`` zero frequencies.

    Examples
    --------
    >>> from arrayrope.config import no_rope
    >>> f = no_rope(8)
    >>> f.rope_type, f.inv_freq.tolist()
    ('none', [0.0, 0.0, 0.0, 0.0])
    """
    return RopeFrequencies(inv_freq=np.zeros(head_dim // 2), head_dim=head_dim, rotary_dim=head_dim, rope_type="none")


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
    head = HEAD_DIM_RULES[fam.head_dim](v)  # a layer's own head dim comes through its View (per_layer_config)
    if prf is not None and float(prf) == 1.0:
        prf = None
    if prf is not None and fam.rotary_dim in ROTARY_KEYS:
        prf = _key_rule_fraction(v, fam, layer, float(prf))
    reads = fam.rotary_dim == "partial" or rope != "default"
    if prf is not None and not reads:
        turns = "the whole head" if fam.rotary_dim == "head_dim" else f"its {fam.rotary_dim} features"
        raise ValueError(
            f"{where}: partial_rotary_factor={prf} but transformers' default rope of model type {fam.model_type!r} "
            f"ignores it and rotates {turns}; remove the key ({turns}) or the model_type (partial rotary)"
        )
    if rope == "proportional" and fam.head_dim != "head_dim":  # both returned: its table is over the rotary features
        return head, _proportional_width(v, fam, head), fam.rotary_features, 1.0 if prf is None else float(prf)
    if fam.rotary_dim in ("partial", "head_dim"):
        return head, None if prf is None else int(head * float(prf)), fam.rotary_features, None
    width = ROTARY_DIM_RULES[fam.rotary_dim](v, head, None)
    if prf is not None:
        width = int(width * float(prf))
    return head, width, fam.rotary_features, None


def _config_head(v: View, fam: Family) -> Any:
    """The ``head_dim`` transformers' config of the family holds (its rope types compute over it): from the key
    its class sets it from (:attr:`Family.head_dim_from`), else its own."""
    source = fam.head_dim_from
    if not source or (source["keeps_stated"] and v.raw("head_dim") is not None):
        return v.get("head_dim")
    return v.get(source["key"])


def _proportional_width(v: View, fam: Family, head: int) -> int:
    """The rotary features of a family whose kernel head is not its config's ``head_dim`` (MLA, Zamba2) under
    rope_type 'proportional': transformers computes its table over the config's ``head_dim`` (DeepSeek's class
    sets it to ``qk_rope_head_dim``), which must be the features its attention rotates, else its own code fails
    (a ``head_dim`` the config or the family's defaults state that differs is refused)."""
    width = head if fam.rotary_dim in ("partial", "head_dim") else ROTARY_DIM_RULES[fam.rotary_dim](v, head, None)
    table = _config_head(v, fam)
    if table is not None and table != width:
        raise ValueError(
            f"{v.where}: transformers computes rope_type 'proportional' of model type {fam.model_type!r} over "
            f"head_dim={table}, but its attention rotates {width} features, which that table does not fit "
            "(transformers' own code fails on it)"
        )
    return width


def _key_rule_fraction(v: View, fam: Family, layer: str | None, prf: float) -> float | None:
    """The partial factor of a family whose rotary dim is a key of its own (``rotary_dim``,
    ``qk_rope_head_dim``): None where it is the family's default or the fraction that key makes of the
    config's ``head_dim`` (Dots3 Note's class writes ``qk_rope_head_dim / head_dim`` itself); a fraction of
    another rotary dim is refused where ``head_dim`` is not the rotary dim (transformers computes the
    scaled types over ``head_dim * partial_rotary_factor``, arrayrope over the key's rotary dim)."""
    raw = v.cfg.get("rope_scaling") or v.cfg.get("rope_parameters")
    if isinstance(raw, Mapping) and layer is not None and isinstance(raw.get(layer), Mapping):
        raw = raw[layer]
    stated = (isinstance(raw, Mapping) and raw.get("partial_rotary_factor") is not None) or (
        v.raw("partial_rotary_factor") is not None
    )
    if not stated:
        return None
    found = _config_head(v, fam)
    if isinstance(found, bool) or not isinstance(found, numbers.Integral) or found <= 0:
        return prf
    head = int(found)
    width = ROTARY_DIM_RULES[fam.rotary_dim](v, head, None)
    if width == head:
        return prf
    if math.isclose(prf * head, width):
        return None
    raise ValueError(
        f"{v.where}: partial_rotary_factor={prf} is not {fam.rotary_dim} / head_dim = {width} / {head}, the "
        f"features transformers' {fam.model_type} rotates; remove partial_rotary_factor or make it {width / head}"
    )


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
        if model_type == "":  # how transformers saves a sub-config of no model type of its own
            parts = ", ".join(repr(k) for k, raw in FAMILIES.items() if "config_class" in raw)
            return None, (
                "its model_type is empty, as transformers saves a sub-config of no model type of its own; pass the "
                "transformers config object, or state as model_type the key arrayrope.families gives it (the "
                f"composite's model type and the path to it: {parts})"
            )
        return None, (
            f"model type {model_type!r} is not among transformers {TRANSFORMERS_VERSION}'s families, "
            "whose pair layouts arrayrope knows"
        )
    if fam.layout is None:
        return None, f"arrayrope has no facts for model type {fam.model_type!r}: {fam.refused}"
    layout = fam.layout
    for key, cases in fam.switches.items():
        value = cfg.get(key, fam.defaults.get(key))
        if value is not None and str(value).lower() in cases:
            layout = cases[str(value).lower()].get("layout", layout)
    return layout, ""


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
