"""Public builders: a standalone model, a model-local function, and a splice into an existing graph."""

from __future__ import annotations

import os
from typing import Any, Mapping

import onnx
from onnx import TensorProto, helper

from ._graph import Builder, Rotary
from ._spec import MS_DOMAIN, META_KEY, Spec, make_spec, onnx_dtype

FUNCTION_DOMAIN = "arrayrope"


def _opset_imports(spec: Spec) -> list:
    ops = [helper.make_opsetid("", spec.opset)]
    if spec.target == "ort":
        ops.append(helper.make_opsetid(MS_DOMAIN, 1))
    return ops


def ir_version_for(opset_imports: list) -> int:
    """The oldest IR version that can hold these opsets.

    ``onnx.helper.make_model`` writes the newest IR version the installed onnx
    knows, which ONNX Runtime releases older than that onnx refuse; the oldest
    sufficient one is accepted by every runtime that implements the opsets.
    """
    return helper.find_min_ir_version_for(list(opset_imports), ignore_unknown=True)


def _io(spec: Spec) -> tuple[list, list, list[tuple[str, str, int | None]]]:
    """Graph inputs, outputs, and (input, output, heads) per rotated tensor."""
    elem = onnx_dtype(spec.dtype)
    d = spec.head_dim

    def shape(heads: int | None, sym: str) -> list:
        if spec.rank == 4:
            return ["batch", heads if heads is not None else sym, "seq", d]
        return ["batch", "seq", heads * d]

    pairs = [("q", "q_rot", spec.num_heads, "heads"), ("k", "k_rot", spec.num_kv_heads, "kv_heads")] if spec.qk else [
        ("x", "y", spec.num_heads, "heads")
    ]
    inputs = [helper.make_tensor_value_info(i, elem, shape(h, sym)) for i, _, h, sym in pairs]
    outputs = [helper.make_tensor_value_info(o, elem, shape(h, sym)) for _, o, h, sym in pairs]
    if spec.position_ids:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"]))
    return inputs, outputs, [(i, o, h) for i, o, h, _ in pairs]


def _emit(spec: Spec, b: Builder, tensors: list[tuple[str, str, int | None]], pos: str | None) -> None:
    rotary = Rotary(spec, b)
    for x, out, heads in tensors:
        rotary.apply(x, pos, out, heads)


def _doc(spec: Spec) -> str:
    return (
        f"arrayrope rotary embedding: layout={spec.layout}, target={spec.target}, head_dim={spec.head_dim}, "
        f"rotary_dim={spec.rotary_dim}, rope_type={spec.freqs.rope_type}, tables={spec.tables}, "
        f"positions < {spec.position_limit}"
    )


_SHARED_DOC = """
    freqs : RopeFrequencies or int
        Frequencies from :func:`arrayrope.rope_frequencies` (any scaling), or a
        ``head_dim`` from which they are made with ``base``, ``rotary_dim`` and ``scaling``.
    layout : {"half", "interleaved"}
        Which features pair up (see :func:`arrayrope.apply_rotary`).
    target : {"auto", "onnx23", "ort", "portable"}
        ``"onnx23"``: one standard ``RotaryEmbedding`` node (opset 23).
        ``"ort"``: ONNX Runtime's fused ``com.microsoft.RotaryEmbedding``.
        ``"portable"``: standard ops only (opset 13+), for any runtime.
        ``"auto"``: the fastest that ``opset``, ``runtime``, ``dtype`` and ``tables`` allow:
        ``"onnx23"`` at opset 23+ (or no opset), else ``"ort"`` for ONNX Runtime, else
        ``"portable"`` (also for float64 and computed tables).
    rank : {4, 3}
        Input layout: 4 is ``(batch, heads, seq, head_dim)``, 3 is ``(batch, seq, heads * head_dim)``.
    num_heads : int, optional
        Heads of ``x``/``q``; required for ``rank=3``, fixes the head axis for ``rank=4``.
    num_kv_heads : int, optional
        Heads of ``k`` with ``qk=True`` (grouped-query attention); default ``num_heads``.
    max_positions : int
        Rows of the cos/sin tables: position ids must be in ``[0, max_positions)``.
    position_ids : bool
        True: an int64 input ``position_ids`` of shape ``(batch, seq)``. False: positions ``0..seq-1``.
    tables : {"constant", "computed"}
        ``"computed"`` (portable only) builds cos/sin in the graph from the position ids,
        so positions are bounded by ``2**30`` instead of a table size.
    dtype : {"float32", "float16", "bfloat16", "float64"}
        Element type of the rotated tensors and the tables (float64: portable only).
    opset : int, optional
        Default-domain opset; default 23 for ``"onnx23"``, 17 otherwise.
    runtime : {"onnxruntime", "any"}
        Whether ONNX Runtime's contrib ops may be used by ``target="auto"``.
    base, rotary_dim, scaling
        Passed to :func:`arrayrope.rope_frequencies` when ``freqs`` is an int.
"""


def rotary_model(
    freqs: Any,
    *,
    layout: str = "half",
    target: str = "auto",
    rank: int = 4,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    max_positions: int = 4096,
    position_ids: bool = True,
    tables: str = "constant",
    dtype: str = "float32",
    opset: int | None = None,
    qk: bool = False,
    runtime: str = "onnxruntime",
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
) -> onnx.ModelProto:
    """A standalone ONNX model that applies rotary embeddings.

    Inputs ``x`` and ``position_ids``, output ``y``; with ``qk=True`` inputs ``q``,
    ``k``, ``position_ids`` and outputs ``q_rot``, ``k_rot`` sharing one pair of
    tables. Batch and sequence dimensions are dynamic.

    Parameters
    ----------%s
    qk : bool
        Rotate queries and keys in one graph.

    Returns
    -------
    onnx.ModelProto
        With the lowest IR version that holds its opsets (so that ONNX Runtime
        accepts it) and metadata ``arrayrope.rotary`` that :func:`validate` reads.

    Notes
    -----
    Position ids must lie in ``[0, max_positions)`` (``[0, 2**30)`` with computed
    tables). An id at or past the end makes the run fail with an error on every
    target: ONNX Runtime rejects it in the fused ops and in Gather, the reference
    evaluator raises IndexError. Negative ids are not positions: the fused ops
    reject them, Gather in the portable graph counts them from the table end.
    ONNX Runtime's fused ops also need ``seq <= max_positions``. The portable
    interleaved graph swaps pairs with an exact permutation MatMul, so a
    non-finite input turns its block of 16 features into NaN.

    Examples
    --------
    >>> import numpy as np, onnxruntime as ort
    >>> from arrayrope.export import rotary_model
    >>> m = rotary_model(64, target="portable", max_positions=128)
    >>> sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    >>> x = np.ones((1, 2, 3, 64), np.float32)
    >>> y, = sess.run(None, {"x": x, "position_ids": np.array([[0, 1, 2]])})
    >>> y.shape, bool(np.allclose(y[0, 0, 0], x[0, 0, 0]))
    ((1, 2, 3, 64), True)
    """
    spec = make_spec(
        freqs, layout=layout, target=target, rank=rank, num_heads=num_heads, num_kv_heads=num_kv_heads,
        max_positions=max_positions, position_ids=position_ids, tables=tables, dtype=dtype, opset=opset,
        qk=qk, runtime=runtime, base=base, rotary_dim=rotary_dim, scaling=scaling,
    )
    return build_model(spec)


rotary_model.__doc__ = rotary_model.__doc__ % _SHARED_DOC


def build_model(spec: Spec) -> onnx.ModelProto:
    inputs, outputs, tensors = _io(spec)
    b = Builder("rope/")
    _emit(spec, b, tensors, "position_ids" if spec.position_ids else None)
    graph = helper.make_graph(b.nodes, "arrayrope_rotary", inputs, outputs, b.initializers, doc_string=_doc(spec))
    ops = _opset_imports(spec)
    model = helper.make_model(graph, opset_imports=ops, producer_name="arrayrope", ir_version=ir_version_for(ops))
    helper.set_model_props(model, {META_KEY: spec.to_json()})
    return model


def rotary_function(
    freqs: Any,
    *,
    name: str = "RotaryEmbedding",
    domain: str = FUNCTION_DOMAIN,
    layout: str = "half",
    target: str = "auto",
    rank: int = 4,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    max_positions: int = 4096,
    position_ids: bool = True,
    tables: str = "constant",
    dtype: str = "float32",
    opset: int | None = None,
    qk: bool = False,
    runtime: str = "onnxruntime",
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
) -> onnx.FunctionProto:
    """The rotary graph as a model-local ONNX function, for composition.

    Same inputs and outputs as :func:`rotary_model` (``x``[, ``position_ids``] ->
    ``y``, or ``q``, ``k``[, ``position_ids``] -> ``q_rot``, ``k_rot``); the tables are
    Constant nodes inside the function. Add it to ``model.functions``, import
    ``domain`` (version 1) and call it as a node of that domain and name; the
    model must import the same default-domain opset (and ``com.microsoft`` for
    ``target="ort"``).

    Parameters
    ----------
    name, domain : str
        The function's name and domain (default ``arrayrope.RotaryEmbedding``).%s
    qk : bool
        Rotate queries and keys in one function.

    Examples
    --------
    >>> import numpy as np, onnx, onnxruntime as ort
    >>> from onnx import helper, TensorProto
    >>> from arrayrope.export import rotary_function
    >>> f = rotary_function(32, target="portable", max_positions=64, position_ids=False)
    >>> node = helper.make_node("RotaryEmbedding", ["a"], ["b"], domain="arrayrope")
    >>> t = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", 4, "S", 32])
    >>> g = helper.make_graph([node], "g", [t("a")], [t("b")])
    >>> m = helper.make_model(g, functions=[f], ir_version=8, opset_imports=[
    ...     helper.make_opsetid("", 17), helper.make_opsetid("arrayrope", 1)])
    >>> sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    >>> sess.run(None, {"a": np.ones((1, 4, 5, 32), np.float32)})[0].shape
    (1, 4, 5, 32)
    """
    spec = make_spec(
        freqs, layout=layout, target=target, rank=rank, num_heads=num_heads, num_kv_heads=num_kv_heads,
        max_positions=max_positions, position_ids=position_ids, tables=tables, dtype=dtype, opset=opset,
        qk=qk, runtime=runtime, base=base, rotary_dim=rotary_dim, scaling=scaling,
    )
    if not isinstance(name, str) or not name or not isinstance(domain, str) or not domain:
        raise ValueError(f"name and domain must be non-empty strings, got name={name!r}, domain={domain!r}")
    inputs, outputs, tensors = _io(spec)
    b = Builder("rope/", function=True)
    _emit(spec, b, tensors, "position_ids" if spec.position_ids else None)
    return helper.make_function(
        domain, name, [i.name for i in inputs], [o.name for o in outputs], b.nodes, _opset_imports(spec),
        doc_string=_doc(spec),
    )


rotary_function.__doc__ = rotary_function.__doc__ % _SHARED_DOC


def load_model(model: Any, argument: str = "model") -> onnx.ModelProto:
    """``model`` as a ModelProto: itself, or loaded from a path (errors name ``argument``)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, bytes, os.PathLike)):
        try:
            return onnx.load(model)
        except Exception as exc:  # onnx raises several types for unreadable files
            raise ValueError(f"{argument}={str(model)!r} does not load as an ONNX model: {exc}") from exc
    raise TypeError(f"{argument} must be an onnx.ModelProto or a path to a .onnx file, got {type(model).__name__}")
