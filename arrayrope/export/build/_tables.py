"""Cos/sin for the graph: the core's tables, shaped and stored; in portable graphs, gathered by position.

Nothing here recomputes the math. Constant tables are :func:`arrayrope.rope_tables`
in float64 on the host, cast to the graph's dtype; computed tables compose the
digit rotations of :func:`arrayrope._lib.digits.digit_rotations` in the graph,
as the core's exact float32 method does.

Portable graphs fold the sign of the rotation into the sin table and lay both
tables out in the feature order of the layout, ``C = [cos, cos]`` and
``S = [-sin, sin]`` (half-split: halves; interleaved: pairs), so that
``y = x * C + swap(x) * S``.

Positions outside the tables. A graph cannot raise, so it must not answer a
position it has no table row for with another row. Every stored table has one
row more, of NaN, at index ``max_positions``, and position ids go through
:func:`guard`, which sends every id outside ``[0, max_positions)`` to that row: the
rotated features of such a position are NaN on every runtime. Computed tables
rotate every id in ``(-2**30, 2**30)`` exactly (negative ids backwards) and send
the others to a NaN row of the top digit's table.

M-RoPE (position ids ``(axes, batch, seq)``) selects from these rows in :mod:`._mrope`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

import arrayrope
from arrayrope._lib.digits import DIGIT_BITS, digit_rotations

from .._graph import PROTOBUF_LIMIT
from ._builder import Builder
from ._spec import COMPUTED_LIMIT, DIGIT_LEVELS, Spec, np_dtype, onnx_dtype

F64 = npt.NDArray[np.float64]
#: Rows of the float64 tables computed at a time (bounds the host memory of large tables).
_BLOCK = 1 << 16
#: Bytes of a model other than its tables (graph, metadata), kept free under the protobuf limit.
_MODEL_BYTES = 1 << 20


def host_tables(spec: Spec, dtype: npt.DTypeLike) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """cos, sin of shape (max_positions + 1, rotary_dim/2) in ``dtype``: the core's float64 tables
    rounded once, in blocks of rows, and a last row of NaN for positions outside the table."""
    n, h = spec.options.rows, spec.rotary_dim // 2
    cos, sin = np.empty((n + 1, h), dtype), np.empty((n + 1, h), dtype)
    for start in range(0, n, _BLOCK):
        pos = np.arange(start, min(n, start + _BLOCK))
        c, s = arrayrope.rope_tables(spec.freqs, pos, xp=np, dtype=np.float64)
        cos[start : start + len(pos)], sin[start : start + len(pos)] = c, s
    cos[n], sin[n] = np.nan, np.nan
    return cos, sin


def table_bytes(spec: Spec) -> int:
    """Bytes of the tables a graph of ``spec`` stores."""
    o = spec.options
    if o.tables == "computed":  # digit tables, C and S per level, (1024 + 1) x rotary_dim each
        return DIGIT_LEVELS * 2 * ((1 << DIGIT_BITS) + 1) * spec.rotary_dim * np.dtype(spec.compute_dtype).itemsize
    if spec.target == "portable":  # C and S, (max_positions + 1) x rotary_dim in the compute dtype
        return 2 * (o.rows + 1) * spec.rotary_dim * np.dtype(spec.compute_dtype).itemsize
    return 2 * (o.rows + 1) * (spec.rotary_dim // 2) * np_dtype(o.dtype).itemsize


def check_size(spec: Spec, model_bytes: int = 0) -> None:
    """Raise when the tables (and ``model_bytes`` already in the model) exceed what ONNX can store."""
    need = table_bytes(spec)
    room = PROTOBUF_LIMIT - _MODEL_BYTES - model_bytes
    if need <= room:
        return
    o = spec.options
    per_row = need // (o.rows + 1)
    largest = max(0, room // per_row - 1)
    raise ValueError(
        f"max_positions={o.max_positions} needs {need / 1e9:.2f} GB of cos/sin tables ({per_row} bytes per position "
        f"for target={spec.target!r}, rotary_dim={spec.rotary_dim}, dtype={o.dtype})"
        + (f" on top of the model's {model_bytes / 1e9:.2f} GB" if model_bytes else "")
        + f", but an ONNX model is at most {PROTOBUF_LIMIT / 1e9:.2f} GB (protobuf's 2 GiB limit); "
        f"use max_positions <= {largest}, or no max_positions (cos/sin computed in the graph), whose tables take "
        f"{DIGIT_LEVELS * 2 * ((1 << DIGIT_BITS) + 1) * spec.rotary_dim * 4 / 1e6:.2f} MB for positions up to 2**30"
    )


def guard(b: Builder, spec: Spec, index: str) -> str:
    """Position ids with every id outside ``[0, max_positions)`` replaced by ``max_positions`` (the NaN row)."""
    n = spec.options.rows
    clipped = b.op("Clip", [index, b.scalar(-1, "below"), b.scalar(n, "beyond")])  # -1 .. n
    return b.op("Mod", [clipped, b.scalar(n + 1, "rows")])  # -1 -> n (the sign of the divisor)


def five_d(spec: Spec) -> bool:
    """3-D half-split input with full rotation works on a (B, S, N, 2, r/2) view."""
    o = spec.options
    return o.rank == 3 and o.layout == "half" and spec.rotary_dim == spec.head_dim


def _in_layout(spec: Spec, a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """(..., h) tables for the first and second partner -> (..., r) in the layout's feature order."""
    if spec.options.layout == "half":
        return np.concatenate([a, b], axis=-1)
    return np.stack([a, b], axis=-1).reshape((*a.shape[:-1], 2 * a.shape[-1]))


def _rows_shape(spec: Spec, t: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Tables (P, r) shaped so that rows gathered by the position index broadcast against the input."""
    if five_d(spec):
        return t.reshape(t.shape[0], 1, 2, spec.rotary_dim // 2)
    return t[:, None] if spec.options.rank == 3 else t


def _table(spec: Spec, b: Builder, a: npt.NDArray[Any], second: npt.NDArray[Any], hint: str) -> str:
    """A constant of the portable form of a table pair, in the compute dtype."""
    return b.const(_rows_shape(spec, _in_layout(spec, a, second)).astype(spec.compute_dtype, copy=False), hint)


def constant_rows(spec: Spec, b: Builder, index: str) -> tuple[str, str]:
    """C and S gathered from stored tables by ``index`` (ids outside the table: the NaN row, by the Gather's
    own negative indexing for -1 and by :func:`guard` for the others)."""
    cos, sin = host_tables(spec, spec.compute_dtype)
    c = _table(spec, b, cos, cos, "cos_table")
    np.negative(sin, out=sin)
    n = _table(spec, b, sin, -sin, "sin_table")
    index = b.op("Clip", [index, b.scalar(-1, "below"), b.scalar(spec.options.rows, "beyond")])
    return b.op("Gather", [c, index], axis=0), b.op("Gather", [n, index], axis=0)


def _digit(b: Builder, index: str, level: int) -> str:
    """Digit ``level`` of the (non-negative) positions in base ``2**DIGIT_BITS``."""
    digit = index
    if level:
        digit = b.op("Div", [digit, b.const(np.array(1 << (DIGIT_BITS * level), np.int64), "radix")])
    if level < DIGIT_LEVELS - 1:  # the top digit is not reduced: 1024 (a position of 2**30) is the NaN row
        digit = b.op("Mod", [digit, b.const(np.array(1 << DIGIT_BITS, np.int64), "digit_mod")])
    return digit


def composed(spec: Spec, b: Builder, clipped: str, table: Any) -> tuple[str, str]:
    """cos and sin of ``|p|`` from base-1024 digits of the (clipped) positions, composed with the angle-addition
    formula; ``table(values, hint)`` stores one digit table (rows: digit values) in the graph's form."""
    factor = spec.freqs.attention_factor
    magnitude = b.op("Abs", [clipped])
    rows: tuple[str, str] | None = None
    for level in range(DIGIT_LEVELS):
        dc, ds = digit_rotations(spec.freqs.inv_freq, level)
        if level == 0 and factor != 1.0:
            dc, ds = dc * factor, ds * factor
        if level == DIGIT_LEVELS - 1:  # |p| = 2**30 and beyond: the NaN row
            nan = np.full((1, dc.shape[1]), np.nan)
            dc, ds = np.concatenate([dc, nan]), np.concatenate([ds, nan])
        ct = table(dc, f"digit{level}_cos")
        st = table(ds, f"digit{level}_sin")
        digit = _digit(b, magnitude, level)
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
    return rows


def clip_positions(b: Builder, index: str) -> str:
    """Position ids clipped to ``[-2**30, 2**30]``: the ends are the NaN rows of the top digit."""
    return b.op("Clip", [index, b.scalar(-COMPUTED_LIMIT, "lowest"), b.scalar(COMPUTED_LIMIT, "highest")])


def computed_rows(spec: Spec, b: Builder, index: str) -> tuple[str, str]:
    """C and S (the portable form) from base-1024 digits of the positions, composed with the angle-addition formula.

    Each digit's rotation comes from the core's float64 digit tables (exact), stored in
    the compute dtype (float32, or float64 for a float64 graph); composing them keeps
    the error near float32 rounding at any position in ``(-2**30, 2**30)``. Digits are
    those of ``|p|`` and a negative position turns the other way (sin negated). The
    attention factor scales the lowest digit's rotation, so it enters the product once.
    """
    clipped = clip_positions(b, index)
    rows = composed(spec, b, clipped, lambda values, hint: _table(spec, b, values, values, hint))
    # the layout's sign of sin, and the direction of the position: rows for sign(p) + 1 = 0, 1, 2
    ones = np.ones((1, spec.rotary_dim // 2))
    sign = _rows_shape(spec, _in_layout(spec, -ones, ones))[0]
    signs = np.stack([-sign, sign, sign]).astype(spec.compute_dtype)
    direction = b.op("Add", [b.op("Sign", [clipped]), b.scalar(1, "one")])
    return rows[0], b.op("Mul", [rows[1], b.op("Gather", [b.const(signs, "signs"), direction], axis=0)])


def computed_cos_sin(spec: Spec, b: Builder, index: str) -> tuple[str, str]:
    """cos and sin ``(..., rotary_dim / 2)`` at the position ids ``index``, computed as :func:`computed_rows`
    computes them (negative ids backwards, ``|id| >= 2**30`` NaN), in float32 and then in the dtype of ``x``:
    the per-token caches of the fused ops."""
    clipped = clip_positions(b, index)
    cos, sin = composed(spec, b, clipped, lambda values, hint: b.const(values.astype(np.float32), hint))
    sign = b.op("Cast", [b.op("Sign", [clipped])], to=onnx_dtype("float32"))  # sin(0) = 0 whatever its sign
    sin = b.op("Mul", [sin, b.op("Unsqueeze", [sign, b.ints([-1], "last_axis")])])
    dtype = spec.options.dtype
    if dtype != "float32":
        cos, sin = (b.op("Cast", [t], to=onnx_dtype(dtype)) for t in (cos, sin))
    return cos, sin
