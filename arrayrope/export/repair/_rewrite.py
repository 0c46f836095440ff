"""One rotation rewritten to its layer's rotation in the config: standard-op rotations replaced by fused nodes
whose tables the config gives (LongRoPE's two regimes chosen per run, as transformers chooses them), and the
stored caches of an attention node that rotates inside replaced by the config's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import NodeProto, TensorProto, helper, numpy_helper

import arrayrope
from arrayrope.frequencies import RopeFrequencies

from ..audit._expect import Layer, length_context
from ..build._builder import Builder
from ..build._emit import emitter, heads_spec, rotate_heads
from ..build._fused import FusedEmitter
from ..build._spec import DTYPE_NAMES, Spec, np_dtype
from ..build._tables import guard
from ..fuse._match import Graph, Site
from ..fuse._probe import shapes
from ..fuse._replace import _position_ids


def regimes(layer: Layer, config: Mapping[str, Any]) -> tuple[RopeFrequencies, RopeFrequencies | None, int]:
    """``(frequencies, long, changes)``: the frequencies of calls up to ``changes`` positions, and those of longer
    calls (None for types whose frequencies do not follow the call's length). ValueError for dynamic NTK, whose
    frequencies grow with every length past ``max_position_embeddings``."""
    context = length_context(layer.settings)
    if context is None:
        return layer.frequencies(config, 1), None, 0
    changes, reach, _ = context
    short, long = layer.frequencies(config, changes), layer.frequencies(config, reach)
    if not np.array_equal(layer.frequencies(config, changes + 1).inv_freq, long.inv_freq):
        raise ValueError(
            f"its frequencies grow with every call length past {changes} positions ({short.rope_type}): no fixed "
            "tables hold them, and repair does not write frequencies computed from the length yet"
        )
    return short, long, changes


def standard_site(
    i: int,
    graph: Graph,
    site: Site,
    seen: Mapping[str, npt.NDArray[Any]],
    layer: Layer,
    config: Mapping[str, Any],
    rows: int | None,
    opset: int,
) -> tuple[Builder, str]:
    """The nodes that rotate ``site`` as ``layer`` says (ValueError where they cannot), and what they compute."""
    b = Builder(f"arrayrope_repair/{i}/", taken=graph.producer.keys() | graph.initializers.keys())
    if layer.settings.nope:
        b.op("Identity", [site.x], out=site.rotated)
        return b, "no rotation: its layer takes no rotary embedding in the config"
    if layer.settings.rotary_features != "leading":
        raise ValueError("its rotary features are the trailing ones of each head (MLA), which repair does not write")
    shape = shapes(site, seen)
    if site.positions is None:
        raise ValueError("no integer positions were found that its tables are computed from")
    short, long, changes = regimes(layer, config)
    mrope = layer.settings.mrope
    if shape.position_axes and mrope is None:
        raise ValueError(f"it reads M-RoPE position ids ({shape.position_axes}, batch, seq), and the config has none")
    dtype = DTYPE_NAMES.get(graph.elem_type(site.x) or TensorProto.FLOAT, "float32")
    pos = _position_ids(b, graph, site, shape, seen)

    def spec_of(freqs: RopeFrequencies) -> Spec:
        return heads_spec(
            freqs,
            layout=layer.layout,
            target="onnx23",
            axes=shape.axes,  # type: ignore[arg-type]
            heads=shape.heads,
            max_positions=rows,
            dtype=dtype,
            opset=opset,
            opset_argument="the model's opset",
            mrope_sections=None if mrope is None or not shape.position_axes else tuple(mrope[0]),
            mrope_interleaved=bool(mrope is not None and shape.position_axes and mrope[1]),
        )

    said = _said(short, rows)
    if long is None:
        spec = spec_of(short)
        rotate_heads(spec, b, emitter(spec, b), site.x, pos, site.rotated)
        return b, said
    if shape.position_axes:
        raise ValueError("M-RoPE with a length-dependent rope type is not written")
    # transformers takes the long frequencies when a call's largest position id reaches ``changes``: one node,
    # its tables chosen per run, so that the rotation is one (the audit measures it call by call)
    reaches = b.op("GreaterOrEqual", [b.op("ReduceMax", [pos], keepdims=0), b.scalar(changes, "changes")])
    spec, other = spec_of(short), spec_of(long)
    first, second = FusedEmitter(spec, b), FusedEmitter(other, b)
    if rows is None:
        (cos_s, sin_s), (cos_l, sin_l) = first.per_token(site.x, pos), second.per_token(site.x, pos)
        ids: list[str] = []
    else:
        (cos_s, sin_s), (cos_l, sin_l) = first.caches(), second.caches()
        ids = [guard(b, spec, pos)]
    cos, sin = (b.op("Where", [reaches, lo, sh]) for lo, sh in ((cos_l, cos_s), (sin_l, sin_s)))
    x, out = site.x, site.rotated
    flat = spec.options.rank == 3
    if flat:
        x, out = b.op("Reshape", [x, b.ints([0, 0, -1], "flat")]), b.name("flat_rotated")
    y = b.op(
        "RotaryEmbedding",
        [x, cos, sin, *ids],
        out=out,
        interleaved=int(layer.layout == "interleaved"),
        rotary_embedding_dim=spec.rotary_dim if spec.rotary_dim < spec.head_dim else 0,
        num_heads=shape.heads if flat else None,
    )
    if flat:
        b.op("Reshape", [y, b.ints([0, 0, -1, spec.head_dim], "heads")], out=site.rotated)
    return b, f"{said}; calls reaching position {changes} take the long frequencies"


def _said(freqs: RopeFrequencies, rows: int | None) -> str:
    kind = "" if freqs.rope_type == "default" else f"{freqs.rope_type}, "
    tables = "computed from the position ids" if rows is None else f"stored, {rows} rows"
    return f"RotaryEmbedding, {kind}base {freqs.base:g}, rotary_dim {freqs.rotary_dim}; tables {tables}"


def attention_caches(
    graph: Graph, node: NodeProto, layer: Layer, config: Mapping[str, Any], made: dict[Any, tuple[str, str]]
) -> tuple[list[onnx.TensorProto], str]:
    """New ``cos_cache`` and ``sin_cache`` for an attention node that rotates inside, with a row for every
    position of the config's context (its own rows, if more), and what they hold; the node's inputs point at
    them. Caches in ``made`` are reused (no tensors returned); a NoPE layer's node stops rotating."""
    if layer.settings.nope:
        next(a for a in node.attribute if a.name == "do_rotary").i = 0
        return [], "no rotation (do_rotary=0): its layer takes no rotary embedding in the config"
    cos, sin = node.input[7], node.input[8]
    if not (graph.is_constant(cos) and graph.is_constant(sin)):
        raise ValueError("its caches are computed in the graph, which repair does not rewrite yet")
    short, long, _ = regimes(layer, config)
    if long is not None:
        raise ValueError(f"its caches would need both {short.rope_type} regimes and a switch, not written yet")
    if layer.settings.mrope is not None or layer.settings.rotary_features != "leading":
        raise ValueError("its config's rotation (M-RoPE, or trailing rotary features) has no cache form")
    stored = graph.constant(cos)
    assert stored is not None
    longest = layer.settings.max_position_embeddings or 0
    rows = max(int(stored.shape[0]), longest)
    dtype = np_dtype(DTYPE_NAMES.get(graph.elem_type(cos) or TensorProto.FLOAT, "float32"))
    key = (repr(layer.settings), rows, np.dtype(dtype).str)
    tensors = []
    if key not in made:
        c, s = arrayrope.rope_tables(short, np.arange(rows, dtype=np.int64), dtype=np.float64)
        names = (f"arrayrope_repair/{len(made)}/cos_cache", f"arrayrope_repair/{len(made)}/sin_cache")
        tensors = [numpy_helper.from_array(np.asarray(t).astype(dtype), n) for t, n in zip((c, s), names, strict=True)]
        made[key] = names
    node.input[7], node.input[8] = made[key]
    interleaved = int(layer.layout == "interleaved")
    for a in node.attribute:
        if a.name == "rotary_interleaved":
            a.i = interleaved
            break
    else:
        node.attribute.append(helper.make_attribute("rotary_interleaved", interleaved))
    return tensors, f"caches of {rows} rows, {short.rope_type}, base {short.base:g}, rotary_dim {short.rotary_dim}"
