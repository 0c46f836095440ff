"""The built-in encodings as parity cases, each with an independent float64 NumPy oracle.

The oracles are written from the published formulas (rotate_half, the complex form,
the Transformer's sinusoids), not with arrayrope's code, so ``arrayrope parity``
checks the library against the definitions and not only against itself.

An oracle must be more precise than what it judges. The float64 angle ``p * theta``
rounds by up to half an ulp of the angle, ``|p * theta| * 2**-53``: about 6e-11 at
position ``2**20``, beyond the float64 tolerance (``2**-40``), and ``cos``/``sin`` pass
it on. So the oracles here reduce each angle exactly: ``p * theta`` with ``theta``'s
float64 value is an exact rational, reduced modulo ``2 pi`` (known to 360 bits) in
integer arithmetic, and only the reduced angle in ``[0, 2 pi)`` is rounded to
float64, whose cos and sin are then good to an ulp or two at any position.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._parity import ParityCase

__all__ = ["builtin_cases", "exact_angles"]

#: pi to 110 significant digits (about 365 bits).
_PI_DIGITS = (
    "31415926535897932384626433832795028841971693993751058209749445923078164062862089986280348253421170679821480865"
)
_BITS = 300  # angles are reduced as multiples of 2**-300
_TWO_PI = (2 * int(_PI_DIGITS) << _BITS) // 10 ** (len(_PI_DIGITS) - 1)  # 2 pi * 2**300, to 2**-60 relative


@functools.lru_cache(maxsize=64)
def _reduced(positions: tuple[int, ...], inv_freq: tuple[float, ...]) -> np.ndarray:
    """``(p * theta) mod 2 pi`` for every pair, exact before one final rounding to float64."""
    out = np.empty((len(positions), len(inv_freq)))
    for j, theta in enumerate(inv_freq):
        num, den = theta.as_integer_ratio()  # den is a power of two, at most 2**1074; here far below 2**300
        shift = _BITS - (den.bit_length() - 1)
        if shift < 0:
            raise ValueError(f"frequency {theta!r} is too small for the exact oracle")
        for i, p in enumerate(positions):
            out[i, j] = ((p * num << shift) % _TWO_PI) / (1 << _BITS)  # int / int rounds correctly
    return out


def exact_angles(positions: Any, inv_freq: Any) -> np.ndarray:
    """Reduce the angles ``positions[..., None] * inv_freq`` exactly into ``[0, 2 pi)``, in float64.

    Use it (or any exact reduction, or mpmath) for float64 references at far
    positions: ``np.cos(p * theta)`` computed in float64 is off by up to
    ``|p * theta| * 2**-53`` before the cosine is taken.

    Parameters
    ----------
    positions : array_like of int
        Integer positions of any shape.
    inv_freq : array_like of float
        The frequencies (each taken as the float64 number it is).

    Returns
    -------
    numpy.ndarray
        The angles in float64, shape ``positions.shape + (len(inv_freq),)``: each angle correctly
        rounded after the exact reduction.

    Examples
    --------
    >>> import numpy as np
    >>> from arrayrope.testing import exact_angles
    >>> p = np.array([2**40])
    >>> float(np.cos(exact_angles(p, np.array([1.0])))[0, 0])  # cos(2**40), to the last digit
    -0.9140040719915569
    """
    pos = np.asarray(positions)
    if pos.dtype.kind not in "iu":
        raise TypeError(f"positions must be integers, got dtype {pos.dtype}")
    flat = tuple(int(p) for p in pos.reshape(-1))
    freqs = tuple(float(f) for f in np.asarray(inv_freq, dtype=np.float64).reshape(-1))
    return _reduced(flat, freqs).reshape((*pos.shape, len(freqs)))


def _inv_freq(rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    return base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def _rope_half(x: np.ndarray, positions: np.ndarray, base: float = 10000.0) -> np.ndarray:
    """``x * cos + rotate_half(x) * sin`` (GPT-NeoX / Llama), positions broadcast over ``x[..., :, :]``."""
    d = x.shape[-1]
    ang = exact_angles(positions, _inv_freq(d, base))
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)
    rotated = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], axis=-1)
    out: np.ndarray = x * cos + rotated * sin
    return out


def _rope_complex(x: np.ndarray, positions: np.ndarray, rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """Interleaved pairs as complex numbers times ``exp(i * position * theta)`` (RoFormer, Meta's freqs_cis)."""
    z = x[..., :rotary_dim:2] + 1j * x[..., 1:rotary_dim:2]
    z = z * np.exp(1j * exact_angles(positions, _inv_freq(rotary_dim, base)))
    out = x.copy()
    out[..., :rotary_dim:2], out[..., 1:rotary_dim:2] = z.real, z.imag
    return out


def _sinusoid(positions: np.ndarray, dim: int) -> np.ndarray:
    """Vaswani et al.: ``PE[p, 2i] = sin(p / 10000^(2i/dim))``, ``PE[p, 2i+1] = cos(...)``."""
    ang = exact_angles(positions, _inv_freq(dim))
    pe = np.empty((len(positions), dim))
    pe[:, 0::2], pe[:, 1::2] = np.sin(ang), np.cos(ang)
    return pe


def builtin_cases(*, seed: int = 0) -> list[ParityCase]:
    """The cases ``arrayrope parity`` and ``arrayrope demo`` run (small shapes: seconds in all)."""
    import arrayrope

    rng = np.random.default_rng(seed)
    cases = []

    rope = arrayrope.RotaryEmbedding(128)
    x = rng.standard_normal((1, 4, 256, 128))
    cases.append(
        ParityCase(
            "RoPE half-split, positions 4000..4255",
            lambda x: rope(x, offset=4000),
            (x,),
            reference=lambda x: _rope_half(x, np.arange(4000, 4256)),
        )
    )

    partial = arrayrope.RotaryEmbedding(128, rotary_dim=64, layout="interleaved")
    x = rng.standard_normal((2, 2, 64, 128))
    pos = np.sort(rng.integers(0, 1 << 20, size=64)).astype(np.int64)
    cases.append(
        ParityCase(
            "RoPE interleaved, rotary_dim 64/128, positions up to 2^20",
            lambda x, p: partial(x, positions=p),
            (x, pos),
            reference=lambda x, p: _rope_complex(x, p, 64),
        )
    )

    decode = arrayrope.RotaryEmbedding(64)
    q = rng.standard_normal((3, 8, 1, 64))
    k = rng.standard_normal((3, 2, 1, 64))
    offsets = np.array([5, 1000, 70000], dtype=np.int64)
    cases.append(
        ParityCase(
            "RoPE decode step, q and k, one offset per batch row",
            lambda q, k, o: decode(q, k, offset=o),
            (q, k, offsets),
            reference=lambda q, k, o: (_rope_half(q, o[:, None, None]), _rope_half(k, o[:, None, None])),
        )
    )

    emb = rng.standard_normal((512, 64))
    cases.append(
        ParityCase(
            "token embeddings + sinusoidal embedding",
            lambda e, p: e + arrayrope.sinusoidal_embedding(64, p, dtype=e.dtype),
            (emb, np.arange(512, dtype=np.int64)),
            reference=lambda e, p: e + _sinusoid(p, 64),
        )
    )
    cases.append(_axial_case())
    return cases


def _axial_case(*, width: int = 14, head_dim: int = 128) -> ParityCase:
    """Axial RoPE of a ``width x width`` grid (x = t mod W, y = t div W), against the complex form."""
    import arrayrope
    from arrayrope.backends import namespace

    t = np.arange(width * width)
    coords = np.stack([t % width, t // width], axis=-1).astype(np.int64)

    def rotate(x: Any, c: Any) -> Any:
        ns = namespace(x)
        cos, sin = arrayrope.axial_rope_tables(head_dim, c, dtype=ns.float64 if x.dtype == ns.float64 else ns.float32)
        return arrayrope.apply_rotary(x, cos, sin, layout="interleaved")

    def reference(x: np.ndarray, c: np.ndarray) -> np.ndarray:
        theta = 100.0 ** (-np.arange(0, head_dim, 4) / head_dim)  # base^(-4i/d), i < d/4 (the 2-D notes)
        angle = np.concatenate([np.outer(c[:, 0], theta), np.outer(c[:, 1], theta)], axis=-1)
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angle)
        return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)

    x = np.random.default_rng(0).standard_normal((2, width * width, head_dim))
    return ParityCase(f"2-D axial RoPE, {width}x{width} grid, interleaved", rotate, (x, coords), reference=reference)
