"""The targets of the speed work, computed from the records: the figure reached and whether it is met.

Each target is evaluated per thread setting (``threads`` of each row); rows whose
figures were not measured under a setting are left out for it. Nothing here
asserts: a target not met is a row with ``met: False``, one that could not be
evaluated in this run ``met: None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Record = dict[str, Any]
Target = dict[str, Any]

def _fmt(v: float) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{v:.2f}"


def _find(records: list[Record], **keys: Any) -> list[Record]:
    return [r for r in records if all(r.get(k) == v for k, v in keys.items())]


def _over(r: Record, variant: str, base: str) -> float:
    """``variant``'s time over ``base``'s in one record (nan where either is missing)."""
    s = r["seconds"]
    a, b = s.get(variant, math.nan), s.get(base, math.nan)
    return a / b if b and not math.isnan(b) else math.nan


def _worst(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return max(finite) if len(finite) == len(values) and finite else math.nan


def targets(records: list[Record], meta: dict[str, Any]) -> list[Target]:
    """Every target under every thread setting of the run."""
    prefill = [list(p) for p in meta.get("prefill", [])]
    settings = meta.get("settings") or list(dict.fromkeys(r.get("threads", "1") for r in records))
    out: list[Target] = []
    for setting in settings:
        recs = [r for r in records if r.get("threads", "1") == setting]

        def add(name: str, goal: str, figure: str, met: bool | None, setting: str = setting) -> None:
            out.append({"target": name, "goal": goal, "threads": setting, "reached": figure, "met": met})

        _speed_targets(recs, prefill, add)
    return out


Add = Callable[..., None]


def _speed_targets(records: list[Record], prefill: list[list[int]], add: Add) -> None:
    """The targets of the speed work on one thread setting's records."""
    for layout in ("half", "interleaved"):
        recs = [r for shape in prefill for r in _find(records, section="apply", backend="numpy", shape=shape,
                                                      layout=layout, dtype="float32", rotary_dim=shape[-1])]
        if recs:
            worst = _worst([r["x_copy"]["arrayrope"] for r in recs])
            add(f"NumPy prefill, {layout}", "≤ 2.0× x.copy()",
                f"{', '.join(_fmt(r['x_copy']['arrayrope']) for r in recs)}× copy ({len(recs)} shapes)", worst <= 2.0)
            if all("ORT fused" in r["seconds"] for r in recs):
                ours = [_over(r, "arrayrope", "ORT fused") for r in recs]
                add(f"NumPy prefill, {layout}, vs ONNX Runtime", "ahead of ORT's fused kernel (same data, same run)",
                    f"{', '.join(_fmt(v) for v in ours)}× ORT's time "
                    f"(ORT {', '.join(_fmt(r['x_copy']['ORT fused']) for r in recs)}× copy)",
                    all(v < 1.0 for v in ours))
    mem = _find(records, section="memory", backend="numpy")
    if mem:
        worst = max(r["extra_over_x"]["arrayrope"] for r in mem)
        add("NumPy prefill peak extra memory", "≤ 0.5× size of x", f"{worst:.3f}× x (tracemalloc, both layouts)",
            worst <= 0.5)
    recs = [r for shape in prefill for layout in ("half", "interleaved")
            for r in _find(records, section="apply", backend="torch", shape=shape, layout=layout,
                           dtype="float32", rotary_dim=shape[-1])]
    if recs:
        worst = _worst([r["x_copy"]["arrayrope"] for r in recs])
        add("PyTorch CPU prefill", "≤ 3.0× x.clone()", f"{_fmt(worst)}× clone (worst of {len(recs)})", worst <= 3.0)
    recs = [r for r in _find(records, section="apply", backend="numpy", dtype="float32") if r["shape"][2] == 1]
    if recs:
        worst = _worst([_over(r, "arrayrope", "naive") for r in recs])
        shapes = len({tuple(r["shape"]) for r in recs})
        add("Decode apply_rotary (NumPy)", "≤ naive NumPy formula",
            f"{_fmt(worst)}× naive (worst of {len(recs)}: {shapes} shape{'s' if shapes > 1 else ''} × 2 layouts)",
            worst <= 1.0)
    recs = _find(records, section="embedding", backend="numpy")
    if recs:
        worst = _worst([_over(r, "RotaryEmbedding", "naive twice") for r in recs])
        add("Decode RotaryEmbedding q, k, offset (NumPy)", "≤ 2× naive formula applied twice",
            f"{_fmt(worst)}× naive twice (worst of {len(recs)})", worst <= 2.0)
    recs = _find(records, section="dask")
    if recs:
        worst = min(_over(r, "x * 1.0", "arrayrope") for r in recs)
        one = all(r["tasks_in_rotary_layer"] == r["chunks"] and not r["rechunks_x"] for r in recs)
        add("Dask 2 GiB chunked", "blockwise, one task per chunk, no rechunk; ≥ 0.5× throughput of x * 1.0",
            f"{_fmt(worst)}× throughput of x * 1.0; one task per chunk, x not rechunked: {one}", worst >= 0.5 and one)
    recs = _find(records, section="tables", backend="numpy")
    if recs:
        r = recs[0]
        err = r["max_error"]["arrayrope"]
        add(f"Tables {r['positions']} × {r['pairs']} (NumPy)", "error ≤ 1e-6, ≤ 2× float32 recipe",
            f"{r['x_recipe']['arrayrope']:.2f}× recipe, max error {err:.1e} "
            f"(recipe {r['max_error']['float32 recipe']:.1e})",
            err <= 1e-6 and r["x_recipe"]["arrayrope"] <= 2.0)
