"""Measuring a foreign RoPE function: its rotation matrices, its pairs and each pair's frequency.

The function is called on unit vectors: its output for ``e_j`` at position ``p`` is column
``j`` of the matrix it applies there. Calls cover positions ``0 .. n-1`` and then short
blocks at positions growing fourfold up to ``max_position``, where the slowest pairs of a
large base turn by measurable angles even in bfloat16 (at ``2**24`` a pair of frequency
``1e7 ** (-126/128)`` turns by 2 radians).

Each measured angle has an uncertainty from the output's dtype (``eps`` per radian of
rounding of cos and sin, relative for small angles) and from the float32 arithmetic
implementations use for angles (an error growing with the angle, ``~4 eps32 |angle|``).
Pair angles are unwrapped block by block against the frequency fitted so far, so that
slow and fast pairs alike are measured to about ``eps32`` relative precision.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backends import to_numpy

__all__ = ["EPS32", "Measured", "Pairs", "Probes", "call", "frequencies", "measure_matrices", "pairs_of", "wrap"]

EPS32 = float(np.finfo(np.float32).eps)
_FAR_BLOCK = 4
# a pair is followed to positions where float32 angle arithmetic still errs by less than ~0.05 rad
_MAX_ANGLE = 0.05 / (4 * EPS32)
_EPS = (("bfloat16", 2.0**-7), ("float16", 2.0**-10), ("float32", EPS32), ("float64", 2.0**-52))


@dataclasses.dataclass(frozen=True)
class Probes:
    """The matrices ``M[k]`` a function applies at ``positions[k]`` (``M[k][:, j]`` is its output for ``e_j``)."""

    positions: np.ndarray
    M: np.ndarray
    ndim: int
    eps: float
    tiny: float
    stopped: str


def call(
    fn: Callable[..., Any], basis: np.ndarray, positions: np.ndarray, ndim: int | None
) -> tuple[np.ndarray, int, str]:
    """``fn`` on ``basis`` ``(B, S, D)`` as 4-D ``(1, B, S, D)`` or else 3-D.

    Returns the output as ``(B, S, D)`` float64, the rank that worked and the output's dtype name.
    """
    errors = []
    for nd in (4, 3) if ndim is None else (ndim,):
        x = np.ascontiguousarray(basis[None] if nd == 4 else basis)
        try:
            out = fn(x, positions.copy())
        except Exception as exc:  # try the other rank, then report both
            errors.append(f"{nd}-D x {x.shape}: {type(exc).__name__}: {exc}")
            continue
        if isinstance(out, (tuple, list)):
            raise TypeError(f"fn must return one array (the rotated x), got a {type(out).__name__}")
        dtype = str(getattr(out, "dtype", ""))
        try:
            arr = np.asarray(to_numpy(out))
        except Exception as exc:
            raise TypeError(f"fn must return an array, got {type(out).__name__}") from exc
        if arr.shape != x.shape:
            raise ValueError(f"fn returned shape {arr.shape} for x of shape {x.shape}; RoPE keeps the shape")
        return arr.reshape(basis.shape).astype(np.float64), nd, dtype
    raise ValueError("fn(x, positions) raised for every probe: " + "; ".join(errors))


def _resolution(*dtypes: str) -> tuple[float, float]:
    """``(eps, smallest subnormal)`` of the coarsest of ``dtypes``."""
    eps, tiny = 2.0**-52, 0.0
    for name in dtypes:
        for key, e in _EPS:
            if key in name:
                if e > eps:
                    eps = e
                if key == "float16":
                    tiny = 2.0**-24
                break
    return eps, tiny


def measure_matrices(fn: Callable[..., Any], d: int, dt: np.dtype[Any], n: int, max_position: int) -> Probes:
    """Rotation matrices at ``0 .. n-1`` and at blocks ``s .. s+3``, ``s = 4n, 16n, ...`` up to ``max_position``."""
    eye = np.eye(d, dtype=dt)
    out, ndim, name = call(fn, np.broadcast_to(eye[:, None, :], (d, n, d)), np.arange(n, dtype=np.int64), None)
    positions, mats, names = [np.arange(n)], [np.transpose(out, (1, 2, 0))], [name]
    stopped = ""
    start = 4 * n
    while start + _FAR_BLOCK - 1 <= max_position:
        pos = np.arange(start, start + _FAR_BLOCK, dtype=np.int64)
        try:
            out, _, name = call(fn, np.broadcast_to(eye[:, None, :], (d, _FAR_BLOCK, d)), pos, ndim)
        except Exception as exc:  # a table of limited length: measure with what was reached
            stopped = f"fn raised at positions {start}..{start + _FAR_BLOCK - 1} ({type(exc).__name__}: {exc})"
            break
        if not np.all(np.isfinite(out)):  # positions past the range of the dtype it computes them in
            stopped = f"fn returned NaN or infinity at positions {start}..{start + _FAR_BLOCK - 1}"
            break
        positions.append(pos)
        mats.append(np.transpose(out, (1, 2, 0)))
        names.append(name)
        start *= 4
    eps, tiny = _resolution(str(dt), *names)
    return Probes(np.concatenate(positions), np.concatenate(mats), ndim, eps, tiny, stopped)


def wrap(a: np.ndarray) -> np.ndarray:
    """Angles to ``[-pi, pi)``."""
    wrapped: np.ndarray = (a + np.pi) % (2 * np.pi) - np.pi
    return wrapped


def noise(theta_w: np.ndarray, theta_abs: np.ndarray, eps: float, tiny: float) -> np.ndarray:
    """Uncertainty of a measured angle: output rounding (relative below 1 rad), float32 angle arithmetic."""
    out: np.ndarray = 2 * eps * np.minimum(np.abs(theta_w), 1.0) + 4 * EPS32 * np.abs(theta_abs) + 4 * tiny + 1e-15
    return out


@dataclasses.dataclass(frozen=True)
class Measured:
    """Per pair: frequency ``omega``, phase at position 0 ``phi``, their uncertainties, and what went wrong."""

    omega: np.ndarray
    phi: np.ndarray
    sigma_omega: np.ndarray
    sigma_phi: np.ndarray
    nonlinear: tuple[int, int, float] | None  # (pair, position, deviation in rad) of the worst misfit


def _line(p: np.ndarray, th: np.ndarray, w: np.ndarray) -> tuple[float, float, float, float]:
    """Weighted fit ``th = phi + omega p``: ``(omega, phi, sigma_omega, sigma_phi)``."""
    sw, sp, st = w.sum(), (w * p).sum(), (w * th).sum()
    spp, spt = (w * p * p).sum(), (w * p * th).sum()
    det = sw * spp - sp * sp
    omega, phi = (sw * spt - sp * st) / det, (spp * st - sp * spt) / det
    return float(omega), float(phi), float(np.sqrt(sw / det)), float(np.sqrt(spp / det))


def frequencies(
    theta_w: np.ndarray, positions: np.ndarray, n: int, eps: float, tiny: float, offset: int = 0
) -> Measured:
    """Unwrap each pair's measured angles (``theta_w``, positions x pairs) and fit ``phi + omega p``."""
    k = theta_w.shape[1]
    omega, phi, s_om, s_phi = (np.zeros(k) for _ in range(4))
    worst: tuple[int, int, float] | None = None
    worst_ratio = 0.0
    pos = positions.astype(np.float64)
    for i in range(k):
        th0 = theta_w[:n, i]
        un = th0[0] + np.concatenate([[0.0], np.cumsum(wrap(np.diff(th0)))])
        used_p, used_t = list(pos[:n]), list(un)
        om, ph, so, sp = _line(pos[:n], un, 1.0 / noise(th0, un, eps, tiny) ** 2)
        for j in range(n, len(pos), _FAR_BLOCK):
            p = pos[j : j + _FAR_BLOCK]
            pred = ph + om * p
            if np.max(np.abs(om * (p + offset))) > _MAX_ANGLE or np.max(np.hypot(sp, so * p)) > 0.5:
                break  # float32 angles, or the frequency known too roughly, make further positions unusable
            th = theta_w[j : j + _FAR_BLOCK, i]
            un_far = pred + wrap(th - pred)
            used_p += list(p)
            used_t += list(un_far)
            pa, ta = np.array(used_p), np.array(used_t)
            om, ph, so, sp = _line(pa, ta, 1.0 / noise(wrap(ta), om * (pa + offset), eps, tiny) ** 2)
        pa, ta = np.array(used_p), np.array(used_t)
        tau = noise(wrap(ta), om * (pa + offset), eps, tiny)
        dev = np.abs(ta - (ph + om * pa))
        ratio = dev / tau
        m = int(np.argmax(ratio))
        if ratio[m] > 16 and ratio[m] > worst_ratio:
            worst_ratio, worst = float(ratio[m]), (i, int(pa[m]), float(dev[m]))
        omega[i], phi[i], s_om[i], s_phi[i] = om, ph, so, sp
    return Measured(omega, phi, s_om, s_phi, worst)


@dataclasses.dataclass(frozen=True)
class Pairs:
    """Where the rotary features sit and how they pair: ``pairs[i]`` are the features of pair ``i``.

    The first ``turning`` pairs turn; the others (proportional rope) keep frequency 0.
    """

    layout: str
    start: int
    width: int
    pairs: np.ndarray
    turning: int


def pairs_of(M: np.ndarray, eps: float) -> Pairs | str | None:
    """The pairing the matrices show, a reason why they show none, or None when no features mix."""
    d = M.shape[-1]
    off = M.copy()
    off[:, np.arange(d), np.arange(d)] = 0.0
    mix = np.max(np.abs(off), axis=0) > 1e-3 * eps * max(1.0, float(np.max(np.abs(M))))
    mix = mix | mix.T
    partners = [np.flatnonzero(mix[j]).tolist() for j in range(d)]
    for j, others in enumerate(partners):
        if len(others) > 1:
            return (
                f"feature {j} mixes with features {others}: the pairs are neither half-split nor interleaved "
                "(each feature turns with exactly one other)"
            )
    found = sorted({(j, others[0]) for j, others in enumerate(partners) if others and j < others[0]})
    if not found:
        return None
    ps = np.array(found)
    lo, k = int(ps[0, 0]), len(ps)
    gap = ps[:, 1] - ps[:, 0]
    if np.all(gap == 1) and k > 1 and np.array_equal(ps[:, 0], lo + 2 * np.arange(k)):
        layout, width, turning = "interleaved", 2 * k, k
        pairs = ps
    elif np.all(gap == gap[0]) and k <= gap[0] and np.array_equal(ps[:, 0], lo + np.arange(k)):
        layout, width, turning = "half", 2 * int(gap[0]), k
        h = width // 2
        pairs = np.stack([lo + np.arange(h), lo + h + np.arange(h)], axis=1)
    else:
        return f"features pair up as {found[:4]}{'...' if k > 4 else ''}: neither half-split nor interleaved pairs"
    if lo != 0 and lo + width != d:
        return (
            f"the rotating features {lo}..{lo + width - 1} are not the leading or the trailing ones of the "
            f"{d} features of the head"
        )
    return Pairs(layout, lo, width, pairs, turning)
