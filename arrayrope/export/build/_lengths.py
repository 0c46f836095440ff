"""Cos/sin of frequencies that follow the call's length (dynamic NTK), computed in the graph from the position ids.

The host gives the frequencies of every call length the graph answers, in float64 (the
scaling registry's, length by length). The graph reads the row of its call's length
``L = max(position ids) + 1`` and turns each position by them in float32 without
forming a large angle: ``|p|`` is split into base-1024 digits ``d``, and each level's
frequency, in turns, into ``a + r``, ``a`` a multiple of ``2**-14`` (so ``d * a`` is exact
and so is its distance ``X`` to the nearest whole turn) and ``r`` the small rest. The
angle of a level is ``X * P1`` (exact: ``P1`` is ``2 * pi`` to 10 bits) plus a small part
``X * P2 + d * r`` (``P2 = 2 * pi - P1``); the exact parts and the sum of the small parts
are each turned by float32 Cos and Sin and composed with the angle-addition formula.
The error stays near float32 rounding at every position, where ``p * inv_freq`` in
float32 grows with the position. Calls longer than the rows given get NaN (a row of NaN
frequencies); negative ids turn backwards.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import numpy.typing as npt

from arrayrope._lib.digits import DIGIT_BITS

from ._builder import Builder
from ._options import DTypeName
from ._spec import onnx_dtype

F64 = npt.NDArray[np.float64]
_FRACTION_BITS = 14  # d * a exact in float32: 10 bits of digit, 14 of a
_P1 = round(2 * math.pi * 2**7) / 2**7  # 2 * pi to 10 significant bits: X * P1 exact (X has 14 bits)
_P2 = 2 * math.pi - _P1


@dataclasses.dataclass(frozen=True)
class ByLength:
    """Frequencies that follow the call's length: ``inv_freq[k]`` (float64, ``(n, rotary_dim / 2)``) turn the
    positions of a call of length ``first + k`` (its largest position id plus one), scaled by
    ``attention_factor[k]``."""

    first: int
    inv_freq: F64
    attention_factor: F64

    @property
    def last(self) -> int:
        """The longest call answered."""
        return self.first + len(self.inv_freq) - 1


def _levels(last: int) -> int:
    """Digit levels covering every position of a call of ``last`` positions."""
    return max(1, math.ceil(max(last - 1, 1).bit_length() / DIGIT_BITS))


def split_turns(by: ByLength) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """``(a, r)`` of shape ``(levels, n + 1, h)``: per digit level, the frequency in turns per unit of that digit
    reduced to ``[0, 1)`` and split into ``a`` (a multiple of ``2**-14``) and ``r`` (the rest, in radians); a last
    row of NaN for calls longer than the rows."""
    turns = by.inv_freq / (2 * math.pi)
    a, r = [], []
    for level in range(_levels(by.last)):
        u = np.mod(turns * float(1 << (DIGIT_BITS * level)), 1.0)  # exact: a power of two, then the fraction
        hi = np.round(u * 2**_FRACTION_BITS) / 2**_FRACTION_BITS
        a.append(hi)
        r.append((u - hi) * 2 * math.pi)
    nan = np.full((len(a), 1, by.inv_freq.shape[1]), np.nan)
    return (
        np.concatenate([np.stack(a), nan], axis=1).astype(np.float32),
        np.concatenate([np.stack(r), nan], axis=1).astype(np.float32),
    )


#: Bytes of the per-length tables a graph may hold (two float32 tables per digit level).
LIMIT = 1 << 28


def table_bytes(first: int, last: int, pairs: int) -> int:
    """Bytes of the constants :func:`split_turns` makes for calls of ``first`` to ``last`` positions."""
    return 2 * 4 * _levels(last) * (last - first + 2) * pairs


def _turn_constants(b: Builder, by: ByLength) -> tuple[list[str], list[str]]:
    """The constants of :func:`split_turns`, per level: made once per ``by`` among builders that share."""
    levels = _levels(by.last)
    keys = [(kind, id(by), level) for kind in ("turns", "rest") for level in range(levels)]
    if b.shared is not None and all(k in b.shared for k in keys):
        return [b.shared[k] for k in keys[:levels]], [b.shared[k] for k in keys[levels:]]
    a, r = split_turns(by)
    return (
        [b.const(a[level], f"level{level}_turns", key=("turns", id(by), level)) for level in range(len(a))],
        [b.const(r[level], f"level{level}_rest", key=("rest", id(by), level)) for level in range(len(r))],
    )


def _row(b: Builder, by: ByLength, length: str) -> str:
    """The row of the frequencies of a call of ``length`` (int64 scalar): the NaN row past the longest."""
    row = b.op("Sub", [length, b.scalar(by.first, "first_length")])
    return b.op("Clip", [row, b.scalar(0, "zero"), b.scalar(len(by.inv_freq), "nan_row")])


def _turned(b: Builder, turns: tuple[list[str], list[str]], row: str, magnitude: str, levels: range) -> tuple[str, str]:
    """float32 cos and sin ``(..., h)`` of the non-negative positions ``magnitude`` ``(..., 1)``, whose digits
    outside ``levels`` are 0, turned by the frequencies of ``row``."""
    a, r = turns
    exact: list[str] = []
    small: str | None = None
    for level in levels:
        digit = magnitude
        if level:
            digit = b.op("Div", [digit, b.const(np.array(1 << (DIGIT_BITS * level), np.int64), "radix")])
        if level < len(a) - 1:
            digit = b.op("Mod", [digit, b.const(np.array(1 << DIGIT_BITS, np.int64), "digit_mod")])
        d = b.op("Cast", [digit], to=onnx_dtype("float32"))
        at = b.op("Gather", [a[level], row], axis=0)  # (h,)
        rest = b.op("Gather", [r[level], row], axis=0)
        y = b.op("Mul", [d, at])
        x = b.op("Sub", [y, b.op("Round", [y])])  # exact: the distance to the nearest whole turn
        exact.append(b.op("Mul", [x, b.const(np.array(_P1, np.float32), "two_pi_high")]))
        part = b.op("Add", [b.op("Mul", [x, b.const(np.array(_P2, np.float32), "two_pi_low")]), b.op("Mul", [d, rest])])
        small = part if small is None else b.op("Add", [small, part])
    assert small is not None
    cos, sin = b.op("Cos", [small]), b.op("Sin", [small])
    for angle in exact:
        cos, sin = _composed(b, (cos, sin), (b.op("Cos", [angle]), b.op("Sin", [angle])))
    return cos, sin


def _composed(b: Builder, first: tuple[str, str], second: tuple[str, str]) -> tuple[str, str]:
    """cos and sin of the sum of two angles, from theirs (broadcasting)."""
    (c1, s1), (c2, s2) = first, second
    return (
        b.op("Sub", [b.op("Mul", [c1, c2]), b.op("Mul", [s1, s2])]),
        b.op("Add", [b.op("Mul", [s1, c2]), b.op("Mul", [c1, s2])]),
    )


def _finished(b: Builder, by: ByLength, row: str, cos: str, sin: str, dtype: DTypeName) -> tuple[str, str]:
    """cos and sin scaled by the attention factor of ``row``, in ``dtype``."""
    if np.any(by.attention_factor != 1.0):
        factors = np.append(by.attention_factor, np.nan).astype(np.float32)
        factor = b.op("Gather", [b.const(factors, "attention_factor"), row], axis=0)
        cos, sin = b.op("Mul", [cos, factor]), b.op("Mul", [sin, factor])
    if dtype != "float32":
        cos, sin = (b.op("Cast", [t], to=onnx_dtype(dtype)) for t in (cos, sin))
    return cos, sin


def by_length_cos_sin(b: Builder, by: ByLength, ids: str, dtype: DTypeName) -> tuple[str, str]:
    """cos and sin ``(B, S, h)`` in ``dtype`` at the int64 position ids ``(B, S)``, for the frequencies of the
    call's length (NaN for calls longer than ``by`` answers)."""
    turns = _turn_constants(b, by)
    row = _row(b, by, b.op("Add", [b.op("ReduceMax", [ids], keepdims=0), b.scalar(1, "one")]))
    signed = b.op("Unsqueeze", [ids, b.ints([-1], "last_axis")])  # (B, S, 1)
    cos, sin = _turned(b, turns, row, b.op("Abs", [signed]), range(len(turns[0])))
    direction = b.op("Cast", [b.op("Sign", [signed])], to=onnx_dtype("float32"))  # sin(0) = 0 either way
    return _finished(b, by, row, cos, b.op("Mul", [sin, direction]), dtype)


def by_length_rows(b: Builder, by: ByLength, length: str, dtype: DTypeName) -> tuple[str, str]:
    """cos and sin ``(length, h)`` in ``dtype``: rows ``0 .. length - 1`` for the frequencies of a call of
    ``length`` (an int64 scalar), a cache. The rotations of the low digit (1024 rows) and of the higher ones
    (one row per 1024 positions) are each computed once and composed on their grid."""
    turns = _turn_constants(b, by)
    length = b.op("Reshape", [length, b.ints([], "scalar")])  # a (1,) total length as well as a scalar
    row = _row(b, by, length)
    radix = 1 << DIGIT_BITS
    low = b.op(
        "Unsqueeze",
        [b.op("Range", [b.scalar(0, "zero"), b.scalar(radix, "radix"), b.scalar(1, "one")]), b.ints([-1], "last_axis")],
    )
    cos, sin = _turned(b, turns, row, low, range(1))  # (1024, h)
    levels = len(turns[0])
    if levels > 1:  # the higher digits' rotation of each block of 1024 rows, composed with each row's
        blocks = b.op("Div", [b.op("Add", [length, b.scalar(radix - 1, "round_up")]), b.scalar(radix, "radix")])
        starts = b.op(
            "Mul", [b.op("Range", [b.scalar(0, "zero"), blocks, b.scalar(1, "one")]), b.scalar(radix, "radix")]
        )
        hc, hs = _turned(b, turns, row, b.op("Unsqueeze", [starts, b.ints([-1], "last_axis")]), range(1, levels))
        grid = b.ints([1], "grid_axis")
        cos, sin = _composed(b, (b.op("Unsqueeze", [hc, grid]), b.op("Unsqueeze", [hs, grid])), (cos, sin))
    half = len(by.inv_freq[0])
    flat = b.ints([-1, half], "rows")
    end = b.op("Unsqueeze", [length, b.ints([0], "first_axis")])
    cos, sin = (
        b.op("Slice", [b.op("Reshape", [t, flat]), b.ints([0], "start"), end, b.ints([0], "first_axis")])
        for t in (cos, sin)
    )
    return _finished(b, by, row, cos, sin, dtype)
