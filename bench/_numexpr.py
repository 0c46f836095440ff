"""numexpr, the fused-expression engine for NumPy, on the bench's data: the rotation as two expressions.

A trial reference: each rotated half (half-split) or each of the even and odd features (interleaved)
is one ``numexpr.evaluate`` over views of x, written with ``out=`` into one preallocated output, in
numexpr's blocks and threads (``NUMEXPR_NUM_THREADS``, pinned with the other pools under "1 thread").
Timed where numexpr is installed; arrayrope does not depend on it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np


def available() -> bool:
    return importlib.util.find_spec("numexpr") is not None


def fused_rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, *, layout: str) -> Callable[[], Any]:
    """A callable rotating x (..., S, D) by tables (S, D/2) of x's dtype into one preallocated output."""
    import numexpr

    h = cos.shape[-1]
    c, s = cos.astype(x.dtype), sin.astype(x.dtype)
    out = np.empty_like(x)
    if layout == "half":
        a, b, oa, ob = x[..., :h], x[..., h:], out[..., :h], out[..., h:]
    else:
        a, b, oa, ob = x[..., 0::2], x[..., 1::2], out[..., 0::2], out[..., 1::2]
    names = {"a": a, "b": b, "c": c, "s": s}

    def run() -> np.ndarray:  # numexpr keeps each expression compiled after its first call
        numexpr.evaluate("a * c - b * s", local_dict=names, out=oa)
        numexpr.evaluate("b * c + a * s", local_dict=names, out=ob)
        return out

    return run
