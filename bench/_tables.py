"""cos/sin tables for positions 0..N-1: arrayrope against the float32 recipe users write, time and error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import arrayrope
from arrayrope.testing import to_numpy

from ._config import Config
from ._libs import Lib
from ._records import Record, Say
from ._timing import measure


def tables_case(lib: Lib, config: Config, say: Say) -> Record:
    """``arange(n)[:, None] * inv_freq`` in float32 then cos, sin, against ``rope_tables(f, n)``."""
    n = config.table_positions
    f = arrayrope.rope_frequencies(128)
    say(f"tables: {lib.name} {n} positions x 64")
    ready, xp, dev = lib.ops.ready, lib.backend.xp, lib.backend.device
    inv = lib.array(f.inv_freq.astype(np.float32))

    def recipe() -> tuple[Any, Any]:
        a = xp.arange(n, dtype=xp.float32, device=dev)[:, None] * inv
        return ready(xp.cos(a)), ready(xp.sin(a))

    variants: dict[str, Callable[[], tuple[Any, Any]]] = {
        "float32 recipe": recipe,
        "arrayrope": lambda: tuple(ready(t) for t in arrayrope.rope_tables(f, n, xp=xp, device=dev)),
    }
    if lib.backend.native is np:  # positions given as an array: the pure Array API path
        variants["reference path"] = lambda: arrayrope.rope_tables(f, np.arange(n))
    times = measure(variants, sync=lib.sync, rounds=min(3, config.rounds), batch_s=0.0, budget_s=60.0)
    errors = {name: _table_error(*fn(), f.inv_freq) for name, fn in variants.items()}
    return {
        "section": "tables",
        "backend": lib.name,
        "positions": n,
        "pairs": 64,
        "seconds": times,
        "x_recipe": {k: v / times["float32 recipe"] for k, v in times.items()},
        "max_error": errors,
    }


def _table_error(c: Any, s: Any, inv: np.ndarray) -> float:
    """Largest error of the tables against float64 cos and sin, in blocks of 65536 positions."""
    c, s = to_numpy(c).astype(np.float64), to_numpy(s).astype(np.float64)
    worst = 0.0
    for i in range(0, c.shape[0], 1 << 16):
        a = np.arange(i, min(i + (1 << 16), c.shape[0]), dtype=np.float64)[:, None] * inv
        worst = max(
            worst,
            float(np.abs(c[i : i + len(a)] - np.cos(a)).max()),
            float(np.abs(s[i : i + len(a)] - np.sin(a)).max()),
        )
    return worst
