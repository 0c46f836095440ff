"""M-RoPE in an audit: the axis whose position turns each pair, measured with the axes of a call at different
positions, against the config's ``mrope_section`` and its interleaving."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from arrayrope.frequencies import RopeFrequencies

from ._expect import BLOCK, pair_features

if TYPE_CHECKING:
    from ._judge import _Judge


def mrope_finding(judge: _Judge) -> tuple[str, str]:
    """``(difference, note)`` of M-RoPE: the axis whose position turns each pair, measured with the axes of a
    call at different positions, against the config's ``mrope_section``."""
    n, mrope = judge.rotation.position_axes, judge.s.mrope
    if not n and mrope is None:
        return "", ""
    if not n:
        assert mrope is not None
        return "", (
            f"the config's M-RoPE (mrope_section {list(mrope[0])}) was not checked: the model takes one position "
            "per token, every axis at that position (text), which was checked"
        )
    if mrope is None:
        return f"it takes M-RoPE position ids ({n}, batch, seq), and the config gives no mrope_section", ""
    freqs = judge.layer.frequencies(judge.exp.config, BLOCK)
    pairs = freqs.rotary_dim // 2
    expected = judge.layer.pair_axes(pairs)
    assert expected is not None
    if int(expected.max()) >= n:
        return f"it takes {n} position axes, and mrope_section {list(mrope[0])} has {expected.max() + 1}", ""
    starts = np.array([97, 7, 31, 53][:n], np.int64)  # every axis at another position
    positions = starts[:, None] + np.arange(BLOCK, dtype=np.int64)[None, :]
    m, e = judge.matrices(positions), judge.layer.matrices(judge.exp.config, positions)
    tol = judge.tolerance(freqs, positions, m.shape[-1])
    at = f"axes at positions {', '.join(str(int(s)) for s in starts)} (+0..{BLOCK - 1})"
    if m.shape == e.shape and bool(np.all(np.abs(m - e) <= tol)):
        return "", f"M-RoPE {at} checked"
    found = _axes_found(judge, n, freqs)
    names = "thw" if n == 3 else "".join(str(a) for a in range(n))
    wrong = np.flatnonzero(found != expected)
    if found.min() < 0 or not wrong.size:
        return f"its M-RoPE rotation differs from mrope_section {list(mrope[0])}'s with the {at}", ""
    i = int(wrong[0])
    by_pair = ["".join(names[a] for a in axes) for axes in (found, expected)]
    return (
        f"M-RoPE pairs turn by other axes than mrope_section {list(mrope[0])} gives: pair {i} by axis "
        f"{names[found[i]]}, expected {names[expected[i]]} (found, pair by pair: {by_pair[0]}; expected: "
        f"{by_pair[1]})",
        "",
    )


def _axes_found(judge: _Judge, n: int, freqs: RopeFrequencies) -> npt.NDArray[np.int64]:
    """The axis whose position alone turns each pair by about its angle there (-1 for none, -2 for several)."""
    pairs = freqs.rotary_dim // 2
    first, second = pair_features(freqs.head_dim, 2 * pairs, judge.layer.layout, judge.s.rotary_features)
    found = np.full(pairs, -1, np.int64)
    at = np.arange(97, 97 + BLOCK)
    # half the sine a pair's own frequency gives there: far above float32's noise even for the slowest pairs
    threshold = 0.5 * np.max(np.abs(np.sin(np.outer(at, np.asarray(freqs.inv_freq[:pairs], np.float64)))), axis=0)
    for a in range(n):
        positions = np.zeros((n, BLOCK), np.int64)
        positions[a] = at
        turns = np.max(np.abs(judge.matrices(positions)[:, second, first]), axis=0) > threshold
        found = np.where(turns & (found == -1), a, np.where(turns, -2, found))
    return found
