"""``identify_rope``: which RoPE convention does someone else's function implement?

Public as :func:`arrayrope.testing.identify_rope` (documented there). The function is probed
with unit vectors (:mod:`.probe`): its output for ``e_j`` at
position ``p`` is column ``j`` of the rotation matrix it applies there, measured at
positions ``0 .. seq_len-1`` and at blocks of far positions up to ``max_position``. From
those matrices follow, in order: which features pair up (the layout) and where they sit
(leading or trailing rotary features, pairs that never turn), the angle of each pair at
each position, hence each pair's frequency and the position offset, and the factor on
cos and sin. The frequency set is then fitted as a whole by every rope type of
:mod:`arrayrope.scaling` whose registry entry can be fitted; a convention is named only
when the frequencies its own function computes agree with the measured ones within
their uncertainties, and a last call on random inputs gives the error reported.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from .._lib import checks
from ..apply import apply_rotary
from ..frequencies import RopeFrequencies, rope_frequencies
from ..scaling import ROPE_TYPES
from ..scaling._fit import K_SIGMA, nice
from ..tables import rope_tables
from . import probe as _probe
from .convention import RopeConvention

__all__ = ["identify_rope"]


def identify_rope(
    fn: Callable[[np.ndarray, np.ndarray], Any],
    *,
    head_dim: int,
    seq_len: int = 32,
    max_offset: int = 1 << 16,
    dtype: str = "float64",
    max_position: int = 1 << 24,
) -> RopeConvention:
    """Find the RoPE convention a function implements by probing it.

    Parameters
    ----------
    fn : callable
        ``fn(x, positions)``: ``x`` a NumPy array ``(..., seq, head_dim)`` (it is
        called with 4-D ``x``, then with 3-D ``x`` if that raises), ``positions``
        int64 of shape ``(seq,)``, consecutive; returns the rotated ``x`` (any array
        library, in the precision the implementation works in).
    head_dim : int
        Features per head.
    seq_len : int
        Positions probed first, ``0 .. seq_len-1`` (at least 4). Pair frequencies
        above pi radians per position cannot be told from their aliases.
    max_offset : int
        Largest position offset looked for.
    dtype : str
        NumPy dtype of the probes given to ``fn``.
    max_position : int
        Farthest position probed (blocks of 4 at ``4 seq_len``, ``16 seq_len``, ...).
        Far positions make slow pairs turn measurably; lower it for implementations
        whose frequencies change with the length (``dynamic`` beyond
        ``max_position_embeddings``) or whose tables end. A call that raises ends the
        probing there. The default, ``2**24``, is the last position float32 holds exactly.

    Returns
    -------
    RopeConvention
        ``str()`` of it says what was found, or plainly why nothing matched.

    Notes
    -----
    Every measured angle carries an uncertainty from the output dtype (float64,
    float32, float16, bfloat16) and from float32 angle arithmetic, which most
    implementations use (about ``4 eps32`` times the angle). The frequencies of all
    pairs are fitted as a whole by each rope type whose :mod:`arrayrope.scaling`
    registry entry has a fit (default, linear, llama3, yarn, proportional); the first,
    roundest parameters whose frequencies agree with the measured ones within
    ``K_SIGMA`` uncertainties are named. ``dynamic`` and ``longrope`` cannot be named
    from a probe (their frequencies depend on the length, or are a list per pair).

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
    max_position = checks.integer(max_position, "max_position", minimum=seq_len - 1)
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise ValueError(f"dtype must be a NumPy floating dtype name, got {dtype!r}")

    d, n = head_dim, seq_len
    probes = _probe.measure_matrices(fn, d, dt, n, max_position)
    found = RopeConvention(matched=False, head_dim=d)
    M, eps = probes.M, probes.eps
    last = int(probes.positions[-1])
    if not np.all(np.isfinite(M)):
        return _unmatched(found, "fn returned NaN or infinity for unit inputs")
    tol = K_SIGMA * (2 * eps + probes.tiny)
    st = _probe.pairs_of(M, eps)
    if st is None:
        if np.max(np.abs(M - np.eye(d))) <= tol:
            return _unmatched(found, f"fn returns x unchanged at positions 0..{last}")
        return _unmatched(found, f"fn changes x but does not turn any pair of features at positions 0..{last}")
    if isinstance(st, str):
        return _unmatched(found, st + _permutation_hint(M[0], tol))
    features = "leading" if st.start == 0 else "trailing"
    found = dataclasses.replace(found, rotary_dim=st.width, layout=st.layout, rotary_features=features)

    turning = st.pairs[: st.turning]
    p_idx, q_idx = turning[:, 0], turning[:, 1]
    a, b = M[:, p_idx, p_idx], M[:, q_idx, p_idx]
    if np.max(np.abs(a - M[:, q_idx, q_idx])) > tol or np.max(np.abs(b + M[:, p_idx, q_idx])) > tol:
        return _unmatched(found, "a pair is not rotated (its 2x2 block is not [[cos, -sin], [sin, cos]])")
    gain = np.hypot(a, b)
    g = float(np.median(gain))
    if g == 0 or np.max(np.abs(gain - g)) > tol * max(g, 1.0):
        return _unmatched(found, "pairs are scaled by different amounts, which no rotation does")
    still = st.pairs[st.turning :].ravel()
    outside = np.setdiff1d(np.arange(d), st.pairs.ravel())
    diag = np.diagonal(M, axis1=1, axis2=2)
    if np.max(np.abs(diag[:, still] - g), initial=0.0) > tol or np.max(np.abs(diag[:, outside] - 1), initial=0.0) > tol:
        return _unmatched(found, "features that do not turn are scaled, which no RoPE does")
    found = dataclasses.replace(found, attention_factor=nice(g, 2 * eps))
    sigma_g = eps * g / 4 + 1e-15  # the median of many roundings; bfloat16 and float16 round cos and sin alike

    if probes.positions.size > n and np.array_equal(M[n : n + 4], M[:4]):
        return _unmatched(found, "fn ignores its positions argument (it always uses 0, 1, 2, ...)")
    theta = np.arctan2(b, a)
    meas = _probe.frequencies(theta, probes.positions, n, eps, probes.tiny)
    if meas.nonlinear is not None:
        i, pos, dev = meas.nonlinear
        return _unmatched(
            found,
            (
                f"the rotation angles do not grow linearly with the position: pair {i} is {dev:.2g} rad off its best "
                f"line at position {pos}, more than its dtype and float32 angles allow (frequencies that change with "
                "the sequence length do this, such as dynamic NTK beyond max_position_embeddings and LongRoPE past "
                "its original context)"
            ),
        )
    omega = meas.omega
    still_turning = np.abs(omega) <= K_SIGMA * meas.sigma_omega
    if np.any(still_turning):
        i = int(np.argmax(still_turning))
        stop = f"; {probes.stopped}" if probes.stopped else ""
        return _unmatched(
            found,
            (
                f"pair {i} ({turning[i, 0]}, {turning[i, 1]}) does not turn measurably as the position grows to {last}"
                f"{stop}"
            ),
        )
    if np.any(omega < 0):
        i = int(np.argmax(omega < 0))
        return _unmatched(found, f"pair {i} turns by {omega[i]:.3g} rad per position: the sine has the opposite sign")
    offset = _offset(meas, max_offset)
    if offset is None:
        why = f"the angles at position 0 are no whole-number offset within +-{max_offset} of the positions"
        return _unmatched(found, why)
    if offset:  # float32 angle errors grow with the offset too
        meas = _probe.frequencies(theta, probes.positions, n, eps, probes.tiny, offset)
    pad = st.width // 2 - st.turning
    omega = np.concatenate([meas.omega, np.zeros(pad)])
    sigma = np.concatenate([meas.sigma_omega, np.full(pad, 1e-300)])
    found = dataclasses.replace(found, offset=offset, inv_freq=omega)

    match = _fit(omega, sigma, d, g, sigma_g, st.width)
    if match is None:
        guess = next(iter(_guess(omega, sigma)), None)
        found = dataclasses.replace(found, base=guess)
        names = ", ".join(name for name, entry in ROPE_TYPES.items() if entry.fit is not None)
        return _unmatched(
            found,
            (
                "the pair frequencies follow neither base ** (-2i / rotary_dim) nor a known scaling of it "
                f"(the rope types a probe can fit: {names})"
                + ("" if g == 1.0 else f", with cos and sin scaled by {g:.4g}")
            ),
        )
    freqs, scaling = match
    found = dataclasses.replace(
        found,
        base=freqs.base,
        scaling=scaling,
        rotary_dim=_rotary_of(scaling, freqs),
        attention_factor=freqs.attention_factor,
    )
    return _verify(fn, found, freqs, probes, dt, n)


def _unmatched(found: RopeConvention, reason: str) -> RopeConvention:
    """``found`` as far as it got, with the reason nothing matched."""
    return dataclasses.replace(found, matched=False, reason=reason)


def _permutation_hint(m0: np.ndarray, tol: float) -> str:
    """A hint when the matrix at position 0 moves features instead of leaving them (a rotation by 0 would)."""
    big = np.abs(m0) > 0.5
    if np.array_equal(big.sum(axis=0), np.ones(len(m0))) and np.array_equal(big.sum(axis=1), np.ones(len(m0))):
        moved = np.flatnonzero(~np.diag(big))
        if moved.size:
            pairs = ", ".join(f"{j} -> {int(np.argmax(big[:, j]))}" for j in moved[:4])
            return (
                f"; at position 0 fn moves features ({pairs}"
                f"{'...' if moved.size > 4 else ''}): its output is permuted, as DeepSeek's interleaved kernel "
                "writes half-split order; probe fn composed with the permutation of its checkpoint rows "
                "(arrayrope.to_interleaved / permute_rotary_rows)"
            )
    return ""


def _offset(meas: _probe.Measured, max_offset: int) -> int | None:
    """The smallest whole number ``o`` with ``phi = o * omega (mod 2 pi)`` for every pair, within the uncertainties."""
    cands = np.arange(-max_offset, max_offset + 1, dtype=np.float64)
    for i in np.argsort(meas.omega):  # the slowest pairs wrap least: they prune first
        om = meas.omega[i]
        res = _probe.wrap(meas.phi[i] - om * cands)
        tol = K_SIGMA * (meas.sigma_phi[i] + np.abs(cands) * meas.sigma_omega[i]) + 4 * _probe.EPS32 * np.abs(
            om * cands
        )
        cands = cands[np.abs(res) <= tol + 1e-12]
        if cands.size == 0:
            return None
    return int(cands[np.argmin(np.abs(cands))])


def _fit(
    omega: np.ndarray, sigma: np.ndarray, d: int, g: float, sigma_g: float, width: int
) -> tuple[RopeFrequencies, dict[str, Any] | None] | None:
    """The first candidate of a fittable rope type whose own frequencies agree with the measured ones."""
    for entry in ROPE_TYPES.values():
        if entry.fit is None:
            continue
        for base, r, scaling in entry.fit(omega, sigma, head_dim=d, gain=g, gain_sigma=sigma_g):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    freqs = rope_frequencies(d, base=base, rotary_dim=r, scaling=scaling)
            except (ValueError, TypeError):  # parameters this rope type does not accept
                continue
            inv = freqs.inv_freq
            if (
                inv.shape == omega.shape
                and np.all(np.abs(inv - omega) <= K_SIGMA * sigma + 1e-15)
                and (abs(freqs.attention_factor - g) <= K_SIGMA * sigma_g)
            ):
                return freqs, scaling
    return None


def _guess(omega: np.ndarray, sigma: np.ndarray) -> Iterator[float]:
    """The base a plain geometric fit gives, for the report when nothing matched."""
    turning = omega > 0
    fit = ROPE_TYPES["default"].fit
    if turning.sum() >= 2 and fit is not None:
        for base, _, _ in fit(omega[turning], sigma[turning]):
            yield base


def _rotary_of(scaling: Mapping[str, Any] | None, freqs: RopeFrequencies) -> int:
    """The features that turn: the rotary dim, less the pairs a proportional rope leaves at frequency 0."""
    return (
        2 * int(np.count_nonzero(freqs.inv_freq))
        if scaling is not None and scaling.get("rope_type") == "proportional"
        else freqs.rotary_dim
    )


def _verify(
    fn: Callable[..., Any],
    found: RopeConvention,
    freqs: RopeFrequencies,
    probes: _probe.Probes,
    dt: np.dtype[Any],
    n: int,
) -> RopeConvention:
    """``fn`` against the convention found (in float64) on random inputs near the start and near position 4096."""
    assert found.layout is not None and found.offset is not None
    far = probes.positions[n::4]
    blocks = [np.arange(n, 2 * n, dtype=np.int64)]
    if far.size:
        s = int(far[np.argmin(np.abs(np.log(far / 4096.0)))])
        blocks.append(np.arange(s, s + 4, dtype=np.int64))
    rng = np.random.default_rng(0)
    err = bound = 0.0
    out0 = None
    for positions in blocks:
        x = rng.standard_normal((2, positions.size, found.head_dim)).astype(dt)
        out, _, _ = _probe.call(fn, x, positions, probes.ndim)
        cos, sin = rope_tables(freqs, positions + found.offset, dtype=np.float64)
        want = apply_rotary(
            x.astype(np.float64),
            cos,
            sin,
            layout=checks.layout(found.layout),
            rotary_features="trailing" if found.rotary_features == "trailing" else "leading",
        )
        err = max(err, float(np.max(np.abs(out - want))) / float(np.max(np.abs(x))))
        angle = float(np.max(freqs.inv_freq)) * (float(positions[-1]) + abs(found.offset))
        bound = max(
            bound,
            K_SIGMA * (2 * probes.eps * max(1.0, freqs.attention_factor) + 8 * _probe.EPS32 * angle + probes.tiny)
            + 1e-12,
        )
        if out0 is None:
            out0 = (x, out)
    if err > bound:
        assert out0 is not None
        same, _, _ = _probe.call(fn, out0[0], np.arange(n, dtype=np.int64), probes.ndim)
        if np.array_equal(same, out0[1]):
            return dataclasses.replace(
                found, max_error=err, reason="fn ignores its positions argument (it always uses 0, 1, 2, ...)"
            )
        where = " and ".join(f"{p[0]}..{p[-1]}" for p in blocks)
        return dataclasses.replace(
            found, max_error=err, reason=f"on random inputs at positions {where} it differs by {err:.2g}"
        )
    return dataclasses.replace(found, matched=True, max_error=err)
