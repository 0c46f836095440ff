"""What measured frequencies tell about a rope type: the inverse of each entry's function.

:func:`arrayrope.testing.identify_rope` measures the frequency ``omega[i]`` of every pair of a
foreign implementation (radians per position, uncertainty ``sigma[i]``; 0 for a pair that
never turns) and the factor ``gain`` on its cos and sin, then asks every rope type whose
registry entry has a ``fit`` which parameters could have produced them. A fit proposes
candidates ``(base, rotary_dim, scaling)``, roundest first; identify keeps the first whose
frequencies, recomputed by the entry's own function, agree with the measurement within
:data:`K_SIGMA` uncertainties. A probe sees only what the frequencies show:

* default: the base (one frequency ratio); with a single pair it is unobservable and 10000 is named.
* linear: the base and the factor (the first pair turns by ``1 / factor``).
* llama3: the base (kept fast pairs), the factor (slowest pairs), and the two cutoff wavelengths
  ``L0 / high_freq_factor`` and ``L0 / low_freq_factor``; ``L0`` itself is not observable, so it is
  named with the roundest factors (``low_freq_factor = 1`` where the band holds two pairs or more).
* yarn: the base, the factor (slowest pairs, else the default attention factor) and the ramp ends,
  named with the default ``beta_fast``/``beta_slow`` and the roundest ``L0`` that gives them;
  an attention factor other than YaRN's default is named as ``attention_factor``.
* proportional: the base over the head dim, the factor and how many pairs turn.

The others have no fit: ``dynamic`` frequencies depend on the call's length (below
``max_position_embeddings`` they are the default ones) and ``longrope`` divides each pair by a
factor of its own list, which no formula names.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._params import yarn_mscale
from ._registry import Candidate

__all__ = ["K_SIGMA", "default", "linear", "llama3", "nice", "proportional", "yarn"]

#: Measured and recomputed frequencies agree when they differ by at most this many uncertainties.
K_SIGMA = 8.0
_POW2 = tuple(2**k for k in range(8, 23))
_LLAMA3_FACTORS = ((1.0, 4.0), (1.0, 1.0), (1.0, 2.0), (1.0, 8.0), (2.0, 4.0))


def nice(value: float, rel: float) -> float:
    """The shortest decimal within ``rel`` (relative) of ``value``.

    Examples
    --------
    >>> from arrayrope.scaling._fit import nice
    >>> nice(499999.93, 1e-6), nice(0.30000004, 1e-9)
    (500000.0, 0.30000004)
    """
    if not math.isfinite(value) or value == 0:
        return value
    for digits in range(1, 17):
        c = float(f"{value:.{digits}g}")
        if abs(c - value) <= rel * abs(value):
            return c
    return value


def _roundest(value: float, rel: float) -> list[float]:
    """``value`` as the roundest decimals within a few uncertainties, then as measured."""
    out: list[float] = []
    for c in (nice(value, K_SIGMA * rel), nice(value, rel), value):
        if c not in out:
            out.append(c)
    return out


def _log_fit(
    omega: np.ndarray, sigma: np.ndarray, idx: np.ndarray, den: float, *, scale: bool
) -> tuple[float, float, float, float]:
    """Weighted fit of ``ln omega[i] = -ln s - (2i / den) ln b`` over pairs ``idx``.

    Returns ``(ln b, its sigma, ln s, its sigma)`` (``ln s = 0`` when ``scale`` is False).
    """
    x = 2.0 * idx / den
    y = np.log(omega[idx])
    w = (omega[idx] / np.maximum(sigma[idx], 1e-300)) ** 2
    if not scale:
        sxx = float(np.sum(w * x * x))
        return -float(np.sum(w * x * y)) / sxx, 1.0 / math.sqrt(sxx), 0.0, 0.0
    sw, sx, sy = float(w.sum()), float(np.sum(w * x)), float(np.sum(w * y))
    sxx, sxy = float(np.sum(w * x * x)), float(np.sum(w * x * y))
    det = sw * sxx - sx * sx
    slope, icept = (sw * sxy - sx * sy) / det, (sxx * sy - sx * sxy) / det
    return -slope, math.sqrt(sw / det), -icept, math.sqrt(sxx / det)


def _turning(omega: np.ndarray) -> bool:
    return bool(np.all(omega > 0))


def _agree(model: np.ndarray, omega: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    agree: np.ndarray = np.abs(model - omega) <= K_SIGMA * sigma
    return agree


def default(omega: np.ndarray, sigma: np.ndarray, **context: Any) -> Iterator[Candidate]:
    """``omega[i] = base ** (-2i / r)``: the base from every pair."""
    r = 2 * len(omega)
    if not _turning(omega):
        return
    if r == 2:
        yield 10000.0, r, None
        return
    lnb, sig, _, _ = _log_fit(omega, sigma, np.arange(r // 2), r, scale=False)
    for b in _roundest(math.exp(lnb), sig):
        yield b, r, None


def linear(omega: np.ndarray, sigma: np.ndarray, **context: Any) -> Iterator[Candidate]:
    """``omega[i] = base ** (-2i / r) / factor``."""
    r = 2 * len(omega)
    if not _turning(omega):
        return
    if r == 2:
        for s in _roundest(1.0 / float(omega[0]), float(sigma[0] / omega[0])):
            yield 10000.0, r, {"rope_type": "linear", "factor": s}
        return
    lnb, sig_b, lns, sig_s = _log_fit(omega, sigma, np.arange(r // 2), r, scale=True)
    if abs(lns) <= K_SIGMA * sig_s:
        return  # factor 1: plain RoPE
    for b in _roundest(math.exp(lnb), sig_b):
        for s in _roundest(math.exp(lns), sig_s):
            yield b, r, {"rope_type": "linear", "factor": s}


def _unscaled_base(omega: np.ndarray, sigma: np.ndarray) -> tuple[list[float], int] | None:
    """Bases of the longest run of leading pairs that follow ``base ** (-2i / r)``, and its length.

    None when there are fewer than two such pairs, or when every pair follows it (no scaling).
    """
    r = 2 * len(omega)
    if r < 6 or not _turning(omega) or not abs(omega[0] - 1.0) <= K_SIGMA * sigma[0]:
        return None
    m, lnb, sig = 0, 0.0, 0.0
    for k in range(2, len(omega) + 1):
        idx = np.arange(k)
        lb, sb, _, _ = _log_fit(omega, sigma, idx, r, scale=False)
        if not np.all(_agree(np.exp(-2.0 * idx / r * lb), omega[idx], sigma[idx])):
            break
        m, lnb, sig = k, lb, sb
    if m < 2 or m == len(omega):
        return None
    return _roundest(math.exp(lnb), sig), m


def _factors(omega: np.ndarray, sigma: np.ndarray, theta: np.ndarray) -> list[float]:
    """The factor of the slowest pair, ``theta / omega``, as the roundest values it allows."""
    s = float(theta[-1] / omega[-1])
    return [c for c in _roundest(s, float(sigma[-1] / omega[-1])) if c > 1.0]


def llama3(omega: np.ndarray, sigma: np.ndarray, **context: Any) -> Iterator[Candidate]:
    """Kept fast pairs, slow pairs divided by the factor, a blend linear in ``1 / wavelength`` between."""
    found = _unscaled_base(omega, sigma)
    if found is None:
        return
    bases, _ = found
    r = 2 * len(omega)
    i = np.arange(r // 2)
    for b in bases:
        theta = b ** (-2.0 * i / r)
        for s in _factors(omega, sigma, theta):
            g = (omega / theta - 1.0 / s) / (1.0 - 1.0 / s)  # 1 kept, 0 divided by s
            tol = K_SIGMA * sigma / theta / (1.0 - 1.0 / s)
            kept, scaled = np.abs(g - 1.0) <= tol, np.abs(g) <= tol
            band = ~(kept | scaled)
            wavelength = 2 * np.pi / theta
            specs: list[tuple[float, float, float]] = []  # round lengths and factors first
            for L0 in _POW2:
                for low, high in _LLAMA3_FACTORS:
                    if np.all(wavelength[kept] < L0 / high) and np.all(wavelength[scaled] > L0 / low):
                        specs.append((float(L0), low, high))
            if band.sum() >= 2:  # g = (L0 / wavelength - low) / (high - low): a line in theta
                slope, icept = np.polyfit(theta[band], g[band], 1)
                if slope > 0 and icept < 0:
                    w_low, w_high = -2 * np.pi * slope / icept, 2 * np.pi * slope / (1.0 - icept)
                    L0 = float(round(nice(w_low, 1e-4)))
                    specs.append((L0, 1.0, nice(L0 / w_high, 1e-4)))
            for L0, low, high in specs:
                yield (
                    b,
                    r,
                    {
                        "rope_type": "llama3",
                        "factor": s,
                        "low_freq_factor": low,
                        "high_freq_factor": high,
                        "original_max_position_embeddings": int(L0),
                    },
                )


def _round_length(lo: float, hi: float) -> int | None:
    """The roundest integer length in ``[lo, hi)``: a power of two, else the multiple of the largest one."""
    for k in range(30, -1, -1):
        c = math.ceil(lo / 2**k) * 2**k
        if lo <= c < hi:
            return int(c)
    return None


def _ramp_end(length: float, beta: float, base: float, r: int) -> float:
    """YaRN's pair index at which the wavelength makes ``beta`` turns over ``length``."""
    return r * math.log(length / (2 * math.pi * beta)) / (2 * math.log(base))


def yarn(
    omega: np.ndarray, sigma: np.ndarray, *, gain: float, gain_sigma: float, **context: Any
) -> Iterator[Candidate]:
    """A ramp in the pair index from ``theta`` (fast pairs) to ``theta / factor`` (slow ones)."""
    found = _unscaled_base(omega, sigma)
    if found is None:
        return
    bases, _ = found
    r = 2 * len(omega)
    i = np.arange(r // 2, dtype=np.float64)
    for b in bases:
        theta = b ** (-2.0 * i / r)
        factors = _factors(omega, sigma, theta)
        if gain > 1.0:  # the ramp may end past the last pair: the default attention factor names s
            factors += [
                c for c in _roundest(math.exp((gain - 1.0) / 0.1), gain_sigma / 0.1) if c > 1.0 and c not in factors
            ]
        for s in factors:
            gamma = (1.0 - omega / theta) / (1.0 - 1.0 / s)
            tol = K_SIGMA * sigma / theta / (1.0 - 1.0 / s)
            ramp = (gamma > tol) & (gamma < 1.0 - tol)

            specs: list[dict[str, Any]] = [  # round lengths with the default betas first
                {"original_max_position_embeddings": L0}
                for L0 in _POW2
                if math.floor(_ramp_end(L0, 32.0, b, r)) <= r // 2 and math.ceil(_ramp_end(L0, 1.0, b, r)) >= 1
            ]
            if ramp.sum() >= 2:  # gamma = (i - lo) / (hi - lo)
                slope, icept = np.polyfit(i[ramp], gamma[ramp], 1)
                lo, hi = (-icept / slope, (1.0 - icept) / slope) if slope > 1.0 / r else (-1.0, -1.0)
                if not (0 <= lo < hi <= r):
                    pass  # no ramp of YaRN's shape: only the grid below
                elif abs(lo - round(lo)) < 0.05 and abs(hi - round(hi)) < 0.05:  # truncated to whole pairs
                    lo, hi = round(lo), round(hi)
                    # floor(r(L0, 32)) == lo and ceil(r(L0, 1)) == hi, as intervals of L0
                    a = max(2 * math.pi * 32 * b ** (2 * lo / r), 2 * math.pi * b ** (2 * (hi - 1) / r))
                    z = min(2 * math.pi * 32 * b ** (2 * (lo + 1) / r), 2 * math.pi * b ** (2 * hi / r))
                    L0 = _round_length(a, z)
                    if L0 is not None:
                        specs.append({"original_max_position_embeddings": L0})
                else:
                    L0 = round(2 * math.pi * b ** (2 * hi / r))
                    spec: dict[str, Any] = {"original_max_position_embeddings": L0, "truncate": False}
                    beta_fast = nice(L0 / (2 * math.pi * b ** (2 * lo / r)), 1e-3)
                    if beta_fast != 32.0:
                        spec["beta_fast"] = beta_fast
                    specs.append(spec)
            attention = None if abs(yarn_mscale(s) - gain) <= K_SIGMA * gain_sigma else nice(gain, 8 * gain_sigma)
            for spec in specs:
                scaling = {"rope_type": "yarn", "factor": s, **spec}
                if attention is not None:
                    scaling["attention_factor"] = attention
                yield b, r, scaling


def proportional(omega: np.ndarray, sigma: np.ndarray, *, head_dim: int, **context: Any) -> Iterator[Candidate]:
    """The first pairs turn with ``base ** (-2i / head_dim) / factor``, the others not at all."""
    n = len(omega)
    k = int(np.count_nonzero(omega))
    if 2 * n != head_dim or k in (0, n) or np.any(omega[:k] <= 0) or np.any(omega[k:] != 0):
        return
    idx = np.arange(k)
    if k == 1:
        lnb, sig_b, lns, sig_s = math.log(10000.0), 0.0, -math.log(float(omega[0])), float(sigma[0] / omega[0])
    else:
        lnb, sig_b, lns, sig_s = _log_fit(omega, sigma, idx, head_dim, scale=True)
    for b in _roundest(math.exp(lnb), sig_b):
        for s in _roundest(math.exp(lns), sig_s):
            scaling: dict[str, Any] = {"rope_type": "proportional"}
            if abs(s - 1.0) > K_SIGMA * sig_s:
                scaling["factor"] = s
            yield b, 2 * k, scaling
