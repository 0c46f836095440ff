"""Measuring rotary applications found in a graph by running them on ONNX Runtime.

The whole model runs once on sample inputs (given, or made from its input types)
to learn the actual shapes of each rotated tensor and its tables. Each rotation is
then cut out as a model of its own, ``(x, positions) -> y``, and probed with unit
vectors by :func:`arrayrope.testing.identify_rope`, which reads off the layout, the
rotary dim, the frequencies and the attention factor, and checks them on random
inputs. A fusion is kept only when the fused cut-out computes what the original
one does (:func:`compare`).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

import arrayrope
from arrayrope._identify import RopeConvention, identify_rope
from arrayrope._lib import checks
from arrayrope.frequencies import RopeFrequencies

from .._graph import inlined
from ._match import Graph, Site, site_nodes

Feed = dict[str, npt.NDArray[Any]]

_PROTOBUF_LIMIT = 2**31 - 1
#: ONNX Runtime's session option: the folder of the external data files of a model passed as bytes.
_EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"
#: Sizes given to symbolic dimensions of sample inputs: the first axis (batch), the others (sequence), and
#: the cached tokens of a decoder that takes past keys and values.
SAMPLE_BATCH, SAMPLE_SEQ, SAMPLE_PAST = 2, 8, 5

_NUMPY = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
    TensorProto.BOOL: np.bool_,
}
#: NumPy dtypes of ONNX Runtime's type strings.
_NUMPY_OF = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def session(
    model: onnx.ModelProto,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    folder: str | None = None,
    threads: int | None = None,
) -> Any:
    """An ONNX Runtime session of ``model`` with graph optimisations on, silent: probes run positions past a
    model's stored tables on purpose and read the errors as exceptions, which ONNX Runtime would also print
    (models over protobuf's 2 GB are passed through a temporary file with their tensors beside it). A model
    whose initializers refer to external data files in ``folder`` is passed without them: ONNX Runtime reads
    them from there itself. ``threads`` sets ONNX Runtime's threads (a probe of a few kilobytes runs fastest on
    one, and a session's pool of threads costs milliseconds to start and to stop)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # fatal only: every error reaches the caller as an exception
    if threads is not None:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = threads
    if folder is not None:
        opts.add_session_config_entry(_EXTERNAL_FOLDER, folder)
        return ort.InferenceSession(model.SerializeToString(), opts, providers=list(providers))
    if model.ByteSize() < _PROTOBUF_LIMIT:
        return ort.InferenceSession(model.SerializeToString(), opts, providers=list(providers))
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # saving with external data rewrites the tensors it moves out
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save_model(copy, path, save_as_external_data=True, location="model.data")
        return ort.InferenceSession(path, opts, providers=list(providers))


def sample_inputs(graph: Graph, seed: int = 0, past: int | None = None, names: Collection[str] | None = None) -> Feed:
    """Inputs for a run of the whole model, from its declared input names, types and shapes.

    A decoder export with a key/value cache gets consistent inputs: ``SAMPLE_BATCH`` rows of ``SAMPLE_SEQ``
    new tokens after ``SAMPLE_PAST`` cached ones (past key/values of that length, an attention mask of ones
    over all ``past + seq`` positions, position ids ``past .. past + seq - 1``). Symbolic dimensions are sized
    by their names (:func:`_dim_size`: batch, past, total, sequence, and sums of them such as
    ``past_sequence_length + sequence_length``). ``logits_to_keep``, which transformers reads as the
    indices of the positions whose logits are kept, keeps the last ones (all, where it holds as many);
    other integer inputs (token ids) stay below the rows of every table they index. ``past`` sets the
    cached tokens of a decoder (positions from ``past`` on); ``names``, where
    given, are the only inputs made.
    """
    rng = np.random.default_rng(seed)
    feed: Feed = {}
    inputs = [v for v in graph.model.graph.input if v.name in graph.inputs]
    if not any("past" in v.name.lower() for v in inputs):
        past = 0
    elif past is None:
        past = SAMPLE_PAST
    for value in inputs:
        if names is not None and value.name not in names:
            continue
        t = value.type.tensor_type
        dims = [
            d.dim_value if d.HasField("dim_value") else _dim_size(d.dim_param, i, value.name, past, len(t.shape.dim))
            for i, d in enumerate(t.shape.dim)
        ]
        dtype = _NUMPY.get(t.elem_type)
        if t.elem_type == onnx.TensorProto.BFLOAT16:
            raise ValueError(
                f"input {value.name!r} is bfloat16, and a bfloat16 model cannot be probed: ONNX Runtime's Python API "
                "takes no bfloat16 arrays and its CPU provider has no bfloat16 kernels for the arithmetic (Mul, "
                "Add); use the float16 or float32 export of the same model, whose rotations are the same"
            )
        if dtype is None:
            raise ValueError(f"input {value.name!r} has an element type sample inputs cannot be made for; pass inputs=")
        name = value.name.lower()
        if np.dtype(dtype).kind == "f":
            feed[value.name] = rng.standard_normal(dims).astype(dtype)
        elif np.dtype(dtype).kind == "b" or "mask" in name:
            feed[value.name] = np.ones(dims, dtype=dtype)
        elif "logits_to_keep" in name:  # a tensor is read as the indices of the positions kept: all, else the last
            count = int(np.prod(dims))
            feed[value.name] = np.arange(SAMPLE_SEQ - count, SAMPLE_SEQ).clip(0).reshape(dims).astype(dtype)
        elif "position" in name:
            start = past if dims and dims[-1] == SAMPLE_SEQ else 0
            feed[value.name] = np.broadcast_to(start + np.arange(dims[-1] if dims else 1), dims).astype(dtype)
        else:
            feed[value.name] = rng.integers(0, _index_bound(graph, value.name), dims).astype(dtype)
    return feed


def _dim_size(param: str, axis: int, name: str, past: int, rank: int = 2) -> int:
    """The size of a symbolic dimension of input ``name``: by its name where it says what it counts (batch,
    past, total, sequence and sums of these), else ``SAMPLE_BATCH`` on the batch axis (the first; of position ids,
    the one before the sequence, as M-RoPE's ``(axes, batch, seq)``) and ``SAMPLE_SEQ``."""
    sizes = {"batch": SAMPLE_BATCH, "past": past, "total": past + SAMPLE_SEQ, "seq": SAMPLE_SEQ}

    def size(word: str) -> int | None:
        word = word.strip().lower()
        return next((v for k, v in sizes.items() if k in word), None)

    terms = [size(term) for term in param.split("+")] if param else [None]
    if param and all(v is not None for v in terms):
        return sum(v for v in terms if v is not None)
    if "mask" in name.lower() and axis == 1:  # the mask of a decoder covers the cached and the new tokens
        return past + SAMPLE_SEQ
    ids = "position" in name.lower()
    if ids and rank == 3 and axis == 0:  # M-RoPE ids (axes, batch, seq): Qwen-VL's three axes
        return 3
    batch = rank - 2 if ids and rank >= 2 else 0
    return SAMPLE_BATCH if axis == batch else SAMPLE_SEQ


def _index_bound(graph: Graph, name: str) -> int:
    """The fewest rows among the tables that ``name`` indexes directly (Gather data), else 2."""
    rows = [
        graph.shape(n.input[0])
        for n in graph.consumers.get(name, [])
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name
    ]
    sizes = [r[0] for r in rows if r and isinstance(r[0], int) and r[0] > 0]
    return min(sizes, default=2)


def run(
    model: onnx.ModelProto,
    feed: Mapping[str, npt.NDArray[Any]],
    extra: Sequence[str] = (),
    providers: Sequence[str] = ("CPUExecutionProvider",),
    folder: str | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """The model's outputs, and the inner tensors ``extra``, by name (external data read from ``folder``)."""
    if extra:
        model = _with_outputs(model, extra)
    sess = session(model, providers, folder)
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feed.items() if k in wanted}), strict=True))


def _with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    out.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in dict.fromkeys(names) if n not in have)
    return out


@dataclasses.dataclass(frozen=True)
class Shapes:
    """What one run of the whole model showed of a rotation: ``x``'s shape, its axes and its heads."""

    x: tuple[int, ...]
    axes: str  # "bhsd", or "bshd" where the tables broadcast over axis 2
    positions_rank: int
    position_axes: int = 0  # M-RoPE: the leading axes of its (axes, batch, seq) position ids; 0 for one per token

    @property
    def heads(self) -> int:
        return self.x[1] if self.axes == "bhsd" else self.x[2]

    @property
    def head_dim(self) -> int:
        return self.x[-1]


def shapes(site: Site, seen: Mapping[str, npt.NDArray[Any]]) -> Shapes:
    """Axes and sizes of a rotation from the tensors of a run (ValueError where it cannot be fused)."""
    x, cos = seen[site.x], seen[site.cos]
    if x.ndim != 4:
        raise ValueError(f"it rotates a {x.ndim}-D tensor; fused nodes here take 4-D (batch, heads, seq, head_dim)")
    axes = "bhsd"
    if site.node is None and cos.ndim == 4 and cos.shape[2] == 1 and cos.shape[1] != 1:
        axes = "bshd"
    rank = seen[site.positions].ndim if site.positions else 0
    if rank not in (1, 2, 3):
        raise ValueError("no integer positions were found that its tables are computed from")
    # rank 3: M-RoPE's (axes, batch, seq), a position per axis of each token
    position_axes = int(seen[site.positions].shape[0]) if rank == 3 and site.positions else 0
    return Shapes(tuple(int(d) for d in x.shape), axes, rank, position_axes)


@dataclasses.dataclass(frozen=True)
class Cut:
    """A rotation cut out of the graph as a model ``(x, positions, stand-ins) -> y`` (names as in the graph).

    ``standins`` maps each tensor whose size (only) the rotation reads to the input
    of the same shape that stands in for it: ``"x"`` or ``"positions"``.
    """

    model: onnx.ModelProto
    site: Site
    shape: Shapes
    standins: dict[str, str]


def cut(graph: Graph, site: Site, shape: Shapes) -> Cut:
    """The rotation as a model of its own; ValueError where it reads more than ``x`` and the positions."""
    stops = [site.x] + ([site.positions] if site.positions else [])
    nodes, sized = site_nodes(graph, site, stops)
    if site.parts is not None:  # a two-part rotation: its parts joined, without what the Concat adds around them
        nodes = [*nodes, helper.make_node("Concat", [site.parts[2], site.parts[3]], [site.rotated], axis=-1)]
    standins = {name: "x" if like == site.x else "positions" for name, like in sized.items()}
    used = {i for n in nodes for i in n.input}
    inits = [inlined(t, graph.folder) for name, t in graph.initializers.items() if name in used]
    x_type = graph.elem_type(site.x) or TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(site.x, x_type, [f"x{i}" for i in range(4)])]
    if site.positions:
        pos_type = graph.elem_type(site.positions) or TensorProto.INT64
        dims = [f"p{i}" for i in range(shape.positions_rank)]
        inputs.append(helper.make_tensor_value_info(site.positions, pos_type, dims))
    for name, like in standins.items():
        rank = 4 if like == "x" else shape.positions_rank
        inputs.append(helper.make_tensor_value_info(name, graph.elem_type(name) or TensorProto.INT64, [None] * rank))
    g = helper.make_graph(nodes, "rotation", inputs, [helper.make_tensor_value_info(site.rotated, x_type, None)], inits)
    m = graph.model
    model = helper.make_model(
        g, opset_imports=list(m.opset_import), ir_version=m.ir_version, functions=list(m.functions)
    )
    return Cut(model, site, shape, standins)


class SiteRunner:
    """``fn(x, positions)`` for :func:`identify_rope` on a cut: probes ``(1, P, S, D)`` as a batch of P, every head."""

    def __init__(self, piece: Cut, model: onnx.ModelProto | None = None) -> None:
        self.piece = piece
        self.sess = session(piece.model if model is None else model, threads=1)
        self.inputs = {i.name: i.type for i in self.sess.get_inputs()}
        self.shape_out: tuple[int, ...] = ()  # of the last run, every head

    @property
    def shape(self) -> Shapes:
        return self.piece.shape

    def __call__(self, x: npt.NDArray[Any], positions: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        probes = np.asarray(x)[0]  # (P, S, D); positions (S,), or (axes, S) for M-RoPE
        p, s, _ = probes.shape
        site, shape = self.piece.site, self.piece.shape
        head_axis = 1 if shape.axes == "bhsd" else 2
        batch = np.repeat(np.expand_dims(probes, head_axis), shape.heads, axis=head_axis)
        feed: Feed = {site.x: batch.astype(_NUMPY_OF[self.inputs[site.x]])}
        pos = positions.astype(np.int64)
        if shape.position_axes:  # M-RoPE ids (axes, batch, seq): one position per token is every axis's
            pos = np.broadcast_to(pos[..., None, :], (shape.position_axes, p, s)).copy()
        elif shape.positions_rank == 2:
            pos = np.broadcast_to(pos, (p, s)).copy()
        if site.positions:
            feed[site.positions] = pos.astype(_NUMPY_OF[self.inputs[site.positions]])
        for name, like in self.piece.standins.items():
            if name in self.inputs:
                feed[name] = np.zeros((batch if like == "x" else pos).shape, _NUMPY_OF[self.inputs[name]])
        y = np.asarray(self.sess.run(None, feed)[0])
        self.shape_out = tuple(y.shape)
        first: npt.NDArray[Any] = np.take(y, 0, axis=head_axis)[None]
        return first


def identify(piece: Cut, order: npt.NDArray[np.int64] | None = None, rows: int | None = None) -> RopeConvention:
    """The convention the rotation implements, measured in float32 (a half-precision cut is widened to float32:
    probes read angles far below half precision's resolution); for a rotation that writes its features in
    another ``order`` than it reads them (see :func:`output_order`), that of its input put in that order first.
    Probes stay below ``rows``, the positions its tables (or the bound asked for) cover."""
    runner: Probe = SiteRunner(piece, widened(piece.model))
    if order is not None:
        back = np.argsort(order)
        runner = reordered_input(runner, back)
    limit = {} if rows is None else {"max_position": rows - 1, "seq_len": min(rows, 32)}
    return identify_rope(runner, head_dim=piece.shape.head_dim, dtype="float32", **limit)


def output_order(piece: Cut) -> npt.NDArray[np.int64] | None:
    """Where a rotation writes a permutation of its input at position 0 (DeepSeek's MLA with ``rope_interleave``:
    the even then the odd features), the input feature each output feature holds; None where it writes them in
    place."""
    d = piece.shape.head_dim
    runner = SiteRunner(piece, widened(piece.model))
    m0 = np.asarray(runner(np.eye(d, dtype=np.float32)[None, :, None, :], np.zeros(1, np.int64)), np.float64)
    m0 = m0[0, :, 0, :].T  # column j: the output for unit vector j
    rounded = np.round(m0)
    moved = np.max(np.abs(m0 - rounded)) <= 1e-3 and np.all(np.isin(rounded, (0.0, 1.0)))
    if not (moved and np.all(rounded.sum(0) == 1) and np.all(rounded.sum(1) == 1)) or np.array_equal(
        rounded, np.eye(d)
    ):
        return None
    order: npt.NDArray[np.int64] = np.argmax(rounded, axis=1).astype(np.int64)
    return order


def reordered_input(fn: Probe, order: npt.NDArray[np.int64]) -> Probe:
    """``fn`` on inputs whose features are first put in ``order``."""

    def call(x: npt.NDArray[Any], positions: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        return fn(np.take(np.asarray(x), order, axis=-1), positions)

    return call


def reordered(fn: Probe, order: npt.NDArray[np.int64] | None) -> Probe:
    """``fn`` reading its input in ``order`` (as a fused node after a Gather does), or ``fn`` itself."""
    return fn if order is None else reordered_input(fn, order)


_HALF = {TensorProto.FLOAT16, TensorProto.BFLOAT16}


def widened(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a model computing in float32 where it computes in float16 or bfloat16 (inputs, casts, constants)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for v in [*g.input, *g.output]:
        if v.type.tensor_type.elem_type in _HALF:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    for i, t in enumerate(g.initializer):
        if t.data_type in _HALF:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    for node in g.node:
        for a in node.attribute:
            if a.name == "to" and a.i in _HALF:
                a.i = TensorProto.FLOAT
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in _HALF:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
    del g.value_info[:]
    return out


Probe = Callable[[npt.NDArray[Any], npt.NDArray[np.int64]], npt.NDArray[Any]]
"""``fn(x, positions)`` on probes ``(1, P, S, D)``, as :class:`SiteRunner` runs a cut."""


def reference(piece: Cut, freqs: RopeFrequencies, layout: str) -> Probe:
    """The core's rotation in float64, called like :class:`SiteRunner` on ``piece``."""

    def rotate(x: npt.NDArray[Any], positions: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        cos, sin = arrayrope.rope_tables(freqs, positions, dtype=np.float64)
        y = arrayrope.apply_rotary(np.asarray(x, np.float64), cos, sin, layout=checks.layout(layout))
        return np.asarray(y)

    return rotate


def compare_at(a: Probe, b: Probe, head_dim: int, positions: npt.NDArray[np.int64], seed: int = 0) -> tuple[float, int]:
    """Largest difference between two rotations on random heads at each of ``positions`` (one call each, so no call
    is longer than one position), relative to the largest input value, and the position where it is largest."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 3, 1, head_dim)).astype(np.float32)
    worst, at = 0.0, int(positions[0])
    for p in positions:
        at_p = np.array([p], np.int64)
        err = float(np.max(np.abs(np.asarray(a(x, at_p), np.float64) - np.asarray(b(x, at_p), np.float64))))
        if not err <= worst:  # NaN included
            worst, at = err, int(p)
    return worst / float(np.max(np.abs(x))), at


def compare(a: Probe, b: Probe, head_dim: int, limit: int, seed: int = 0) -> float:
    """Largest difference between two rotations on random heads at random positions below ``limit``,
    relative to the largest input value. Sequences are at most ``limit`` long: ONNX Runtime's fused
    kernels refuse a sequence longer than their caches."""
    rng = np.random.default_rng(seed)
    seq = min(13, limit)
    x = rng.standard_normal((1, 3, seq, head_dim)).astype(np.float32)
    positions = rng.integers(0, limit, seq)
    ya, yb = np.asarray(a(x, positions), np.float64), np.asarray(b(x, positions), np.float64)
    return float(np.max(np.abs(ya - yb))) / float(np.max(np.abs(x)))
