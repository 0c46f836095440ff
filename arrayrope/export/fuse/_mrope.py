"""M-RoPE in fuse: the sections of a rotation whose tables are read at position ids ``(axes, batch, seq)``,
measured axis by axis, and the fused rotation compared with it with every axis at another position."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from arrayrope.encodings.mrope import pair_axes
from arrayrope.frequencies import RopeFrequencies

from ._probe import Probe

#: Positions of one probing call: far enough from 0 that the slowest pair of a checkpoint turns measurably.
_AT = 97
_SEQ = 8


def sections_of(
    run: Probe, freqs: RopeFrequencies, layout: str, axes: int, rows: int | None
) -> tuple[tuple[int, ...], bool]:
    """``(sections, interleaved)`` of the export layer's M-RoPE that turn each pair by the axis ``run`` turns it
    by (one axis moved at a time, the others at 0); ValueError where no such sections exist."""
    pairs = freqs.rotary_dim // 2
    half = pairs if layout == "half" else 1
    step = 1 if layout == "half" else 2
    first = step * np.arange(pairs)
    start = max(1, min(_AT, (rows or _AT + _SEQ) - _SEQ))
    at = np.arange(start, start + _SEQ, dtype=np.int64)
    # half the sine a pair's own frequency gives there: far above float32's noise even for the slowest pairs
    sines = np.abs(np.sin(np.outer(at, np.asarray(freqs.inv_freq, np.float64))))
    threshold = 0.5 * freqs.attention_factor * np.max(sines, axis=0)
    probes = np.zeros((1, pairs, _SEQ, freqs.head_dim), np.float32)
    probes[0, np.arange(pairs), :, first] = 1.0  # probe k: the first feature of pair k
    found = np.full(pairs, -1, np.int64)
    for a in range(axes):
        positions = np.zeros((axes, _SEQ), np.int64)
        positions[a] = at
        y = np.asarray(run(probes, positions), np.float64)[0]  # (pairs, seq, head_dim)
        turns = np.max(np.abs(y[np.arange(pairs), :, first + half]), axis=-1) > threshold
        found = np.where(turns & (found == -1), a, np.where(turns, -2, found))
    names = "thw" if axes == 3 else "".join(str(a) for a in range(axes))
    said = "".join(names[a] if a >= 0 else "?" for a in found)
    if found.min() < 0:
        raise ValueError(
            f"its M-RoPE pairs do not each turn by one position axis (pair by pair: {said}; '?': none or several)"
        )
    counts = tuple(int(c) for c in np.bincount(found, minlength=axes))
    for interleaved in (False, True):
        try:
            if np.array_equal(pair_axes(counts, interleaved, pairs), found):
                return counts, interleaved
        except ValueError:
            continue
    raise ValueError(
        f"its M-RoPE pairs turn by the axes {said}, in an order neither consecutive nor interleaved sections give"
    )


def axes_differ(a: Probe, b: Probe, head_dim: int, axes: int, limit: int, seed: int = 1) -> float:
    """Largest difference between two M-RoPE rotations on random heads with every axis at its own random
    positions below ``limit``, relative to the largest input value."""
    rng = np.random.default_rng(seed)
    seq = min(13, limit)
    x = rng.standard_normal((1, 3, seq, head_dim)).astype(np.float32)
    positions: npt.NDArray[np.int64] = rng.integers(0, limit, (axes, seq))
    ya, yb = np.asarray(a(x, positions), np.float64), np.asarray(b(x, positions), np.float64)
    return float(np.max(np.abs(ya - yb))) / float(np.max(np.abs(x)))
