"""Public builders of a standalone model and of a model-local function."""

from __future__ import annotations

from typing import NamedTuple, Unpack

import onnx
from onnx import OperatorSetIdProto, TensorProto, ValueInfoProto, helper

from .._graph import ir_version_for
from ._builder import Builder
from ._emit import emitter
from ._options import ExportKeywords, ExportOptions, check_keywords
from ._spec import META_KEY, MS_DOMAIN, Frequencies, Spec, make_spec, onnx_dtype

FUNCTION_DOMAIN = "arrayrope"


class Rotated(NamedTuple):
    """A tensor the graph rotates: its input and output names and its number of heads."""

    input: str
    output: str
    heads: int | None


def opset_imports(spec: Spec) -> list[OperatorSetIdProto]:
    """The opsets a graph of ``spec`` uses."""
    ops = [helper.make_opsetid("", spec.opset)]
    if spec.target == "ort":
        ops.append(helper.make_opsetid(MS_DOMAIN, 1))
    return ops


def _signature(spec: Spec) -> tuple[list[ValueInfoProto], list[ValueInfoProto], list[Rotated]]:
    """Graph inputs, outputs, and the rotated tensors."""
    o = spec.options
    elem = onnx_dtype(o.dtype)
    d = spec.head_dim

    def shape(heads: int | None, sym: str) -> list[str | int]:
        if o.rank == 4:
            return ["batch", heads if heads is not None else sym, "seq", d]
        return ["batch", "seq", spec.flat_heads(heads) * d]

    if o.qk:
        pairs = [("q", "q_rot", o.num_heads, "heads"), ("k", "k_rot", o.num_kv_heads, "kv_heads")]
    else:
        pairs = [("x", "y", o.num_heads, "heads")]
    inputs = [helper.make_tensor_value_info(i, elem, shape(h, sym)) for i, _, h, sym in pairs]
    outputs = [helper.make_tensor_value_info(out, elem, shape(h, sym)) for _, out, h, sym in pairs]
    if o.position_ids:
        axes: list[str | int] = [] if spec.mrope_axes is None else [spec.mrope_axes]
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, [*axes, "batch", "seq"]))
    return inputs, outputs, [Rotated(i, out, h) for i, out, h, _ in pairs]


def _emit(spec: Spec, b: Builder, tensors: list[Rotated]) -> None:
    rotary = emitter(spec, b)
    pos = "position_ids" if spec.options.position_ids else None
    for x, out, heads in tensors:
        rotary.apply(x, pos, out, heads)


def _doc(spec: Spec) -> str:
    o = spec.options
    return (
        f"arrayrope rotary embedding: layout={o.layout}, target={spec.target}, head_dim={spec.head_dim}, "
        f"rotary_dim={spec.rotary_dim}, rope_type={spec.freqs.rope_type}, tables={o.tables}, "
        f"positions < {spec.position_limit}"
        + (
            ""
            if o.mrope_sections is None
            else f", mrope_sections={list(o.mrope_sections)} (interleaved={o.mrope_interleaved})"
        )
    )


def _spec(freqs: Frequencies, options: ExportKeywords, caller: str) -> Spec:
    check_keywords(options, ExportKeywords.__optional_keys__, caller)
    return make_spec(freqs, ExportOptions(**options))


def rotary_model(freqs: Frequencies, **options: Unpack[ExportKeywords]) -> onnx.ModelProto:
    """A standalone ONNX model that applies rotary embeddings.

    Inputs ``x`` and ``position_ids``, output ``y``; with ``qk=True`` inputs ``q``,
    ``k``, ``position_ids`` and outputs ``q_rot``, ``k_rot`` sharing one pair of
    tables. Batch and sequence dimensions are dynamic. With ``mrope_sections``
    (multimodal RoPE, Qwen2-VL/Qwen3-VL) ``position_ids`` has shape ``(axes, batch, seq)``.

    Parameters
    ----------
    freqs : RopeFrequencies or int
        Frequencies from :func:`arrayrope.rope_frequencies` (any scaling), or a
        ``head_dim`` from which they are made with the options ``base``,
        ``rotary_dim`` and ``scaling``.
    **options
        Any option of :class:`ExportOptions`, which documents each one and its
        default (``layout``, ``target``, ``max_positions``, ``dtype``...).

    Returns
    -------
    onnx.ModelProto
        With the lowest IR version that holds its opsets (so that ONNX Runtime
        accepts it) and metadata ``arrayrope.rotary`` that :func:`validate` reads.

    Notes
    -----
    Position ids are rotated in ``[0, max_positions)`` (``(-2**30, 2**30)`` with
    computed tables, negative ids backwards). A graph cannot raise, and runtimes
    differ on ids outside a table (ONNX Runtime's fused kernels reject them, ONNX's
    reference evaluator reads negative ones from the table end), so every graph
    sends such ids to a row of NaN: their rotated features are NaN on every target
    and runtime, never another position's rotation. The portable
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
    >>> m = rotary_model(64, max_positions=128, mrope_sections=(8, 12, 12))  # Qwen2-VL's sections, halved
    >>> [d.dim_value or d.dim_param for d in m.graph.input[1].type.tensor_type.shape.dim]
    [3, 'batch', 'seq']
    """
    return build_model(_spec(freqs, options, "rotary_model"))


def build_model(spec: Spec) -> onnx.ModelProto:
    """The standalone model of a spec (see :func:`rotary_model`)."""
    inputs, outputs, tensors = _signature(spec)
    b = Builder("rope/")
    _emit(spec, b, tensors)
    graph = helper.make_graph(b.nodes, "arrayrope_rotary", inputs, outputs, b.initializers, doc_string=_doc(spec))
    ops = opset_imports(spec)
    model = helper.make_model(graph, opset_imports=ops, producer_name="arrayrope", ir_version=ir_version_for(ops))
    helper.set_model_props(model, {META_KEY: spec.to_json()})
    return model


def rotary_function(
    freqs: Frequencies,
    *,
    name: str = "RotaryEmbedding",
    domain: str = FUNCTION_DOMAIN,
    **options: Unpack[ExportKeywords],
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
    freqs : RopeFrequencies or int
        As in :func:`rotary_model`.
    name, domain : str
        The function's name and domain (default ``arrayrope.RotaryEmbedding``).
    **options
        Any option of :class:`ExportOptions`, as in :func:`rotary_model`.

    Returns
    -------
    onnx.FunctionProto
        The function ``domain.name``, with the inputs and outputs :func:`rotary_model` has.

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
    spec = _spec(freqs, options, "rotary_function")
    if not isinstance(name, str) or not name or not isinstance(domain, str) or not domain:
        raise ValueError(f"name and domain must be non-empty strings, got name={name!r}, domain={domain!r}")
    inputs, outputs, tensors = _signature(spec)
    b = Builder("rope/", function=True)
    _emit(spec, b, tensors)
    return helper.make_function(
        domain,
        name,
        [i.name for i in inputs],
        [o.name for o in outputs],
        b.nodes,
        opset_imports(spec),
        doc_string=_doc(spec),
    )
