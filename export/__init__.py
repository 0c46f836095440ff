"""arrayrope.export: ONNX subgraphs that apply rotary embeddings in deployment graphs.

Imported as ``arrayrope.export``; it requires the ``onnx`` extra (and
``onnxruntime`` for :func:`validate`). The tables it embeds come from the core,
so exported graphs are as precise as arrayrope itself.
"""

from __future__ import annotations

from typing import Any

from ._api import rotary_function, rotary_model
from ._spec import TARGETS
from ._splice import add_rotary
from ._validate import Check, ValidationError, ValidationReport, _spec_of, validate

__all__ = ["rotary_model", "rotary_function", "add_rotary", "validate", "ValidationReport", "ValidationError", "Check", "TARGETS"]


def _demo_case(head_dim: int = 128, *, target: str = "auto", layout: str = "half", max_positions: int = 8192) -> Any:
    """The demo's export row: a model built and validated on ONNX Runtime (CUDA first, then CPU).

    Returns a :class:`~arrayrope.testing.ParityReport` with one row per run (each provider at
    both optimisation levels, and ONNX's reference evaluator), each compared with the float64
    core by :func:`validate`; a mismatch is a failed row, never an exception.
    """
    import math

    from arrayrope.testing import ParityReport, ParityRow

    model = rotary_model(head_dim, target=target, layout=layout, max_positions=max_positions)
    report = validate(model, raise_on_failure=False)
    name = f"ONNX export ({_spec_of(model).target}, {layout}, {len(model.graph.node)} node(s)), validated"
    rows, skipped = [], []
    for check in report.checks:
        if check.passed is None:
            skipped.append((check.name, check.detail))
        elif check.max_error is not None:
            runtime, _, where = check.name.partition(" ")
            rows.append(ParityRow(runtime, where.strip("()") or "-", "float32", check.max_error, math.nan,
                                  check.tolerance, bool(check.passed), check.detail, name))
        elif not check.passed:
            rows.append(ParityRow(check.name, "-", "-", math.nan, math.nan, math.nan, False, check.detail, name))
    return ParityReport(tuple(rows), tuple(skipped))
