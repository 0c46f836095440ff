"""Multimodal RoPE in a call of :class:`~arrayrope.RotaryEmbedding`: the instance's sections, checked once,
and positions of shape ``(axes, B, S)`` (one position per axis and token), checked before anything changes.

The tables themselves are :func:`~arrayrope.mrope_tables`'; positions of shape ``(S,)`` or ``(B, S)`` are
text positions, the same on every axis, which is 1-D RoPE and takes the instance's usual paths. Where an exporter
writes arrayrope's own rotation (``torch.onnx.export``), M-RoPE positions reach it with the sections
(:func:`._call.exported`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .._lib import checks
from .._lib.types import Array, Axes, Namespace
from ..apply import rotate_features
from ..backends import Library
from .mrope import Interleaving, half_axes, interleaving

__all__ = ["Interleaving", "MRope", "check_positions", "mrope_of", "rotate_halves", "rotation"]


@dataclasses.dataclass(frozen=True, slots=True)
class MRope:
    """The rotary pairs each position axis drives (``sections``), and whether the axes take turns pair by pair
    (``interleaved``, Qwen3-VL; ``"spatial"``: the axes after the first take turns, ERNIE 4.5 VL) rather than
    holding consecutive sections (Qwen2-VL, GLM-4V)."""

    sections: tuple[int, ...]
    interleaved: Interleaving


def mrope_of(sections: Any, interleaved: Any, rotary_dim: int, name: str, layout: str = "half") -> MRope | None:
    """M-RoPE's ``sections`` (``name``: how the caller calls them; None: 1-D RoPE) and interleaving, checked
    against the ``rotary_dim // 2`` pairs that rotate and the instance's ``layout``."""
    interleaved = interleaving(interleaved, "mrope_interleaved")
    if interleaved == "full_width" and layout != "half":
        raise ValueError(
            f"mrope_interleaved='full_width' (HunYuan-VL's sections over the whole rotary width) splits the "
            f"half-split layout's features; with layout={layout!r} pass consecutive sections (False) instead"
        )
    if sections is None:
        if interleaved:
            raise ValueError(
                f"mrope_interleaved={interleaved!r} needs mrope_sections= (the rotary pairs each position axis drives, "
                "e.g. (24, 20, 20) for Qwen3-VL)"
            )
        return None
    sections = checks.int_sequence(sections, name, positive=True)
    half_axes(sections, interleaved, rotary_dim // 2, name)
    return MRope(tuple(sections), interleaved)


def rotation(mrope: MRope | None) -> Callable[..., Array]:
    """The rotation of a call at positions of ``mrope`` (None: 1-D): :func:`rotate_halves` for full-width sections,
    else :func:`~arrayrope.apply.rotate_features`."""
    return rotate_halves if mrope is not None and mrope.interleaved == "full_width" else rotate_features


def rotate_halves(
    module: Library | None,
    xp: Namespace,
    x: Array,
    cos: Array,
    sin: Array,
    layout: str,
    features: str,
    prepared: object = None,
    out: Array | None = None,
) -> Array:
    """:func:`~arrayrope.apply.rotate_features` with tables of full-width sections (HunYuan-VL's), whose
    axis -2 holds the tables of the pairs' first features, then of their second: the first features of one
    rotation joined to the rest of the other (each feature rounded once, as a rotation's)."""
    half = cos.shape[-1]
    first = rotate_features(module, xp, x, cos[..., 0, :], sin[..., 0, :], layout, features)
    y = rotate_features(module, xp, x, cos[..., 1, :], sin[..., 1, :], layout, features, out=out)
    lo = 0 if features == "leading" else x.shape[-1] - 2 * half
    if out is not None:
        out[..., lo : lo + half] = first[..., lo : lo + half]
        return out
    return xp.concat([y[..., :lo], first[..., lo : lo + half], y[..., lo + half :]], axis=-1)


def check_positions(pos: Array, mrope: MRope | None, batch: int, seq: int, axes: Axes, refused: str = "") -> bool:
    """Whether ``pos`` are M-RoPE positions ``(axes, B, S)`` (True), or ``(S,)``/``(B, S)`` ones to check as
    1-D positions (False); 3-D positions that do not fit raise, naming the shape expected (``refused``: why the
    instance's family has multimodal RoPE that arrayrope does not compute)."""
    if pos.ndim != 3:
        return False
    shape = tuple(pos.shape)
    if mrope is None and refused:
        raise ValueError(
            f"positions of shape {shape} are multimodal RoPE's (axes, B, S), which arrayrope does not compute for "
            f"this config: {refused}; text positions (S,) or (B, S), the same on every axis, are 1-D RoPE and "
            "computed"
        )
    if mrope is None:
        raise ValueError(
            f"positions must have shape (S,) or (B, S) = ({seq},) or ({batch}, {seq}), got {shape}: positions "
            "(axes, B, S) are multimodal RoPE's, which this instance does not compute (pass mrope_sections=, or "
            "build it with RotaryEmbedding.from_config from a config of an M-RoPE family)"
        )
    n = len(mrope.sections)
    if shape[0] != n:
        raise ValueError(
            f"positions of shape {shape} give {shape[0]} position axes, but mrope_sections="
            f"{mrope.sections} drive {n}: pass positions of shape ({n}, B, S), one row per axis (or (S,), (B, S) "
            "for text, the same position on every axis)"
        )
    # batch first: a traced batch equals itself without a guard, where comparing it with 1 first makes one
    if not (shape[1] == batch or shape[1] == 1) or shape[2] != seq:
        raise ValueError(
            f"positions of M-RoPE must have shape ({n}, B, S) = ({n}, {batch}, {seq}) or ({n}, 1, {seq}) (batch "
            f"and sequence of q with axes={axes!r}), got {shape}"
        )
    return True
