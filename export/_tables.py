"""Cos/sin for the graph: the core's tables, shaped and stored; in portable graphs, gathered by position.

Nothing here recomputes the math. Constant tables are :func:`arrayrope.rope_tables`
in float64 on the host, cast to the graph's dtype; computed tables compose the
digit rotations of :func:`arrayrope._lib.digits.digit_rotations` in the graph,
as the core's exact float32 method does.

Portable graphs fold the sign of the rotation into the sin table and lay both
tables out in the feature order of the layout, ``C = [cos, cos]`` and
``S = [-sin, sin]`` (half-split: halves; interleaved: pairs), so that
``y = x * C + swap(x) * S``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

import arrayrope
from arrayrope._lib.digits import DIGIT_BITS, digit_rotations

from ._builder import Builder
from ._spec import DIGIT_LEVELS, Spec

F64 = npt.NDArray[np.float64]


def host_tables(spec: Spec) -> tuple[F64, F64]:
    """cos, sin of shape (max_positions, rotary_dim/2) in float64, from the core."""
    cos, sin = arrayrope.rope_tables(spec.freqs, spec.options.max_positions, xp=np, dtype=np.float64)
    return np.asarray(cos), np.asarray(sin)


def five_d(spec: Spec) -> bool:
    """3-D half-split input with full rotation works on a (B, S, N, 2, r/2) view."""
    o = spec.options
    return o.rank == 3 and o.layout == "half" and spec.rotary_dim == spec.head_dim


def _in_layout(spec: Spec, a: F64, b: F64) -> F64:
    """(..., h) tables for the first and second partner -> (..., r) in the layout's feature order."""
    if spec.options.layout == "half":
        return np.concatenate([a, b], axis=-1)
    return np.stack([a, b], axis=-1).reshape((*a.shape[:-1], 2 * a.shape[-1]))


def _rows_shape(spec: Spec, t: F64) -> F64:
    """Tables (P, r) shaped so that rows gathered by the position index broadcast against the input."""
    if five_d(spec):
        return t.reshape(t.shape[0], 1, 2, spec.rotary_dim // 2)
    return t[:, None] if spec.options.rank == 3 else t


def _table(spec: Spec, b: Builder, a: F64, second: F64, hint: str) -> str:
    """A constant of the portable form of a table pair, in the compute dtype."""
    return b.const(_rows_shape(spec, _in_layout(spec, a, second)).astype(spec.compute_dtype), hint)


def constant_rows(spec: Spec, b: Builder, index: str) -> tuple[str, str]:
    """C and S gathered from stored tables by ``index``."""
    cos, sin = host_tables(spec)
    c = _table(spec, b, cos, cos, "cos_table")
    n = _table(spec, b, -sin, sin, "sin_table")
    return b.op("Gather", [c, index], axis=0), b.op("Gather", [n, index], axis=0)


def _digit(b: Builder, index: str, level: int) -> str:
    """Digit ``level`` of the positions in base ``2**DIGIT_BITS``."""
    digit = index
    if level:
        digit = b.op("Div", [digit, b.const(np.array(1 << (DIGIT_BITS * level), np.int64), "radix")])
    if level < DIGIT_LEVELS - 1:  # the top digit is not reduced: Gather rejects positions past the range
        digit = b.op("Mod", [digit, b.const(np.array(1 << DIGIT_BITS, np.int64), "digit_mod")])
    return digit


def computed_rows(spec: Spec, b: Builder, index: str) -> tuple[str, str]:
    """C and S from base-1024 digits of the positions, composed with the angle-addition formula.

    Each digit's rotation comes from the core's float64 digit tables, stored in the
    compute dtype (float32, or float64 for a float64 graph); composing them keeps
    the error near float32 rounding at any position below 1024**3. The attention
    factor scales the lowest digit's rotation, so it enters the product once.
    """
    factor = spec.freqs.attention_factor
    rows: tuple[str, str] | None = None
    for level in range(DIGIT_LEVELS):
        dc, ds = digit_rotations(spec.freqs.inv_freq, level)
        if level == 0 and factor != 1.0:
            dc, ds = dc * factor, ds * factor
        ct = _table(spec, b, dc, dc, f"digit{level}_cos")
        st = _table(spec, b, ds, ds, f"digit{level}_sin")
        digit = _digit(b, index, level)
        dcos, dsin = b.op("Gather", [ct, digit], axis=0), b.op("Gather", [st, digit], axis=0)
        if rows is None:
            rows = dcos, dsin
        else:
            c, n = rows
            rows = (
                b.op("Sub", [b.op("Mul", [c, dcos]), b.op("Mul", [n, dsin])]),
                b.op("Add", [b.op("Mul", [n, dcos]), b.op("Mul", [c, dsin])]),
            )
    if rows is None:
        raise AssertionError("DIGIT_LEVELS >= 1")
    ones = np.ones((1, spec.rotary_dim // 2))
    sign = _rows_shape(spec, _in_layout(spec, -ones, ones))[0].astype(spec.compute_dtype)
    return rows[0], b.op("Mul", [rows[1], b.const(sign, "sign")])

