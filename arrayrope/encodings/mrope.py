"""Multimodal RoPE: one set of frequencies, driven by one position per axis (Qwen2-VL, Qwen3-VL, ERNIE 4.5 VL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.positions import position_array
from .._lib.types import Array, Device, DType, Namespace
from ..frequencies import RopeFrequencies
from ..tables import rope_tables

__all__ = ["mrope_tables"]

#: How the axes share the pairs: consecutive sections (False), turns (True), "spatial" (ERNIE 4.5 VL), or
#: "full_width" (HunYuan-VL: sections of features over the whole rotary width, halves included)
Interleaving: TypeAlias = bool | Literal["spatial", "full_width"]


def mrope_tables(
    freqs: RopeFrequencies,
    positions: Array,
    *,
    sections: Sequence[int],
    interleaved: Interleaving = False,
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
    * ``interleaved="spatial"`` (ERNIE 4.5 VL): axes ``1 .. n-1`` take turns over the leading
      ``sum(sections[1:])`` pairs (pair ``k`` to axis ``1 + k mod (n - 1)``; their sections equal),
      axis 0 holds the trailing ``sections[0]`` pairs (for three axes: h, w, h, w, ..., then t).
      ERNIE's config states its ``mrope_section`` as ``[h, w, t]``; these sections are ``(t, h, w)``.

    Text tokens carry the same position on every axis, which makes this plain 1-D RoPE.
    The tables have a column per rotary pair: Qwen applies them in the half-split layout, ERNIE 4.5 VL in
    the interleaved one.

    Parameters
    ----------
    freqs : RopeFrequencies
        From :func:`~arrayrope.rope_frequencies` (its scaling and attention factor apply).
    positions : array
        Integer or real positions of shape ``(len(sections), ...)``, e.g. ``(3, B, S)``
        as Qwen's ``get_rope_index`` returns them.
    sections : sequence of int
        ``mrope_section``: frequencies per axis, positive; consecutive and spatial ones sum to
        ``rotary_dim // 2``, interleaved ones bound each axis's pairs (those past them take axis 0), as
        Qwen3-VL slices them.
    interleaved : bool or "spatial"
        Qwen3-VL's assignment (True) or ERNIE 4.5 VL's ("spatial") instead of consecutive sections.
        HunYuan-VL's ``"full_width"`` sections turn the two features of a pair by different axes: no
        table of pairs holds them, and they are refused (:class:`RotaryEmbedding` applies them).
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
    sections = checks.int_sequence(sections, "sections", positive=True)
    interleaved = interleaving(interleaved, "interleaved")
    (cos, sin), _ = _tables(freqs, positions, sections, (interleaved,), xp, dtype, device)
    return cos, sin


def half_tables(
    freqs: RopeFrequencies, positions: Array, *, sections: Sequence[int], interleaved: Interleaving, dtype: DType
) -> tuple[tuple[Array, Array], tuple[Array, Array] | None]:
    """:func:`mrope_tables` for any form: the tables of the first features of the pairs, and those of the
    second features where they differ (``"full_width"``, HunYuan-VL's), else None."""
    if interleaved != "full_width":
        return _tables(freqs, positions, sections, (interleaved,), None, dtype, None)
    return _tables(freqs, positions, sections, ("first", "second"), None, dtype, None)


def _tables(
    freqs: RopeFrequencies,
    positions: Array,
    sections: Sequence[int],
    forms: tuple[object, ...],
    xp: Namespace | None,
    dtype: DType | None,
    device: Device,
) -> tuple[tuple[Array, Array], Any]:
    """cos/sin of the pairs whose axes ``forms[0]`` gives (an :data:`Interleaving`, or ``"first"``: the first
    features of full-width sections), and of ``forms[1]``'s (``"second"``) where given, else None."""
    if not isinstance(freqs, RopeFrequencies):
        raise TypeError(f"freqs must be a RopeFrequencies from rope_frequencies(), got {type(freqs).__name__}")
    pairs = freqs.rotary_dim // 2
    for form in forms:  # checked before anything is computed
        _axes(tuple(sections), form, pairs)
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
    dev = backends.device_of(cos_all) if device is None else device
    found = []
    for form in forms:
        cos, sin = cos_all[0, ...], sin_all[0, ...]
        axis_of = backends.constant(ns, _axes, (tuple(sections), form, pairs), dev)
        for a in range(1, n):
            mask = axis_of == a
            cos = ns.where(mask, cos_all[a, ...], cos)
            sin = ns.where(mask, sin_all[a, ...], sin)
        found.append((cos, sin))
    return found[0], (found[1] if len(found) > 1 else None)


def _axes(sections: tuple[int, ...], form: object, pairs: int) -> np.ndarray:
    """:func:`pair_axes` of ``form``, or of the first or second features of full-width sections."""
    if form == "first" or form == "second":
        return half_axes(sections, "full_width", pairs)[0 if form == "first" else 1]
    return pair_axes(sections, form, pairs)  # type: ignore[arg-type]  # an Interleaving


def interleaving(value: object, name: str) -> Interleaving:
    """``value`` checked as an :data:`Interleaving`: True, False (NumPy's ``bool_`` too) or ``"spatial"``."""
    if isinstance(value, str) and value in ("spatial", "full_width"):
        return "spatial" if value == "spatial" else "full_width"
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(
        f"{name} must be True (Qwen3-VL's turns), False (consecutive sections), 'spatial' (ERNIE 4.5 VL's "
        "turns of the spatial axes, then the temporal section) or 'full_width' (HunYuan-VL's sections of "
        f"features over the whole rotary width), got {value!r} ({type(value).__name__})"
    )


def stated_sections(sections: Sequence[int], interleaved: Interleaving, *, to_config: bool = False) -> tuple[int, ...]:
    """The sections per axis of a config's ``mrope_section`` (``to_config``: the other way): the same, except
    ERNIE 4.5 VL's ("spatial"), which its config states as ``[h, w, t]`` for arrayrope's ``(t, h, w)``."""
    s = tuple(int(n) for n in sections)
    if interleaved != "spatial" or not s:
        return s
    return (*s[1:], s[0]) if to_config else (s[-1], *s[:-1])


def pair_axes(sections: Sequence[int], interleaved: Interleaving, pairs: int, name: str = "sections") -> np.ndarray:
    """The axis whose position turns each of the ``pairs`` rotary pairs (host, int64): M-RoPE's one rule.

    Consecutive sections must cover the pairs exactly (``sum(sections) == pairs``: Qwen2-VL's code splits
    the tables by them). Interleaved ones are bounds, as Qwen3-VL's code slices them: axis ``a >= 1`` takes
    pair ``k`` where ``k mod n == a`` and ``k < n * sections[a]``, axis 0 every other pair, so the sections
    may sum to more or fewer pairs (a checkpoint's ``mrope_section`` with another ``partial_rotary_factor``).
    Spatial ones (ERNIE 4.5 VL) cover the pairs too: axes ``1 .. n-1``, of equal sections, take turns over the
    leading pairs (ERNIE's code stacks their columns), axis 0 holds the trailing ``sections[0]``.
    ``name``: what the caller calls the sections, for the error.
    """
    n = len(sections)
    if interleaved == "full_width":
        half_axes(sections, interleaved, pairs, name)  # its sections checked first
        raise ValueError(
            f"{name}={list(sections)} with interleaved='full_width' (HunYuan-VL's sections over the whole rotary "
            "width) turn the two features of a pair by the positions of different axes: no table of pairs holds "
            "them; RotaryEmbedding(..., mrope_interleaved='full_width') applies them"
        )
    if interleaved == "spatial":
        if n < 2 or len(set(sections[1:])) != 1 or sum(sections) != pairs:
            raise ValueError(
                f"{name}={list(sections)}: spatial sections (ERNIE 4.5 VL's, per axis t, h, w; its config states "
                "[h, w, t]) give axis 0 the trailing pairs and the other axes equal sections taking turns over the "
                f"leading ones, summing to rotary_dim // 2 = {pairs} pairs"
            )
        spatial = np.arange(pairs - sections[0], dtype=np.int64) % (n - 1) + 1
        return np.concatenate([spatial, np.zeros(sections[0], dtype=np.int64)])
    if not interleaved:
        if sum(sections) != pairs:
            raise ValueError(
                f"{name}={list(sections)} sum to {sum(sections)}, but rotary_dim // 2 = {pairs} pairs rotate; "
                "consecutive sections must sum to it (interleaved ones bound the pairs of each axis)"
            )
        return np.array([a for a, s in enumerate(sections) for _ in range(s)], dtype=np.int64)
    k = np.arange(pairs, dtype=np.int64)
    axis_of = np.zeros_like(k)
    for a in range(1, n):
        axis_of[(k % n == a) & (k < n * sections[a])] = a
    return axis_of


def half_axes(
    sections: Sequence[int], interleaved: Interleaving, pairs: int, name: str = "sections"
) -> tuple[np.ndarray, np.ndarray]:
    """The axis whose position turns the first feature of each of the ``pairs`` pairs, and the second's.

    Both are :func:`pair_axes` except for ``"full_width"`` sections (HunYuan-VL's), which split the whole
    rotary width, the half-split layout's two halves one after the other: axis ``a`` drives
    ``2 * sections[a]`` consecutive features, so the sections sum to ``pairs`` and the two features of a
    pair (``i`` and ``i + pairs``) turn by different axes.
    """
    if interleaved != "full_width":
        axes = pair_axes(sections, interleaved, pairs, name)
        return axes, axes
    if len(sections) < 2 or sum(sections) != pairs:
        raise ValueError(
            f"{name}={list(sections)}: full-width sections (HunYuan-VL's) give each of at least two axes "
            f"2 * section consecutive features of the rotary width, summing to rotary_dim // 2 = {pairs} pairs; "
            f"these sum to {sum(sections)}"
        )
    # each axis's features listed in Python: a traced np.repeat by counts has a data-dependent shape
    features = np.array([a for a, s in enumerate(sections) for _ in range(2 * s)], dtype=np.int64)
    return features[:pairs], features[pairs:]
