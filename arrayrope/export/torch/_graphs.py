"""The ONNX side of ``torch.onnx.export`` for modules that use arrayrope.

While ``torch.onnx.export`` traces, :class:`arrayrope.RotaryEmbedding` records one
``arrayrope::rotary_embedding`` op per rotated tensor (:mod:`._bridge`)
instead of computing tables. The exporter translates each op here, with the emitters
of :func:`~arrayrope.export.rotary_model`: the nodes of the target that the
exporter's opset allows, reading cos/sin caches that the core computes in float64
and stores in the dtype of ``x`` when the positions are bounded, else computing
cos/sin from the position ids in the graph (the exact float32 method, right at every
position below ``2**30``). Nothing here imports torch: the graph is written as
``onnx_ir`` nodes, the exporter's own representation.

:func:`torch_options` chooses, for the exports it encloses, the target and the
rows of the caches.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from arrayrope._lib import checks
from arrayrope.frequencies import RopeFrequencies

from ..build._builder import Builder
from ..build._emit import emitter, heads_spec, rotate_heads
from ..build._options import ExportOptions, Target
from ..build._spec import DTYPE_NAMES, MIN_OPSET, TARGET_DTYPES

if TYPE_CHECKING:  # onnx_ir comes with onnxscript, which torch.onnx.export needs; importing this module does not
    import onnx_ir as ir

__all__ = [
    "OP_NAME",
    "TorchOptions",
    "current_options",
    "frequencies_from_json",
    "frequencies_json",
    "ir_nodes",
    "mrope_from_json",
    "mrope_json",
    "rotary_graph",
    "torch_options",
    "torch_translations",
]

#: The PyTorch op that RotaryEmbedding records while ``torch.onnx.export`` traces (:mod:`._bridge`).
OP_NAME = "arrayrope::rotary_embedding"


@dataclasses.dataclass(frozen=True)
class TorchOptions:
    """How arrayrope's ops are exported by ``torch.onnx.export`` (see :func:`torch_options`).

    Parameters
    ----------
    target : {"auto", "onnx23", "ort", "portable"}
        As for :func:`torch_options`.
    max_positions : int, optional
        As for :func:`torch_options`.

    Examples
    --------
    >>> from arrayrope.export import torch_options
    >>> with torch_options(max_positions=4096) as chosen:
    ...     chosen.cache_rows(None), chosen.cache_rows(8192)
    (4096, 4096)
    """

    target: Target = "auto"
    max_positions: int | None = None

    def cache_rows(self, model_rows: int | None) -> int | None:
        """Rows of the caches: ``max_positions``, else the module's ``max_position_embeddings``; None (no bound:
        cos/sin computed in the graph from the position ids) when neither is given."""
        return self.max_positions or model_rows


_DEFAULTS = TorchOptions()
_OPTIONS: contextvars.ContextVar[TorchOptions | None] = contextvars.ContextVar("arrayrope_torch_options", default=None)


def current_options() -> TorchOptions:
    """The options of the innermost :func:`torch_options` block (the defaults outside any)."""
    return _OPTIONS.get() or _DEFAULTS


def torch_options(
    *, target: Target = "auto", max_positions: int | None = None
) -> contextlib.AbstractContextManager[TorchOptions]:
    """Choose how ``torch.onnx.export`` writes the rotations of arrayrope modules traced in this block.

    Without this block every ``torch.onnx.export(..., dynamo=True)`` of a module
    that calls :class:`arrayrope.RotaryEmbedding` writes, per rotated tensor, one
    standard ``RotaryEmbedding`` node at opset 23 and above, and a compact
    standard-op graph below (the ``"portable"`` target: two Gathers from the caches,
    shared by q and k, and five to seven elementwise and view ops per tensor). Both
    read float32 (or the model's dtype) cos/sin caches computed by the core in
    float64 when the module has ``max_position_embeddings`` (or ``max_positions`` is
    given here); without a bound they compute cos/sin from the position ids with the
    exact float32 method, so that the graph is right at every position a model can
    reach. No graph carries a float64 tensor, cast or op, and none computes Cos or
    Sin.

    Parameters
    ----------
    target : {"auto", "onnx23", "ort", "portable"}
        ``"auto"``: ``"onnx23"`` at opset 23+, ``"portable"`` below. ``"ort"``: ONNX
        Runtime's ``com.microsoft.RotaryEmbedding`` at any opset (ONNX Runtime only).
        ``"onnx23"`` fails the export below opset 23; ``"portable"`` is standard ops at
        any opset.
    max_positions : int, optional
        A bound on the positions: caches of this many rows are stored, and position
        ids must be below it. Default: the module's ``max_position_embeddings``; a
        module without one gets cos/sin computed in the graph from the position ids
        with the exact float32 method, right at every position below ``2**30``.

    Returns
    -------
    context manager
        Enter it (``with``) around the exports; it gives the :class:`TorchOptions` in effect.

    Examples
    --------
    >>> from arrayrope.export import torch_options
    >>> with torch_options(target="ort", max_positions=8192) as chosen:
    ...     chosen.target, chosen.max_positions   # torch.onnx.export(model, ...) goes here
    ('ort', 8192)
    >>> torch_options(target="onnx")
    Traceback (most recent call last):
    ...
    ValueError: target must be one of ('auto', 'onnx23', 'ort', 'portable'), got 'onnx'
    """
    rows = None if max_positions is None else checks.positive_int(max_positions, "max_positions")
    return _in_effect(TorchOptions(ExportOptions(target=target).target, rows))


@contextlib.contextmanager
def _in_effect(chosen: TorchOptions) -> Iterator[TorchOptions]:
    token = _OPTIONS.set(chosen)
    try:
        yield chosen
    finally:
        _OPTIONS.reset(token)


def torch_translations(opset: int) -> dict[Any, Callable[..., Any]]:
    """Give the translations of arrayrope's PyTorch op, for ``torch.onnx.export(..., custom_translation_table=...)``.

    Exports through PyTorch's public API write the same fused nodes that arrayrope
    registers on its own on the PyTorch versions it is tested with: pass this on
    other versions, or to state the translation explicitly.

    Parameters
    ----------
    opset : int
        The ``opset_version`` of the export (it picks the target ``"auto"`` stands for).

    Returns
    -------
    dict
        ``{torch.ops.arrayrope.rotary_embedding.default: translation}``.

    Examples
    --------
    >>> import torch, arrayrope
    >>> from arrayrope.export import torch_translations
    >>> table = torch_translations(23)
    >>> list(table) == [torch.ops.arrayrope.rotary_embedding.default]
    True
    """
    opset = checks.positive_int(opset, "opset")
    from ._bridge import translations

    return translations(opset)


def frequencies_json(freqs: RopeFrequencies) -> str:
    """What the op needs of ``freqs``, exactly (JSON floats round-trip float64)."""
    return json.dumps({"inv_freq": [float(v) for v in freqs.inv_freq], "attention_factor": freqs.attention_factor})


def frequencies_from_json(text: str, head_dim: int) -> RopeFrequencies:
    """The frequencies of :func:`frequencies_json`, for heads of ``head_dim`` features."""
    d = json.loads(text)
    inv = np.asarray(d["inv_freq"], dtype=np.float64)
    return RopeFrequencies(
        inv_freq=inv, head_dim=head_dim, rotary_dim=2 * inv.shape[0], attention_factor=float(d["attention_factor"])
    )


def mrope_json(sections: Sequence[int], interleaved: bool) -> str:
    """M-RoPE's sections and interleaving as the op's ``mrope`` argument (the empty string: plain RoPE)."""
    return json.dumps({"sections": [int(n) for n in sections], "interleaved": bool(interleaved)})


def mrope_from_json(text: str) -> tuple[tuple[int, ...], bool]:
    """The sections and interleaving of :func:`mrope_json`."""
    d = json.loads(text)
    return tuple(int(n) for n in d["sections"]), bool(d["interleaved"])


def rotary_graph(
    shape: Sequence[object],
    elem_type: int,
    *,
    frequencies: str,
    layout: str,
    axes: str,
    max_positions: int,
    target: str,
    opset: int,
    mrope: str = "",
    ids_rank: int | None = None,
) -> Builder:
    """Nodes that rotate the graph's 4-D tensor ``"x"`` at ``"position_ids"`` ``(B, S)`` into ``"y"``.

    ``shape`` and ``elem_type`` (an ONNX element type) describe ``x``, laid out as
    ``axes`` (``"bhsd"`` or ``"bshd"``); heads and features must be static.
    ``opset`` is the one the exporter writes: ``target="auto"`` becomes ``"onnx23"``
    from opset 23 on and ``"portable"`` below. ``max_positions`` 0 means no bound:
    cos/sin computed in the graph from the position ids. ``(B, S, N, D)`` input is rotated as
    its 3-D view ``(B, S, N * D)`` (two Reshapes, no copy). ``mrope`` (:func:`mrope_json`) makes
    it M-RoPE, at position ids ``(axes, B, S)``: the export layer's selection of each pair's
    cos/sin by its axis (:mod:`arrayrope.export.build._mrope`). ``ids_rank``, where known, is
    checked against the position ids this expects.
    """
    heads = shape[1 if axes == "bhsd" else 2] if len(shape) == 4 else None
    head_dim = shape[-1] if shape else None
    if not isinstance(heads, int) or not isinstance(head_dim, int):
        raise ValueError(f"{OP_NAME} needs a 4-D input with static heads and head_dim, got shape {list(shape)}")
    dtype = DTYPE_NAMES.get(elem_type)
    if dtype is None:
        raise ValueError(f"{OP_NAME} rotates float32, float16, bfloat16 or float64 tensors, got ONNX type {elem_type}")
    sections, interleaved = mrope_from_json(mrope) if mrope else (None, False)
    want = 2 if sections is None else 3
    if ids_rank is not None and ids_rank != want:
        raise ValueError(
            f"{OP_NAME} with mrope={mrope!r} rotates at position ids of rank {want} "
            f"({'(B, S)' if sections is None else f'({len(sections)}, B, S)'}), got rank {ids_rank}"
        )
    freqs = frequencies_from_json(frequencies, head_dim)
    if target == "auto":  # float64 models: the fused ops carry no float64
        fused = opset >= MIN_OPSET["onnx23"] and dtype in TARGET_DTYPES["onnx23"]
        target = "onnx23" if fused else "portable"
    spec = heads_spec(
        freqs,
        layout=layout,
        target=target,  # type: ignore[arg-type]
        axes=axes,  # type: ignore[arg-type]
        heads=heads,
        max_positions=max_positions or None,
        dtype=dtype,
        opset=opset,
        opset_argument="the opset_version of torch.onnx.export",
        mrope_sections=sections,
        mrope_interleaved=interleaved,
    )
    b = Builder("arrayrope/")
    rotate_heads(spec, b, emitter(spec, b), "x", "position_ids", "y")
    return b


def ir_nodes(b: Builder, x: ir.Value, position_ids: ir.Value) -> tuple[list[ir.Node], ir.Value]:
    """The graph of :func:`rotary_graph` as ``onnx_ir`` nodes (the dynamo exporter's), and the value of ``"y"``.

    Constants come first, as ``Constant`` nodes: the exporter makes them
    initializers, one per distinct table, that q and k then share.
    """
    import onnx_ir as ir

    values = {"x": x, "position_ids": position_ids}
    nodes: list[ir.Node] = []
    for tensor in b.initializers:
        const = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", ir.serde.deserialize_tensor(tensor))])
        nodes.append(const)
        values[tensor.name] = const.outputs[0]
    for proto in b.nodes:
        attributes = [ir.serde.deserialize_attribute(a) for a in proto.attribute]
        node = ir.Node(
            proto.domain, proto.op_type, [values[i] for i in proto.input], attributes, num_outputs=len(proto.output)
        )
        nodes.append(node)
        values.update(zip(proto.output, node.outputs, strict=True))
    return nodes, values["y"]
