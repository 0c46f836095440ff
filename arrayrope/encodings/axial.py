"""Axial RoPE for images (2-D) and video (3-D): feature block ``j`` rotates by coordinate ``j``.

Each block of pairs is a 1-D RoPE of its own width (frequencies
``base ** (-2i / axis_dim)``). With two axes of ``head_dim / 2`` features this is
``base ** (-4i / head_dim)``, the 2-D construction of the RoFormer author's image notes.

In the interleaved layout pair ``i`` is features ``(2i, 2i + 1)``, so block ``j``
of pairs is block ``j`` of features. In the half-split layout pair ``i`` is
``(i, i + r/2)``, as in Hugging Face vision rotaries, which concatenate the
per-axis frequencies and apply ``rotate_half``; the two results are one
:func:`~arrayrope.to_half_split` permutation apart. Fixed frequencies go through
:func:`~arrayrope.rope_tables`: float64 angles where the device has float64, the
exact float32 method where it does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.types import (
    BAND_SPACINGS,
    GRID_INDEXINGS,
    GRID_KINDS,
    Array,
    BandSpacing,
    Device,
    DType,
    GridIndexing,
    GridKind,
    Namespace,
)
from ..frequencies import RopeFrequencies, rope_frequencies
from ..tables import rope_tables
from ._grid import coordinate_array, grid_coordinates, grid_shape, with_prefix

__all__ = ["axial_rope_tables", "pixel_frequencies"]


def axial_rope_tables(
    head_dim: int,
    positions: Sequence[int] | Array,
    *,
    base: float = 100.0,
    axis_dims: Sequence[int] | None = None,
    rotary_dim: int | None = None,
    train_grid: Sequence[int] | None = None,
    num_prefix_tokens: int = 0,
    num_suffix_tokens: int = 0,
    grid: GridKind = "index",
    indexing: GridIndexing = "ij",
    grid_offset: float = 0.0,
    frequencies: Sequence[float] | np.ndarray | None = None,
    xp: Namespace | None = None,
    dtype: DType | None = None,
    device: Device = None,
) -> tuple[Array, Array]:
    """Cos/sin tables of axial RoPE: feature block ``j`` rotates by coordinate ``j``.

    Parameters
    ----------
    head_dim : int
        Features per head (even).
    positions : tuple of int or array
        A grid shape such as ``(H, W)`` or ``(T, H, W)``: its tokens are taken in
        row-major order (the last axis varies fastest) and token ``t`` has
        coordinates ``unravel_index(t, grid)``, so for ``(H, W)`` coordinate 0 is
        the row and coordinate 1 the column. Or an array of coordinates of shape
        ``(..., n_axes)``, integer or real (fractional coordinates allowed).
    base : float
        Rotary base of every axis (100 for images in the 2-D notes and RoPE-ViT).
    axis_dims : sequence of int, optional
        Features per axis, even, summing to the rotary dim. Default: an even split.
    rotary_dim : int, optional
        Leading features that rotate (default ``head_dim``); the rest pass through.
    train_grid : sequence of int, optional
        With a grid ``positions``: the grid the model was trained on. Coordinates
        are rescaled to it, ``c * train_grid[j] / grid[j]`` (EVA-02), so a larger
        image keeps the trained range of angles.
    num_prefix_tokens : int
        Tokens before the grid (a class token, registers) that are not rotated:
        they get coordinate 0 on every axis, i.e. ``cos = 1``, ``sin = 0``.
        Prepended along the token axis (``positions.shape[-2]`` for an array).
    num_suffix_tokens : int
        The same for tokens after the grid (torchtune's class token, appended last).
    grid : {"index", "pixel", "centered"}
        With a grid ``positions``: the coordinates of axis ``j`` (size ``s``) are
        ``0 .. s-1`` (``"index"``), ``s`` points evenly spaced in ``[-1, 1]``
        (``"pixel"``, ``linspace(-1, 1, s)``), or the cell centres
        ``2 (k + 0.5) / s - 1`` (``"centered"``, DINOv3). ``train_grid`` rescales
        before centres are mapped to ``[-1, 1]``, as timm does.
    indexing : {"ij", "xy"}
        With a grid: coordinate 0 is the row (``"ij"``) or the column (``"xy"``);
        tokens stay in row-major order either way.
    grid_offset : float
        With a grid: added to every ``"index"`` or ``"centered"`` coordinate
        (torchtune's vision RoPE counts from 1).
    frequencies : sequence of float, optional
        The frequencies of every axis (radians per unit of coordinate), in place of
        ``base ** (-2i / axis_dim)``: each axis then has ``len(frequencies)`` pairs,
        and ``axis_dims`` defaults to ``2 * len(frequencies)`` each. See
        :func:`pixel_frequencies`.
    xp : namespace, optional
        Array namespace for int or tuple positions (default NumPy); inferred from an array.
    dtype : dtype or str, optional
        Real floating dtype of the tables (default float32).
    device : device, optional
        Device of the tables (default: the positions' device).

    Returns
    -------
    cos : array
        Shape ``(num_prefix_tokens + prod(grid), rotary_dim // 2)`` for a grid,
        ``positions.shape[:-1] + (rotary_dim // 2,)`` (tokens extended by the prefix)
        for coordinates.
    sin : array
        The same shape.

    Raises
    ------
    ValueError
        A grid size < 1, ``axis_dims`` odd or not summing to the rotary dim, an
        uneven default split, coordinates whose trailing size is not the number of
        axes, non-finite coordinates (checked where the values exist; traced arrays
        and Dask graphs are not inspected).

    Examples
    --------
    The 2-D case of the notes, interleaved, on a 14-wide grid: ``x = t mod W``
    rotates the first half of the features, ``y = t div W`` the second.

    >>> import numpy as np, arrayrope
    >>> t = np.arange(14 * 14)
    >>> coords = np.stack([t % 14, t // 14], axis=-1)
    >>> cos, sin = arrayrope.axial_rope_tables(128, coords)
    >>> cos.shape
    (196, 64)
    >>> q = np.ones((2, 196, 128), dtype=np.float32)
    >>> arrayrope.apply_rotary(q, cos, sin, layout="interleaved").shape
    (2, 196, 128)

    A video grid, 16 temporal and 24 + 24 spatial features, and a class token:

    >>> cos, sin = arrayrope.axial_rope_tables(64, (4, 6, 6), axis_dims=(16, 24, 24), num_prefix_tokens=1)
    >>> cos.shape, float(cos[0].min()), float(sin[0].max())
    ((145, 32), 1.0, 0.0)

    rotary-embedding-torch's pixel mode on a 14 x 14 grid (coordinates in ``[-1, 1]``, 16
    linearly spaced bands per axis up to ``max_freq = 10``):

    >>> bands = arrayrope.pixel_frequencies(16, 10.0)
    >>> cos, sin = arrayrope.axial_rope_tables(64, (14, 14), grid="pixel", frequencies=bands)
    >>> cos.shape
    (196, 32)
    """
    head_dim = checks.positive_int(head_dim, "head_dim", even=True)
    rotary = checks.rotary_dim(rotary_dim, head_dim)
    prefix = checks.non_negative_int(num_prefix_tokens, "num_prefix_tokens")
    suffix = checks.non_negative_int(num_suffix_tokens, "num_suffix_tokens")
    kind = checks.choice(grid, "grid", GRID_KINDS)
    order = checks.choice(indexing, "indexing", GRID_INDEXINGS)
    offset = checks.finite_real(grid_offset, "grid_offset")
    shape = grid_shape(positions)
    if shape is not None:
        ns, coords, device = grid_coordinates(
            shape, train_grid, prefix, xp, device, kind=kind, indexing=order, offset=offset, suffix=suffix
        )
    else:
        extras = [
            name
            for name, v, default in (
                ("train_grid", train_grid, None),
                ("grid", kind, "index"),
                ("indexing", order, "ij"),
                ("grid_offset", offset, 0.0),
            )
            if v != default
        ]
        if extras:
            raise ValueError(f"{extras[0]} applies to a grid shape; compute the coordinates of an array yourself")
        ns, coords = coordinate_array(positions, xp, device)
        coords = with_prefix(ns, coords, prefix, device, suffix)
    n_axes = coords.shape[-1]
    # the frequencies are made on the host (a graph compiler tracing this takes them as constants)
    bands = None if frequencies is None else backends.host(ns, _band_count, (frequencies,))
    if bands is not None and axis_dims is None:
        axis_dims = (2 * bands,) * n_axes
    dims = _axis_dims(axis_dims, n_axes, rotary, from_grid=shape is not None)
    cos, sin = [], []
    for j, freqs in enumerate(backends.host(ns, _axis_frequencies, (dims, base, frequencies))):
        c, s = rope_tables(freqs, coords[..., j], xp=ns, dtype=dtype, device=device)
        cos.append(c)
        sin.append(s)
    if len(dims) == 1:
        return cos[0], sin[0]
    return ns.concat(cos, axis=-1), ns.concat(sin, axis=-1)


def _axis_dims(axis_dims: Sequence[int] | None, n_axes: int, rotary: int, *, from_grid: bool) -> tuple[int, ...]:
    if axis_dims is None:
        if rotary % (2 * n_axes):
            raise ValueError(
                f"rotary_dim={rotary} does not split evenly into {n_axes} axes of an even number of "
                "features; pass axis_dims"
            )
        return (rotary // n_axes,) * n_axes
    dims = checks.int_sequence(axis_dims, "axis_dims", positive=True)
    odd = [d for d in dims if d % 2]
    if odd:
        raise ValueError(f"axis_dims must be even (features rotate in pairs), got {list(dims)}")
    if len(dims) != n_axes:
        where = "the grid has" if from_grid else "positions has a trailing size of"
        raise ValueError(
            f"axis_dims={list(dims)} gives {len(dims)} axes but {where} {n_axes}; give one feature count per coordinate"
        )
    if sum(dims) != rotary:
        raise ValueError(f"axis_dims={list(dims)} sum to {sum(dims)}; they must sum to the rotary dim {rotary}")
    return dims


def _axis_frequencies(dims: tuple[int, ...], base: float, frequencies: Any) -> tuple[RopeFrequencies, ...]:
    """The frequencies of each axis: ``base ** (-2i / d)``, or the given ones."""
    bands = _bands(frequencies)
    found = []
    for j, d in enumerate(dims):
        if bands is None:
            found.append(rope_frequencies(d, base=base))
        elif d != 2 * bands.size:
            raise ValueError(f"axis_dims[{j}]={d} must be 2 * len(frequencies) = {2 * bands.size}")
        else:  # explicit bands: no base made them; this set only carries them to rope_tables and stays here
            found.append(RopeFrequencies(inv_freq=bands, head_dim=d, rotary_dim=d, base=1.0, rope_type="frequencies"))
    return tuple(found)


def _band_count(frequencies: Any) -> int:
    bands = _bands(frequencies)
    assert bands is not None
    return int(bands.size)


def _bands(frequencies: Any) -> np.ndarray | None:
    if frequencies is None:
        return None
    try:
        bands = np.asarray(frequencies, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"frequencies must be a sequence of numbers, got {frequencies!r}") from None
    if bands.ndim != 1 or bands.size == 0 or not np.all(np.isfinite(bands)):
        raise ValueError(f"frequencies must be a non-empty 1-D sequence of finite numbers, got {frequencies!r}")
    return bands


def pixel_frequencies(num_bands: int, max_freq: float, *, spacing: BandSpacing = "linear") -> np.ndarray:
    """Make the frequency bands of vision RoPE in pixel mode: from pi to ``pi * max_freq / 2``, in float64.

    Pair them with coordinates in ``[-1, 1]`` (``grid="pixel"`` of :func:`axial_rope_tables`).

    Parameters
    ----------
    num_bands : int
        Bands per axis, >= 1.
    max_freq : float
        Twice the highest band over pi, > 0 (rotary-embedding-torch's ``max_freq``,
        timm's ``max_res``).
    spacing : {"linear", "log"}
        ``"linear"``: ``pi * linspace(1, max_freq / 2, num_bands)`` (rotary-embedding-torch's
        ``freqs_for="pixel"``, timm's ``linear_bands=True``); ``"log"``:
        ``pi * 2 ** linspace(0, log2(max_freq) - 1, num_bands)`` (timm's default pixel bands).

    Returns
    -------
    numpy.ndarray
        The bands, float64, shape ``(num_bands,)``, in radians per unit of coordinate.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> (arrayrope.pixel_frequencies(3, 10.0) / np.pi).tolist()
    [1.0, 3.0, 5.0]
    >>> (arrayrope.pixel_frequencies(3, 16.0, spacing="log") / np.pi).tolist()
    [1.0, 2.8284271247461903, 8.0]
    """
    n = checks.positive_int(num_bands, "num_bands")
    top = checks.positive_real(max_freq, "max_freq")
    if checks.choice(spacing, "spacing", BAND_SPACINGS) == "linear":
        bands: np.ndarray = np.linspace(1.0, top / 2, n)
    else:
        bands = 2.0 ** np.linspace(0.0, math.log2(top) - 1, n)
    return bands * math.pi
