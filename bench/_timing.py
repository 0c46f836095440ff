"""Medians of repeated runs inside one process, the variants of a workload interleaved.

Variants of one workload run round-robin (a, b, c, a, b, c, ...) so that a change
of load on a shared machine touches them alike; each round times a batch of calls
long enough for the clock (about ``batch_s``), and the figure kept is the median
per-call time over the rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping


def measure(
    variants: Mapping[str, Callable[[], object]],
    *,
    sync: Callable[[], None] | None = None,
    rounds: int = 7,
    batch_s: float = 2e-3,
    budget_s: float = 20.0,
) -> dict[str, float]:
    """Median seconds per call of each variant (``nan`` for a variant that raised)."""
    sync = sync or (lambda: None)
    number: dict[str, int] = {}
    times: dict[str, list[float]] = {name: [] for name in variants}
    failed: dict[str, str] = {}
    for name, fn in variants.items():  # warm-up (compilation, caches) and batch size
        try:
            fn()
            fn()  # a second call may still fill a cache (prepared rows): the batch is sized on the warm calls
            sync()
            once = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                sync()
                once = min(once, time.perf_counter() - t0)
            once = max(once, 1e-7)
        except Exception as exc:  # a reference that does not support this case
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        number[name] = max(1, min(10000, int(batch_s / once)))
    start = time.perf_counter()
    for r in range(rounds):
        for name, fn in variants.items():
            if name in failed:
                continue
            n = number[name]
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            times[name].append((time.perf_counter() - t0) / n)
        if r >= 2 and time.perf_counter() - start > budget_s:
            break
    return {name: (statistics.median(ts) if ts else float("nan")) for name, ts in times.items()}
