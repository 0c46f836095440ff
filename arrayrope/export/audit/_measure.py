"""Every rotation of a model, whatever its form, as a function from positions to the matrices it applies there.

Rotations written in standard ops, and ``RotaryEmbedding`` nodes (standard or ``com.microsoft``), are found by
:mod:`..fuse._match` and cut out of the graph with the nodes that build their tables; the cut is run on ONNX
Runtime with unit vectors (in float32 where the model computes in half precision), so its output for ``e_j`` at
position ``p`` is column ``j`` of the matrix applied there. Attention nodes that rotate inside
(``GroupQueryAttention`` with ``do_rotary=1``) rotate by their ``cos_cache`` and ``sin_cache`` at each position:
the nodes building the caches are run for the total length of each call (LongRoPE's ``If`` picks its tables by
it), the caches read at the positions, and the node itself run once at the first positions to check that it
rotates by them as read. Nothing else of the model runs, and of its weights only the tensors these nodes read.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import NodeProto, TensorProto, helper

from .._graph import inlined, reads
from ..build._spec import MS_DOMAIN
from ..fuse._match import ROTATING_ATTENTION, Graph, Site, find_sites
from ..fuse._probe import Shapes, SiteRunner, cut, sample_inputs, session, widened
from ..fuse._rows import held_rows
from ._expect import BLOCK

Matrices = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]]
"""``positions (S,) -> (S, D, D)``: the matrix a rotation applies at each position of one call (M-RoPE: positions
``(axes, S)`` too, or ``(S,)`` for text, every axis at the same position)."""

_EPS: dict[int, float] = {TensorProto.FLOAT16: 2.0**-11, TensorProto.BFLOAT16: 2.0**-8, TensorProto.DOUBLE: 2.0**-53}
#: The attributes of GroupQueryAttention that its rotation reads.
_ROTATION_ATTRIBUTES = frozenset({"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved", "scale"})
_LAYER = re.compile(r"(?:^|[/._])(?:layers|layer|h|blocks|block|decoder_layer)[./_]?(\d+)(?=[/._]|$)")


@dataclasses.dataclass
class Rotation:
    """One rotation found in the model, and how to measure it (``matrices`` None: it cannot be, ``reason`` why)."""

    kind: str
    name: str
    layer: int | None
    head_dim: int | None
    matrices: Matrices | None
    rows: int | None = None  # rows of stored tables it reads by position (None: computed, or not known)
    eps: float = 2.0**-24  # rounding of the tables it reads, relative
    reason: str = ""
    note: str = ""  # what could not be checked of a rotation that was measured
    order: str = ""  # how it writes its features where not in the order it reads them (undone in ``matrices``)
    cut: bool = False  # its input is cut from a wider tensor (a Slice or Split: MLA's q_pe), not a whole head
    position_axes: int = 0  # M-RoPE: the axes of its (axes, batch, seq) positions; ``matrices`` takes (axes, S) too


def layer_of(names: Iterable[str]) -> int | None:
    """The layer index that node names such as ``/model/layers.3/self_attn/Add`` carry, else None."""
    for name in names:
        m = _LAYER.search(name)
        if m is not None:
            return int(m.group(1))
    return None


def rotations(graph: Graph, head_dims: Sequence[int]) -> list[Rotation]:
    """Every rotation in the graph, in graph order, each ready to be measured (``head_dims``: the widths the config
    gives a rotation's input, its head dim first, then its rotary width)."""
    out = [_site(graph, site, head_dims) for site in find_sites(graph)]
    for node in graph.nodes:
        rotary = any(a.name == "do_rotary" and a.i == 1 for a in node.attribute)
        if rotary and node.domain == MS_DOMAIN and node.op_type in ROTATING_ATTENTION:
            out.append(_attention(graph, node))
    return out


def _site(graph: Graph, site: Site, head_dims: Sequence[int]) -> Rotation:
    node = site.node or graph.producer.get(site.output)
    name = node.name if node is not None and node.name else site.output
    kind = "rotation in standard ops"
    if site.node is not None:
        kind = f"{site.node.domain + '.' if site.node.domain else ''}RotaryEmbedding"
    names = [name, site.output, site.x, *_scopes(node)]
    rotation = Rotation(kind, name, layer_of(names), None, None, eps=_EPS.get(graph.elem_type(site.cos) or 1, 2.0**-24))
    try:
        candidates = _static_shapes(graph, site, head_dims)
        cut(graph, site, candidates[0])
    except ValueError as exc:
        ids = _position_input(graph, site)
        if ids is None:
            rotation.reason = str(exc)
            return rotation
        site = dataclasses.replace(site, positions=ids)  # tables computed from the ids by integer arithmetic
        candidates = _static_shapes(graph, site, head_dims)
    try:
        shape, matrices = _running(graph, site, candidates)
    except ValueError as exc:
        rotation.reason = str(exc)
        return rotation
    rotation.head_dim = shape.head_dim
    rotation.cut = cut_from_head(graph, site.x)
    rotation.position_axes = shape.position_axes
    rotation.rows = held_rows(graph, site)
    rotation.matrices, rotation.order = _in_order(matrices)
    return rotation


_KEEPS_FEATURES = ("Transpose", "Reshape", "Cast", "Identity", "Unsqueeze", "Squeeze", "Expand")


def cut_from_head(graph: Graph, name: str) -> bool:
    """Whether tensor ``name`` is a part cut from a wider one (a ``Slice`` or ``Split`` up the ops that move its
    features without mixing them, or the graph's own input, which its caller cuts: a rotation exported alone): a
    rotation of the rotary features alone, whose head the model joins outside it; a rotation of a projection's
    whole output is not one."""
    node = graph.producer.get(name)
    for _ in range(8):
        if node is None:
            return name in graph.inputs
        if node.op_type not in (*_KEEPS_FEATURES, "Slice", "Split"):
            return False
        if node.op_type in ("Slice", "Split"):
            return True
        name = node.input[0]
        node = graph.producer.get(name)
    return False


def _in_order(matrices: Matrices) -> tuple[Matrices, str]:
    """``matrices`` with the permutation a rotation applies at position 0 undone, and what it is ('' for none).

    DeepSeek's MLA with ``rope_interleave`` reads its rotary features in interleaved pairs and writes them in
    half-split order (the even features, then the odd ones); queries and keys are written in the same order, so
    attention sees the interleaved rotation the config describes."""
    m0 = matrices(np.zeros(1, np.int64))[0]
    rounded = np.round(m0)
    permutation = (
        np.max(np.abs(m0 - rounded)) <= 1e-3
        and np.all(np.isin(rounded, (0.0, 1.0)))
        and np.all(rounded.sum(0) == 1)
        and np.all(rounded.sum(1) == 1)
    )
    if not permutation or np.array_equal(rounded, np.eye(len(m0))):
        return matrices, ""
    held = np.argmax(rounded, axis=1)  # output feature i holds input feature held[i]
    back = np.argsort(held)

    def undone(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return matrices(positions)[:, back, :]

    shown = ", ".join(str(int(i)) for i in held[:8]) + (", ..." if len(held) > 8 else "")
    return undone, (
        f"it writes its features in another order than it reads them (output features hold input features "
        f"{shown}); compared in the order it reads them, as attention sees them where queries and keys share it"
    )


def _scopes(node: NodeProto | None) -> list[str]:
    """The module scopes ``torch.onnx.export(dynamo=True)`` records on a node (``net.model.layers.3.self_attn``):
    its node names (``node_cat_1``) do not say the layer."""
    keys = ("pkg.torch.onnx.name_scopes", "namespace")
    return [p.value for p in node.metadata_props if p.key in keys] if node is not None else []


def _position_input(graph: Graph, site: Site) -> str | None:
    """The one integer input of the model that the rotation's tables (or its node's positions) depend on."""
    reads = [site.cos, site.sin] + ([site.node.input[1]] if site.node is not None and site.node.domain else [])
    ints = [i for i in graph.inputs if graph.elem_type(i) in (TensorProto.INT64, TensorProto.INT32)]
    found = [i for i in ints if any(graph.depends_on(r, i) for r in reads if r)]
    return found[0] if len(found) == 1 else None


def _static_shapes(graph: Graph, site: Site, head_dims: Sequence[int]) -> list[Shapes]:
    """The shapes a rotation may take from inferred shapes alone, likeliest first: its axes (as its tables
    broadcast, else both orders), its heads (where the graph fixes them, else one) and its width (the input's,
    else each of ``head_dims``: a rotation cut out of the head takes its rotary features alone)."""
    cos = graph.shape(site.cos)
    orders = ["bhsd", "bshd"]
    if site.node is None and cos is not None and len(cos) == 4 and cos[2] == 1 and cos[1] != 1:
        orders.reverse()
    x = graph.shape(site.x)
    widths = list(dict.fromkeys(head_dims))
    if x is not None and len(x) == 4 and isinstance(x[-1], int):
        widths = [x[-1]]
    pos = graph.shape(site.positions) if site.positions else None
    if site.positions and pos is None:
        raise ValueError(f"the rank of its positions {site.positions!r} is not known from the graph")
    rank = len(pos) if pos is not None else 0
    mrope = 0
    if rank == 3 and pos is not None:  # M-RoPE ids (axes, batch, seq): the number of axes fixed by the graph
        if not isinstance(pos[0], int) or not 2 <= pos[0] <= 4:
            raise ValueError(
                f"its positions {site.positions!r} have 3 axes, and the first ({pos[0]}) is not a fixed number of "
                "M-RoPE axes (2 to 4)"
            )
        mrope = pos[0]
    elif rank not in (1, 2):
        raise ValueError("no integer positions were found that its tables are computed from")
    out = []
    for axes in orders if site.node is None else orders[:1]:
        h = x[1 if axes == "bhsd" else 2] if x is not None and len(x) == 4 else None
        heads = h if isinstance(h, int) else 1
        out += [
            Shapes((1, heads, BLOCK, d) if axes == "bhsd" else (1, BLOCK, heads, d), axes, rank, mrope) for d in widths
        ]
    return out


def _running(graph: Graph, site: Site, candidates: list[Shapes]) -> tuple[Shapes, Matrices]:
    """The first of the ``candidates`` under which the rotation's cut runs on probes at positions 0..7 and gives
    back a tensor of its input's shape (ValueError naming the first refusal where none does)."""
    first = ""
    for shape in candidates:
        piece = cut(graph, site, shape)
        runner = SiteRunner(piece, widened(piece.model))
        try:
            m = _cut_matrices(runner)(np.arange(BLOCK, dtype=np.int64))
        except Exception as exc:  # ONNX Runtime refuses the shape (a reshape to fixed heads, a concat)
            first = first or " ".join(str(exc).split()[-24:])
            continue
        if runner.shape_out == _fed(shape) and np.all(np.isfinite(m)):
            return shape, _cut_matrices(runner)
        first = first or f"it gives a tensor of shape {runner.shape_out} for one of shape {_fed(shape)}"
    widths = sorted({shape.x[-1] for shape in candidates})
    raise ValueError(
        f"its axes and width are not known from the graph, and it runs at none of the widths the config gives "
        f"({', '.join(map(str, widths))} features; a config of another model?): {first}"
    )


def _fed(shape: Shapes) -> tuple[int, ...]:
    """The shape of the probes a :class:`SiteRunner` feeds under ``shape`` (the ``head_dim`` unit vectors)."""
    d = shape.head_dim
    return (d, shape.heads, BLOCK, d) if shape.axes == "bhsd" else (d, BLOCK, shape.heads, d)


def _cut_matrices(runner: SiteRunner) -> Matrices:
    d = runner.shape.head_dim

    def matrices(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        s = positions.shape[-1]  # (S,), or (axes, S) for M-RoPE
        probes = np.broadcast_to(np.eye(d, dtype=np.float32)[None, :, None, :], (1, d, s, d))
        y = np.asarray(runner(np.ascontiguousarray(probes), positions), np.float64)[0]  # (d, s, d): probe j
        return np.transpose(y, (1, 2, 0))

    return matrices


def _attention(graph: Graph, node: NodeProto) -> Rotation:
    """A ``GroupQueryAttention`` (or other attention node) that rotates its queries and keys inside."""
    name = node.name or node.output[0]
    kind = f"{MS_DOMAIN}.{node.op_type} (do_rotary=1)"
    rotation = Rotation(kind, name, layer_of([name, *node.input]), None, None)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type != "GroupQueryAttention":
        rotation.reason = f"measuring the rotation inside {node.op_type} is not supported; only GroupQueryAttention's"
        return rotation
    if len(node.input) < 9 or not node.input[7] or not node.input[8]:
        rotation.reason = "it has no cos_cache and sin_cache inputs"
        return rotation
    cos, sin = node.input[7], node.input[8]
    heads, kv_heads = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
    query = graph.shape(node.input[0])
    packed = len(node.input) < 2 or not node.input[1]  # queries, keys and values in one input
    width = query[-1] if query else None
    if not isinstance(width, int) or width % (heads + 2 * kv_heads if packed else heads):
        rotation.reason = f"its head dim is not known from the shape of its query input {node.input[0]!r}"
        return rotation
    d = width // (heads + 2 * kv_heads if packed else heads)
    rotation.head_dim = d
    rotation.eps = _EPS.get(graph.elem_type(cos) or 1, 2.0**-24)
    caches = _Caches(graph, cos, sin)
    rotation.rows = caches.rows_if_stored()
    interleaved = bool(attrs.get("rotary_interleaved", 0))
    real = _single_node(node, heads, kv_heads, d, graph.elem_type(node.input[0]) or TensorProto.FLOAT, packed)

    def matrices(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        last = int(positions.max())
        c, s = caches(last + 1)  # the caches of a call of that length (LongRoPE's If chooses by it)
        if last >= c.shape[0]:
            raise ValueError(f"position {last} is past the {c.shape[0]} rows of its cos_cache")
        read = _read_caches(c[positions], s[positions], d, interleaved)
        if np.array_equal(positions, np.arange(len(positions))):  # the node itself: does it rotate as read?
            try:
                ran = real(c, s, len(positions))
            except Exception as exc:  # ONNX Runtime refuses the node (its checks of the caches' shapes)
                rotation.note = f"ONNX Runtime refuses to run the node: {' '.join(str(exc).split()[-24:])}"
                return read
            worst = float(np.max(np.abs(ran - read)))
            if worst > 16 * rotation.eps * max(1.0, float(np.max(np.abs(c)))):
                raise ValueError(
                    f"the node does not rotate by its caches as ONNX Runtime documents them (differs by {worst:.2g})"
                )
        return read

    rotation.matrices = matrices
    return rotation


def _read_caches(cos: npt.NDArray[Any], sin: npt.NDArray[Any], d: int, interleaved: bool) -> npt.NDArray[np.float64]:
    """The matrices of ONNX Runtime's rotary with caches ``(S, r/2)`` read at each position."""
    s, half = cos.shape
    first = 2 * np.arange(half) if interleaved else np.arange(half)
    second = first + (1 if interleaved else half)
    out = np.broadcast_to(np.eye(d), (s, d, d)).copy()
    c, n = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    out[:, first, first] = c
    out[:, second, second] = c
    out[:, second, first] = n
    out[:, first, second] = -n
    return out


class _Caches:
    """The ``cos_cache`` and ``sin_cache`` an attention node reads in a call of a given total length."""

    def __init__(self, graph: Graph, cos: str, sin: str) -> None:
        self.graph, self.cos, self.sin = graph, cos, sin
        self.stored = graph.is_constant(cos) and graph.is_constant(sin)
        self._fixed: tuple[npt.NDArray[Any], npt.NDArray[Any]] | None = None
        self._model: onnx.ModelProto | None = None
        self._runs: dict[bool, tuple[npt.NDArray[Any], npt.NDArray[Any]]] = {}

    def rows_if_stored(self) -> int | None:
        dims = self.graph.shape(self.cos) if self.stored else None
        return dims[0] if dims and isinstance(dims[0], int) else None

    def __call__(self, total: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        if self.stored:
            if self._fixed is None:
                c, s = (self.graph.constant(n) for n in (self.cos, self.sin))
                assert c is not None and s is not None
                self._fixed = (np.asarray(c, np.float64), np.asarray(s, np.float64))
            return self._fixed
        if self._model is None:
            self._model = _table_model(self.graph, [self.cos, self.sin])
        past = max(total - 8, 0)
        names = {i.name for i in self._model.graph.input}
        feed = sample_inputs(self.graph, past=past, names=names)
        sess = session(self._model, threads=1)
        c, s = sess.run([self.cos, self.sin], {k: v for k, v in feed.items() if k in names})
        return np.asarray(c, np.float64), np.asarray(s, np.float64)


def _table_model(graph: Graph, outputs: list[str]) -> onnx.ModelProto:
    """The nodes computing ``outputs`` from the model's inputs, as a model (subgraphs' outer reads included)."""
    keep: set[int] = set()
    stack, seen = list(outputs), set()
    while stack:
        v = stack.pop()
        if v in seen or not v:
            continue
        seen.add(v)
        node = graph.producer.get(v)
        if node is None:
            continue
        keep.add(id(node))
        stack.extend(reads(node))
    nodes = [n for n in graph.nodes if id(n) in keep]
    used = {i for n in nodes for i in reads(n)}
    inputs = [i for i in graph.model.graph.input if i.name in used and i.name in graph.inputs]
    inits = [inlined(t, graph.folder) for name, t in graph.initializers.items() if name in used]
    outs = [helper.make_tensor_value_info(o, graph.elem_type(o) or TensorProto.FLOAT, None) for o in outputs]
    g = helper.make_graph(nodes, "tables", inputs, outs, inits)
    m = graph.model
    return helper.make_model(g, opset_imports=list(m.opset_import), ir_version=m.ir_version)


def _single_node(
    node: NodeProto, heads: int, kv_heads: int, d: int, elem: int, packed: bool
) -> Callable[[npt.NDArray[Any], npt.NDArray[Any], int], npt.NDArray[np.float64]]:
    """``run(cos, sin, S)``: the node alone on unit keys at positions ``0 .. S-1``, its present keys as matrices
    (queries, keys and values ``packed`` in one input as the model's node takes them, or separate)."""
    floats = TensorProto.FLOAT if elem not in (TensorProto.FLOAT16,) else TensorProto.FLOAT16
    dt = np.float16 if floats == TensorProto.FLOAT16 else np.float32
    attrs = [a for a in node.attribute if a.name in _ROTATION_ATTRIBUTES]  # windows, softcaps: not the rotation
    qkv = ["qkv", "", ""] if packed else ["query", "key", "value"]
    names = [*qkv, "past_key", "past_value", "seqlens_k", "total_length", "cos", "sin"]
    gqa = helper.make_node("GroupQueryAttention", names, ["out", "present_key", "present_value"], domain=MS_DOMAIN)
    gqa.attribute.extend(attrs)
    widths = {"qkv": (heads + 2 * kv_heads) * d} if packed else {"query": heads * d, "key": kv_heads * d}
    widths |= {} if packed else {"value": kv_heads * d}
    inputs = [
        *(helper.make_tensor_value_info(n, floats, ["B", "S", w]) for n, w in widths.items()),
        helper.make_tensor_value_info("past_key", floats, ["B", kv_heads, "P", d]),
        helper.make_tensor_value_info("past_value", floats, ["B", kv_heads, "P", d]),
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
        helper.make_tensor_value_info("total_length", TensorProto.INT32, []),
        helper.make_tensor_value_info("cos", floats, ["R", "H"]),
        helper.make_tensor_value_info("sin", floats, ["R", "H"]),
    ]
    outputs = [helper.make_tensor_value_info(n, floats, None) for n in ("out", "present_key", "present_value")]
    graph = helper.make_graph([gqa], "gqa", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = 8
    holder: list[Any] = []

    def run(cos: npt.NDArray[Any], sin: npt.NDArray[Any], s: int) -> npt.NDArray[np.float64]:
        if not holder:
            holder.append(session(model, threads=1))
        feed: dict[str, npt.NDArray[Any]] = {n: np.zeros((d, s, w), dt) for n, w in widths.items()}
        key, first = ("qkv", heads * d) if packed else ("key", 0)
        for j in range(d):
            feed[key][j, :, first + j] = 1.0  # key head 0 of batch row j is e_j
        feed |= {
            "past_key": np.zeros((d, kv_heads, 0, d), dt),
            "past_value": np.zeros((d, kv_heads, 0, d), dt),
            "seqlens_k": np.full(d, s - 1, np.int32),
            "total_length": np.array(s, np.int32),
            "cos": cos.astype(dt),
            "sin": sin.astype(dt),
        }
        present = np.asarray(holder[0].run(["present_key"], feed)[0], np.float64)  # (d, kv, S, d)
        return np.transpose(present[:, 0], (1, 2, 0))

    return run
