"""Repairing a deployed model: every rotation the audit finds wrong rewritten to its layer's rotation in the
checkpoint's config, the rest kept, and the written model audited again.

``_rewrite`` builds one rotation's replacement (standard-op rotations become fused nodes on the config's tables;
an attention node that rotates inside gets the config's caches), ``_report`` says what changed
(:class:`RepairReport`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx

from arrayrope._lib import checks
from arrayrope.config import TransformersConfig

from .._graph import ModelSource, data_folder, load_model, reads
from ..audit import audit_rotary, audited
from ..audit._expect import Layer, expected, length_context
from ..audit._judge import Finding
from ..audit._measure import cut_from_head
from ..build._spec import MIN_OPSET, MS_DOMAIN
from ..fuse._edit import rewritten
from ..fuse._match import ROTATING_ATTENTION, Graph, find_sites
from ..fuse._probe import run, sample_inputs
from ..fuse._rewrite import _converted, _opset
from ._report import Change, Repaired, RepairReport
from ._rewrite import attention_caches, standard_site

__all__ = ["Change", "RepairReport", "Repaired", "repair_rotary"]


def repair_rotary(
    model: ModelSource,
    config: Mapping[str, Any] | str | os.PathLike[str] | TransformersConfig,
    *,
    max_positions: int | None = None,
    inputs: Mapping[str, npt.ArrayLike] | None = None,
) -> Repaired:
    """Rewrite every rotation of a model that differs from its checkpoint's config to the config's rotation.

    The model is audited (:func:`audit_rotary`); each rotation that fails is rewritten
    and each that matches is kept as it is. A rotation in standard ops becomes the
    standard ``RotaryEmbedding`` (the model is converted to opset 23 if older) on the
    config's tables for its layer: computed in the graph from the position ids by the
    exact float32 method, or stored with ``max_positions`` rows. LongRoPE's two regimes
    are both written, and each run takes the long one when its largest position id
    reaches ``original_max_position_embeddings``, as transformers chooses. Dynamic NTK
    takes the frequencies of each run's length (its largest position id plus one) past
    ``max_position_embeddings``, computed in the graph for every length up to the end
    of the context the config implies (or ``max_positions``); longer runs give NaN. A
    ``GroupQueryAttention`` that rotates inside gets the config's ``cos_cache`` and
    ``sin_cache``, with a row for every position below ``max_position_embeddings`` (or
    as many as it had). The repaired model is then audited again.

    Parameters
    ----------
    model : onnx.ModelProto or path
        The model; it is not modified.
    config : dict, TransformersConfig or path
        The checkpoint's ``config.json``, the folder holding it, or the parsed dict.
    max_positions : int, optional
        A bound on the positions: tables of this many rows are stored. Default:
        cos/sin computed in the graph, right at every position below ``2**30`` (dynamic NTK's
        frequencies for calls up to the context the config implies, NaN past it; this bound,
        where given, extends that).
    inputs : mapping, optional
        Inputs for the run that measures shapes (default: made from the input
        types, as :func:`fuse_rotary` makes them).

    Returns
    -------
    Repaired
        ``(model, report)``: the repaired model and a :class:`RepairReport` (each
        rotation before and after, and the audit of the repaired model).

    Raises
    ------
    ValueError
        A config without RoPE, a model with no rotation, a model that does not load.

    Examples
    --------
    >>> from arrayrope.export import repair_rotary, rotary_model
    >>> model = rotary_model(16, target="portable", max_positions=64, base=500000.0)
    >>> config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    >>> repaired, report = repair_rotary(model, config)
    >>> report.changes[0].before
    'rope_theta 500000 found, 10000 expected'
    >>> report.status, report.repaired
    ('verified', 1)
    """
    exp = expected(config)
    rows = None if max_positions is None else checks.positive_int(max_positions, "max_positions")
    context = max((_context(lay) for lay in exp.rope), default=0)
    if rows is not None and rows < context:
        raise ValueError(
            f"max_positions={rows} stores fewer rows than the {context} positions of the config's context "
            f"(max_position_embeddings, or what its scaling extends it to); pass max_positions >= {context}, or "
            "leave it out to compute the tables in the graph"
        )
    source = load_model(model, keep_external=True)
    folder = data_folder(model, source)
    before = audit_rotary(model, config)
    if not before.findings:
        raise ValueError(f"nothing to repair: {before.verdict()}")
    work = onnx.ModelProto()
    work.CopyFrom(source)
    sites = find_sites(Graph(work, folder))
    wrong = [i for i, f in enumerate(before.findings) if f.status == "failed"]
    if any(i < len(sites) for i in wrong) and _opset(work) < MIN_OPSET["onnx23"]:
        try:
            work = _converted(work, MIN_OPSET["onnx23"])
        except ValueError as exc:
            raise ValueError(
                f"model: its rotations are rewritten as the standard RotaryEmbedding of opset "
                f"{MIN_OPSET['onnx23']}, and onnx could not convert the model from opset {_opset(work)}: "
                f"{exc.__cause__ or exc}"
            ) from exc
    graph = Graph(work, folder)
    sites = find_sites(graph)
    attention = [
        n
        for n in graph.nodes
        if n.domain == MS_DOMAIN
        and n.op_type in ROTATING_ATTENTION
        and any(a.name == "do_rotary" and a.i == 1 for a in n.attribute)
    ]
    if len(sites) + len(attention) != len(before.findings):  # the audit found them in this order
        raise ValueError("model: the rotations found after converting it to opset 23 differ from those audited")
    feed = sample_inputs(graph) if inputs is None else {k: np.asarray(v) for k, v in inputs.items()}
    wanted = [n for i in wrong if i < len(sites) for n in (sites[i].cos, sites[i].positions) if n]
    wanted += [site.x for site in sites]  # every rotation's width, checked against the config's
    wanted = list(dict.fromkeys(n for n in wanted if n not in feed))
    seen = {**feed, **run(work, feed, wanted, folder=folder)} if wanted else feed
    contradiction = _contradiction(exp, graph, sites, attention, seen, before.findings)
    if contradiction:
        raise ValueError(
            f"config: {contradiction}: the model and the config disagree on its shape, which repair does not "
            "change; check that the config is the checkpoint's the model was made from"
        )
    changes, nodes, inits, replaced = [], [], [], set()
    made: dict[Any, tuple[str, str]] = {}  # caches written once, whichever nodes read them
    shared: dict[Any, str] = {}  # per-length tables made once for every site that reads them
    for i, finding in enumerate(before.findings):
        change = Change(finding.name, finding.kind, finding.layer, finding.difference, "")
        if finding.status != "failed":
            kept = "it matches the config" if finding.status == "verified" else f"not measured: {finding.difference}"
            changes.append(change._replace(reason=kept))
            continue
        try:
            layer = _layer(finding, exp)
            if i < len(sites):
                b, after = standard_site(
                    i, graph, sites[i], seen, layer, exp.config, rows, MIN_OPSET["onnx23"], shared, finding.layer
                )
                nodes += b.nodes
                inits += b.initializers
                replaced.add(sites[i].rotated)
            else:
                b, after = attention_caches(graph, attention[i - len(sites)], layer, exp.config, made)
                nodes += b.nodes
                inits += b.initializers
                replaced.update(o for n in b.nodes for o in n.output)
            changes.append(change._replace(after=after, repaired=True))
        except ValueError as exc:
            changes.append(change._replace(reason=str(exc)))
    if not any(c.repaired for c in changes):  # the model as it was (a copy): its audit stands
        kept = source
        if source is model:
            kept = onnx.ModelProto()
            kept.CopyFrom(source)
        return Repaired(kept, RepairReport(tuple(changes), before, before, folder))
    out = rewritten(work, nodes, inits, replaced, contrib=False)
    read = {name for n in out.graph.node for name in reads(n)} | {o.name for o in out.graph.output}
    kept_inits = [t for t in out.graph.initializer if t.name in read]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept_inits)
    after_audit = audited(out, folder, exp, before.model, before.config)
    return Repaired(out, RepairReport(tuple(changes), before, after_audit, folder))


def _contradiction(
    exp: Any,
    graph: Graph,
    sites: list[Any],
    attention: list[Any],
    seen: Mapping[str, npt.NDArray[Any]],
    findings: tuple[Finding, ...],
) -> str:
    """How the model contradicts the config (empty where it does not): a layer past the config's, rotations of
    another width than its head (or rotary) dim, attention nodes of other head counts."""
    named = [f.layer for f in findings if f.layer is not None]
    if named and max(named) >= len(exp.layers):
        return f"num_hidden_layers is {len(exp.layers)}, and the model rotates in layer {max(named)}"
    for i, site in enumerate(sites):
        x = seen.get(site.x)
        try:
            layer = _layer(findings[i], exp)
        except ValueError:
            continue
        if x is None or x.ndim != 4 or layer.settings.nope:
            continue
        freqs = layer.frequencies(exp.config, 1)
        width = int(x.shape[-1])
        if width != freqs.head_dim and not (width == freqs.rotary_dim and cut_from_head(graph, site.x)):
            return (
                f"its head_dim is {freqs.head_dim} (rotary dim {freqs.rotary_dim}), and the model's rotation "
                f"{findings[i].name} turns vectors of {width} features"
            )
    config = exp.config
    for j, node in enumerate(attention):
        attrs = {a.name: a.i for a in node.attribute}
        for key, attr in (("num_attention_heads", "num_heads"), ("num_key_value_heads", "kv_num_heads")):
            stated = config.get(key)  # compared where the config names it so
            if isinstance(stated, int) and attr in attrs and attrs[attr] != stated:
                return f"{key} is {stated}, and the model's {node.op_type} {node.name!r} has {attr}={attrs[attr]}"
        try:
            layer = _layer(findings[len(sites) + j], exp)
        except ValueError:
            continue
        query = graph.shape(node.input[0])
        heads, kv = attrs.get("num_heads", 0), attrs.get("kv_num_heads", 0)
        packed = len(node.input) < 2 or not node.input[1]
        parts = heads + 2 * kv if packed else heads
        if query and isinstance(query[-1], int) and parts and not layer.settings.nope:
            width, d = query[-1] // parts, layer.frequencies(config, 1).head_dim
            if width != d:
                return f"its head_dim is {d}, and the model's {node.op_type} {node.name!r} has heads of {width}"
    return ""


def _context(layer: Layer) -> int:
    """The positions a layer's rotation must cover: the end of the context its config implies."""
    extended = length_context(layer.settings)
    return extended[1] if extended is not None else layer.settings.max_position_embeddings or 0


def _layer(finding: Finding, exp: Any) -> Layer:
    """The layer of the config a rotation belongs to (ValueError where its names do not say and layers differ)."""
    if finding.layer is not None and finding.layer < len(exp.layers):
        layer: Layer = exp.layers[finding.layer]
        return layer
    if finding.layer is None and all(lay.settings == exp.rope[0].settings for lay in exp.rope):
        first: Layer = exp.rope[0]
        return first
    raise ValueError("its node names do not say which layer it belongs to, and the config's layers differ")
