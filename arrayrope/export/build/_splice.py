"""Splicing rotary nodes into an existing graph, after named tensors."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Unpack

import onnx
from onnx import GraphProto, NodeProto, TensorProto, TypeProto, helper

from arrayrope._lib import checks

from .._graph import ModelSource, ir_version_for, load_model, subgraphs, topological
from ._builder import Builder
from ._emit import emitter
from ._options import RANKS, ExportOptions, Rank, SpliceKeywords, check_keywords
from ._spec import DTYPE_NAMES, MS_DOMAIN, Frequencies, Spec, make_spec


def _tensor_types(model: onnx.ModelProto) -> dict[str, TypeProto.Tensor]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # unknown ops: fall back to what the model declares
        inferred = model
    g = inferred.graph
    types = {v.name: v.type.tensor_type for v in list(g.input) + list(g.value_info) + list(g.output)}
    for init in g.initializer:
        types.setdefault(init.name, TypeProto.Tensor(elem_type=init.data_type))
    return types


def _produced(graph: GraphProto) -> set[str]:
    names = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
    return names


def _rewire(nodes: Iterable[NodeProto], renamed: dict[str, str]) -> None:
    """Point every read of a renamed tensor, in subgraphs too, at its new name (ONNX names are unique)."""
    for node in nodes:
        for i, name in enumerate(node.input):
            if name in renamed:
                node.input[i] = renamed[name]
        for g in subgraphs(node):
            _rewire(g.node, renamed)


def _check_width(name: str, t: TypeProto.Tensor | None, spec: Spec, heads: int | None) -> None:
    """Where the graph knows the last dimension, it must be head_dim (4-D) or num_heads * head_dim (3-D)."""
    if t is None or not t.HasField("shape"):
        return
    dims, rank, head_dim = t.shape.dim, spec.options.rank, spec.head_dim
    if len(dims) != rank:
        raise ValueError(f"{name!r} has rank {len(dims)} but rank={rank}")
    last = dims[-1].dim_value if dims[-1].HasField("dim_value") else None
    want = head_dim if rank == 4 else spec.flat_heads(heads) * head_dim
    if last is not None and last != want:
        what = "head_dim" if rank == 4 else f"num_heads * head_dim = {heads} * {head_dim}"
        raise ValueError(f"{name!r} has last dimension {last} but {what} = {want}; check head_dim and num_heads")


def add_rotary(
    model: ModelSource,
    *,
    q: str,
    k: str | None = None,
    position_ids: str | None = None,
    freqs: Frequencies,
    rank: Rank | None = None,
    **options: Unpack[SpliceKeywords],
) -> onnx.ModelProto:
    """A copy of ``model`` with rotary nodes after tensors ``q`` (and ``k``), consumers rewired.

    Every node that read ``q`` reads the rotated tensor instead, also inside
    control-flow bodies; graph outputs keep their names and values (a graph
    output named ``q`` stays unrotated).
    ``model`` itself is not modified.

    Parameters
    ----------
    model : onnx.ModelProto or path
        The graph to extend.
    q, k : str
        Names of the tensors to rotate (``k`` optional; both share tables).
    position_ids : str, optional
        Name of an int64 ``(batch, seq)`` tensor of the graph; None: positions ``0..seq-1``.
    freqs : RopeFrequencies or int
        As in :func:`rotary_model`.
    rank : {4, 3}, optional
        Rank of ``q``/``k``; default: from the model's shape information.
    **options
        The options of :class:`ExportOptions` that :class:`SpliceKeywords` lists
        (``layout``, ``target``, ``num_heads``, ``max_positions``...). The others come
        from the model: the element type from ``q``, the opset from the model's
        imports (it is not changed: a target that needs a newer opset is an error),
        ``qk`` from ``k`` and ``position_ids`` from the argument above.

    Returns
    -------
    onnx.ModelProto
        A copy of ``model`` whose readers of ``q`` (and ``k``) read the rotated tensors.

    Examples
    --------
    >>> import numpy as np, onnxruntime as ort
    >>> from onnx import helper, TensorProto
    >>> from arrayrope.export import add_rotary
    >>> t = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", 2, "S", 8])
    >>> g = helper.make_graph([helper.make_node("Identity", ["x"], ["q"]),
    ...                        helper.make_node("Identity", ["q"], ["out"])], "g", [t("x")], [t("out")])
    >>> m = helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)])
    >>> m2 = add_rotary(m, q="q", freqs=8, max_positions=16)
    >>> [n.op_type for n in m.graph.node]  # the input model is unchanged
    ['Identity', 'Identity']
    >>> sess = ort.InferenceSession(m2.SerializeToString(), providers=["CPUExecutionProvider"])
    >>> sess.run(None, {"x": np.ones((1, 2, 3, 8), np.float32)})[0].shape
    (1, 2, 3, 8)
    """
    check_keywords(options, SpliceKeywords.__optional_keys__, "add_rotary")
    model = load_model(model)
    graph = model.graph
    known = _produced(graph)
    _check_names(known, {"q": q, "k": k, "position_ids": position_ids})
    types = _tensor_types(model)
    chosen = _options(model, types, q, k, position_ids, rank, options)
    spec = make_spec(freqs, chosen, opset_argument="the model's opset")
    pairs = ((q, spec.options.num_heads), (k, spec.options.num_kv_heads))
    rotated = [(name, heads) for name, heads in pairs if name is not None]
    for name, heads in rotated:
        _check_width(name, types.get(name), spec, heads)
    b = Builder("arrayrope_rope/", taken=known | {n.name for n in graph.node} | {o.name for o in graph.output})
    rotary = emitter(spec, b, model.ByteSize())
    renamed = {}
    for name, heads in rotated:
        renamed[name] = b.name(f"{name}_rotated")
        rotary.apply(name, position_ids, renamed[name], heads)
    return _spliced(model, b, renamed, contrib=spec.target == "ort")


def _check_names(known: set[str], names: dict[str, object]) -> None:
    """Each argument names a tensor of the graph (``q`` must, ``k`` and ``position_ids`` may be None)."""
    for arg, name in names.items():
        if name is None:
            if arg == "q":
                raise TypeError("q must name a tensor of the graph")
            continue
        if not isinstance(name, str):
            raise TypeError(f"{arg} must be a tensor name (str), got {name!r}")
        if name not in known:
            some = ", ".join(sorted(known)[:8])
            raise ValueError(f"{arg}={name!r} is not a tensor of the graph (graph tensors include: {some})")


def _options(
    model: onnx.ModelProto,
    types: dict[str, TypeProto.Tensor],
    q: str,
    k: str | None,
    position_ids: str | None,
    rank: Rank | None,
    options: SpliceKeywords,
) -> ExportOptions:
    """The options with those that come from the model: rank, position ids, dtype, opset, qk."""
    tq = types.get(q)
    dtype = DTYPE_NAMES.get(tq.elem_type if tq is not None else TensorProto.UNDEFINED)
    if dtype is None:
        raise ValueError(
            f"q={q!r} must be a float32, float16, bfloat16 or float64 tensor; its type is unknown or other"
        )
    if rank is None:
        if tq is None or not tq.HasField("shape"):
            raise ValueError(f"the rank of q={q!r} is not known from the model; pass rank=3 or rank=4")
        inferred: Rank = checks.choice(len(tq.shape.dim), "rank", RANKS)
        rank = inferred
    if position_ids is not None:
        tp = types.get(position_ids)
        if tp is not None and tp.elem_type not in (TensorProto.INT64, TensorProto.UNDEFINED):
            raise ValueError(f"position_ids={position_ids!r} must be an int64 tensor")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise ValueError("model imports no default-domain opset")
    return ExportOptions(
        **options, rank=rank, position_ids=position_ids is not None, dtype=dtype, opset=opset, qk=k is not None
    )


def _spliced(model: onnx.ModelProto, b: Builder, renamed: dict[str, str], *, contrib: bool) -> onnx.ModelProto:
    """A copy of ``model`` with the builder's nodes and constants, reads of ``renamed`` tensors rewired."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    old_nodes = list(g.node)
    _rewire(old_nodes, renamed)
    available = {i.name for i in g.input} | {i.name for i in g.initializer} | {t.name for t in b.initializers}
    ordered = topological(old_nodes + b.nodes, available)
    del g.node[:]
    g.node.extend(ordered)
    g.initializer.extend(b.initializers)
    if contrib and not any(o.domain == MS_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    out.ir_version = max(out.ir_version, ir_version_for(out.opset_import))
    return out
