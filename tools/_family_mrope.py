"""Multimodal RoPE (M-RoPE) of a family, measured from its rotary module for ``tools/families.py``.

The module is run on position ids ``(axes, 1, 1)``: once the same on every axis (each column of its cos
and sin is matched to its frequency) and once different per axis (each column to the axis whose position
turns it). The facts are the sections of rotary pairs each axis drives, in arrayrope's order of pairs,
and whether the axes take turns pair by pair (``"spatial"``: the axes after the first take turns before
axis 0's trailing section, ERNIE 4.5 VL's, whose config states ``[h, w, t]``), checked to follow a stated
``mrope_section``; or why the family's multimodal rope is no sections of pairs.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import math
import textwrap
from collections.abc import Mapping
from typing import Any

import _hf_probe as hp
import numpy as np
import torch

Probe = Any  # families.Probe: the family's default config (``config``) and published values (``values``)

__all__ = ["measure_mrope"]


class MixedPair(Exception):
    """The two features of a rotary pair turn by the positions of different axes; ``features``: the axis of
    each column of the module's tables (its half-split order: the pairs' first features, then their second),
    where every column matched."""

    def __init__(self, message: str, features: np.ndarray | None = None) -> None:
        super().__init__(message)
        self.features = features


def _mrope_run(
    use: hp.Use, p: Probe, sections: list[int] | None, positions: np.ndarray, label: str | None = None
) -> Any:
    """cos and sin of the rotary module (of its first rope set), for one position per axis, and its frequencies;
    None where it takes no such position ids."""
    rope = copy.deepcopy(dict(getattr(p.config, "rope_parameters", None) or {}))
    nested = rope and all(isinstance(v, Mapping) or v is None for v in rope.values())
    if sections is not None:
        for entry in rope.values() if nested else [rope]:
            if isinstance(entry, dict):
                entry["mrope_section"] = sections
    try:
        config = hp.tiny_config(use.config_cls, **{**p.values, "rope_parameters": rope})
        with hp.quiet(), torch.no_grad():
            params = inspect.signature(use.rotary.__init__).parameters
            rot = use.rotary(config) if "device" not in params else use.rotary(config, device=None)
            labels = hp.rotary_labels(rot)
            label = label if label in labels else (labels[0] if labels else None)
            ids = torch.from_numpy(positions).reshape(-1, 1, 1)
            takes = "layer_type" in inspect.signature(rot.forward).parameters
            out = rot(torch.zeros(1, 1, 8), ids, label) if label and takes else rot(torch.zeros(1, 1, 8), ids)
        inv, _ = hp.module_frequencies(rot, label)
    except Exception:
        return None
    if not isinstance(out, tuple):  # complex rotations (Llama 4): one axis of positions
        return None
    cos, sin = out
    if inv is None or tuple(cos.shape[:2]) != (1, 1):
        return None
    return cos.double().numpy().reshape(-1), sin.double().numpy().reshape(-1), inv


def _mrope_axes(use: hp.Use, p: Probe, sections: list[int] | None, label: str | None = None) -> np.ndarray | None:
    """The axis whose position drives each rotary pair of the module (pairs in the order of decreasing frequency,
    as arrayrope numbers them), run on position ids ``(axes, 1, 1)`` that differ per axis (``sections``: stated
    as ``mrope_section``); None where it takes no such ids. Each column of its cos and sin is matched to its
    frequency (at position 1 on every axis) and then to the axis whose position turns it, so that the order in
    which the module keeps its frequencies (Ernie 4.5 VL's) and writes its columns does not matter. Raises
    MixedPair where the two features of a pair turn by different axes (HunYuan-VL's sections over both halves)."""
    distinct = np.array([3, 50, 900, 200])  # float32 angles right to 1e-4; distinct on every axis at every frequency
    for n in (3, 4, 2):
        ones = _mrope_run(use, p, sections, np.ones(n, dtype=np.int64), label)
        if ones is None:
            continue
        got = _mrope_run(use, p, sections, distinct[:n], label)
        if got is None:
            continue
        break
    else:
        return None
    c1, s1, inv = ones
    c, s, _ = got
    freqs = np.sort(inv[inv != 0])[::-1]
    if c.size != c1.size or not freqs.size:
        return None
    axes_of: dict[int, set[int]] = {}
    column_axes = np.full(c.size, -1)
    for j in range(c.size):
        f, scale = math.atan2(s1[j], c1[j]), math.hypot(s1[j], c1[j])  # the attention factor scales both
        if abs(f) < 1e-12:
            continue
        k = int(np.argmin(np.abs(freqs - f) / freqs))
        if abs(freqs[k] - f) > 1e-4 * freqs[k] + 1e-7:
            return None
        angles = distinct[:n] * freqs[k]
        error = np.abs(np.cos(angles) - c[j] / scale) + np.abs(np.sin(angles) - s[j] / scale)
        if np.min(error) > 1e-3:
            return None
        axes_of.setdefault(k, set()).add(int(np.argmin(error)))
        column_axes[j] = int(np.argmin(error))
    if len(axes_of) != freqs.size:
        return None
    mixed = [k for k, a in axes_of.items() if len(a) > 1]
    if mixed:
        raise MixedPair(
            f"the two features of its rotary pairs {mixed[:4]}... turn by the positions of different axes "
            f"({sorted(axes_of[mixed[0]])} for pair {mixed[0]}), which is no rotation of a pair by one position",
            column_axes if np.all(column_axes >= 0) and column_axes.size == 2 * freqs.size else None,
        )
    axes = np.array([next(iter(axes_of[k])) for k in range(freqs.size)])
    return axes if n != 3 or np.any(axes) else None  # one axis driving every pair: 1-D RoPE given 3 ids


def measure_mrope(use: hp.Use, p: Probe, labels: list[str]) -> dict[str, Any]:
    """:func:`_mrope_one` of each rope set (``labels``: the layer types it keeps frequencies for, or none), with
    the sections of each layer type where they differ (NeoMME's turns over its full and sliding layers)."""
    found = {label: _mrope_one(use, p, label or None) for label in labels or [""]}
    if _states_sections(p.values):  # probed as a checkpoint states it: the family's code has no default sections
        found = {label: {**f, "required": True} if "sections" in f else f for label, f in found.items()}
    aliases = _section_aliases(use, p) if any("sections" in f for f in found.values()) else []
    if aliases:
        found = {label: {**f, "aliases": aliases} if "sections" in f else f for label, f in found.items()}
    first = next(iter(found.values()))
    if all(f == first for f in found.values()) or "sections" not in first:
        return first
    if any(set(f) != set(first) or f.get("interleaved") != first["interleaved"] for f in found.values()):
        return {"refused": f"its rope sets differ in how their multimodal rope drives pairs: {found}"}
    return {**first, "layer_types": {label: f["sections"] for label, f in found.items()}}


def _mrope_one(use: hp.Use, p: Probe, label: str | None) -> dict[str, Any]:
    """Multimodal RoPE: the sections per axis the module uses when the config states none, and whether the
    axes take turns pair by pair (Qwen3-VL) rather than holding consecutive sections; checked to follow the
    sections a config states (``mrope_section``), or recorded as ignoring them (``"stated": False``). A
    multimodal rope that is neither is recorded with the reason arrayrope does not read it as M-RoPE
    (``"refused"``); its text positions (every axis the same) are 1-D RoPE."""
    from arrayrope.encodings.mrope import pair_axes, stated_sections

    try:
        axes = _mrope_axes(use, p, None, label)
    except MixedPair as exc:
        return _full_width(use, p, label, exc)
    if axes is None or not np.any(axes):
        return {}
    n = int(axes.max()) + 1
    counts = [int(k) for k in np.bincount(axes, minlength=max(n, 2))]

    def drives(sections: list[int], form: Any) -> bool:
        """Whether ``sections`` of that form drive the pairs as the module does (False: no such sections)."""
        try:
            return bool(np.array_equal(pair_axes(sections, form, len(axes)), axes))
        except ValueError:
            return False

    # consecutive sections, Qwen3-VL's turns, or ERNIE 4.5 VL's turns of the spatial axes before the temporal ones
    interleaved = next((f for f in (bool(np.any(np.diff(axes) < 0)), "spatial") if drives(counts, f)), None)
    if interleaved is None:
        return {
            "refused": f"its multimodal rope drives pairs by axes {axes.tolist()}, neither in sections nor in turns"
        }
    options = [
        counts[::-1],
        [counts[0] + 2, counts[1] - 2, *counts[2:]],
        [counts[0] + 1, counts[1] - 1, *counts[2:]],
        [counts[0] + len(counts) - 1, *(c - 1 for c in counts[1:])],  # spatial: the turning axes stay equal
    ]
    stated = next(  # sections that would drive the pairs otherwise (and are sections of that form)
        (
            o
            for o in options
            if min(o) > 0 and not drives(o, interleaved) and _valid(pair_axes, o, interleaved, len(axes))
        ),
        None,
    )
    if stated is None:
        return {"sections": counts, "interleaved": interleaved}
    as_stated = list(stated_sections(stated, interleaved, to_config=True))  # ERNIE's config: [h, w, t]
    try:
        again = _mrope_axes(use, p, as_stated, label)
    except MixedPair as exc:
        return {"refused": f"its multimodal rope with a stated mrope_section: {exc}"}
    out: dict[str, Any] = {"sections": counts, "interleaved": interleaved}
    if again is not None and np.array_equal(again, axes):
        out["stated"] = False  # the module ignores a stated mrope_section (NeoMME's fixed turns)
    elif again is None or not np.array_equal(pair_axes(stated, interleaved, len(axes)), again):
        return {"refused": f"its multimodal rope does not follow a stated mrope_section {as_stated}"}
    return out


def _valid(rule: Any, sections: list[int], form: Any, pairs: int) -> bool:
    """Whether ``rule`` (``pair_axes``) takes ``sections`` of that form for ``pairs`` pairs."""
    try:
        rule(sections, form, pairs)
    except ValueError:
        return False
    return True


def _full_width(use: hp.Use, p: Probe, label: str | None, mixed: MixedPair) -> dict[str, Any]:
    """A module whose pairs' two features turn by different axes: HunYuan-VL's sections over the whole rotary
    width (``"full_width"``) where its columns are exactly those, with the sections it uses and checked to
    follow other stated ones; else refused with the reason."""
    from arrayrope.encodings.mrope import half_axes

    refused = {"refused": f"its multimodal rope: {mixed}"}
    columns = mixed.features
    if columns is None:
        return refused
    counts = [int(k) // 2 for k in np.bincount(columns)]
    pairs = columns.size // 2

    def follows(sections: list[int], found: np.ndarray | None) -> bool:
        try:
            first, second = half_axes(sections, "full_width", pairs)
        except ValueError:
            return False
        return found is not None and bool(np.array_equal(np.concatenate([first, second]), found))

    if not follows(counts, columns):
        return refused
    other = [counts[0] + 1, counts[1] - 1, *counts[2:]]  # sections that would drive the features otherwise
    try:
        _mrope_axes(use, p, other, label)
        again = None  # one axis per pair with these: not full-width sections
    except MixedPair as exc:
        again = exc.features
    if min(other) < 1 or not follows(other, again):
        return {"refused": f"its multimodal rope does not follow a stated mrope_section {other}"}
    return {"sections": counts, "interleaved": "full_width"}


def _states_sections(values: Mapping[str, Any]) -> bool:
    """Whether the probe's config values (``PUBLISHED``) state ``mrope_section``."""
    rope = values.get("rope_parameters")
    return isinstance(rope, Mapping) and (
        "mrope_section" in rope or any(isinstance(v, Mapping) and "mrope_section" in v for v in rope.values())
    )


def _section_aliases(use: hp.Use, p: Probe) -> list[str]:
    """Older names of ``mrope_section`` in a rope dict that the config class turns into it (HunYuan-VL's
    ``xdrope_section``): the ``*_section`` keys its code pops or gets, each stated alone with sections of its
    own and found again as ``mrope_section``."""
    names: set[str] = set()
    for klass in use.config_cls.__mro__:
        if not klass.__module__.startswith("transformers.models."):
            continue
        with contextlib.suppress(OSError, TypeError, SyntaxError):
            for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(klass)))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("pop", "get")
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                    and node.args[0].value.endswith("_section")
                    and node.args[0].value != "mrope_section"
                ):
                    names.add(node.args[0].value)
    found = []
    for name in sorted(names):
        rope = copy.deepcopy(dict(p.values.get("rope_parameters") or getattr(p.config, "rope_parameters", None) or {}))
        sections = rope.pop("mrope_section", None)
        if not isinstance(sections, list) or len(sections) < 2:
            continue
        moved = [sections[0] + 1, sections[1] - 1, *sections[2:]]  # other sections than the probe's own
        try:
            config = hp.tiny_config(use.config_cls, **{**p.values, "rope_parameters": {**rope, name: moved}})
        except Exception:
            continue
        if (getattr(config, "rope_parameters", None) or {}).get("mrope_section") == moved:
            found.append(name)
    return found
