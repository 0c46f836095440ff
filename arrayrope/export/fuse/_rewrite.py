"""``fuse_rotary``: one fused node for each rotary application of an existing ONNX model.

The call: the model loaded and converted, its rotations found and each replaced (:mod:`._replace`),
the nodes written into it (:mod:`._edit`), rotations left alone reported, and the fused model run
against the original (:func:`_validation`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import onnx

from arrayrope._lib import checks
from arrayrope._lib.verdicts import Report, Row

from .._graph import ModelSource, data_folder, ir_version_for, load_model, providers_named
from ..build._spec import MIN_OPSET
from ._edit import rewritten
from ._match import Graph, Site, find_sites, internal_rotations
from ._probe import (
    run,
    sample_inputs,
)
from ._replace import SAME, Job
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
        compare their outputs (``report.validation``), where a rotation was fused.
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
    job = Job(graph, target, chosen, rows, _opset(work), explicit)
    done = [job.fuse(i, site, seen) for i, site in enumerate(sites)]
    rotations = tuple(r for r, _ in done) + _unrecognised(graph, sites)
    builders = [b for _, b in done if b is not None]
    fused = rewritten(
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
    if validate and report.fused:  # nothing fused: the model is unchanged, and nothing is compared
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
