"""``torch.onnx.export`` of modules that use arrayrope: one fused node per rotated tensor.

While ``torch.onnx.export`` traces, :class:`arrayrope.RotaryEmbedding` records the
custom op ``arrayrope::rotary_embedding(x, position_ids, ...)`` for q and for k
instead of computing tables (:func:`rotary_embedding`). The exporter translates
the op by the opset it writes, with the graphs of ``arrayrope.export._from_torch``:
the standard ``RotaryEmbedding`` node from opset 23 on, a compact standard-op graph
below, or ONNX Runtime's contrib op where ``arrayrope.export.torch_options`` asks
for it. Every form reads cos/sin caches computed by the core in float64 and
stored in the dtype of ``x`` when the positions are bounded (``max_position_embeddings``
or ``torch_options(max_positions=...)``), and otherwise computes cos/sin from the
position ids with the exact float32 method: no graph computes Cos/Sin or carries float64.

* ``dynamo=True``: the exporter picks a translation by opset from a registry it
  builds when an export starts. :func:`register` adds arrayrope's two entries (from
  opset 18 and from opset 23) to the list that registry is built from, the one
  PyTorch's own opset-dependent translations (``rms_norm``, ``scaled_dot_product_attention``)
  are in: PyTorch has no public way to add opset-dependent translations to every
  export. ``arrayrope.backends`` calls :func:`register` when that module is imported
  (or at once if it already is), so the first export of a process is translated
  like the next. Where registration fails (another PyTorch version),
  :func:`rotary_embedding` declines and RotaryEmbedding traces its ordinary
  computation, whose tables then use the exact float32 method: no float64 and no
  Cos/Sin either, but no fused node.
* ``dynamo=False`` (TorchScript): the op's symbolic (public
  ``torch.onnx.register_custom_op_symbolic``) writes the same graphs.

Run eagerly (``ExportedProgram.module()``), the op computes what RotaryEmbedding computes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from arrayrope.export._from_torch import (
    OP_NAME,
    current_options,
    frequencies_from_json,
    frequencies_json,
    ir_nodes,
    rotary_graph,
)

__all__ = ["exporting", "register", "registered", "rotary_embedding"]

#: Opsets from which each translation applies: the exporter picks the newest one not above its opset.
TRANSLATION_OPSETS = (18, 23)

_state: dict[str, Any] = {"registered": False, "why": "not registered yet"}


@torch.library.custom_op(OP_NAME, mutates_args=())
def _rotary(
    x: torch.Tensor, position_ids: torch.Tensor, frequencies: str, layout: str, axes: str, max_positions: int,
    target: str,
) -> torch.Tensor:
    """RoPE of ``x`` (``axes`` ``"bhsd"`` or ``"bshd"``) at position ids ``(B, S)``, as the core computes it.

    ``frequencies`` is the JSON of :func:`~arrayrope.export._from_torch.frequencies_json` (a
    string: float arguments would reach TorchScript's translation rounded to float32).
    """
    import arrayrope

    cos, sin = arrayrope.rope_tables(frequencies_from_json(frequencies, x.shape[-1]), position_ids)
    head_axis = 1 if axes == "bhsd" else 2
    cos, sin = cos.unsqueeze(head_axis), sin.unsqueeze(head_axis)
    y: torch.Tensor = arrayrope.apply_rotary(x, cos, sin, layout=layout)  # type: ignore[arg-type]
    return y


@_rotary.register_fake
def _(x: torch.Tensor, *_: object) -> torch.Tensor:
    return torch.empty_like(x)


def exporting() -> bool:
    """Whether ``torch.onnx.export`` is tracing (either exporter)."""
    onnx = sys.modules.get("torch.onnx")
    return onnx is not None and bool(onnx.is_in_onnx_export())


def registered() -> tuple[bool, str]:
    """Whether the dynamo exporter knows arrayrope's op, and why not."""
    return bool(_state["registered"]), str(_state["why"])


def _translation(opset: int) -> Callable[..., Any]:
    """The dynamo exporter's translation of the op for graphs of ``opset`` and newer."""

    def translate(x: Any, position_ids: Any, *attrs: Any) -> Any:
        from torch.onnx._internal.exporter import _core

        tracer = _core.current_tracer
        if tracer is None:
            raise RuntimeError(f"{OP_NAME} is translated outside torch.onnx.export")
        graph = rotary_graph(list(x.shape), int(x.dtype), **_attributes(attrs), opset=opset)
        nodes, y = ir_nodes(graph, x, position_ids)
        tracer.nodes.extend(nodes)
        return y

    translate.__name__ = f"arrayrope_rotary_embedding_opset{opset}"
    return translate


def _attributes(values: Sequence[Any]) -> dict[str, Any]:
    """The op's arguments after ``x`` and ``position_ids``, by name."""
    names = ("frequencies", "layout", "axes", "max_positions", "target")
    return dict(zip(names, values, strict=True))


def register() -> bool:
    """Add the op's translations to the exporters (once); False, with the reason kept, where it fails."""
    if _state["registered"]:
        return True
    try:
        from torch.onnx._internal.exporter._torchlib._torchlib_registry import onnx_impl

        for opset in TRANSLATION_OPSETS:
            onnx_impl(torch.ops.arrayrope.rotary_embedding.default, no_compile=True,
                      opset_introduced=opset)(_translation(opset))
    except Exception as exc:  # another PyTorch: the dynamo exporter's registry is private
        _state["why"] = f"this PyTorch's ONNX exporter does not take arrayrope's translations: {exc}"
        return False
    _state.update(registered=True, why="")
    return True


#: TorchScript value scalar types -> ONNX TensorProto element types (FLOAT, DOUBLE, FLOAT16, BFLOAT16).
_SCRIPT_ELEM_TYPES = {"Float": 1, "Double": 11, "Half": 10, "BFloat16": 16}


def _script_symbolic(g: Any, x: Any, position_ids: Any, *attrs: Any) -> Any:
    """The TorchScript exporter's translation: the same graph, written with ``g.op``."""
    from onnx import helper, numpy_helper
    from torch.onnx import symbolic_helper

    sym: Any = symbolic_helper  # the TorchScript exporter's helpers are untyped
    args = [sym._maybe_get_const(a, kind) for a, kind in zip(attrs, "sssis", strict=True)]
    sizes = sym._get_tensor_sizes(x) or []
    elem_type = _SCRIPT_ELEM_TYPES[x.type().scalarType()]
    graph = rotary_graph(sizes, elem_type, **_attributes(args), opset=g.opset)
    values = {"x": x, "position_ids": position_ids}
    for tensor in graph.initializers:
        values[tensor.name] = g.op("Constant", value_t=torch.from_numpy(numpy_helper.to_array(tensor).copy()))
    for node in graph.nodes:
        kinds = {a.name: ("f" if a.type in (1, 6) else "i") for a in node.attribute}  # FLOAT(S): f, INT(S): i
        kw = {f"{a.name}_{kinds[a.name]}": helper.get_attribute_value(a) for a in node.attribute}
        name = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        out = g.op(name, *[values[i] for i in node.input], outputs=len(node.output), **kw)
        values.update(zip(node.output, out if len(node.output) > 1 else [out], strict=True))
    return values["y"]


torch.onnx.register_custom_op_symbolic(OP_NAME, _script_symbolic, 1)  # type: ignore[attr-defined]


def _position_ids(x: torch.Tensor, seq_axis: int, positions: Any, offset: Any) -> torch.Tensor | None:
    """Int64 position ids ``(B, S)`` for ``x``; None for real-valued positions (no cache holds them)."""
    batch, seq = x.shape[0], x.shape[seq_axis]
    if positions is not None:
        pos = torch.as_tensor(positions, device=x.device)
        if pos.is_floating_point():
            return None
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
    q: torch.Tensor, k: torch.Tensor | None, *, freqs: Any, positions: Any, offset: Any, layout: str, axes: str,
    max_positions: int | None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None:
    """RotaryEmbedding's call while ``torch.onnx.export`` traces: one op per tensor.

    None (RotaryEmbedding then traces its ordinary computation) for real-valued
    positions, which no cache holds, and for a dynamo export without arrayrope's
    translations (:func:`registered` says why).
    """
    if torch.compiler.is_exporting() and not _state["registered"]:
        return None
    pos = _position_ids(q, 2 if axes == "bhsd" else 1, positions, offset)
    if pos is None:
        return None
    chosen = current_options()
    attrs = (frequencies_json(freqs), layout, axes, chosen.cache_rows(max_positions) or 0, chosen.target)  # 0: none
    q_rot = _rotary(q, pos, *attrs)
    return q_rot if k is None else (q_rot, _rotary(k, pos, *attrs))
