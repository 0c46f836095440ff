"""``identify_rope``: which RoPE convention does someone else's function implement?

The function is probed with unit vectors: its output for ``e_j`` at position ``p``
is column ``j`` of the rotation matrix it applies there. From those matrices follow,
in order: which features rotate (the rotary dim), which features pair up (the
layout), the angle of each pair at each position, hence each pair's frequency (the
angle's growth per position) and the position offset (the angle at position 0),
and from the frequencies the base and any known frequency scaling. Every guess is
checked by rebuilding the matrices from it; a convention is named only when the
rebuilt ones agree with the measured ones, and a last call at other positions
checks the result on random inputs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from .._lib import checks
from ..backends import to_numpy

__all__ = ["RopeConvention", "identify_rope"]

_LAYOUT_NAMES = {
    "half": "half-split (GPT-NeoX, Llama, rotate_half)",
    "interleaved": "interleaved (RoFormer paper, GPT-J, complex freqs_cis)",
}
# Frequency scalings tried with these parameters; the registry decides which exist.
_FACTORS = (1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0, 40.0, 64.0)
_ORIGINAL_LENGTHS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)


@dataclasses.dataclass(frozen=True)
class RopeConvention:
    """What :func:`identify_rope` found.

    Attributes
    ----------
    matched : bool
        Whether the function is a known RoPE convention (then every field below is set).
    layout : {"half", "interleaved"} or None
    rotary_dim, head_dim : int
    base : float or None
        The base (``rope_theta``) of ``inv_freq[i] = base ** (-2i / rotary_dim)``.
    offset : int or None
        The function rotates ``x`` by ``positions + offset`` (1 is the classic
        off-by-one).
    scaling : dict or None
        A Hugging Face ``rope_scaling`` dict (``{"rope_type": "linear", "factor": 4.0}``),
        or None when the frequencies are unscaled.
    attention_factor : float
        The factor multiplying cos and sin (1.0 for plain RoPE).
    inv_freq : numpy.ndarray or None
        The measured frequency of each pair (radians per position).
    max_error : float
        Largest difference between ``fn`` and the named convention on random
        inputs, relative to the largest input value (NaN when nothing matched).
    reason : str
        Why nothing matched (empty when matched).
    """

    matched: bool
    head_dim: int
    layout: str | None = None
    rotary_dim: int | None = None
    base: float | None = None
    offset: int | None = None
    scaling: dict[str, Any] | None = None
    attention_factor: float = 1.0
    inv_freq: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    max_error: float = float("nan")
    reason: str = ""

    def embedding_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :class:`arrayrope.RotaryEmbedding` that reproduce ``fn``.

        The offset is not among them: pass ``positions + offset`` when calling.
        """
        if not self.matched:
            raise ValueError(f"fn matches no known RoPE convention ({self.reason}); nothing to reproduce")
        return {
            "head_dim": self.head_dim,
            "base": self.base,
            "rotary_dim": self.rotary_dim,
            "scaling": self.scaling,
            "layout": self.layout,
        }

    def __str__(self) -> str:
        if not self.matched:
            found = ", ".join(
                f"{k} {v}" for k, v in (("layout", self.layout), ("rotary_dim", self.rotary_dim),
                                        ("base", self.base), ("offset", self.offset)) if v is not None
            )
            return f"matches no known RoPE convention: {self.reason}" + (f" (found: {found})" if found else "")
        scaling = "no frequency scaling" if self.scaling is None else "scaling " + ", ".join(
            f"{k}={v}" for k, v in self.scaling.items()
        )
        offset = "positions as given" if not self.offset else f"positions shifted by {self.offset:+d}"
        return (
            f"{_LAYOUT_NAMES[self.layout or 'half']} RoPE, rotary_dim {self.rotary_dim} of head_dim {self.head_dim}, "
            f"base {self.base:g}, {scaling}, {offset}; max error {self.max_error:.1e}"
        )


def identify_rope(
    fn: Callable[[np.ndarray, np.ndarray], Any],
    *,
    head_dim: int,
    seq_len: int = 32,
    max_offset: int = 1 << 16,
    dtype: str = "float64",
) -> RopeConvention:
    """Find the RoPE convention a function implements by probing it.

    Parameters
    ----------
    fn : callable
        ``fn(x, positions)``: ``x`` a NumPy array ``(..., seq, head_dim)`` (it is
        called with 4-D ``x``, then with 3-D ``x`` if that raises), ``positions``
        int64 of shape ``(seq,)``; returns the rotated ``x`` (any array library).
    head_dim : int
        Features per head.
    seq_len : int
        Positions probed, ``0 .. seq_len-1`` (at least 4). Pair frequencies above
        pi radians per position cannot be told from their aliases.
    max_offset : int
        Largest position offset looked for.
    dtype : str
        Dtype of the probes given to ``fn``.

    Returns
    -------
    RopeConvention
        ``str()`` of it says what was found, or plainly why nothing matched.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> from arrayrope.testing import identify_rope
    >>> rope = arrayrope.RotaryEmbedding(64, base=500000.0, layout="interleaved")
    >>> found = identify_rope(lambda x, p: rope(x, positions=p + 1), head_dim=64)
    >>> found.layout, found.base, found.offset
    ('interleaved', 500000.0, 1)
    """
    checks.choice(dtype, "dtype", ("float64", "float32"))
    if not callable(fn):
        raise TypeError(f"fn must be callable as fn(x, positions), got {type(fn).__name__}")
    head_dim = checks.positive_int(head_dim, "head_dim", even=True)
    seq_len = checks.positive_int(seq_len, "seq_len")
    if seq_len < 4:
        raise ValueError(f"seq_len must be >= 4 to measure frequencies, got {seq_len}")
    max_offset = checks.non_negative_int(max_offset, "max_offset")
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise ValueError(f"dtype must be a NumPy floating dtype name, got {dtype!r}")

    d, n = head_dim, seq_len
    positions = np.arange(n, dtype=np.int64)
    basis = np.broadcast_to(np.eye(d, dtype=dt)[:, None, :], (d, n, d))
    out, ndim = _call(fn, basis, positions, None)
    eps = float(np.finfo(out.dtype).eps) if out.dtype.kind == "f" else float(np.finfo(np.float64).eps)
    tol = max(32 * eps, 1e-12)
    found = RopeConvention(matched=False, head_dim=d)
    M = np.transpose(out, (1, 2, 0)).astype(np.float64)  # M[s] is the matrix at position s
    if not np.all(np.isfinite(M)):
        return _unmatched(found, "fn returned NaN or infinity for unit inputs")

    eye = np.eye(d)
    moved = np.max(np.abs(M - eye), axis=(0, 1))
    rotating = moved > tol
    r = int(rotating.sum())
    if r == 0:
        return _unmatched(found, f"fn returns x unchanged at positions 0..{n - 1}")
    if not rotating[:r].all():
        changed = np.flatnonzero(rotating).tolist()
        return _unmatched(found, f"the features that change, {changed}, are not the leading ones")
    if r % 2:
        return _unmatched(found, f"{r} leading features change, an odd number: they cannot rotate in pairs")
    found = dataclasses.replace(found, rotary_dim=r)

    layout, pairs = _layout(M, r, d, tol)
    if layout is None or pairs is None:
        return _unmatched(found, _mixing(M, r, tol))
    found = dataclasses.replace(found, layout=layout)

    p_idx, q_idx = pairs[:, 0], pairs[:, 1]
    a, b = M[:, p_idx, p_idx], M[:, q_idx, p_idx]
    if np.max(np.abs(a - M[:, q_idx, q_idx])) > tol or np.max(np.abs(b + M[:, p_idx, q_idx])) > tol:
        return _unmatched(found, "a pair is not rotated (its 2x2 block is not [[cos, -sin], [sin, cos]])")
    gain = np.hypot(a, b)
    g = float(np.mean(gain))
    if np.max(np.abs(gain - g)) > tol * max(g, 1.0) or g == 0:
        return _unmatched(found, "pairs are scaled by different amounts, which no rotation does")
    found = dataclasses.replace(found, attention_factor=_snap(g, tol))
    theta = np.arctan2(b, a)
    step = _wrap(np.diff(theta, axis=0))
    omega = np.mean(step, axis=0)
    atol = max(tol / g, 1e-12) * 4
    if np.max(np.abs(step - omega)) > atol * n:
        return _unmatched(found, "the rotation angles do not grow linearly with the position")
    if np.any(np.abs(omega) <= atol):
        i = int(np.argmax(np.abs(omega) <= atol))
        return _unmatched(found, f"pair {i} ({pairs[i, 0]}, {pairs[i, 1]}) does not turn as the position grows")
    if np.any(omega < 0):
        i = int(np.argmax(omega < 0))
        return _unmatched(found, f"pair {i} turns by {omega[i]:.3g} rad per position: the sine has the opposite sign")
    unwrapped = theta[0] + np.concatenate([np.zeros((1, r // 2)), np.cumsum(step, axis=0)])
    omega = _slope(unwrapped)
    found = dataclasses.replace(found, inv_freq=omega)

    offset = _offset(_wrap(unwrapped[0]), omega, max_offset, atol * n)
    if offset is None:
        why = f"the angles at position 0 are no whole-number offset within +-{max_offset} of the positions"
        return _unmatched(found, why)
    found = dataclasses.replace(found, offset=offset)

    for base, scaling, factor in _candidates(omega, r, d, g):
        model = (positions[:, None] + offset) * _freqs(base, scaling, r, d)[None, :]
        if np.max(np.abs(_wrap(model - unwrapped))) <= atol * n and abs(factor - g) <= tol * max(g, 1.0):
            found = dataclasses.replace(found, base=base, scaling=scaling)
            break
    else:
        found = dataclasses.replace(found, base=_snap(_fit(omega, r)[0], 1e-4))
        return _unmatched(found,
            "the pair frequencies follow neither base ** (-2i / rotary_dim) nor a known scaling of it"
            + ("" if g == 1.0 else f" with cos and sin scaled by {g:.4g}")
        )
    return _verify(fn, found, ndim, dt, n, max(tol, 1e-12))


def _unmatched(found: RopeConvention, reason: str) -> RopeConvention:
    """``found`` as far as it got, with the reason nothing matched."""
    return dataclasses.replace(found, matched=False, reason=reason)


def _call(fn: Callable[..., Any], basis: np.ndarray, positions: np.ndarray, ndim: int | None) -> tuple[np.ndarray, int]:
    """``fn`` on ``basis`` ``(B, S, D)`` as 4-D ``(1, B, S, D)`` or else 3-D; the output as ``(B, S, D)``."""
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
        try:
            out = np.asarray(to_numpy(out))
        except Exception as exc:
            raise TypeError(f"fn must return an array, got {type(out).__name__}") from exc
        if out.shape != x.shape:
            raise ValueError(f"fn returned shape {out.shape} for x of shape {x.shape}; RoPE keeps the shape")
        return out.reshape(basis.shape), nd
    raise ValueError("fn(x, positions) raised for every probe: " + "; ".join(errors))


def _layout(M: np.ndarray, r: int, d: int, tol: float) -> tuple[str | None, np.ndarray | None]:
    h = r // 2
    options = {
        "half": np.stack([np.arange(h), np.arange(h) + h], axis=1),
        "interleaved": np.stack([np.arange(0, r, 2), np.arange(1, r, 2)], axis=1),
    }
    for name, pairs in options.items():
        allowed = np.eye(d, dtype=bool)
        for p, q in pairs:
            allowed[p, q] = allowed[q, p] = True
        if np.max(np.abs(M[:, ~allowed]), initial=0.0) <= tol:
            return name, pairs
    return None, None


def _mixing(M: np.ndarray, r: int, tol: float) -> str:
    """Say which feature mixes with which others, against both pairings."""
    mixes = np.max(np.abs(M), axis=0) > tol
    for j in range(r):
        others = [k for k in np.flatnonzero(mixes[:, j]).tolist() if k != j]
        half, inter = (j + r // 2) % r, j ^ 1
        if others not in ([half], [inter]):
            return (
                f"feature {j} mixes with features {others}: the pairs are neither half-split "
                f"({j} with {half}) nor interleaved ({j} with {inter})"
            )
    return "the features pair up as neither half-split nor interleaved"


def _wrap(a: np.ndarray) -> np.ndarray:
    wrapped: np.ndarray = (a + np.pi) % (2 * np.pi) - np.pi
    return wrapped


def _slope(unwrapped: np.ndarray) -> np.ndarray:
    s = np.arange(unwrapped.shape[0], dtype=np.float64)
    s = s - s.mean()
    slope: np.ndarray = (s[:, None] * (unwrapped - unwrapped.mean(axis=0))).sum(axis=0) / (s * s).sum()
    return slope


def _offset(phase: np.ndarray, omega: np.ndarray, max_offset: int, atol: float) -> int | None:
    """The whole number ``k`` with ``phase = k * omega (mod 2 pi)`` for every pair."""
    i = int(np.argmin(omega))  # the slowest pair wraps least: few candidates
    turns = math.ceil(max_offset * omega[i] / (2 * np.pi)) + 1
    cands = np.round((phase[i] + 2 * np.pi * np.arange(-turns, turns + 1)) / omega[i])
    cands = cands[np.abs(cands) <= max_offset]
    if cands.size == 0:
        return None
    resid = np.max(np.abs(_wrap(phase[None, :] - cands[:, None] * omega[None, :])), axis=1)
    best = int(np.argmin(resid))
    return int(cands[best]) if resid[best] <= atol * (1 + abs(cands[best]) / 32) else None


def _snap(value: float, rel: float) -> float:
    """The shortest decimal within ``rel`` (relative) of ``value``."""
    if not math.isfinite(value) or value == 0:
        return value
    for digits in range(1, 16):
        c = float(f"{value:.{digits}g}")
        if abs(c - value) <= rel * abs(value):
            return c
    return value


def _freqs(base: float, scaling: Mapping[str, Any] | None, r: int, d: int) -> np.ndarray:
    from ..frequencies import rope_frequencies

    if scaling is not None and scaling["rope_type"] == "linear":  # theta / factor, by definition
        linear: np.ndarray = rope_frequencies(d, base=base, rotary_dim=r).inv_freq / scaling["factor"]
        return linear
    kwargs = {}
    if scaling is not None and "original_max_position_embeddings" in scaling:
        kwargs["max_position_embeddings"] = int(scaling["original_max_position_embeddings"] * scaling["factor"])
    return rope_frequencies(d, base=base, rotary_dim=r, scaling=scaling, **kwargs).inv_freq


def _fit(omega: np.ndarray, r: int) -> tuple[float, float]:
    """``(base, factor)`` of ``omega[i] = base ** (-2i / r) / factor``, weighted to the fast pairs."""
    if r <= 2:
        return float("nan"), 1.0 / float(omega[0])
    i = np.arange(r // 2, dtype=np.float64)
    w = omega / omega.max()
    A = np.stack([np.ones_like(w), i], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, np.log(omega) * w, rcond=None)
    return (math.exp(-b * r / 2) if b < 0 else float("nan")), math.exp(-a)


def _candidates(
    omega: np.ndarray, r: int, d: int, g: float
) -> Iterator[tuple[float, dict[str, Any] | None, float]]:
    """(base, scaling, attention factor) guesses, plainest first."""
    from ..frequencies import rope_frequencies
    from ..scaling import ROPE_TYPES

    i = np.arange(r // 2)
    base, factor = _fit(omega, r)
    if math.isfinite(base):
        for rel in (1e-4, 1e-5, 1e-7, 1e-9):  # the roundest value that fits first
            nice = _snap(base, rel)
            if abs(factor - 1) <= 1e-6:
                yield nice, None, 1.0
            else:
                yield nice, {"rope_type": "linear", "factor": _snap(factor, 1e-6)}, 1.0
    if r <= 2:
        return
    # Scalings that keep the fastest pairs and slow the others down.
    base = _snap(float(omega[1] ** (-r / 2)), 1e-5)
    plain = base ** (-2.0 * i / r)
    slowdown = float(plain[-1] / omega[-1])
    factors = sorted(_FACTORS, key=lambda f: abs(f - slowdown))[:3]
    for rope_type in ("llama3", "yarn"):
        if rope_type not in ROPE_TYPES:
            continue
        for f in factors:
            for L0 in _ORIGINAL_LENGTHS:
                scaling = {"rope_type": rope_type, "factor": f, "original_max_position_embeddings": L0}
                if rope_type == "llama3":  # the values Llama 3.1 and 3.2 ship with
                    scaling.update(low_freq_factor=1.0, high_freq_factor=4.0)
                try:
                    freqs = rope_frequencies(d, base=base, rotary_dim=r, scaling=scaling,
                                             max_position_embeddings=int(L0 * f))
                except Exception:  # parameters this rope type does not accept
                    continue
                if np.max(np.abs(freqs.inv_freq - omega) / omega) > 1e-3:
                    continue
                if np.max(np.abs(freqs.inv_freq - plain) / plain) <= 1e-6:
                    continue  # these parameters change nothing: not evidence of this scaling
                factor = freqs.attention_factor
                if abs(factor - g) > 1e-6 * g:
                    if not ROPE_TYPES[rope_type].carries_attention_factor:
                        continue
                    scaling = dict(scaling, attention_factor=_snap(g, 1e-9))
                    factor = g
                yield base, scaling, factor


def _verify(
    fn: Callable[..., Any], found: RopeConvention, ndim: int, dt: np.dtype[Any], n: int, tol: float
) -> RopeConvention:
    """Random inputs at positions ``n .. 2n-1``: ``fn`` against the convention found."""
    from ..apply import apply_rotary
    from ..frequencies import RopeFrequencies
    from ..tables import rope_tables

    d, r = found.head_dim, found.rotary_dim
    assert r is not None and found.base is not None and found.layout is not None and found.offset is not None
    inv = _freqs(found.base, found.scaling, r, d)
    freqs = RopeFrequencies(inv, d, r, found.attention_factor, found.base)
    x = np.random.default_rng(0).standard_normal((2, n, d)).astype(dt)
    positions = np.arange(n, 2 * n, dtype=np.int64)
    out, _ = _call(fn, x, positions, ndim)
    cos, sin = rope_tables(freqs, positions + found.offset, dtype=np.float64)
    want = apply_rotary(x.astype(np.float64), cos, sin, layout=checks.layout(found.layout))
    scale = float(np.max(np.abs(x)))
    err = float(np.max(np.abs(out.astype(np.float64) - want))) / scale
    if err > 64 * tol * max(1.0, found.attention_factor):
        same = _call(fn, x, np.arange(n, dtype=np.int64), ndim)[0]
        if np.array_equal(same, out):
            why = "fn ignores its positions argument (it always uses 0, 1, 2, ...)"
            return dataclasses.replace(found, max_error=err, reason=why)
        return dataclasses.replace(
            found, max_error=err, reason=f"on random inputs at positions {n}..{2 * n - 1} it differs by {err:.2g}"
        )
    return dataclasses.replace(found, matched=True, max_error=err)
