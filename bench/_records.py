"""What the sections share: host tables, the naive formulas' tables, and records with their ratios.

A record is one workload's median seconds per variant (``seconds``) with every
variant's time over a reference timed in the same rounds: ``x_copy`` (a fresh
copy of x), ``x_naive`` (the naive formula) and ``x_ort`` (ONNX Runtime's fused
kernel), where the workload has them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

import arrayrope

from ._config import Shape
from ._libs import Lib

Say = Callable[[str], None]
Record = dict[str, Any]
Tables = tuple[Any, Any, Any, Any]
Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[Layout, ...] = ("half", "interleaved")


def host_tables(s: int, rdim: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 cos/sin tables (S, rdim/2) for positions 0..S-1, on the host."""
    cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(rdim), np.arange(s), dtype="float64")
    return cos, sin


def naive_tables(lib: Lib, cos: np.ndarray, sin: np.ndarray, dtype: str) -> Tables:
    """What a user of the naive formulas holds: tables in x's dtype, full width for half-split."""
    return (
        lib.array(np.concatenate([cos, cos], -1), dtype),
        lib.array(np.concatenate([sin, sin], -1), dtype),
        lib.array(cos, dtype),
        lib.array(sin, dtype),
    )


def ratios(times: dict[str, float], base: str) -> dict[str, float]:
    """Every time over the time of ``base`` (empty when ``base`` was not timed)."""
    ref = times.get(base)
    if ref is None or math.isnan(ref) or ref <= 0:
        return {}
    return {k: v / ref for k, v in times.items()}


def record(
    section: str,
    lib: str,
    shape: Shape | tuple[int, ...],
    layout: str,
    dtype: str,
    rdim: int,
    times: dict[str, float],
    copy: str = "copy",
    **extra: Any,
) -> Record:
    """One workload's record; ``copy`` names the variant ``x_copy`` is taken to."""
    return {
        "section": section,
        "backend": lib,
        "shape": list(shape),
        "layout": layout,
        "dtype": dtype,
        "rotary_dim": rdim,
        "seconds": times,
        "x_copy": ratios(times, copy),
        **extra,
    }
