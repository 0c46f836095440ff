"""Replacing one rotation of a graph by a fused node: its convention measured, the node built on the core's
tables (or the model's own), and the result checked against the rotation it replaces before it is kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from onnx import TensorProto

from arrayrope._identify import RopeConvention
from arrayrope.frequencies import RopeFrequencies

from ..build._builder import Builder
from ..build._emit import emitter, heads_spec, rotate_heads
from ..build._spec import COMPUTED_LIMIT, DTYPE_NAMES, MS_DOMAIN, np_dtype
from ._edit import rewritten
from ._match import Graph, Site
from ._mrope import axes_differ, sections_of
from ._probe import (
    Shapes,
    SiteRunner,
    compare,
    compare_at,
    cut,
    identify,
    output_order,
    reference,
    reordered,
    shapes,
)
from ._report import Rotation
from ._rows import held_rows

__all__ = ["EXACT", "SAME", "Job"]

#: Largest difference from the original rotation (relative to the input) a fusion may show at positions < 256.
SAME = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
#: Largest difference of exact caches from the core's float64 rotation at any position below the cache size.
EXACT = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


class Job:
    """The choices of one fuse_rotary call, applied to each rotation."""

    def __init__(self, graph: Graph, target: str, tables: str, rows: int | None, opset: int, chosen: bool) -> None:
        self.graph, self.target, self.tables, self.rows, self.opset = graph, target, tables, rows, opset
        self.chosen = chosen  # tables= was given: no rotation falls back to the model's own tables

    def fuse(self, i: int, site: Site, seen: Mapping[str, npt.NDArray[Any]]) -> tuple[Rotation, Builder | None]:
        """What happens to one rotation, and the nodes that replace it (None when it is left alone)."""
        base = Rotation(site.x, site.output, False, positions=site.positions)
        try:
            return self._fuse(i, site, seen, base)
        except ValueError as exc:
            return dataclasses.replace(base, reason=str(exc)), None

    def _fuse(
        self, i: int, site: Site, seen: Mapping[str, npt.NDArray[Any]], base: Rotation
    ) -> tuple[Rotation, Builder | None]:
        existing = site.node
        if existing is not None and (self.tables == "model" or len(existing.input) > 3 or existing.domain):
            raise ValueError(f"already a fused {existing.domain + '.' if existing.domain else ''}RotaryEmbedding node")
        if self.tables == "model" and self.target == "ort":
            raise ValueError(
                "ONNX Runtime's contrib op reads 2-D caches by position, not the model's per-token "
                "tables; use tables='stored' or 'computed', or target='onnx23'"
            )
        shape = shapes(site, seen)
        piece = cut(self.graph, site, shape)
        original = SiteRunner(piece)
        order = output_order(piece)  # DeepSeek's MLA: interleaved features in, half-split order out
        held = held_rows(self.graph, site)  # the positions the model's own tables cover, and those asked for
        covered = min((r for r in (held, self.rows) if r is not None), default=None)
        if covered is not None and covered < 4:
            held_by = (
                f"the bound on the positions asked for is {covered}"
                if covered == self.rows
                else f"its stored tables hold {covered} rows"
            )
            raise ValueError(f"{held_by}, too few positions to measure its frequencies (4 are needed)")
        found = identify(piece, order, covered)
        if found.layout is None or found.rotary_dim is None or found.offset is None:
            raise ValueError(f"it is no rotary embedding: {found.reason}")
        if found.offset:
            raise ValueError(f"it rotates by positions shifted by {found.offset:+d}")
        dtype = DTYPE_NAMES.get(self.graph.elem_type(site.x) or TensorProto.FLOAT, "float32")
        b = Builder(f"arrayrope_fuse/{i}/", taken=self.graph.producer.keys() | self.graph.initializers.keys())
        freqs: RopeFrequencies | None = None
        tables = "the model's"
        if self.tables != "model":
            freqs = found.frequencies() if found.matched else _stored(found, dtype, shape.head_dim)
            tables = ("computed from the position ids" if self.rows is None else f"stored, {self.rows} rows") + (
                "" if found.matched else f", the model's {dtype} frequencies"
            )
            if freqs is None and (self.chosen or self.target == "ort" or self.rows is not None):
                raise ValueError(f"its frequencies follow no known rule ({found.reason}); tables='model' keeps them")
            if freqs is None:  # LongRoPE's per-pair factors: the node reads the model's own cos/sin
                tables = "the model's (its frequencies follow no rule whose tables arrayrope computes exactly)"
        sections: tuple[tuple[int, ...], bool] | None = None
        if shape.position_axes:
            if freqs is None or order is not None:
                raise ValueError(
                    "it writes M-RoPE's features in another order than it reads them"
                    if order is not None
                    else "its M-RoPE tables are fused as tables='stored' or 'computed' (a node reading the model's "
                    "own tables takes one position per token)"
                    if self.tables == "model"
                    else "its M-RoPE tables follow no frequencies arrayrope computes exactly"
                )
            sections = sections_of(original, freqs, found.layout, shape.position_axes, covered)
            tables += f", M-RoPE sections {list(sections[0])}{' interleaved' if sections[1] else ''}"
        if freqs is not None:
            spec = heads_spec(
                freqs,
                layout=found.layout,
                target=self.target,  # type: ignore[arg-type]
                axes=shape.axes,  # type: ignore[arg-type]
                heads=shape.heads,
                max_positions=self.rows,
                dtype=dtype,
                opset=self.opset,
                opset_argument="the model's opset",
                mrope_sections=None if sections is None else sections[0],
                mrope_interleaved=sections is not None and sections[1],
            )
            pos = _position_ids(b, self.graph, site, shape, seen)
            rotate_heads(spec, b, emitter(spec, b), _reordered(b, site.x, order), pos, site.rotated)
        else:
            batched = seen[site.cos].shape[0] == seen[site.x].shape[0]
            _model_tables(b, site, shape, found.layout, found.rotary_dim, batched, _reordered(b, site.x, order))
        fused = SiteRunner(piece, rewritten(piece.model, b.nodes, b.initializers, {site.rotated}, self.target == "ort"))
        if site.parts is not None:  # the Concat around a two-part rotation, with the fused part in its place
            before, after, _, _ = site.parts
            b.op("Concat", [*before, site.rotated, *after], out=site.output, axis=-1)
        limit = COMPUTED_LIMIT if self.rows is None else self.rows
        err = compare(original, fused, shape.head_dim, min(limit, 256, held or 256))
        if shape.position_axes:  # and with each axis at positions of its own
            err = max(err, axes_differ(original, fused, shape.head_dim, shape.position_axes, min(limit, held or 256)))
        if not err <= SAME.get(dtype, 1e-4):
            raise ValueError(f"the fused node differs from it by {err:.2g} (relative), so it was kept as it is")
        if freqs is not None:
            far = compare(fused, reordered(reference(piece, freqs, found.layout), order), shape.head_dim, limit)
            if not far <= EXACT.get(dtype, 2e-6):
                raise ValueError(f"the exact caches differ from the core's rotation by {far:.2g} at far positions")
        if freqs is not None and covered is not None and held is not None and covered > 256:
            # stored tables: every row the fused node now computes must be the model's, up to float32 angles
            stop = covered
            spread = np.unique(np.linspace(256, stop - 1, 61).astype(np.int64))
            turn = float(np.max(np.abs(freqs.inv_freq))) * max(freqs.attention_factor, 1.0)
            allowed = SAME.get(dtype, 1e-4) + 2.0**-20 * stop * turn
            worst, at = compare_at(original, fused, shape.head_dim, spread)
            if not worst <= allowed:
                raise ValueError(
                    f"its stored tables differ from a rotation of fixed frequencies at position {at} (by {worst:.2g}, "
                    f"relative), within the {stop} positions {'asked for' if covered == self.rows else 'they hold'}; "
                    "a fused node would change what it computes there, so it was kept as it is"
                )
        node = "RotaryEmbedding" if self.target == "onnx23" else f"{MS_DOMAIN}.RotaryEmbedding"
        if order is not None:
            node = f"Gather (interleaved pairs to half-split order) + {node}"
        rotation = dataclasses.replace(
            base,
            fused=True,
            node=node,
            layout=found.layout,
            rotary_dim=found.rotary_dim,
            head_dim=shape.head_dim,
            heads=shape.heads,
            base=found.base if found.matched else None,
            scaling=found.scaling,
            tables=tables,
            error=err,
        )
        return rotation, b


#: Relative spacing of the half-precision dtypes (2**-mantissa bits).
_HALF_SPACING = {"float16": 2.0**-10, "bfloat16": 2.0**-7}


def _stored(found: RopeConvention, dtype: str, head_dim: int) -> RopeFrequencies | None:
    """The frequencies a half-precision model stores (a rule's, rounded to its dtype) from those measured, or None.

    Models converted to float16 or bfloat16 keep ``inv_freq`` in that dtype, which
    moves every angle off the rule by the rounding; the measured frequencies land
    within a small part of the dtype's spacing of the stored ones, so rounding them
    to the dtype recovers those exactly, and the caches are exact for them.
    """
    spacing = _HALF_SPACING.get(dtype)
    if spacing is None or found.inv_freq is None or found.rotary_dim is None:
        return None
    stored = np.asarray(found.inv_freq).astype(np_dtype(dtype)).astype(np.float64)  # type: ignore[arg-type]
    if np.max(np.abs(stored - found.inv_freq) / stored) > 0.1 * spacing:
        return None
    return RopeFrequencies(
        inv_freq=stored, head_dim=head_dim, rotary_dim=found.rotary_dim, attention_factor=found.attention_factor
    )


def _position_ids(b: Builder, graph: Graph, site: Site, shape: Shapes, seen: Mapping[str, npt.NDArray[Any]]) -> str:
    """The site's positions as int64 ``(B, S)`` ids, broadcast over the batch of ``x`` where they lack it."""
    assert site.positions is not None
    pos = site.positions
    if graph.elem_type(pos) != TensorProto.INT64:
        pos = b.op("Cast", [pos], to=TensorProto.INT64)
    have, x = seen[site.positions].shape, seen[site.x].shape
    if (len(have) == 2 and have[0] == x[0]) or (len(have) == 3 and have[1] == x[0]):  # (B, S); M-RoPE's (axes, B, S)
        return pos
    if len(have) == 3:
        raise ValueError(f"its M-RoPE position ids of shape {tuple(have)} hold no batch of its {x[0]} rows")
    if len(have) == 1:
        pos = b.op("Unsqueeze", [pos, b.ints([0], "batch_axis")])
    dims = b.op("Shape", [site.x])
    bs = b.op("Gather", [dims, b.ints([0, 2 if shape.axes == "bhsd" else 1], "bs_axes")], axis=0)
    return b.op("Expand", [pos, bs])


def _reordered(b: Builder, x: str, order: npt.NDArray[np.int64] | None) -> str:
    """``x`` with its features in ``order`` (the fused node's input), or ``x`` itself."""
    if order is None:
        return x
    return b.op("Gather", [x, b.ints(order.tolist(), "feature_order")], axis=-1)


def _model_tables(b: Builder, site: Site, shape: Shapes, layout: str, rotary_dim: int, batched: bool, x: str) -> None:
    """``RotaryEmbedding(x, cos, sin)`` on the model's tables, one value per pair: ``(B, S, rotary_dim / 2)``
    (broadcast over the batch of ``x`` unless ``batched``)."""
    head_axis = 1 if shape.axes == "bhsd" else 2

    def pairs(table: str) -> str:
        t = b.op("Squeeze", [table, b.ints([head_axis], "head_axis")])
        step = 1 if layout == "half" else 2
        end = rotary_dim // 2 if layout == "half" else rotary_dim
        t = b.op("Slice", [t, b.ints([0], "start"), b.ints([end], "end"), b.ints([-1], "last"), b.ints([step], "step")])
        if batched:
            return t
        dims = b.op("Shape", [site.x])
        bs = b.op("Gather", [dims, b.ints([0, 2 if shape.axes == "bhsd" else 1], "bs_axes")], axis=0)
        return b.op("Expand", [t, b.op("Concat", [bs, b.ints([rotary_dim // 2], "half")], axis=0)])

    cos, sin = pairs(site.cos), pairs(site.sin)
    out = site.rotated
    flat = shape.axes == "bshd"
    if flat:
        x, out = b.op("Reshape", [x, b.ints([0, 0, -1], "flat")]), b.name("flat_rotated")
    y = b.op(
        "RotaryEmbedding",
        [x, cos, sin],
        out=out,
        interleaved=int(layout == "interleaved"),
        rotary_embedding_dim=rotary_dim if rotary_dim < shape.head_dim else None,
        num_heads=shape.heads if flat else None,
    )
    if flat:
        b.op("Reshape", [y, b.ints([0, 0, -1, shape.head_dim], "heads")], out=site.rotated)
