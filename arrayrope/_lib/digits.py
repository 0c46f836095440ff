"""Angles exact at any position: turns reduced on the host, digits composed on the device.

A float64 angle ``p * theta`` carries an absolute error of about ``p * theta * 2**-53``
radians (2.4e-7 at ``p = 2**31``), and a float32 one ``p * theta * 2**-24`` (6e-2 at
2**20). arrayrope never forms large angles. For each frequency it computes on the
host, in integer arithmetic, the fractional turns ``u_s = frac(2**s * theta / (2 pi))``
to 160 bits, and splits positions into digits ``p = sum(d_k * 2**s_k)``:

* Devices with float64 (:func:`float64_turns`): 20-bit digits. ``u_s`` is held as
  three float64 pieces of 33, 33 and 53 bits, so ``d * piece`` is exact and the turns
  ``sum_k frac(d_k * u_{s_k})`` are summed, reduced to ``[-1/2, 1/2]`` and turned into
  one angle: the error stays near float64 rounding (1e-15 radians) at any position.
* Devices without float64 (:func:`float32_digits`): 10-bit digits. The rotation of
  every digit value at every level, ``(cos, sin)(2 pi frac(d * u_s))``, is computed on
  the host in float64 from the same exact turns and rounded to float32 once; the
  device composes the digit rotations with the angle-addition formula in float32.

Negative integers are split in two's complement (non-negative digits below a signed
top digit), so no magnitude is ever formed and ``-2**63`` is no special case. Real
positions are split into the nearest integer, whose digits are taken with exact
float operations (``floor`` and ``remainder`` by powers of two), and a remainder of
at most 0.5, rotated by a small angle.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from . import fence
from .positions import magnitude_bits
from .types import Array, Device, Namespace

__all__ = ["DIGIT_BITS", "WIDE_BITS", "cos_sin", "digit_rotations", "float32_digits", "float64_turns", "turn_pieces"]

#: Bits per digit of the float32 method: 1024 rows per digit table.
DIGIT_BITS = 10
#: Bits per digit of the float64 method: a digit times a 33-bit piece of the turns is exact.
WIDE_BITS = 20
_FRACTION_BITS = 160


@functools.cache
def _inverse_two_pi(bits: int) -> int:
    """``floor(2**bits / (2 pi))`` to within one, with pi from Machin's formula in integers."""
    guard = bits + 64
    one = 1 << guard

    def arctan_inverse(x: int) -> int:  # arctan(1/x) * 2**guard
        total, term, k, x2 = 0, one // x, 0, x * x
        while term:
            total += term // (2 * k + 1) if k % 2 == 0 else -(term // (2 * k + 1))
            term //= x2
            k += 1
        return total

    pi = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)
    return (1 << (bits + guard)) // (2 * pi)


def _turns(theta: float, shift: int) -> int:
    """``floor(frac(2**shift * theta / (2 pi)) * 2**160)``, exact up to 2**-190 turns."""
    m, e = math.frexp(theta)
    mant, exp = int(m * (1 << 53)), e - 53  # theta = mant * 2**exp exactly
    # 2**q / (2 pi) to 200 bits beyond the integer part of the turns; q a multiple of 256 (cached)
    q = -(-(max(0, shift + exp + 53) + 200) // 256) * 256
    scaled = mant * _inverse_two_pi(q)  # turns * 2**(q - shift - exp)
    return (scaled >> (q - shift - exp - _FRACTION_BITS)) & ((1 << _FRACTION_BITS) - 1)


def _key(inv_freq: np.ndarray | bytes) -> bytes:
    """The frequencies as the bytes of their float64 values (the form the host caches are keyed by)."""
    if isinstance(inv_freq, bytes):
        return inv_freq
    return np.ascontiguousarray(inv_freq, dtype=np.float64).tobytes()


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@functools.lru_cache(maxsize=256)
def _pieces(inv_freq: bytes, shift: int) -> np.ndarray:
    """Rows ``a``, ``b``, ``c`` of :func:`turn_pieces`, one array ``(3, len(inv_freq))``."""
    out = np.empty((3, len(inv_freq) // 8))
    for i, theta in enumerate(np.frombuffer(inv_freq, dtype=np.float64).tolist()):
        g = _turns(theta, shift)
        out[0, i] = math.ldexp(g >> 127, -33)
        out[1, i] = math.ldexp((g >> 94) & ((1 << 33) - 1), -66)
        out[2, i] = math.ldexp(g & ((1 << 94) - 1), -160)
    return _frozen(out)


def turn_pieces(inv_freq: np.ndarray | bytes, shift: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per frequency, ``frac(2**shift * theta / (2 pi)) = a + b + c``: ``a`` and ``b`` of 33 bits, float64."""
    a, b, c = _pieces(_key(inv_freq), shift)
    return a, b, c


def _host_turns(d: np.ndarray, inv_freq: bytes, shift: int) -> np.ndarray:
    """``frac(d * 2**shift * theta / (2 pi))`` reduced to ``[-1/2, 1/2]``, for integers ``|d| <= 2**20``."""
    a, b, c = _pieces(inv_freq, shift)
    d = d[:, None]
    whole = d * a  # exact: at most 20 + 33 bits
    t: np.ndarray = (whole - np.floor(whole)) + (d * b + d * c)
    return t - np.round(t)


@functools.lru_cache(maxsize=64)
def _rotations(inv_freq: bytes, level: int) -> tuple[np.ndarray, np.ndarray]:
    angles = 2 * np.pi * _host_turns(np.arange(1 << DIGIT_BITS, dtype=np.float64), inv_freq, DIGIT_BITS * level)
    return _frozen(np.cos(angles)), _frozen(np.sin(angles))


def digit_rotations(inv_freq: np.ndarray | bytes, level: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of ``d * 1024**level * inv_freq`` for ``d < 1024``, float64 within 1e-15, ``(1024, len(inv_freq))``."""
    return _rotations(_key(inv_freq), level)


# What the device takes from the host, through fence.backends.constant: plain functions (tracers take those as
# constants, not functools' cache wrappers), each array made once by the host caches above.


def _digit_table(inv_freq: bytes, level: int) -> np.ndarray:
    """:func:`digit_rotations` rounded once to float32, cos then sin along the rows: ``(1024, 2 * len(inv_freq))``."""
    return _float32_digit_table(inv_freq, level)


@functools.lru_cache(maxsize=64)
def _float32_digit_table(inv_freq: bytes, level: int) -> np.ndarray:
    return _frozen(np.concatenate(_rotations(inv_freq, level), axis=1).astype(np.float32))


def _turn_pieces(inv_freq: bytes, shift: int) -> np.ndarray:
    """:func:`turn_pieces` as one array ``(3, len(inv_freq))``."""
    return _pieces(inv_freq, shift)


def _frequencies(inv_freq: bytes, dtype: str) -> np.ndarray:
    return np.frombuffer(inv_freq, dtype=np.float64).astype(dtype)


def _shifts(bits: int, digit: int, spare: int) -> range:
    """Digit shifts for positions ``|p| < 2**bits``: the top digit ``p >> shift`` keeps ``|.| < 2**(digit - spare)``."""
    top = max(0, -(-(bits - digit + spare) // digit) * digit)
    return range(0, top + 1, digit)


def _split(xp: Namespace, pos: Array, work: Any) -> tuple[Array, Array | None]:
    """``pos`` as (integers, remainder): an integer array as it is, or the nearest integers as floats."""
    if fence.backends.is_integral(xp, pos.dtype):
        return pos, None
    p = xp.astype(pos, work)
    whole = xp.round(p)
    return whole, p - whole  # exact, |remainder| <= 1/2


def _digit(xp: Namespace, n: Array, shift: int, bits: int, top: bool, work: Any) -> Array:
    """Digit ``n >> shift`` (the top one signed, the others in ``[0, 2**bits)``), as ``work`` floats."""
    if fence.backends.is_integral(xp, n.dtype):
        d = n >> shift if shift else n
        return xp.astype(d if top else d & ((1 << bits) - 1), work)
    d = xp.floor(n / float(1 << shift)) if shift else n  # exact: integers scaled by powers of two
    return d if top else d % float(1 << bits)


def cos_sin(
    xp: Namespace,
    inv_freq: np.ndarray | bytes,
    pos: Array,
    device: Device,
    *,
    exact: bool = False,
    bits: int | None = None,
    float64: bool = True,
) -> tuple[Array, Array]:
    """cos/sin of ``pos[..., None] * inv_freq`` in float64 where the device has it (and ``float64``), else float32.

    With float64: positions below ``2**20`` in magnitude take float64 angles
    ``p * theta`` (error below ``2**-33`` radians, invisible in float32 tables), others
    :func:`float64_turns`, as do all positions when ``exact`` (float64 tables: within a
    few ulps at every position). Without float64, :func:`float32_digits`. ``bits``
    bounds the magnitudes, ``|p| < 2**bits`` (default: read from ``pos``, see
    :func:`~arrayrope._lib.positions.magnitude_bits`). ``inv_freq`` may be given as the
    bytes of its float64 values (:attr:`RopeFrequencies._inv_freq_bytes`): what the host
    computes from it reaches the device through :func:`arrayrope.backends.constant`, so
    that a graph compiler tracing this code meets no NumPy.
    """
    key = _key(inv_freq)
    if bits is None:
        bits = magnitude_bits(xp, pos)
    if not (float64 and fence.backends.has_float64(xp, device)):
        return float32_digits(xp, key, pos, device, bits)
    if exact or bits > WIDE_BITS:
        return float64_turns(xp, key, pos, device, bits)
    angles = xp.astype(pos, xp.float64)[..., None] * fence.backends.constant(xp, _frequencies, (key, "float64"), device)
    return xp.cos(angles), xp.sin(angles)


def float64_turns(
    xp: Namespace, inv_freq: np.ndarray | bytes, pos: Array, device: Device, bits: int
) -> tuple[Array, Array]:
    """float64 cos/sin of ``pos * inv_freq`` for positions ``|p| < 2**bits``, exact turns per 20-bit digit."""
    key = _key(inv_freq)
    f64 = xp.float64
    n, rest = _split(xp, pos, f64)
    total: Any = None
    shifts = _shifts(bits, WIDE_BITS, 0)
    for shift in shifts:
        d = _digit(xp, n, shift, WIDE_BITS, shift == shifts[-1], f64)[..., None]
        pieces = fence.backends.constant(xp, _turn_pieces, (key, shift), device)
        a, b, c = pieces[0, :], pieces[1, :], pieces[2, :]
        whole = d * a
        t = (whole - xp.floor(whole)) + (d * b + d * c)
        total = t if total is None else total + t
    angle = (total - xp.round(total)) * (2 * math.pi)
    if rest is not None:
        angle = angle + rest[..., None] * fence.backends.constant(xp, _frequencies, (key, "float64"), device)
    return xp.cos(angle), xp.sin(angle)


def float32_digits(
    xp: Namespace, inv_freq: np.ndarray | bytes, pos: Array, device: Device, bits: int
) -> tuple[Array, Array]:
    """float32 cos/sin of ``pos * inv_freq`` for positions ``|p| < 2**bits``, by 10-bit digit rotations."""
    key = _key(inv_freq)
    h = len(key) // 8
    f32 = xp.float32
    n, rest = _split(xp, pos, f32)
    shape = tuple(n.shape)
    flat = xp.reshape(n, (-1,))
    cos: Any = None
    sin: Any = None
    shifts = _shifts(bits, DIGIT_BITS, 1)
    for level, shift in enumerate(shifts):
        top = shift == shifts[-1]
        d = _digit(xp, flat, shift, DIGIT_BITS, top, f32)
        index = xp.astype(xp.abs(d) if top else d, xp.int32)
        rows = xp.take(fence.backends.constant(xp, _digit_table, (key, level), device), index, axis=0)
        c, s = rows[:, :h], rows[:, h:]
        if top:
            s = xp.where((d < 0)[:, None], -s, s)
        if cos is None:
            cos, sin = c, s
        else:
            cos, sin = cos * c - sin * s, sin * c + cos * s
    cos = xp.reshape(cos, (*shape, h))
    sin = xp.reshape(sin, (*shape, h))
    if rest is not None:
        fa = rest[..., None] * fence.backends.constant(xp, _frequencies, (key, "float32"), device)
        fc, fs = xp.cos(fa), xp.sin(fa)
        cos, sin = cos * fc - sin * fs, sin * fc + cos * fs
    return cos, sin
