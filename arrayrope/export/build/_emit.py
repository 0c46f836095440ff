"""The emitter of a spec's target: the nodes that rotate each tensor, into a builder.

:func:`heads_spec` and :func:`rotate_heads` serve graphs written by others
(``torch.onnx.export``, :func:`~arrayrope.export.fuse_rotary`), whose 4-D tensors
are ``(batch, heads, seq, head_dim)`` or ``(batch, seq, heads, head_dim)``, at position ids
``(batch, seq)``, or ``(axes, batch, seq)`` for M-RoPE (``torch.onnx.export`` of M-RoPE calls).
"""

from __future__ import annotations

from typing import Literal, Protocol, TypeAlias

from arrayrope._lib import checks
from arrayrope.frequencies import RopeFrequencies

from ._builder import Builder
from ._fused import FusedEmitter
from ._options import DTypeName, ExportOptions, Target
from ._portable import PortableEmitter
from ._spec import Spec, make_spec
from ._tables import check_size

Axes: TypeAlias = Literal["bhsd", "bshd"]
"""Where heads and sequence sit in a 4-D tensor of heads."""


class Emitter(Protocol):
    """Rotates tensors of one spec into one builder; the tensors share tables and positions."""

    def apply(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        """Rotate ``x`` (``heads`` heads) at positions ``pos`` (None: 0..seq-1) into the tensor ``out``."""
        ...


def emitter(spec: Spec, b: Builder, model_bytes: int = 0) -> Emitter:
    """The emitter for ``spec.target``, once its tables are known to fit in a model (with ``model_bytes`` more)."""
    check_size(spec, model_bytes)
    if spec.target == "portable":
        return PortableEmitter(spec, b)
    return FusedEmitter(spec, b)


def heads_spec(
    freqs: RopeFrequencies,
    *,
    layout: str,
    target: Target,
    axes: Axes,
    heads: int,
    max_positions: int | None,
    dtype: DTypeName,
    opset: int,
    opset_argument: str,
    mrope_sections: tuple[int, ...] | None = None,
    mrope_interleaved: bool = False,
) -> Spec:
    """The spec for 4-D tensors of ``heads`` heads laid out as ``axes``: ``(B, S, N, D)`` as its 3-D view;
    with ``mrope_sections``, of M-RoPE at position ids ``(axes, B, S)``."""
    options = ExportOptions(
        layout=checks.layout(layout),
        target=target,
        rank=4 if axes == "bhsd" else 3,
        num_heads=heads,
        max_positions=max_positions,
        dtype=dtype,
        opset=opset,
        runtime="any",
        mrope_sections=mrope_sections,
        mrope_interleaved=mrope_interleaved,
    )
    return make_spec(freqs, options, opset_argument=opset_argument)


def rotate_heads(spec: Spec, b: Builder, rotary: Emitter, x: str, pos: str, out: str) -> str:
    """Rotate the 4-D ``x`` at position ids ``pos`` ``(B, S)`` (M-RoPE specs: ``(axes, B, S)``) into ``out``;
    ``(B, S, N, D)`` (rank-3 specs) through its view ``(B, S, N * D)``: two Reshapes, no copy."""
    heads = spec.options.num_heads
    if spec.options.rank == 4:
        return rotary.apply(x, pos, out, heads)
    flat = b.op("Reshape", [x, b.ints([0, 0, -1], "flat")])
    rotated = rotary.apply(flat, pos, b.name("flat_rotated"), heads)
    return b.op("Reshape", [rotated, b.ints([0, 0, -1, spec.head_dim], "heads")], out=out)
