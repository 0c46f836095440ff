"""Multimodal RoPE in a call of :class:`~arrayrope.RotaryEmbedding`: the instance's sections, checked once,
and positions of shape ``(axes, B, S)`` (one position per axis and token), checked before anything changes.

The tables themselves are :func:`~arrayrope.mrope_tables`'; positions of shape ``(S,)`` or ``(B, S)`` are
text positions, the same on every axis, which is 1-D RoPE and takes the instance's usual paths. Where an exporter
writes arrayrope's own rotation (``torch.onnx.export``), M-RoPE positions reach it with the sections
(:func:`._call.exported`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._lib import checks
from .._lib.types import Array, Axes
from .mrope import Interleaving, interleaving, pair_axes

__all__ = ["Interleaving", "MRope", "check_positions", "mrope_of"]


@dataclasses.dataclass(frozen=True, slots=True)
class MRope:
    """The rotary pairs each position axis drives (``sections``), and whether the axes take turns pair by pair
    (``interleaved``, Qwen3-VL; ``"spatial"``: the axes after the first take turns, ERNIE 4.5 VL) rather than
    holding consecutive sections (Qwen2-VL, GLM-4V)."""

    sections: tuple[int, ...]
    interleaved: Interleaving


def mrope_of(sections: Any, interleaved: Any, rotary_dim: int, name: str) -> MRope | None:
    """M-RoPE's ``sections`` (``name``: how the caller calls them; None: 1-D RoPE) and interleaving, checked
    against the ``rotary_dim // 2`` pairs that rotate."""
    interleaved = interleaving(interleaved, "mrope_interleaved")
    if sections is None:
        if interleaved:
            raise ValueError(
                f"mrope_interleaved={interleaved!r} needs mrope_sections= (the rotary pairs each position axis drives, "
                "e.g. (24, 20, 20) for Qwen3-VL)"
            )
        return None
    sections = checks.int_sequence(sections, name, positive=True)
    pair_axes(sections, interleaved, rotary_dim // 2, name)
    return MRope(tuple(sections), interleaved)


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
