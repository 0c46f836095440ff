"""The rows of a rotation's stored tables: how far its positions reach before its tables end (the probes of fuse
and audit stay within them)."""

from __future__ import annotations

import numpy as np

from ._match import _INT_VIEWS, Graph, Site


def held_rows(graph: Graph, site: Site) -> int | None:
    """The rows of stored tables a rotation reads by position (an existing node's own caches included), before
    their trailing rows of NaN; None where its tables are computed."""
    held = table_rows(graph, site.cos, site.positions)
    dims = graph.shape(site.cos) if site.node is not None and graph.is_constant(site.cos) else None
    if held is None and dims and len(dims) == 2 and isinstance(dims[0], int):
        held = finite_rows(graph, site.cos, dims[0])
    return held


def table_rows(graph: Graph, table: str, positions: str | None) -> int | None:
    """Rows of the stored tables that ``table`` gathers by position, None where it is computed."""
    rows = []
    for v in [table, *graph.walk(table, lambda v, n: [] if n is None else graph.data_inputs(n))]:
        node = graph.producer.get(v)
        if node is None or node.op_type != "Gather" or not graph.is_constant(node.input[0]):
            continue
        if positions is None or not _views_of(graph, node.input[1], positions):
            continue  # indices that are not the positions (a shape, a constant, a part of them)
        dims = graph.shape(node.input[0])
        if dims and isinstance(dims[0], int):
            rows.append(finite_rows(graph, node.input[0], dims[0]))
    return min(rows, default=None)


def _views_of(graph: Graph, name: str, positions: str) -> bool:
    """Whether ``name`` is ``positions`` through reshapes, casts and guards only (not split into parts)."""
    current: str | None = name
    for _ in range(64):
        if current == positions:
            return True
        node = graph.producer.get(current or "")
        if node is None or node.op_type not in _INT_VIEWS or not node.input:
            return False
        current = node.input[0]
    return False


def finite_rows(graph: Graph, table: str, rows: int) -> int:
    """The rows of a stored table before its trailing rows of NaN (the row arrayrope's graphs send ids past the
    table to)."""
    value = graph.constant(table)
    if value is None or value.ndim == 0 or not (value.dtype.kind == "f" or value.dtype.name == "bfloat16"):
        return rows
    finite = np.all(np.isfinite(value.astype(np.float32).reshape(value.shape[0], -1)), axis=1)
    last = np.flatnonzero(finite)
    return int(last[-1]) + 1 if last.size else rows
