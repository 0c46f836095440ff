"""``torch.onnx.export`` of modules that use arrayrope: one fused node per rotated tensor.

While ``torch.onnx.export`` traces, :class:`arrayrope.RotaryEmbedding` records the
custom op ``arrayrope::rotary_embedding(x, position_ids, ...)`` (``torch.library``) for
q and for k instead of computing tables (:func:`rotary_embedding`): position ids ``(B, S)``, or,
for multimodal RoPE, ``(axes, B, S)`` with the sections in the op's ``mrope`` argument. Each exporter
translates the op with the graphs of :mod:`._graphs`: the standard
``RotaryEmbedding`` node from opset 23 on, a compact standard-op graph below, or ONNX
Runtime's contrib op where :func:`~arrayrope.export.torch_options` asks for it.

* ``dynamo=True``: a translation is an ordinary function of ONNX Script ops, per
  opset. :func:`translations` gives them for ``custom_translation_table=`` (public).
  :func:`register` also adds them, by the opset they apply from, to the list PyTorch
  builds every export's registry from, so that a plain ``torch.onnx.export`` writes
  fused nodes: that list is private, so :mod:`arrayrope.export.torch` registers only on
  PyTorch versions it is tested with (and warns once, naming the version, on others;
  RotaryEmbedding then traces its ordinary computation: no float64 and no Cos/Sin,
  but no fused node).
* ``dynamo=False`` (TorchScript): the op's symbolic, registered with the public
  ``torch.onnx.register_custom_op_symbolic``, writes the same graphs.

Run eagerly (``ExportedProgram.module()``), the op computes what RotaryEmbedding computes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.onnx import symbolic_helper

from ..build._builder import Builder
from ._graphs import (
    OP_NAME,
    current_options,
    frequencies_from_json,
    frequencies_json,
    mrope_from_json,
    mrope_json,
    rotary_graph,
)

__all__ = ["TRANSLATION_OPSETS", "register", "registered", "rotary_embedding", "translation", "translations"]

#: Opsets from which each translation applies: the exporter picks the newest one not above its opset.
TRANSLATION_OPSETS = (18, 23)
_NAMES = ("frequencies", "layout", "axes", "max_positions", "target", "mrope")

# registered: the translations joined the exporter's list; table: torch_translations() was asked for (the export
# is given them); late: they joined during an export, whose registry was built before
_state: dict[str, Any] = {"registered": False, "why": "not registered", "table": False, "late": False}


@torch.library.custom_op(OP_NAME, mutates_args=())
def _rotary(
    x: torch.Tensor,
    position_ids: torch.Tensor,
    frequencies: str,
    layout: str,
    axes: str,
    max_positions: int,
    target: str,
    mrope: str = "",
) -> torch.Tensor:
    """RoPE of ``x`` (``axes`` ``"bhsd"`` or ``"bshd"``) at position ids ``(B, S)``, as the core computes it;
    with ``mrope`` (the JSON of :func:`._graphs.mrope_json`), M-RoPE at position ids ``(axes, B, S)``.

    ``frequencies`` is the JSON of :func:`._graphs.frequencies_json` (a string: float
    arguments would reach TorchScript's translation rounded to float32). ``mrope`` came last
    with a default, so that ops recorded without it keep their meaning.
    """
    import arrayrope

    freqs = frequencies_from_json(frequencies, x.shape[-1])
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32  # RotaryEmbedding's tables for x
    if mrope:
        sections, interleaved = mrope_from_json(mrope)
        cos, sin = arrayrope.mrope_tables(freqs, position_ids, sections=sections, interleaved=interleaved, dtype=dtype)
    else:
        cos, sin = arrayrope.rope_tables(freqs, position_ids, dtype=dtype)
    head_axis = 1 if axes == "bhsd" else 2
    cos, sin = cos.unsqueeze(head_axis), sin.unsqueeze(head_axis)
    y: torch.Tensor = arrayrope.apply_rotary(x, cos, sin, layout=layout)  # type: ignore[arg-type]
    return y


@_rotary.register_fake
def _(x: torch.Tensor, *_: object) -> torch.Tensor:
    return torch.empty_like(x)


def registered() -> tuple[bool, str]:
    """Whether every ``torch.onnx.export(dynamo=True)`` knows arrayrope's op, and why not."""
    return bool(_state["registered"]), str(_state["why"])


def _emit(b: Builder, x: Any, position_ids: Any, opset: int) -> Any:
    """The nodes of ``b`` as ONNX Script op calls (what the exporter records), and the value of ``"y"``."""
    from onnx import helper
    from onnxscript import values

    opsets: dict[str, Any] = {}

    def ops(domain: str) -> Any:
        if domain not in opsets:
            opsets[domain] = values.Opset(domain, opset if domain == "" else 1)
        return opsets[domain]

    found: dict[str, Any] = {"x": x, "position_ids": position_ids}
    for tensor in b.initializers:  # Constants: the exporter makes them initializers, shared by q and k
        found[tensor.name] = ops("").Constant(value=tensor)
    for node in b.nodes:
        attrs = {a.name: _attribute(helper.get_attribute_value(a)) for a in node.attribute}
        opset_of = ops(node.domain)
        try:
            op = getattr(opset_of, node.op_type)
        except AttributeError:  # an op ONNX itself has no schema of (ONNX Runtime's contrib ops)
            op = values.Op(opset_of, node.op_type, _schema(node))
        out = op(*[found[i] if i else None for i in node.input], **attrs)
        found.update(zip(node.output, out if isinstance(out, tuple) else (out,), strict=True))
    return found["y"]


def _schema(node: Any) -> Any:
    """A schema for ``node``'s op as written (ONNX Runtime's contrib ops): outputs typed like the first input."""
    from onnx import AttributeProto
    from onnx.defs import OpSchema

    types = [f"tensor({t})" for t in ("float", "float16", "bfloat16", "double", "int64", "int32")]
    inputs = [OpSchema.FormalParameter(f"input{i}", f"T{i}") for i in range(len(node.input))]
    outputs = [OpSchema.FormalParameter(f"output{i}", "T0") for i in range(len(node.output))]
    kinds = {
        AttributeProto.INT: OpSchema.AttrType.INT,
        AttributeProto.FLOAT: OpSchema.AttrType.FLOAT,
        AttributeProto.STRING: OpSchema.AttrType.STRING,
    }  # what contrib nodes of these graphs carry
    attributes = [OpSchema.Attribute(a.name, kinds[a.type], "", required=False) for a in node.attribute]
    return OpSchema(
        node.op_type,
        node.domain,
        1,
        inputs=inputs,
        outputs=outputs,
        type_constraints=[(f"T{i}", types, "") for i in range(len(node.input))],
        attributes=attributes,
    )


def _attribute(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def translation(opset: int) -> Callable[..., Any]:
    """The dynamo exporter's translation of the op for graphs of ``opset`` and newer."""

    def translate(x: Any, position_ids: Any, *attrs: Any, **named: Any) -> Any:
        shape = [d if isinstance(d, int) else None for d in x.shape]
        given = {**dict(zip(_NAMES, attrs, strict=False)), **named}  # ops recorded before mrope lack it
        ids_rank = None if position_ids.shape is None else len(position_ids.shape)
        graph = rotary_graph(shape, int(x.dtype), **given, ids_rank=ids_rank, opset=opset)
        return _emit(graph, x, position_ids, opset)

    translate.__name__ = f"arrayrope_rotary_embedding_opset{opset}"
    return translate


def translations(opset: int) -> dict[Any, Callable[..., Any]]:
    """``{op: translation}`` for ``torch.onnx.export(..., custom_translation_table=...)`` at ``opset``.

    From then on, exports record the op whether or not :func:`register` took: the table translates it.
    """
    _state["table"] = True
    return {torch.ops.arrayrope.rotary_embedding.default: translation(opset)}


def register() -> bool:
    """Add the op's translations to the list every dynamo export's registry is built from (once).

    False, with the reason kept, where this PyTorch's exporter does not take them.
    """
    if _state["registered"]:
        return True
    try:
        from torch.onnx._internal.exporter._torchlib._torchlib_registry import onnx_impl

        for opset in TRANSLATION_OPSETS:
            onnx_impl(torch.ops.arrayrope.rotary_embedding.default, no_compile=True, opset_introduced=opset)(
                translation(opset)
            )
    except Exception as exc:  # the exporter's registry is private: another PyTorch may differ
        _state["why"] = f"PyTorch {torch.__version__}'s ONNX exporter does not take arrayrope's translations: {exc}"
        return False
    _state.update(registered=True, why="")
    return True


#: TorchScript value scalar types -> ONNX TensorProto element types (FLOAT, DOUBLE, FLOAT16, BFLOAT16).
_SCRIPT_ELEM_TYPES = {"Float": 1, "Double": 11, "Half": 10, "BFloat16": 16}


@symbolic_helper.parse_args("v", "v", "s", "s", "s", "i", "s", "s")
def _script_symbolic(
    g: Any,
    x: Any,
    position_ids: Any,
    frequencies: str,
    layout: str,
    axes: str,
    max_positions: int,
    target: str,
    mrope: str = "",
) -> Any:
    """The TorchScript exporter's translation: the same graph, written with ``g.op``."""
    from onnx import helper, numpy_helper

    sizes = x.type().varyingSizes() or []
    ids_rank = position_ids.type().dim()
    graph = rotary_graph(
        sizes,
        _SCRIPT_ELEM_TYPES[x.type().scalarType()],
        frequencies=frequencies,
        layout=layout,
        axes=axes,
        max_positions=max_positions,
        target=target,
        mrope=mrope,
        ids_rank=ids_rank,
        opset=g.opset,
    )
    found = {"x": x, "position_ids": position_ids}
    for tensor in graph.initializers:
        found[tensor.name] = g.op("Constant", value_t=torch.from_numpy(numpy_helper.to_array(tensor).copy()))
    for node in graph.nodes:
        kinds = {a.name: ("f" if a.type in (1, 6) else "i") for a in node.attribute}  # FLOAT(S): f, INT(S): i
        kw = {f"{a.name}_{kinds[a.name]}": helper.get_attribute_value(a) for a in node.attribute}
        name = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        out = g.op(name, *[found[i] for i in node.input], outputs=len(node.output), **kw)
        found.update(zip(node.output, out if len(node.output) > 1 else [out], strict=True))
    return found["y"]


torch.onnx.register_custom_op_symbolic(OP_NAME, _script_symbolic, 1)  # type: ignore[attr-defined]


def _position_ids(x: torch.Tensor, seq_axis: int, positions: Any, offset: Any, axes: int) -> torch.Tensor | None:
    """Int64 position ids ``(B, S)`` for ``x`` (``(axes, B, S)`` for M-RoPE's ``axes`` > 0); None for real-valued
    positions (no cache holds them)."""
    batch, seq = x.shape[0], x.shape[seq_axis]
    if positions is not None:
        pos = torch.as_tensor(positions, device=x.device)
        if pos.is_floating_point():
            return None
        if axes:  # checked by the caller: (axes, B or 1, S)
            return pos.to(torch.int64).expand(axes, batch, seq)
        if pos.ndim not in (1, 2):
            raise ValueError(f"positions must have shape (S,) or (B, S), got {tuple(pos.shape)}")
        return pos.to(torch.int64).expand(batch, seq)
    steps = torch.arange(seq, dtype=torch.int64, device=x.device)
    if isinstance(offset, int):
        return (steps + offset).expand(batch, seq)
    off = torch.as_tensor(offset, device=x.device)
    if off.is_floating_point():
        return None
    return (off.to(torch.int64).reshape(-1, 1) + steps).expand(batch, seq)  # one offset (0-d) or one per row


def rotary_embedding(
    q: torch.Tensor,
    k: torch.Tensor | None,
    *,
    freqs: Callable[[], Any],
    positions: Any,
    offset: Any,
    layout: str,
    axes: str,
    max_positions: int | None,
    mrope: tuple[tuple[int, ...], bool] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None:
    """RotaryEmbedding's call while ``torch.onnx.export`` traces: one op per tensor (``freqs()``: its frequencies;
    ``mrope``: the sections and interleaving of M-RoPE positions ``(axes, B, S)``, None for positions ``(B, S)``).

    None (RotaryEmbedding then traces its ordinary computation) for real-valued
    positions, which no cache holds, and for a dynamo export that has no translation
    of the op (:func:`registered` says why; ``custom_translation_table`` gives one).
    """
    if torch.compiler.is_exporting() and not _state["table"] and (_state["late"] or not _state["registered"]):
        return None
    pos = _position_ids(q, 2 if axes == "bhsd" else 1, positions, offset, 0 if mrope is None else len(mrope[0]))
    if pos is None:
        return None
    chosen = current_options()
    rows = chosen.cache_rows(max_positions) or 0  # 0: none
    attrs = (frequencies_json(freqs()), layout, axes, rows, chosen.target, "" if mrope is None else mrope_json(*mrope))
    q_rot = _rotary(q, pos, *attrs)
    return q_rot if k is None else (q_rot, _rotary(k, pos, *attrs))
