"""Auditing a deployed model: does every rotation in it turn the way its checkpoint's config says?

``_expect`` reads each layer's rotation from the config, ``_measure`` finds every rotation in the graph
(subgraphs in standard ops, ``RotaryEmbedding`` nodes, attention nodes that rotate inside) and measures it,
``_judge`` compares them and names the first difference, ``_report`` says it (:class:`AuditReport`).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any

import onnx
from onnx import external_data_helper

from arrayrope.config import TransformersConfig

from .._graph import ModelSource, data_folder, load_model
from ..fuse._match import Graph
from ._expect import BLOCK, Expected, expected
from ._judge import Finding, judge
from ._measure import Rotation, rotations
from ._report import AuditReport

__all__ = ["AuditReport", "Finding", "audit_rotary", "audited"]


def audit_rotary(
    model: ModelSource, config: Mapping[str, Any] | str | os.PathLike[str] | TransformersConfig
) -> AuditReport:
    """Compare every rotation of an ONNX model with the rotation its checkpoint's config describes.

    Each rotation is found whatever its form: a subgraph in standard ops (as
    ``torch.onnx.export``, optimum-onnx and arrayrope write them), a ``RotaryEmbedding``
    node (standard or ``com.microsoft``), or an attention node that rotates inside
    (``com.microsoft.GroupQueryAttention`` with ``do_rotary=1``, its ``cos_cache`` and
    ``sin_cache`` stored, computed, or chosen by an ``If`` for LongRoPE's two regimes).
    Only the nodes that build tables and rotate are run, on ONNX Runtime's CPU
    provider; the model is read without its external data, and of its weights only
    the tensors those nodes read.

    Each rotation is measured (which features pair up, how many rotate, the factor on
    cos and sin, the length of its stored tables, the matrix it applies at each probed
    position) and compared with its layer's rotation in the config, as transformers
    computes it (family, layer types, layers without RoPE, the scaling's regimes), at
    positions near 0, on each side of ``original_max_position_embeddings``, at the end
    of ``max_position_embeddings`` and at the end of the model's own tables.

    Parameters
    ----------
    model : onnx.ModelProto or path
        The model (a ``.onnx`` file: its external data stays on disk).
    config : dict, TransformersConfig or path
        The checkpoint's ``config.json``, the folder holding it, or the parsed dict.

    Returns
    -------
    AuditReport
        One :class:`Finding` per rotation, its status and the first property that
        differs, in the config's terms; ``report.status`` and ``report.exit_status``
        conclude.

    Raises
    ------
    ValueError
        A model that does not load as ONNX (truncated, not ONNX), external data outside
        the model's folder, a config that cannot be read or describes no RoPE.
    TypeError
        ``model`` or ``config`` of another type.

    Examples
    --------
    >>> from arrayrope.export import audit_rotary, rotary_model
    >>> model = rotary_model(16, target="portable", max_positions=64, base=500000.0)
    >>> config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    >>> report = audit_rotary(model, config)
    >>> report.status, report.findings[0].difference
    ('failed', 'rope_theta 500000 found, 10000 expected')
    """
    start = time.perf_counter()
    exp = expected(config)  # the config first: it is small, and a bad one is refused before the model is read
    source = load_model(model, keep_external=True)
    folder = data_folder(model, source)
    name = "<ModelProto>" if isinstance(model, onnx.ModelProto) else os.fspath(model)
    where = (
        os.fspath(config)
        if isinstance(config, (str, os.PathLike))
        else "<dict>"
        if isinstance(config, Mapping)
        else f"<{type(config).__name__}>"
    )
    return audited(source, folder, exp, name, where, start)


def audited(
    source: onnx.ModelProto, folder: str | None, exp: Expected, name: str, where: str, start: float | None = None
) -> AuditReport:
    """The audit of a loaded model whose external data is in ``folder``, against the config ``exp`` describes."""
    start = time.perf_counter() if start is None else start
    _check_external(source, folder)
    graph = Graph(source, folder)
    _check_caches(graph, exp)
    first = exp.rope[0]
    found = rotations(graph, (first.settings.head_dim, first.frequencies(exp.config, BLOCK).rotary_dim))
    findings = tuple(_finding(r, exp, found) for r in found)
    placed = {r.layer for r in found}
    missing: tuple[tuple[int, str], ...] = ()
    if found and None not in placed:
        missing = tuple((lay.index, "expected: RoPE") for lay in exp.rope if lay.index not in placed)
    elif not found:
        missing = tuple((lay.index, "expected: RoPE") for lay in exp.rope)
    unplaced: tuple[str, ...] = ()
    if found and None in placed and len(found) < len(exp.rope):
        unplaced = (
            f"{len(found)} rotation{'s' if len(found) > 1 else ''} found for {len(exp.rope)} layers with RoPE, "
            "and the node names do not say which layers they belong to",
        )
    return AuditReport(name, where, exp.model_type, findings, missing, unplaced, time.perf_counter() - start)


def _finding(rotation: Rotation, exp: Expected, every: list[Rotation]) -> Finding:
    """``rotation`` judged against its layer; a rotation whose layer its names do not say is judged against the
    config's rotation where every layer with RoPE has the same one, and not verified otherwise."""
    if rotation.layer is not None and rotation.layer < len(exp.layers):
        return judge(rotation, exp.layers[rotation.layer], exp)
    if rotation.layer is not None:
        return Finding(
            rotation.name,
            rotation.kind,
            rotation.layer,
            "failed",
            f"{len(exp.layers)} layers",
            difference=f"its node names place it in layer {rotation.layer}, but the config has {len(exp.layers)}",
        )
    same = all(lay.settings == exp.rope[0].settings for lay in exp.rope)  # Settings hold dicts: not hashable
    if same and (len(exp.rope) == len(exp.layers) or len(every) <= 2 * len(exp.rope)):
        return judge(rotation, exp.rope[0], exp)
    return Finding(
        rotation.name,
        rotation.kind,
        None,
        "not verified",
        "one of several rotations the config's layers differ in",
        difference="its node names do not say which layer it belongs to, and the config's layers differ",
    )


_CACHE_KEY = re.compile(r"^past\w*?[._](\d+)[._]key$")  # past_key_values.3.key, the exporters' key caches


def _check_caches(graph: Graph, exp: Expected) -> None:
    """A config whose head dim the model's key caches contradict is refused: each layer's cached keys hold heads of
    the model's head dim, which no rotation of another width can be measured against (a partial rotation would
    pass for the whole head)."""
    for name in sorted(graph.inputs):
        m = _CACHE_KEY.match(name)
        shape = graph.shape(name) if m else None
        if m is None or not shape or len(shape) != 4 or not isinstance(shape[-1], int):
            continue
        index = int(m.group(1))
        if index >= len(exp.layers) or exp.layers[index].settings.rotary_features == "trailing":
            continue  # past the config's layers (said by the findings); MLA's caches hold other widths
        head = exp.layers[index].settings.head_dim
        if shape[-1] != head:
            raise ValueError(
                f"config: its head_dim is {head}, and the model's key cache {name!r} holds heads of {shape[-1]} "
                "features: the model and the config disagree; check that the config is the checkpoint's the model "
                "was made from"
            )


def _check_external(model: onnx.ModelProto, folder: str | None) -> None:
    """External data must lie in the model's folder (ONNX's loader refuses other paths, and so does the audit)."""
    if folder is None:
        return
    root = os.path.realpath(folder)
    for t in model.graph.initializer:
        if not external_data_helper.uses_external_data(t):
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        path = os.path.realpath(os.path.join(root, location))
        if os.path.isabs(location) or os.path.commonpath([root, path]) != root:
            raise ValueError(
                f"model: initializer {t.name!r} refers to external data {location!r} outside the model's folder "
                f"{folder!r}; ONNX refuses to read it, and so does the audit"
            )
