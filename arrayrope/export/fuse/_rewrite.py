"""``fuse_rotary``: one fused node for each rotary application of an existing ONNX model."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import onnx
from onnx import NodeProto, TensorProto, helper

from arrayrope._lib import checks
from arrayrope._lib.verdicts import Report, Row
from arrayrope.frequencies import RopeFrequencies
from arrayrope.testing import RopeConvention

from .._graph import ModelSource, data_folder, ir_version_for, load_model, providers_named, reads, topological
from ..build._builder import Builder
from ..build._emit import emitter, heads_spec, rotate_heads
from ..build._spec import COMPUTED_LIMIT, DTYPE_NAMES, MIN_OPSET, MS_DOMAIN, np_dtype
from ._match import Graph, Site, find_sites, internal_rotations
from ._probe import (
    Shapes,
    SiteRunner,
    compare,
    cut,
    identify,
    output_order,
    reference,
    reordered,
    run,
    sample_inputs,
    shapes,
)
from ._report import Fused, FusionReport, Rotation

FuseTarget: TypeAlias = Literal["onnx23", "ort"]
"""The fused node: the standard ``RotaryEmbedding`` (opset 23) or ONNX Runtime's contrib op.

The type of :func:`fuse_rotary`'s ``target``, for static checkers.

Examples
--------
>>> from typing import get_args
>>> from arrayrope.export import FuseTarget
>>> get_args(FuseTarget)
('onnx23', 'ort')
"""
FuseTables: TypeAlias = Literal["stored", "computed", "model"]
"""Where the fused node's cos/sin come from: the core's tables, stored or computed in the graph, or the model's own.

The type of :func:`fuse_rotary`'s ``tables``, for static checkers.

Examples
--------
>>> from typing import get_args
>>> from arrayrope.export import FuseTables
>>> get_args(FuseTables)
('stored', 'computed', 'model')
"""

#: Largest difference from the original rotation (relative to the input) a fusion may show at positions < 256.
SAME = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
#: Largest difference of exact caches from the core's float64 rotation at any position below the cache size.
EXACT = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def fuse_rotary(
    model: ModelSource,
    *,
    target: FuseTarget = "onnx23",
    tables: FuseTables | None = None,
    max_positions: int | None = None,
    inputs: Mapping[str, npt.ArrayLike] | None = None,
    validate: bool = True,
    providers: Sequence[str] | str | None = None,
) -> Fused:
    """Replace each rotary application of a model with one fused node.

    Rotations are found by their structure, ``x * C + R(x) * S`` with ``R`` moving and
    negating features (``rotate_half``, ``rotate_every_two``, partial rotary), and by
    existing ``RotaryEmbedding`` nodes; each is then cut out and probed on ONNX
    Runtime, which measures its layout, rotary dim, frequencies and positions. A
    fusion is kept only when the fused cut-out computes what the original does.

    Parameters
    ----------
    model : onnx.ModelProto or path
        The model; it is not modified.
    target : {"onnx23", "ort"}
        ``"onnx23"``: the standard ``RotaryEmbedding`` (the model is converted to
        opset 23 first if it is older). ``"ort"``: ``com.microsoft.RotaryEmbedding``,
        at the model's opset (ONNX Runtime only).
    tables : {"stored", "computed", "model"}, optional
        Where the fused nodes' cos/sin come from, as for :class:`ExportOptions`.
        ``"stored"``: the core's tables of ``max_positions`` rows, computed in float64
        and stored in the model's dtype, read by position ids. ``"computed"``: cos/sin
        computed in the graph from the position ids by the exact float32 method. Both
        fix the precision the common float32 recipe loses at long positions and remove
        its Cos and Sin. ``"model"``: the model's own cos/sin, computed as before
        (``"onnx23"`` only). Default: ``"stored"`` with ``max_positions``, else
        ``"computed"``; a rotation whose frequencies follow no rule the core can
        recompute exactly (LongRoPE's per-pair factors) then keeps the model's own
        cos/sin (with ``target="onnx23"`` and no ``max_positions``; its report line
        says so), where ``tables`` or ``max_positions`` given leave it alone with the
        reason.
    max_positions : int, optional
        A bound on the positions: exact caches of this many rows are stored, and
        position ids must stay below it. Default: no bound; the fused nodes read
        cos/sin computed in the graph from the position ids with the exact float32
        method, right at every position below ``2**30``.
    inputs : mapping, optional
        Inputs for the runs that measure shapes and validate (default: made from the
        input types; pass them for models whose inputs need consistent sizes, such
        as past key/value caches).
    validate : bool
        Run both models on ONNX Runtime (CUDA first when available, then CPU) and
        compare their outputs (``report.validation``).
    providers : str or list of str, optional
        ONNX Runtime providers for the validation, as :func:`validate` takes them.

    Returns
    -------
    Fused
        ``(model, report)``: the new model and a :class:`FusionReport` with one
        :class:`Rotation` per rotary application (what was fused, left alone and why).
        A model read from a path whose weights are in external data files is read
        without them (ONNX Runtime reads them from the files for its runs): the new
        model's initializers refer to those files, in ``report.data_folder``, and
        :meth:`Fused.save` writes it with its weights.

    Raises
    ------
    ValueError
        Nothing to fuse (no rotation found, or attention nodes that rotate inside,
        such as ``GroupQueryAttention`` with ``do_rotary=1``; the message says which),
        options that contradict each other, a bfloat16 model, or a model that does
        not run on the inputs (the runtime's message whole).

    Examples
    --------
    >>> import numpy as np
    >>> from onnx import TensorProto, helper
    >>> from arrayrope.export import fuse_rotary
    >>> inv = 10000.0 ** (-np.arange(0, 8, 2) / 8)   # a rotate_half graph, as exporters write it
    >>> n = lambda *a, **k: helper.make_node(*a, **k)
    >>> c = lambda name, v: helper.make_tensor(name, TensorProto.FLOAT if np.asarray(v).dtype.kind == "f"
    ...     else TensorProto.INT64, np.shape(v), np.ravel(v))
    >>> nodes = [n("Unsqueeze", ["pos", "ax2"], ["p3"]), n("Cast", ["p3"], ["pf"], to=1),
    ...          n("Mul", ["pf", "inv"], ["f"]), n("Concat", ["f", "f"], ["ang"], axis=-1),
    ...          n("Cos", ["ang"], ["c"]), n("Sin", ["ang"], ["s"]),
    ...          n("Unsqueeze", ["c", "ax1"], ["c4"]), n("Unsqueeze", ["s", "ax1"], ["s4"]),
    ...          n("Slice", ["x", "zero", "four", "ax3"], ["x1"]), n("Slice", ["x", "four", "big", "ax3"], ["x2"]),
    ...          n("Neg", ["x2"], ["nx2"]), n("Concat", ["nx2", "x1"], ["rot"], axis=-1),
    ...          n("Mul", ["x", "c4"], ["xc"]), n("Mul", ["rot", "s4"], ["rs"]), n("Add", ["xc", "rs"], ["y"])]
    >>> inits = [c("inv", inv.astype(np.float32)), c("ax1", [1]), c("ax2", [2]), c("ax3", [3]),
    ...          c("zero", [0]), c("four", [4]), c("big", [2**62])]
    >>> g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, ["B", 2, "S", 8]),
    ...     helper.make_tensor_value_info("pos", 7, ["B", "S"])], [helper.make_tensor_value_info("y", 1, None)], inits)
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    >>> fused, report = fuse_rotary(m, max_positions=64, providers="cpu")
    >>> [node.op_type for node in fused.graph.node], report.fused, report.ok
    (['Clip', 'Mod', 'RotaryEmbedding'], 1, True)
    """
    source = load_model(model, keep_external=True)  # weights in external data files stay there
    folder = data_folder(model, source)
    target = checks.choice(target, "target", ("onnx23", "ort"))
    rows = None if max_positions is None else checks.positive_int(max_positions, "max_positions")
    explicit = tables is not None
    chosen: FuseTables = (
        checks.choice(tables, "tables", ("stored", "computed", "model"))
        if tables is not None
        else ("computed" if rows is None else "stored")
    )
    tables = chosen
    if tables == "stored" and rows is None:
        raise ValueError(
            "tables='stored' stores max_positions rows: pass max_positions (the bound of the position "
            "ids), or tables='computed' to compute cos/sin in the graph"
        )
    if tables == "computed" and rows is not None:
        raise ValueError(
            f"max_positions={rows} bounds stored tables, and tables='computed' stores none (it rotates "
            "every position below 2**30): pass one of them"
        )
    validate = checks.boolean(validate, "validate")
    opset_before = _opset(source)
    work = source
    if target == "onnx23" and opset_before < MIN_OPSET["onnx23"] and find_sites(Graph(source, folder)):
        work = _converted(source, MIN_OPSET["onnx23"])
    graph = Graph(work, folder)
    sites = find_sites(graph)
    if not sites and not _unrecognised(graph, sites):
        raise ValueError(f"nothing to fuse: {_nothing_found(work)}")
    feed = sample_inputs(graph) if inputs is None else {k: np.asarray(v) for k, v in inputs.items()}
    longest = max((v.shape[-1] for v in feed.values() if v.ndim and v.dtype.kind in "iu"), default=0)
    if tables == "stored" and sites and rows is not None and rows < longest:  # before anything runs (ORT's error)
        made = "the given inputs" if inputs is not None else "sample inputs"
        raise ValueError(
            f"max_positions={rows} is below the {longest} positions of the {made} the fusion is "
            f"checked with (the exact caches must hold a row for every position a model runs at); "
            f"use max_positions >= {longest}"
        )
    wanted = [n for s in sites for n in (s.x, s.cos, s.positions) if n and n not in feed]
    try:
        seen = {**feed, **run(work, feed, wanted, folder=folder)} if sites else dict(feed)
    except Exception as exc:  # ONNX Runtime's errors: inputs of the wrong sizes or types
        made = "the given inputs" if inputs is not None else "sample inputs made from its input types"
        said = " ".join(str(exc).split())  # the runtime's message whole, on one line
        raise ValueError(f"the model does not run on {made} ({said}); pass inputs= with a feed it runs on") from exc
    job = _Job(graph, target, chosen, rows, _opset(work), explicit)
    done = [job.fuse(i, site, seen) for i, site in enumerate(sites)]
    rotations = tuple(r for r, _ in done) + _unrecognised(graph, sites)
    builders = [b for _, b in done if b is not None]
    fused = _rewritten(
        work,
        [n for b in builders for n in b.nodes],
        [t for b in builders for t in b.initializers],
        {r.output for r in rotations if r.fused},
        contrib=target == "ort",
    )
    report = FusionReport(
        rotations,
        target,
        chosen,
        len(source.graph.node),
        len(fused.graph.node),
        opset_before,
        _opset(fused),
        data_folder=folder,
    )
    if validate:
        report = dataclasses.replace(report, validation=_validation(source, fused, feed, providers, folder))
    return Fused(fused, report)


def _nothing_found(model: onnx.ModelProto) -> str:
    """What a model with no rotation to fuse holds instead: attention nodes that rotate inside, or nothing."""
    inside = internal_rotations(model)
    if not inside:
        return "no rotary embedding found (no cos/sin tables applied to a tensor, no rotary node)"
    kinds = ", ".join(f"{n} {kind} node{'s' if n > 1 else ''}" for kind, n in inside.items())
    return (
        f"{kinds} already rotate{'s' if sum(inside.values()) == 1 else ''} queries and keys internally "
        "(do_rotary=1, with their cos_cache and sin_cache inputs), which no fused node can replace"
    )


def _unrecognised(graph: Graph, sites: Sequence[Site]) -> tuple[Rotation, ...]:
    """Cos tables that no rotation found reads: each a rotation left alone, with the reason (none is silent)."""
    used: set[str] = set()
    for site in sites:
        for table in (site.cos, site.sin):
            used |= set(graph.walk(table, lambda v, n: [] if n is None else n.input))
    out = []
    for node in graph.nodes:
        if node.op_type != "Cos" or node.output[0] in used or not graph.consumers.get(node.output[0]):
            continue
        reads = [n.output[0] for n in graph.consumers[node.output[0]]]
        out.append(
            Rotation(
                node.input[0],
                node.output[0],
                False,
                reason=(
                    f"its cos table {node.output[0]!r} (read by {reads[:3]}) feeds no rotation of a form "
                    "fuse_rotary knows (x * C + R(x) * S with R moving and negating features of x, or the two parts "
                    "a * C - b * S and b * C + a * S of DeepSeek's interleaved MLA); it was left as it is"
                ),
            )
        )
    return tuple(out)


def _converted(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    from onnx import version_converter

    try:
        out = version_converter.convert_version(model, opset)
    except Exception as exc:  # the converter lacks an adapter for some op of the model
        raise ValueError(
            f"target='onnx23' needs opset 23 and onnx could not convert the model: {exc}; use target='ort' (any opset)"
        ) from exc
    out.ir_version = max(out.ir_version, ir_version_for(out.opset_import))
    return out


class _Job:
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
        found = identify(piece, order)
        if found.layout is None or found.rotary_dim is None or found.offset is None:
            raise ValueError(f"it is no rotary embedding: {found.reason}")  # before its frequencies were measured
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
            )
            pos = _position_ids(b, self.graph, site, shape, seen)
            rotate_heads(spec, b, emitter(spec, b), _reordered(b, site.x, order), pos, site.rotated)
        else:
            batched = seen[site.cos].shape[0] == seen[site.x].shape[0]
            _model_tables(b, site, shape, found.layout, found.rotary_dim, batched, _reordered(b, site.x, order))
        fused = SiteRunner(
            piece, _rewritten(piece.model, b.nodes, b.initializers, {site.rotated}, self.target == "ort")
        )
        if site.parts is not None:  # the Concat around a two-part rotation, with the fused part in its place
            before, after, _, _ = site.parts
            b.op("Concat", [*before, site.rotated, *after], out=site.output, axis=-1)
        limit = COMPUTED_LIMIT if self.rows is None else self.rows
        err = compare(original, fused, shape.head_dim, min(limit, 256))
        if not err <= SAME.get(dtype, 1e-4):
            raise ValueError(f"the fused node differs from it by {err:.2g} (relative), so it was kept as it is")
        if freqs is not None:
            far = compare(fused, reordered(reference(piece, freqs, found.layout), order), shape.head_dim, limit)
            if not far <= EXACT.get(dtype, 2e-6):
                raise ValueError(f"the exact caches differ from the core's rotation by {far:.2g} at far positions")
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
    if len(have) == 2 and have[0] == x[0]:
        return pos
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


def _rewritten(
    model: onnx.ModelProto, nodes: Sequence[NodeProto], inits: Sequence[TensorProto], replaced: set[str], contrib: bool
) -> onnx.ModelProto:
    """A copy of ``model`` where ``nodes`` compute the ``replaced`` tensors; nodes no longer needed are dropped."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    if not replaced:
        return out
    kept = [n for n in g.node if not set(n.output) & replaced]
    new_inits, renamed = _distinct(list(g.initializer), inits)
    nodes = _shared(nodes, renamed, replaced)
    live = _live(kept + nodes, {o.name for o in g.output})
    everything = [n for n in kept + nodes if id(n) in live]
    available = {i.name for i in g.input} | {t.name for t in new_inits}
    ordered = topological(everything, available)
    read = {i for n in ordered for i in reads(n)} | {o.name for o in g.output}
    del g.node[:]
    g.node.extend(ordered)
    del g.initializer[:]
    g.initializer.extend(t for t in new_inits if t.name in read)
    if contrib and not any(o.domain == MS_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    out.ir_version = max(out.ir_version, ir_version_for(out.opset_import))
    return out


def _shared(nodes: Sequence[NodeProto], renamed: dict[str, str], keep: set[str]) -> list[NodeProto]:
    """``nodes`` reading ``renamed`` tensors by their new names, each repeated computation made once."""
    seen: dict[tuple[Any, ...], NodeProto] = {}
    out = []
    for n in nodes:  # builders emit producers before consumers
        n.input[:] = [renamed.get(i, i) for i in n.input]
        key = (n.domain, n.op_type, tuple(n.input), tuple(a.SerializeToString() for a in n.attribute))
        first = seen.get(key)
        if first is not None and not set(n.output) & keep and len(first.output) == len(n.output):
            renamed.update(zip(n.output, first.output, strict=True))
            continue
        seen[key] = n
        out.append(n)
    return out


def _live(nodes: Sequence[NodeProto], outputs: set[str]) -> set[int]:
    """Ids of the nodes that the graph outputs need."""
    producer = {o: n for n in nodes for o in n.output if o}
    live: set[int] = set()
    stack = list(outputs)
    while stack:
        node = producer.get(stack.pop())
        if node is None or id(node) in live:
            continue
        live.add(id(node))
        stack.extend(reads(node))
    return live


def _distinct(existing: list[TensorProto], added: Sequence[TensorProto]) -> tuple[list[TensorProto], dict[str, str]]:
    """``existing`` and those of ``added`` with new contents; each repeated one renamed to its first copy."""

    def key(t: TensorProto) -> tuple[Any, ...]:
        return t.data_type, tuple(t.dims), hashlib.sha256(onnx.numpy_helper.to_array(t).tobytes()).hexdigest()

    first: dict[tuple[Any, ...], str] = {}
    out, renamed = list(existing), {}
    for t in added:
        k = key(t)
        if k in first:
            renamed[t.name] = first[k]
        else:
            first[k] = t.name
            out.append(t)
    return out, renamed


def _validation(
    source: onnx.ModelProto,
    fused: onnx.ModelProto,
    feed: Mapping[str, npt.NDArray[Any]],
    providers: Sequence[str] | str | None,
    folder: str | None = None,
) -> Report:
    """Both models on each provider, output by output; the original is the reference (external data in
    ``folder``)."""
    import onnxruntime as ort

    rows, skipped = [], []
    for provider in providers_named(providers):
        device = provider.replace("ExecutionProvider", "")
        if provider not in ort.get_available_providers():  # ONNX Runtime would fall back to the CPU silently
            skipped.append((f"onnxruntime {device}", f"{provider} is not available in this onnxruntime build"))
            continue
        try:
            want = run(source, feed, providers=[provider], folder=folder)
        except Exception as exc:  # no kernel for an op of the original on this provider: nothing to compare with
            skipped.append((f"onnxruntime {device}", str(exc).splitlines()[0][:160]))
            continue
        try:
            got = run(fused, feed, providers=[provider], folder=folder)
        except Exception as exc:  # the original runs and the fused model does not: a failure, not a skip
            nan = math.nan
            rows.append(
                Row(
                    "onnxruntime",
                    device,
                    "-",
                    nan,
                    nan,
                    nan,
                    False,
                    f"the fused model fails where the original runs: {str(exc).splitlines()[0][:160]}",
                )
            )
            continue
        for name, ref in want.items():
            ref64, out64 = ref.astype(np.float64), got[name].astype(np.float64)
            scale = float(np.max(np.abs(ref64), initial=0.0))
            err = float(np.max(np.abs(out64 - ref64), initial=0.0))
            tol = SAME.get(str(ref.dtype), 1e-4) * (1.0 + scale)
            rel = err / scale if scale else math.nan
            ok = err <= tol
            rows.append(
                Row(
                    "onnxruntime",
                    device,
                    str(ref.dtype),
                    err,
                    rel,
                    tol,
                    ok,
                    "" if ok else "fused model differs from the original",
                    name,
                )
            )
    return Report(tuple(rows), tuple(skipped), "fused model against the original, output by output")
