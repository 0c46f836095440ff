"""A far position costs what it uses: a fresh RotaryEmbedding's first decode step at a large offset.

Against a warm decode step of the same instance type (tables cached, median over
rounds); the peak memory of the first call is NumPy's, through ``tracemalloc``.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

import arrayrope

from ._config import Config
from ._libs import Lib
from ._records import Record, Say, ratios
from ._timing import measure


def far_cases(lib: Lib, config: Config, say: Say) -> list[Record]:
    """One record per offset of ``config.far_offsets``."""
    return [far_case(lib, config, offset, say) for offset in config.far_offsets]


def far_case(lib: Lib, config: Config, offset: int, say: Say) -> Record:
    """Fresh instances at ``offset`` against a warm call; q (1, 8, 1, 128), k (1, 2, 1, 128)."""
    say(f"far position: {lib.name} fresh RotaryEmbedding at offset {offset}")
    rng = np.random.default_rng(5)
    q = lib.array(rng.standard_normal((1, 8, 1, 128)), "float32")
    k = lib.array(rng.standard_normal((1, 2, 1, 128)), "float32")
    ready, sync = lib.ops.ready, lib.sync
    warm = arrayrope.RotaryEmbedding(128)

    def step(rope: arrayrope.RotaryEmbedding, offset: int) -> tuple[Any, Any]:
        q_rot, k_rot = rope(q, k, offset=offset)
        return ready(q_rot), ready(k_rot)

    step(warm, 1000)
    variants: dict[str, Callable[[], object]] = {"warm decode step": lambda: step(warm, 1000)}
    times = measure(variants, sync=sync, rounds=config.rounds, batch_s=config.batch_s)
    fresh: list[float] = []
    for _ in range(max(1, min(3, config.rounds))):
        rope = arrayrope.RotaryEmbedding(128)
        sync()
        t0 = time.perf_counter()
        step(rope, offset)
        sync()
        fresh.append(time.perf_counter() - t0)
        del rope
    peak = None
    if lib.backend.library == "numpy":  # NumPy reports its allocations to tracemalloc
        tracemalloc.start()
        step(arrayrope.RotaryEmbedding(128), offset)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    times[f"fresh, offset {offset}"] = statistics.median(fresh)
    return {
        "section": "far",
        "backend": lib.name,
        "shape": [1, 8, 1, 128],
        "layout": "half",
        "dtype": "float32",
        "rotary_dim": 128,
        "seconds": times,
        "offset": offset,
        "x_warm": ratios(times, "warm decode step"),
        "peak_MB": peak,
    }
