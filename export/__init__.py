"""arrayrope.export: ONNX subgraphs that apply rotary embeddings in deployment graphs.

Imported as ``arrayrope.export``; it requires the ``onnx`` extra (and
``onnxruntime`` for :func:`validate`). The tables it embeds come from the core,
so exported graphs are as precise as arrayrope itself.
"""

from ._api import rotary_function, rotary_model
from ._spec import TARGETS
from ._splice import add_rotary
from ._validate import Check, ValidationError, ValidationReport, validate

__all__ = ["rotary_model", "rotary_function", "add_rotary", "validate", "ValidationReport", "ValidationError", "Check", "TARGETS"]


def _demo_case(head_dim: int = 128, *, target: str = "auto", layout: str = "half", max_positions: int = 8192) -> dict:
    """One export-and-validate row for ``arrayrope demo``: builds a model, validates it on CPU.

    Returns ``{"label", "nodes", "max_error", "tolerance", "ok", "seconds"}`` (errors over all
    ONNX Runtime and reference-evaluator runs); never raises on a mismatch.
    """
    import time

    t0 = time.perf_counter()
    model = rotary_model(head_dim, target=target, layout=layout, max_positions=max_positions)
    report = validate(model, providers="cpu", raise_on_failure=False)
    runs = [c for c in report.checks if c.max_error is not None]
    worst = max(runs, key=lambda c: c.max_error / c.tolerance) if runs else None
    from ._validate import _spec_of

    spec_target = _spec_of(model).target
    return {
        "label": f"onnx export ({spec_target}, {layout}) on onnxruntime CPU",
        "nodes": len(model.graph.node),
        "max_error": worst.max_error if worst else float("nan"),
        "tolerance": worst.tolerance if worst else float("nan"),
        "ok": report.ok,
        "seconds": time.perf_counter() - t0,
    }
