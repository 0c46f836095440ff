"""Shared oracles and tolerances of the conformance tests (independent of arrayrope's code).

Tolerances, and why:

* arrayrope against a float64 oracle: its tables are correctly rounded float64 values cast once,
  and the rotation runs in float32 for float32/float16/bfloat16 inputs and is rounded once, so the
  error is a few units of the output dtype: ``4 eps(dtype) * (|x1| + |x2|)`` per element.
* a library against arrayrope: the library's own float32 recipe. Its ``inv_freq`` is a float32
  ``pow`` whose exponent was rounded (relative error up to ``~eps32 * (2 + ln(base))``, checked
  first), its angle ``position * inv_freq`` is one more float32 rounding, and cos/sin of it are
  within an ulp: ``|d cos| <= att * (2 eps32 + |angle| * (rel_inv + eps32))``. Where the
  library works in a lower dtype (it casts its tables to float16/bfloat16), that dtype's rounding
  is added. The figures are recorded: a library that is imprecise shows it in its own column.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import numpy as np

EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
EPS32 = EPS["float32"]


def inv_freq_rtol(base: float) -> float:
    """Relative error bound of a float32 ``base ** (-2i / d)`` (the exponent's rounding times ln base)."""
    return 4 * EPS32 * (2 + np.log(base))


def table_bound(angles: np.ndarray, rel_inv: float, att: float = 1.0) -> np.ndarray:
    """Elementwise bound of |cos - cos_exact| for float32 tables whose frequencies err by ``rel_inv``."""
    return att * (2 * EPS32 + np.abs(angles) * (rel_inv + EPS32))


def rotate64(x: np.ndarray, angles: np.ndarray, layout: str, *, att: float = 1.0, trailing: bool = False) -> np.ndarray:
    """Float64 oracle: rotate pair i of the rotary features of ``x`` (..., S, D) by ``angles`` (S, r/2)."""
    x = np.asarray(x, dtype=np.float64)
    h = angles.shape[-1]
    r, d = 2 * h, x.shape[-1]
    start = d - r if trailing else 0
    out = x.copy()
    part = x[..., start : start + r]
    if layout == "half":
        idx1, idx2 = np.arange(h), np.arange(h) + h
    else:
        idx1, idx2 = np.arange(0, r, 2), np.arange(1, r, 2)
    c, s = att * np.cos(angles), att * np.sin(angles)
    x1, x2 = part[..., idx1], part[..., idx2]
    out[..., start + idx1] = x1 * c - x2 * s
    out[..., start + idx2] = x2 * c + x1 * s
    return out


def rotation_bound(
    x: np.ndarray, table_err: np.ndarray | float, dtype: str, layout: str, *, trailing: bool = False
) -> np.ndarray:
    """Elementwise bound of a rotation of ``x`` whose tables err by ``table_err`` (S, r/2) and whose result
    is rounded to ``dtype``: ``(|x1| + |x2|) * (table_err + 4 eps)`` on rotary features, ``4 eps |x|`` elsewhere."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    h = np.shape(table_err)[-1] if np.ndim(table_err) else None
    assert h is not None
    r, d = 2 * h, x.shape[-1]
    start = d - r if trailing else 0
    idx1, idx2 = (np.arange(h), np.arange(h) + h) if layout == "half" else (np.arange(0, r, 2), np.arange(1, r, 2))
    pair = x[..., start + idx1] + x[..., start + idx2]
    bound = 4 * EPS[dtype] * x
    bound[..., start + idx1] = pair * (table_err + 4 * EPS[dtype])
    bound[..., start + idx2] = pair * (table_err + 4 * EPS[dtype])
    return bound


def transformers_probe() -> Any:
    """``tools/_hf_probe`` (running transformers' own rotary code), or the calling test module skipped: without
    transformers or torch, or with another transformers release than the one arrayrope's family table comes
    from (``python tools/families.py`` regenerates it)."""
    import pytest

    from arrayrope.families import TRANSFORMERS_VERSION

    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    pytest.importorskip("torch", reason="torch is not installed")
    if transformers.__version__ != TRANSFORMERS_VERSION:
        pytest.skip(
            f"the table comes from transformers {TRANSFORMERS_VERSION}, this is {transformers.__version__}",
            allow_module_level=True,
        )
    tools = str(pathlib.Path(__file__).resolve().parents[2] / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import _hf_probe

    return _hf_probe
