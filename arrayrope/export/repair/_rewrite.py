"""One rotation rewritten to its layer's rotation in the config: standard-op rotations replaced by fused nodes
whose tables the config gives, and the caches of an attention node that rotates inside replaced by the config's.
Length-dependent types choose per run, as transformers does: LongRoPE's two regimes, dynamic NTK's frequencies
of the run's length."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from onnx import GraphProto, NodeProto, TensorProto, helper

import arrayrope
from arrayrope.config import rope_frequencies_from_config
from arrayrope.frequencies import RopeFrequencies

from ..audit._expect import Layer, length_context
from ..build._builder import Builder
from ..build._emit import emitter, heads_spec, rotate_heads
from ..build._fused import FusedEmitter, Switched
from ..build._lengths import LIMIT, ByLength, by_length_rows, table_bytes
from ..build._options import DTypeName
from ..build._spec import DTYPE_NAMES, Spec, np_dtype, onnx_dtype
from ..fuse._match import Graph, Site
from ..fuse._probe import shapes
from ..fuse._replace import _position_ids


def regimes(
    layer: Layer, config: Mapping[str, Any], rows: int | None
) -> tuple[RopeFrequencies, RopeFrequencies | ByLength | None, int]:
    """``(frequencies, long, changes)``: the frequencies of calls up to ``changes`` positions, and those of longer
    calls (None for types whose frequencies do not follow the call's length): one set (LongRoPE), or one per call
    length up to ``rows`` or the end of the context the config implies (dynamic NTK, whose frequencies grow with
    every length)."""
    context = length_context(layer.settings)
    if context is None:
        return layer.frequencies(config, 1), None, 0
    changes, reach, _ = context
    short, long = layer.frequencies(config, changes), layer.frequencies(config, reach)
    if np.array_equal(layer.frequencies(config, changes + 1).inv_freq, long.inv_freq):
        return short, long, changes
    lengths = range(changes + 1, max(rows or 0, reach) + 1)
    key = ("by length", repr(layer.settings), lengths)  # the cache layers of the same settings share
    size = table_bytes(lengths[0], lengths[-1], short.rotary_dim // 2)
    if size > LIMIT:
        raise ValueError(
            f"its frequencies follow the call's length ({short.rope_type}) up to {lengths[-1]} positions: tables of "
            f"{len(lengths)} lengths would take {size / 2**20:.0f} MiB of the graph (at most {LIMIT >> 20} MiB); pass "
            "a smaller max_positions"
        )
    if key not in layer.cache:
        made = [rope_frequencies_from_config(config, seq_len=n, layer_idx=layer.index) for n in lengths]
        layer.cache[key] = ByLength(
            changes + 1,
            np.stack([np.asarray(f.inv_freq, np.float64) for f in made]),
            np.array([f.attention_factor for f in made], np.float64),
        )
    by: ByLength = layer.cache[key]
    return short, by, changes


def standard_site(
    i: int,
    graph: Graph,
    site: Site,
    seen: Mapping[str, npt.NDArray[Any]],
    layer: Layer,
    config: Mapping[str, Any],
    rows: int | None,
    opset: int,
    shared: dict[Any, str],
    placed: int | None = None,
) -> tuple[Builder, str]:
    """The nodes that rotate ``site`` as ``layer`` says (ValueError where they cannot), and what they compute;
    large constants made once among the sites (``shared``). ``placed``: the layer the site's names said, which
    the new nodes' names say too (``arrayrope_repair/layers.3/...``), so that an audit places them again."""
    scope = f"arrayrope_repair/{i}/" if placed is None else f"arrayrope_repair/layers.{placed}/{i}/"
    b = Builder(scope, taken=graph.producer.keys() | graph.initializers.keys(), shared=shared)
    if layer.settings.nope:
        b.op("Identity", [site.x], out=site.rotated)
        return b, "no rotation: its layer takes no rotary embedding in the config"
    if layer.settings.rotary_features != "leading":
        raise ValueError("its rotary features are the trailing ones of each head (MLA), which repair does not write")
    shape = shapes(site, seen)
    if site.positions is None:
        raise ValueError("no integer positions were found that its tables are computed from")
    short, long, changes = regimes(layer, config, rows)
    mrope = layer.settings.mrope
    if shape.position_axes and mrope is None:
        raise ValueError(f"it reads M-RoPE position ids ({shape.position_axes}, batch, seq), and the config has none")
    if shape.position_axes and long is not None:
        raise ValueError("M-RoPE with a length-dependent rope type is not written")
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

    spec = spec_of(short)
    said = _said(short, rows)
    if long is None:
        rotate_heads(spec, b, emitter(spec, b), site.x, pos, site.rotated)
        return b, said
    # transformers takes the longer call's frequencies when its largest position id reaches ``changes``: one
    # node whose tables each run chooses, so that the rotation is one (the audit measures it call by call)
    if isinstance(long, ByLength):
        other: FusedEmitter | ByLength = long
        said += (
            f"; calls reaching position {changes} take the frequencies of their length (computed in the graph "
            f"for lengths up to {long.last}, NaN past it)"
        )
    else:
        other = FusedEmitter(spec_of(long), b)
        said += f"; calls reaching position {changes} take the long frequencies"
    rotate_heads(spec, b, Switched(FusedEmitter(spec, b), other, changes), site.x, pos, site.rotated)
    return b, said


def _said(freqs: RopeFrequencies, rows: int | None) -> str:
    kind = "" if freqs.rope_type == "default" else f"{freqs.rope_type}, "
    tables = "computed from the position ids" if rows is None else f"stored, {rows} rows"
    return f"RotaryEmbedding, {kind}base {freqs.base:g}, rotary_dim {freqs.rotary_dim}; tables {tables}"


def attention_caches(
    graph: Graph, node: NodeProto, layer: Layer, config: Mapping[str, Any], made: dict[Any, tuple[str, str]]
) -> tuple[Builder, str]:
    """New ``cos_cache`` and ``sin_cache`` for an attention node that rotates inside, and what they hold; the
    node's inputs point at them. Stored caches have a row for every position of the config's context (its own
    rows, if more). Dynamic NTK's are chosen per run: those stored below ``max_position_embeddings``, past it
    one row per position of the run, computed for its total length. The builder holds what the graph gains;
    caches in ``made`` are reused. A NoPE layer's node stops rotating."""
    b = Builder(f"arrayrope_repair/caches{len(made)}/", taken=graph.producer.keys() | graph.initializers.keys())
    if layer.settings.nope:
        next(a for a in node.attribute if a.name == "do_rotary").i = 0
        return b, "no rotation (do_rotary=0): its layer takes no rotary embedding in the config"
    if layer.settings.mrope is not None or layer.settings.rotary_features != "leading":
        raise ValueError("its config's rotation (M-RoPE, or trailing rotary features) has no cache form")
    cos = node.input[7]
    stored = graph.constant(cos) if graph.is_constant(cos) else None
    rows = max(0 if stored is None else int(stored.shape[0]), layer.settings.max_position_embeddings or 0)
    if not rows:
        raise ValueError("its caches are computed in the graph, and the config has no max_position_embeddings")
    elem = graph.elem_type(cos) or graph.elem_type(node.input[0]) or TensorProto.FLOAT  # else the query's type
    name = DTYPE_NAMES.get(elem, "float32")
    short, long, changes = regimes(layer, config, None)
    total = node.input[6] if len(node.input) > 6 else ""
    if long is not None and not total:
        raise ValueError("it has no total_sequence_length input to choose its caches by")
    key = (repr(layer.settings), rows, name, total)
    if key not in made:
        if long is None:
            made[key] = _stored_caches(b, short, rows, name)
        else:
            made[key] = _chosen_by_length(b, short, long, changes, total, rows, name)
    node.input[7], node.input[8] = made[key]
    interleaved = int(layer.layout == "interleaved")
    for a in node.attribute:
        if a.name == "rotary_interleaved":
            a.i = interleaved
            break
    else:
        node.attribute.append(helper.make_attribute("rotary_interleaved", interleaved))
    said = f"caches of {rows} rows, {short.rope_type}, base {short.base:g}, rotary_dim {short.rotary_dim}"
    if isinstance(long, ByLength):
        said += (
            f"; runs longer than {changes} positions take caches computed for their length in the graph "
            f"(lengths up to {long.last}, NaN past it)"
        )
    elif long is not None:
        said += f"; runs longer than {changes} positions take the long frequencies' caches"
    return b, said


def _stored_caches(b: Builder, freqs: RopeFrequencies, rows: int, dtype: DTypeName) -> tuple[str, str]:
    """``cos_cache`` and ``sin_cache`` of ``rows`` rows: the exact tables, rounded once to ``dtype``."""
    c, s = arrayrope.rope_tables(freqs, np.arange(rows, dtype=np.int64), dtype=np.float64)
    return b.const(np.asarray(c).astype(np_dtype(dtype)), "cos_cache"), b.const(
        np.asarray(s).astype(np_dtype(dtype)), "sin_cache"
    )


def _chosen_by_length(
    b: Builder,
    short: RopeFrequencies,
    long: RopeFrequencies | ByLength,
    changes: int,
    total: str,
    rows: int,
    dtype: DTypeName,
) -> tuple[str, str]:
    """``cos_cache`` and ``sin_cache`` chosen by an ``If`` on the run's total length: ``short``'s stored up to
    ``changes``, past it the long frequencies' (LongRoPE: stored too), or one row per position ``0 .. total - 1``
    computed for the frequencies of that length (dynamic NTK). Each branch holds its own constants."""
    length = b.op("Cast", [total], to=TensorProto.INT64)
    longer = b.op("Greater", [length, b.scalar(changes, "changes")])
    then, other = (Builder(f"{b.prefix}{hint}/", function=True, taken=b.taken) for hint in ("long", "short"))
    if isinstance(long, ByLength):
        grown = list(by_length_rows(then, long, length, dtype))
    else:
        grown = list(_stored_caches(then, long, rows, dtype))
    kept = list(_stored_caches(other, short, rows, dtype))
    elem = onnx_dtype(dtype)
    outs = [b.name("cos_cache"), b.name("sin_cache")]

    def branch(built: Builder, results: list[str], name: str) -> GraphProto:
        typed = [helper.make_tensor_value_info(t, elem, None) for t in results]
        return helper.make_graph(built.nodes, name, [], typed)

    b.nodes.append(
        helper.make_node(
            "If",
            [longer],
            outs,
            name=b.name("length_caches"),
            then_branch=branch(then, grown, "long"),
            else_branch=branch(other, kept, "short"),
        )
    )
    return outs[0], outs[1]
