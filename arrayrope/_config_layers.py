"""Which rope parameters a layer of a config turns by: one set for every layer, or one per layer type.

A config keeps one set of rope parameters (``rope_parameters``, ``rope_scaling``), or one per layer
type (Gemma 3, ModernBERT...), stated or left to its family's defaults; ``layer_types`` (or the pattern
key the family's config class fills it from) names the type of each layer. :mod:`arrayrope._config_read`
reads the rest of a config.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from ._config_keys import legacy_parameters
from ._config_view import View, kept_types
from ._lib import checks
from .families import Family

__all__ = [
    "layer_count",
    "layer_type_of",
    "layer_types",
    "parameters",
    "pattern_types",
    "per_layer",
    "per_type",
    "zero_layers",
]


def per_type(cfg: Mapping[str, Any], fam: Family | None) -> bool:
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
        return list(kept_types(types[::2] if _blocks(cfg, fam) else types, fam))
    rule = fam.layer_pattern if fam is not None else {}
    if not rule:
        return []
    n = layer_count(cfg, fam, where)
    key = rule.get("key")
    period = checks.positive_int(cfg.get(key, rule["default"]), f"{where}: {key}") if key else rule["default"]
    return pattern_types(rule, n, period)


def pattern_types(rule: Mapping[str, Any], n: int, period: int) -> list[Any]:
    """The layer types of ``n`` layers by a :attr:`Family.layer_pattern`: layer ``i`` is of type ``every`` when
    ``i % period == at`` (``at`` defaults to ``period - 1``: every ``period``-th layer), ``i < first`` or, with
    ``last``, ``i == n - 1``; of type ``else`` otherwise."""
    at, first, last = rule.get("at", period - 1), rule.get("first", 0), rule.get("last", False)
    return [rule["every"] if i % period == at or i < first or (last and i == n - 1) else rule["else"] for i in range(n)]


def _blocks(cfg: Mapping[str, Any], fam: Family | None) -> bool:
    """Whether the config's ``layer_types`` lists each layer's type and then its family's other block (Dory's
    released configs: attention, ``"mlp"``), counting both in ``num_hidden_layers``."""
    types = cfg.get("layer_types")
    return bool(fam is not None and fam.layer_blocks and isinstance(types, (list, tuple)) and fam.layer_blocks in types)


def layer_count(cfg: Mapping[str, Any], fam: Family | None, where: str) -> int:
    """The config's number of layers (``num_hidden_layers``, which counts two blocks per layer where
    ``layer_types`` lists them)."""
    n = View(cfg, fam, where).size("num_hidden_layers")
    return n // 2 if _blocks(cfg, fam) else n


def layer_type_of(
    cfg: Mapping[str, Any], where: str, layer_type: str | None, layer_idx: int, fam: Family | None
) -> str | None:
    """The layer type of layer ``layer_idx`` from ``layer_types`` (and that it agrees with ``layer_type``)."""
    types = layer_types(cfg, fam, where)
    if not types:
        return layer_type
    layers = View(cfg, fam, where).get("num_hidden_layers")
    if layers is not None and _blocks(cfg, fam):
        layers = layer_count(cfg, fam, where)
    if layers is not None and layers != len(types):
        raise ValueError(
            f"{where}: layer_types names {len(types)} entries for num_hidden_layers={layers}, which "
            "arrayrope does not map to layer indices; pass layer_type= instead of layer_idx="
        )
    if layer_idx >= len(types):
        raise ValueError(f"{where}: layer_idx={layer_idx} but layer_types names {len(types)} layers")
    own = types[layer_idx]
    if fam is not None:
        own = fam.rope_sets.get(own, own)
    if layer_type is not None and layer_type != own:
        raise ValueError(f"{where}: layer_type={layer_type!r} but layer {layer_idx} is {own!r} in layer_types")
    return str(own)


def per_layer(
    cfg: Mapping[str, Any], fam: Family | None, where: str, layer_idx: int | None, base: float
) -> tuple[float, bool, bool]:
    """``(base, scaled, nope)`` of layer ``layer_idx`` where the family's model reads a list layer by layer
    (:attr:`Family.per_layer`): its base, whether the rope parameters' scaling applies and whether it has no
    RoPE. Without ``layer_idx``, the one setting every rotating layer shares, or a ValueError saying to pass
    ``layer_idx=``."""
    rule = fam.per_layer if fam is not None else {}
    key = rule.get("key", "")
    values = cfg.get(key) if key else None
    if not key:
        return base, True, False
    n = layer_count(cfg, fam, where)
    if layer_idx is not None and layer_idx >= n:
        raise ValueError(f"{where}: layer_idx={layer_idx} but the config has num_hidden_layers={n}")
    if values is None and not rule.get("zeros"):  # the config class's default: every layer scales, or rotates
        return base, True, False
    if values is None:  # the zeros the family's config class fills in
        return base, True, layer_idx is not None and layer_idx in zero_layers(rule["zeros"], n)
    if not isinstance(values, (list, tuple)) or any(
        isinstance(x, bool) or not isinstance(x, numbers.Real) for x in values
    ):
        raise ValueError(f"{where}: {key} must be a list of numbers, one per layer, got {values!r}")
    if rule["sets"] == "scaling":  # layer indices
        if any(not isinstance(x, numbers.Integral) for x in values):
            raise ValueError(f"{where}: {key} must list layer indices (ints), got {values!r}")
        listed = {int(x) for x in values}
        if layer_idx is not None:
            return base, layer_idx in listed, False
        if not listed or listed >= set(range(n)):
            return base, bool(listed), False
        raise ValueError(
            f"{where}: {key}={list(values)}: transformers' {fam.model_type} scales these layers only and turns "  # type: ignore[union-attr]
            "the others by the unscaled base; pass layer_idx= to read one layer"
        )
    if layer_idx is not None and layer_idx >= len(values):
        raise ValueError(f"{where}: {key} lists {len(values)} layers, so it has no layer_idx={layer_idx}")
    bases = {checks.positive_real(x, f"{where}: {key}[{i}]") for i, x in enumerate(values) if x != 0}
    nope = layer_idx is not None and values[layer_idx] == 0
    if rule["sets"] != "rope_theta":  # only its zeros are read
        if bases - {base}:
            raise ValueError(
                f"{where}: {key} states the bases {sorted(bases - {base})}, but transformers' {fam.model_type} "  # type: ignore[union-attr]
                f"reads only its zeros (layers without RoPE) and turns every other layer by rope_theta={base}; "
                f"state {base} (or 0) for every layer, or the base as rope_theta"
            )
        return base, True, nope
    if layer_idx is not None:
        return (float(values[layer_idx]) if not nope else base), True, nope
    if len(bases) > 1:
        raise ValueError(
            f"{where}: {key} gives the layers the bases {sorted(bases)}; pass layer_idx= to read one layer"
        )
    if not bases:  # all zeros: no layer rotates
        return base, True, True
    return bases.pop(), True, False


def zero_layers(rule: Mapping[str, Any], n: int) -> list[int]:
    """The layers, of ``n``, without RoPE by a ``zeros`` rule of :attr:`Family.per_layer`: those ``i`` with
    ``i % every == at`` counted ``from`` the first layer, or ``(n - 1 - i) % every == at`` from the last."""
    return [i for i in range(n) if ((n - 1 - i) if rule["from"] == "last" else i) % rule["every"] == rule["at"]]


def parameters(v: View, layer_type: str | None) -> tuple[dict[str, Any] | None, str | None]:
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
            layer_type = _only_type(cfg, fam, where, layer_type, sorted(raw))
            chosen = _pick(raw, layer_type, where, sorted(raw))
            if chosen is None:
                return None, layer_type
            params = dict(chosen)
            for key, value in legacy_parameters(v, "").items():
                params.setdefault(key, value)
            return params, layer_type
        _single_set(cfg, layer_type, where)
        params = dict(raw) if raw else {}
        for key, value in legacy_parameters(v, "").items():
            params.setdefault(key, value)
        return params, None
    if per_type or nested_file:
        names = sorted(raw) if nested_file else sorted(defaults or {})
        layer_type = _only_type(cfg, fam, where, layer_type, names)
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
                params = legacy_parameters(v, layer_type, stated=False)
                for key, value in base.items():
                    params.setdefault(key, value)
                return params, layer_type
            params = {"rope_type": base.get("rope_type", "default")}  # a v4 rope_scaling: to the types it goes to
            if layer_type in fam.scaling_to:
                params.update(raw)
        for key, value in legacy_parameters(v, layer_type).items():
            params.setdefault(key, value)
        for key, value in (_fallback(fam, params).get(layer_type) or {}).items():
            params.setdefault(key, value)
        return params, layer_type
    _single_set(cfg, layer_type, where, fam)
    params = dict(raw) if raw else legacy_parameters(v, "", stated=False)
    if raw:
        for key, value in legacy_parameters(v, "").items():
            params.setdefault(key, value)
        fallback = _fallback(fam, params)
    else:
        fallback = defaults if isinstance(defaults, Mapping) else {}
    for key, value in fallback.items():
        params.setdefault(key, value)
    return params, None


def _fallback(fam: Family, params: Mapping[str, Any]) -> Mapping[str, Any]:
    """What transformers fills into a stated rope dict that lacks the base or the factor: for a scaled rope type,
    what its rotary module moves in from the config (``rope_fallback_scaled``, where that differs)."""
    name = params.get("rope_type", params.get("type", "default"))
    scaled = fam.defaults.get("rope_fallback_scaled") if name != "default" else None
    return scaled or fam.defaults.get("rope_fallback") or {}


def _single_set(cfg: Mapping[str, Any], layer_type: str | None, where: str, fam: Family | None = None) -> None:
    """A layer type asked of a config with one set of parameters must be one its ``layer_types`` names."""
    if layer_type is not None:
        declared = layer_types(cfg, fam, where)
        if layer_type not in declared:
            raise ValueError(
                f"{where}: layer_type={layer_type!r} given, but the config has one set of rope parameters and its "
                f"layer_types {sorted(set(declared))} do not name it"
            )


def _only_type(
    cfg: Mapping[str, Any], fam: Family | None, where: str, layer_type: str | None, names: list[str]
) -> str | None:
    """The one layer type of rope parameters kept per layer type, where there is one and every layer is of it
    (Cohere Compass's ``{"full_attention": {...}}``): no layer type need be passed to pick it."""
    if layer_type is None and len(names) == 1 and set(layer_types(cfg, fam, where)) <= set(names):
        return names[0]
    return layer_type


def _pick(options: Mapping[str, Any], layer_type: str | None, where: str, names: list[str]) -> Any:
    if layer_type is None:
        raise ValueError(f"{where}: the rope parameters differ per layer type {names}; pass layer_type=")
    if layer_type not in options:
        raise ValueError(f"{where}: layer_type {layer_type!r} not in the config's {names}")
    return options[layer_type]
