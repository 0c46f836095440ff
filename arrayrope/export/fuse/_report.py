"""What :func:`~arrayrope.export.fuse_rotary` did: one :class:`Rotation` per rotary application found."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import onnx

from arrayrope.testing import Report


@dataclasses.dataclass(frozen=True)
class Rotation:
    """One rotary application of the model: fused, or left alone and why.

    Attributes
    ----------
    input, output : str
        The tensor rotated and the rotated tensor (its consumers keep reading this name).
    fused : bool
        Whether one fused node now computes ``output``.
    node : str
        The fused node (``"RotaryEmbedding"`` or ``"com.microsoft.RotaryEmbedding"``).
    layout : str or None
        ``"half"`` or ``"interleaved"``, as measured.
    rotary_dim, head_dim, heads : int or None
        Rotating features, features per head and heads, as measured.
    base : float or None
        The base of the frequencies (None where they follow no known rule).
    scaling : dict or None
        The frequency scaling found (Hugging Face ``rope_scaling`` form).
    positions : str or None
        The integer tensor the fused node reads as position ids.
    tables : str
        ``"stored, N rows"`` (the core's float64 tables stored in the graph), ``"computed from the position
        ids"`` (the exact float32 method in the graph) or ``"the model's"``.
    error : float
        Largest difference between the fused and the original rotation in the
        check before it was kept, relative to the largest input (NaN if not run).
    reason : str
        Why it was left alone (empty when fused).
    """

    input: str
    output: str
    fused: bool
    node: str = ""
    layout: str | None = None
    rotary_dim: int | None = None
    head_dim: int | None = None
    heads: int | None = None
    base: float | None = None
    scaling: dict[str, Any] | None = None
    positions: str | None = None
    tables: str = ""
    error: float = math.nan
    reason: str = ""

    def __str__(self) -> str:
        if not self.fused:
            return f"left alone {self.output}: {self.reason}"
        scaling = "" if self.scaling is None else f", {self.scaling.get('rope_type')} scaling"
        base = "" if self.base is None else f", base {self.base:g}"
        return (
            f"fused {self.output} <- {self.input}: {self.node}, {self.layout}, rotary_dim {self.rotary_dim} of "
            f"{self.head_dim}, {self.heads} heads{base}{scaling}; positions {self.positions}; tables {self.tables}; "
            f"checked: differs by {self.error:.1e}"
        )


@dataclasses.dataclass(frozen=True)
class FusionReport:
    """Every rotary application found, the graph before and after, and the validation (when run)."""

    rotations: tuple[Rotation, ...]
    target: str
    tables: str
    nodes_before: int
    nodes_after: int
    opset_before: int
    opset_after: int
    validation: Report | None = None

    @property
    def fused(self) -> int:
        """How many rotations one fused node now computes."""
        return sum(r.fused for r in self.rotations)

    @property
    def left_alone(self) -> tuple[Rotation, ...]:
        return tuple(r for r in self.rotations if not r.fused)

    @property
    def ok(self) -> bool:
        """Whether the validation passed (True when it did not run)."""
        return self.validation is None or self.validation.ok

    def __str__(self) -> str:
        opsets = f"opset {self.opset_before}" + (
            f" -> {self.opset_after}" if self.opset_after != self.opset_before else ""
        )
        lines = [
            f"{len(self.rotations)} rotary applications, {self.fused} fused (target {self.target}, tables "
            f"{self.tables}); nodes {self.nodes_before} -> {self.nodes_after}; {opsets}",
            *(f"  {r}" for r in self.rotations),
        ]
        if self.validation is not None:
            lines.append(str(self.validation))
        return "\n".join(lines)


class Fused(NamedTuple):
    """The result of :func:`~arrayrope.export.fuse_rotary`: the new model and the report."""

    model: onnx.ModelProto
    report: FusionReport
