"""Finding rotary applications in an ONNX graph, by structure: where each one starts, ends and reads.

A rotation is ``y = x * C + R(x) * S`` (an Add of two Muls, operands in any order),
where ``R(x)`` only moves, splits, joins and negates features of ``x`` (Slice,
Split, Neg, Concat, Unsqueeze, Reshape..., or a MatMul by a constant signed
permutation: ``rotate_half`` and ``rotate_every_two`` as exporters and arrayrope's
portable graph write them), and the tables ``C`` and ``S`` do not depend on the
values of ``x``; or ``y = Concat(a * C - b * S, b * C + a * S)`` with ``a`` and ``b``
two parts of ``x`` (the even and odd features of DeepSeek's MLA with ``rope_interleave``,
whose output is in half-split order). When ``x`` is a leading Slice of a head whose rest is
concatenated back after ``y`` (partial rotary), the rotation spans the whole
head. An existing ``RotaryEmbedding`` node (standard or ``com.microsoft``) is a
rotation too. The positions are the integer tensor that the tables are computed
from (through a Cast to float or as Gather indices), followed back through
reshapes to where it has rank 1 or 2.

Structure only proposes: what the rotation computes (layout, rotary dim,
frequencies) is measured by running it (:mod:`._fuse_probe`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
import onnx
from onnx import NodeProto, TensorProto, external_data_helper, numpy_helper

from .._graph import inlined
from ..build._spec import MS_DOMAIN

#: Ops that move, split, join or negate features without other arithmetic (R and partial rotary).
_MOVES = frozenset(
    {
        "Slice",
        "Split",
        "Neg",
        "Concat",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Identity",
        "Transpose",
        "Expand",
        "Flatten",
        "Gather",
    }
)
#: Integer ops that only reshape the positions on their way to the tables (data input first), or guard them
#: (Clip and Mod: the id guard of arrayrope's own graphs, which send ids outside the tables to a NaN row).
_INT_VIEWS = frozenset(
    {"Unsqueeze", "Squeeze", "Reshape", "Expand", "Tile", "Identity", "Cast", "Flatten", "Clip", "Mod"}
)
_INTS = frozenset({TensorProto.INT64, TensorProto.INT32})
#: Integer ops by constants that make the digits of position ids (the exact tables' indices), from the ids.
_DIGIT_OPS = frozenset({"Div", "Mod", "Abs", "Clip"})
_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})


class Graph:
    """A read-only index of a model's main graph: producers, consumers, constants and inferred types."""

    def __init__(self, model: onnx.ModelProto, folder: str | None = None) -> None:
        self.model = model
        self.folder = folder  # where initializers stored in external data files are read from
        g = model.graph
        self.nodes = list(g.node)
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.consumers: dict[str, list[NodeProto]] = {}
        for n in self.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.initializers = {t.name: t for t in g.initializer}
        self.inputs = {i.name for i in g.input} - set(self.initializers)
        self.outputs = {o.name for o in g.output}
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception:  # unknown ops: what the model declares
            inferred = model
        ig = inferred.graph
        self.types = {v.name: v.type.tensor_type for v in [*ig.input, *ig.value_info, *ig.output]}

    def constant(self, name: str) -> npt.NDArray[np.generic] | None:
        """The value of an initializer or a Constant node's output, else None (one stored in an external data
        file is read from it)."""
        if name in self.initializers:
            return numpy_helper.to_array(inlined(self.initializers[name], self.folder))
        if self.is_constant(name):
            return numpy_helper.to_array(self.producer[name].attribute[0].t)
        return None

    def is_constant(self, name: str) -> bool:
        """Whether :meth:`constant` has a value for ``name`` (nothing is read)."""
        if name in self.initializers:
            return True
        node = self.producer.get(name)
        return (
            node is not None
            and node.op_type == "Constant"
            and bool(node.attribute)
            and node.attribute[0].name == "value"
        )

    def external(self, name: str) -> bool:
        """Whether ``name`` is an initializer whose data is in an external data file."""
        t = self.initializers.get(name)
        return t is not None and self.folder is not None and external_data_helper.uses_external_data(t)

    def elem_type(self, name: str) -> int | None:
        if name in self.initializers:
            return int(self.initializers[name].data_type)
        t = self.types.get(name)
        return int(t.elem_type) if t is not None and t.elem_type else None

    def shape(self, name: str) -> list[int | str | None] | None:
        """Dims (int, symbol or None) where inference knows the rank, else None."""
        if name in self.initializers:
            return list(self.initializers[name].dims)
        t = self.types.get(name)
        if t is None or not t.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]

    def data_inputs(self, node: NodeProto) -> list[str]:
        """Inputs that carry data rather than shapes, indices or axes (the first, for views)."""
        if node.op_type in _INT_VIEWS | {"Slice", "Split", "Gather", "Transpose", "Flatten"} or self.permutes(node):
            return [node.input[0]] if node.input else []
        return [i for i in node.input if i]

    def walk(self, start: str, follow: Callable[[str, NodeProto | None], Iterable[str]]) -> Iterator[str]:
        """Non-constant tensors reached from ``start`` back through their producers, each once;
        ``follow(tensor, producer)`` gives the tensors to visit next."""
        stack, seen = [start], set()
        while stack:
            v = stack.pop()
            if v in seen or not v or self.is_constant(v):
                continue
            seen.add(v)
            yield v
            stack.extend(follow(v, self.producer.get(v)))

    def leaves(self, name: str, through: frozenset[str], stop: str) -> set[str]:
        """Non-constant tensors that ``name`` is computed from by data paths through ops in ``through``,
        not looking past ``stop``."""
        out: set[str] = set()

        def follow(v: str, node: NodeProto | None) -> list[str]:
            if v == stop or node is None or not (node.op_type in through or self.permutes(node)):
                out.add(v)
                return []
            return self.data_inputs(node)

        for _ in self.walk(name, follow):
            pass
        return out

    def permutes(self, node: NodeProto) -> bool:
        """Whether ``node`` is a MatMul by a constant signed permutation (a swap of features written as a product)."""
        if node.op_type != "MatMul" or len(node.input) != 2:
            return False
        dims = self.shape(node.input[1]) if self.external(node.input[1]) else None
        if dims is not None and (
            len(dims) != 2 or dims[0] != dims[1] or not isinstance(dims[0], int) or dims[0] > 1024
        ):
            return False  # a weight read from its file only where it is small and square, as permutations are
        m = self.constant(node.input[1])
        if m is None or m.ndim != 2 or m.shape[0] != m.shape[1]:
            return False
        nonzero = m != 0
        return bool(np.all(np.isin(m, (-1, 0, 1))) and np.all(nonzero.sum(0) == 1) and np.all(nonzero.sum(1) == 1))

    def values_from_inputs(self, name: str) -> bool:
        """Whether the values of ``name`` depend on those of a graph input (not only on shapes and constants)."""

        def follow(v: str, node: NodeProto | None) -> Iterable[str]:
            return [] if node is None or node.op_type in ("Shape", "Size") else node.input

        return any(v in self.inputs for v in self.walk(name, follow))

    def depends_on(self, name: str, target: str) -> bool:
        """Whether the values of ``name`` depend on those of ``target`` (shapes do not count)."""

        def follow(v: str, node: NodeProto | None) -> Iterable[str]:
            return [] if node is None or node.op_type in ("Shape", "Size") else node.input

        return any(v == target for v in self.walk(name, follow))


@dataclasses.dataclass(frozen=True)
class Site:
    """One rotary application found in the graph.

    ``x`` is rotated into ``output``; ``cos`` and ``sin`` are the tables it reads
    (broadcast against ``x``), ``positions`` the integer tensor they are made from
    (None where none was found) and ``node`` an existing fused node, if any.
    """

    x: str
    output: str
    cos: str
    sin: str
    positions: str | None
    node: NodeProto | None = None
    #: a two-part rotation inside a Concat: the Concat's other inputs before and after it, and its two parts
    parts: tuple[tuple[str, ...], tuple[str, ...], str, str] | None = None

    @property
    def rotated(self) -> str:
        """The tensor a fused node writes: the output, or for a two-part rotation a name for its rotated part."""
        return self.output if self.parts is None else self.output + "/arrayrope_rotated_part"


#: Attention ops of ONNX Runtime that rotate queries and keys themselves when ``do_rotary`` is set.
ROTATING_ATTENTION = ("GroupQueryAttention", "MultiHeadAttention", "PackedMultiHeadAttention", "SparseAttention")


def internal_rotations(model: onnx.ModelProto) -> dict[str, int]:
    """How many attention nodes of each kind rotate inside (``do_rotary=1``), in the main graph and subgraphs."""
    found: dict[str, int] = {}

    def visit(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            rotary = any(a.name == "do_rotary" and a.i == 1 for a in node.attribute)
            if rotary and node.domain == MS_DOMAIN and node.op_type in ROTATING_ATTENTION:
                found[node.op_type] = found.get(node.op_type, 0) + 1
            for a in node.attribute:
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    visit(sub)

    visit(model.graph)
    return found


def find_sites(graph: Graph) -> list[Site]:
    """Every rotary application in the graph, in graph order."""
    sites = []
    inside: set[str] = set()  # the Add of a two-part rotation is no rotation of its own
    for node in graph.nodes:
        if node.op_type == "Concat" and len(node.input) >= 2:
            for k in range(len(node.input) - 1):
                found = _two_parts(graph, node, k)
                if found is not None:
                    sites.append(found)
                    inside.add(node.input[k + 1])
    for node in graph.nodes:
        found = _existing(graph, node) if node.op_type == "RotaryEmbedding" else None
        if found is None and node.op_type == "Add" and len(node.input) == 2 and node.output[0] not in inside:
            found = _rotation(graph, node)
        if found is not None:
            sites.append(found)
    order = {n.output[0]: i for i, n in enumerate(graph.nodes) if n.output}
    return sorted(sites, key=lambda s: order.get(s.output, len(order)))


def _existing(graph: Graph, node: NodeProto) -> Site | None:
    if node.domain not in ("", "ai.onnx", MS_DOMAIN) or len(node.input) < 3:
        return None
    if node.domain == MS_DOMAIN:
        x, pos, cos, sin = node.input[:4]
    else:
        x, cos, sin = node.input[:3]
        pos = node.input[3] if len(node.input) > 3 and node.input[3] else None
    head, out = _whole_head(graph, x, node.output[0])
    return Site(head, out, cos, sin, pos or positions_of(graph, cos), node)


def _mul_operands(graph: Graph, name: str) -> tuple[str, str] | None:
    node = graph.producer.get(name)
    if node is None or node.op_type != "Mul" or len(node.input) != 2:
        return None
    return node.input[0], node.input[1]


def _rotation(graph: Graph, add: NodeProto) -> Site | None:
    """``add`` as ``x * C + R(x) * S`` (any order), extended over a partial-rotary split; or None."""
    a, b = (_mul_operands(graph, i) for i in add.input)
    if a is None or b is None:
        return None
    for x_c, r_s in ((a, b), (b, a)):
        for x, cos in (x_c, x_c[::-1]):
            for rot, sin in (r_s, r_s[::-1]):
                if rot == x or graph.is_constant(x) or graph.leaves(rot, _MOVES, x) != {x}:
                    continue
                if graph.depends_on(cos, x) or graph.depends_on(sin, x) or not _floating(graph, x):
                    continue
                full, out = _whole_head(graph, x, add.output[0])
                return Site(full, out, cos, sin, positions_of(graph, cos) or positions_of(graph, sin))
    return None


def _two_parts(graph: Graph, concat: NodeProto, k: int) -> Site | None:
    """Inputs ``k``, ``k + 1`` of a Concat on the last axis as ``a * C - b * S``, ``b * C + a * S``, ``a`` and ``b``
    moved out of one ``x`` (the other inputs pass through, as MLA's ``q_pass`` does); or None."""
    axis = next((a.i for a in concat.attribute if a.name == "axis"), None)
    rank = graph.shape(concat.output[0])
    if axis is None or not (axis == -1 or (rank is not None and axis == len(rank) - 1)):
        return None
    first, second = (graph.producer.get(i) for i in concat.input[k : k + 2])
    if first is None or second is None or first.op_type != "Sub" or second.op_type != "Add":
        return None
    pos_a, neg_b = (_mul_operands(graph, i) for i in first.input)
    pos_b, pos_a2 = (_mul_operands(graph, i) for i in second.input)
    if None in (pos_a, neg_b, pos_b, pos_a2):
        return None
    assert pos_a and neg_b and pos_b and pos_a2
    for a, cos in (pos_a, pos_a[::-1]):
        for b, sin in (neg_b, neg_b[::-1]):
            if a == b or set(pos_b) != {b, cos} or set(pos_a2) != {a, sin}:
                continue
            x = _common_source(graph, a, b)
            if x is None:
                continue
            if graph.is_constant(x) or graph.depends_on(cos, x) or graph.depends_on(sin, x):
                continue
            if not _floating(graph, x):
                continue
            parts = (tuple(concat.input[:k]), tuple(concat.input[k + 2 :]), concat.input[k], concat.input[k + 1])
            return Site(
                x, concat.output[0], cos, sin, positions_of(graph, cos) or positions_of(graph, sin), parts=parts
            )
    return None


def _chain(graph: Graph, name: str) -> list[str]:
    """``name`` and the tensors it is moved out of (first data input of each move), nearest first."""
    out = [name]
    node = graph.producer.get(name)
    while node is not None and node.op_type in _MOVES and node.op_type != "Concat" and node.input:
        out.append(node.input[0])
        node = graph.producer.get(node.input[0])
    return out


def _common_source(graph: Graph, a: str, b: str) -> str | None:
    """The nearest tensor both ``a`` and ``b`` are moved out of (the rotated head), or None."""
    theirs = _chain(graph, b)
    return next((v for v in _chain(graph, a)[1:] if v in theirs[1:]), None)


def _floating(graph: Graph, name: str) -> bool:
    t = graph.elem_type(name)
    return t is None or t in _FLOATS


def _whole_head(graph: Graph, x: str, y: str) -> tuple[str, str]:
    """``(head, output)``: for ``x = head[..., :r]`` whose ``y`` is joined with ``head[..., r:]``, the whole head."""
    sliced = graph.producer.get(x)
    users = graph.consumers.get(y, [])
    if sliced is None or sliced.op_type != "Slice" or len(users) != 1 or users[0].op_type != "Concat":
        return x, y
    concat = users[0]
    if len(concat.input) != 2 or concat.input[0] != y:
        return x, y
    rest = graph.producer.get(concat.input[1])
    if rest is None or rest.op_type != "Slice" or rest.input[0] != sliced.input[0]:
        return x, y
    return sliced.input[0], concat.output[0]


def positions_of(graph: Graph, table: str) -> str | None:
    """The integer tensor a table is computed from: a Cast to float's input or a Gather's indices, traced back.

    Where some of these come from the model's inputs and others only from shapes (GLM's ``repeat_interleave``
    of the tables, a Gather by indices made from a Range), the ones from the inputs are the positions.
    """
    found = set(_integer_sources(graph, table))
    from_inputs = {name for name in found if graph.values_from_inputs(name)}
    roots = {_root(graph, name) for name in from_inputs or found}
    return roots.pop() if len(roots) == 1 else None


def _integer_sources(graph: Graph, table: str) -> list[str]:
    found: list[str] = []

    def follow(v: str, node: NodeProto | None) -> Iterable[str]:
        if node is None or node.op_type in ("Shape", "Size"):
            return []
        if node.op_type == "Cast" and graph.elem_type(node.input[0]) in _INTS:
            found.append(node.input[0])
            return []
        if node.op_type in ("Gather", "GatherElements", "GatherND") and graph.elem_type(node.input[1]) in _INTS:
            found.append(node.input[1])
            return [node.input[0]]
        return graph.data_inputs(node)

    for _ in graph.walk(table, follow):
        pass
    return found


def _root(graph: Graph, name: str) -> str:
    """Back through integer views to the first tensor of rank 1 or 2 (the position ids), and through the digits
    that exact tables are read by (``Mod`` and ``Div`` by constants of ``Abs`` or ``Clip`` of the ids)."""
    current = name
    while True:
        shape = graph.shape(current)
        node = graph.producer.get(current)
        digits = node is not None and node.op_type in _DIGIT_OPS and all(graph.is_constant(i) for i in node.input[1:])
        if shape is not None and len(shape) <= 2 and not digits:
            return current
        views = _INT_VIEWS | _DIGIT_OPS if digits else _INT_VIEWS
        if node is None or node.op_type not in views or graph.elem_type(node.input[0]) not in _INTS:
            return current
        current = node.input[0]


def site_nodes(graph: Graph, site: Site, stop: Sequence[str]) -> tuple[list[NodeProto], dict[str, str]]:
    """The nodes computing ``site.output`` from ``stop`` tensors and constants, in graph order, and stand-ins.

    Exporters take symbolic sizes from whichever tensor has them, so a rotation may
    read the shape of a tensor from elsewhere (an attention mask): where that tensor
    has the known shape of a ``stop`` tensor, the stand-ins map it to that one.
    Raises ValueError naming the other tensors whose values the output needs.
    """
    keep: set[int] = set()
    missing: set[str] = set()
    standins: dict[str, str] = {}
    stack = [(site.output, False)] if site.parts is None else [(site.parts[2], False), (site.parts[3], False)]
    seen: set[tuple[str, bool]] = set()
    while stack:
        v, size_only = stack.pop()
        if (v, size_only) in seen or v in stop or not v:
            continue
        seen.add((v, size_only))
        like = _same_shape(graph, v, stop) if size_only else None
        if like is not None:
            standins[v] = like
            continue
        node = graph.producer.get(v)
        if node is None:
            if v not in graph.initializers:
                missing.add(v)
            continue
        keep.add(id(node))
        stack.extend((i, node.op_type in ("Shape", "Size")) for i in node.input)
    if missing:
        raise ValueError(f"its tables also read {sorted(missing)}, not only the positions")
    return [n for n in graph.nodes if id(n) in keep], standins


def _same_shape(graph: Graph, name: str, candidates: Sequence[str]) -> str | None:
    """The candidate whose fully known shape (sizes or symbols) is that of ``name``."""
    shape = graph.shape(name)
    if not shape or any(d is None for d in shape):
        return None
    return next((c for c in candidates if graph.shape(c) == shape), None)
