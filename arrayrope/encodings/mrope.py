"""Multimodal RoPE: one set of frequencies, driven by one position per axis (Qwen2-VL, Qwen3-VL)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.positions import position_array
from .._lib.types import Array, Device, DType, Namespace
from ..frequencies import RopeFrequencies
from ..tables import rope_tables

__all__ = ["mrope_tables"]


def mrope_tables(
    freqs: RopeFrequencies,
    positions: Array,
    *,
    sections: Sequence[int],
    interleaved: bool = False,
    xp: Namespace | None = None,
    dtype: DType | None = None,
    device: Device = None,
) -> tuple[Array, Array]:
    """Cos/sin tables of multimodal RoPE (Qwen2-VL M-RoPE, Qwen3-VL interleaved M-RoPE).

    Every token has one position per axis (temporal, height, width for Qwen);
    frequency ``k`` of ``freqs`` is driven by the position of one axis:

    * ``interleaved=False`` (Qwen2-VL, Qwen2.5-VL): consecutive sections,
      ``sections[0]`` frequencies for axis 0, then ``sections[1]`` for axis 1, ...
    * ``interleaved=True`` (Qwen3-VL): with ``n = len(sections)`` axes, frequency
      ``k`` takes axis ``a >= 1`` when ``k mod n == a`` and ``k < n * sections[a]``,
      axis 0 otherwise (for three axes: h when ``k mod 3 = 1`` and ``k < 3 * sections[1]``,
      w when ``k mod 3 = 2`` and ``k < 3 * sections[2]``, t otherwise).

    Text tokens carry the same position on every axis, which makes this plain 1-D RoPE.
    The tables are meant for the half-split layout, as Qwen applies them.

    Parameters
    ----------
    freqs : RopeFrequencies
        From :func:`~arrayrope.rope_frequencies` (its scaling and attention factor apply).
    positions : array
        Integer or real positions of shape ``(len(sections), ...)``, e.g. ``(3, B, S)``
        as Qwen's ``get_rope_index`` returns them.
    sections : sequence of int
        ``mrope_section``: frequencies per axis, positive; consecutive ones sum to ``rotary_dim // 2``,
        interleaved ones bound each axis's pairs (those past them take axis 0), as Qwen3-VL slices them.
    interleaved : bool
        Qwen3-VL's assignment instead of consecutive sections.
    xp : namespace, optional
        Array namespace for int or tuple positions (default NumPy); inferred from an array.
    dtype : dtype or str, optional
        Real floating dtype of the tables (default float32).
    device : device, optional
        Device of the tables (default: the positions' device).

    Returns
    -------
    cos : array
        Shape ``positions.shape[1:] + (rotary_dim // 2,)``; for queries ``(B, heads, S, d)``
        index it as ``cos[:, None]``.
    sin : array
        The same shape.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.rope_frequencies(128, base=1e6)
    >>> pos = np.stack([np.zeros((1, 4), int), np.arange(4)[None], np.arange(4)[None] % 2])  # (3, B, S)
    >>> cos, sin = arrayrope.mrope_tables(f, pos, sections=(16, 24, 24))
    >>> cos.shape
    (1, 4, 64)
    >>> bool(np.all(sin[..., :16] == 0))  # temporal section: position 0 everywhere
    True
    """
    if not isinstance(freqs, RopeFrequencies):
        raise TypeError(f"freqs must be a RopeFrequencies from rope_frequencies(), got {type(freqs).__name__}")
    sections = checks.int_sequence(sections, "sections", positive=True)
    interleaved = checks.boolean(interleaved, "interleaved")
    pair_axes(sections, interleaved, freqs.rotary_dim // 2, "sections")  # checked before anything is computed
    n = len(sections)
    if isinstance(positions, (int, float)):
        raise TypeError(f"positions must be an array of shape ({n}, ...), got {positions!r}")
    xp, positions, device = position_array(positions, xp=xp, device=device)
    if positions.ndim < 1 or positions.shape[0] != n:
        raise ValueError(
            f"positions must have shape (len(sections), ...) = ({n}, ...), e.g. (3, batch, seq); "
            f"got shape {tuple(positions.shape)}"
        )
    cos_all, sin_all = rope_tables(freqs, positions, xp=xp, dtype=dtype, device=device)
    ns = backends.namespace(cos_all)
    cos, sin = cos_all[0, ...], sin_all[0, ...]
    dev = backends.device_of(cos_all) if device is None else device
    axis_of = backends.constant(ns, pair_axes, (tuple(sections), interleaved, freqs.rotary_dim // 2), dev)
    for a in range(1, n):
        mask = axis_of == a
        cos = ns.where(mask, cos_all[a, ...], cos)
        sin = ns.where(mask, sin_all[a, ...], sin)
    return cos, sin


def pair_axes(sections: Sequence[int], interleaved: bool, pairs: int, name: str = "sections") -> np.ndarray:
    """The axis whose position turns each of the ``pairs`` rotary pairs (host, int64): M-RoPE's one rule.

    Consecutive sections must cover the pairs exactly (``sum(sections) == pairs``: Qwen2-VL's code splits
    the tables by them). Interleaved ones are bounds, as Qwen3-VL's code slices them: axis ``a >= 1`` takes
    pair ``k`` where ``k mod n == a`` and ``k < n * sections[a]``, axis 0 every other pair, so the sections
    may sum to more or fewer pairs (a checkpoint's ``mrope_section`` with another ``partial_rotary_factor``).
    ``name``: what the caller calls the sections, for the error.
    """
    n = len(sections)
    if not interleaved:
        if sum(sections) != pairs:
            raise ValueError(
                f"{name}={list(sections)} sum to {sum(sections)}, but rotary_dim // 2 = {pairs} pairs rotate; "
                "consecutive sections must sum to it (interleaved ones bound the pairs of each axis)"
            )
        return np.repeat(np.arange(n, dtype=np.int64), sections)
    k = np.arange(pairs, dtype=np.int64)
    axis_of = np.zeros_like(k)
    for a in range(1, n):
        axis_of[(k % n == a) & (k < n * sections[a])] = a
    return axis_of
