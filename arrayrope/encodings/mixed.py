"""RoPE-Mixed: learned per-head frequencies of every axis, summed into one angle per pair."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.dtypes import table_dtype
from .._lib.types import Array, Device, DType, Namespace
from ._grid import coordinate_array, grid_coordinates, grid_shape, with_prefix

__all__ = ["mixed_rope_frequencies", "mixed_rope_tables"]


def mixed_rope_tables(
    freqs: Array,
    positions: Sequence[int] | Array,
    *,
    num_prefix_tokens: int = 0,
    xp: Namespace | None = None,
    dtype: DType | None = None,
    device: Device = None,
) -> tuple[Array, Array]:
    """Cos/sin tables from per-head frequencies of every axis (RoPE-Mixed), differentiable.

    Pair ``i`` of head ``h`` rotates by ``sum_j coords[j] * freqs[j, h, i]``: every
    pair mixes all axes, and the frequencies are parameters a model learns.

    Parameters
    ----------
    freqs : array
        Shape ``(n_axes, num_heads, rotary_dim // 2)``, real floating, of any backend
        (a ``torch.nn.Parameter`` trains through the tables with autograd).
        :func:`mixed_rope_frequencies` gives the usual initialisation.
    positions : tuple of int or array
        A grid shape (row-major tokens, as for :func:`axial_rope_tables`) or
        coordinates of shape ``(..., N, n_axes)`` in ``freqs``' namespace.
    num_prefix_tokens : int
        Leading tokens that are not rotated (class token): coordinate 0.
    xp : namespace, optional
        Checked against ``freqs``' namespace, which is used.
    dtype : dtype, optional
        Table dtype (default ``freqs.dtype``).
    device : device, optional
        Where the tables go (default: ``freqs``' device, where they are computed).

    Returns
    -------
    cos : array
        Shape ``positions.shape[:-2] + (num_heads, N, rotary_dim // 2)`` (``N``
        including the prefix), in ``freqs``' namespace: it broadcasts against
        queries ``(B, num_heads, N, head_dim)``.
    sin : array
        The same shape.

    Notes
    -----
    Angles are computed in float64 where the device has it (the cast keeps the
    autograd graph), else in ``freqs``' dtype.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.mixed_rope_frequencies(64, 4, seed=0)     # (2, 4, 32), float64
    >>> cos, sin = arrayrope.mixed_rope_tables(f.astype(np.float32), (7, 7), num_prefix_tokens=1)
    >>> cos.shape, cos.dtype
    ((4, 50, 32), dtype('float32'))
    """
    ns = backends.namespace(freqs, xp=xp, names=("freqs",))
    target = device
    if not backends.is_real_floating(ns, freqs.dtype):
        raise TypeError(f"freqs must have a real floating dtype, got {freqs.dtype}")
    if freqs.ndim != 3:
        raise ValueError(f"freqs must have shape (n_axes, num_heads, rotary_dim // 2), got shape {tuple(freqs.shape)}")
    if backends.concrete(freqs) and not bool(ns.all(ns.isfinite(freqs))):
        raise ValueError("freqs must be finite; got NaN or infinity")
    prefix = checks.non_negative_int(num_prefix_tokens, "num_prefix_tokens")
    device = backends.device_of(freqs)
    if target is not None:
        backends.check_device(ns, target)
    out_dtype = freqs.dtype if dtype is None else table_dtype(ns, dtype, device)
    work = ns.float64 if backends.has_float64(ns, device) else freqs.dtype
    grid = grid_shape(positions)
    if grid is not None:
        _, coords, _ = grid_coordinates(grid, None, prefix, ns, device)
    else:
        _, coords = coordinate_array(positions, ns, device)
        backends.same_device(freqs, coords, "freqs", "positions")
        if coords.ndim < 2:
            raise ValueError(f"positions must have shape (..., N, n_axes), got shape {tuple(coords.shape)}")
        coords = with_prefix(ns, coords, prefix, device)
    n_axes = freqs.shape[0]
    if coords.shape[-1] != n_axes:
        raise ValueError(
            f"positions has {coords.shape[-1]} coordinates per token (its trailing size) but freqs has "
            f"n_axes = freqs.shape[0] = {n_axes}; they must match"
        )
    coords = ns.astype(coords, work)
    f = ns.astype(freqs, work)
    angles: Any = None
    for j in range(n_axes):
        term = coords[..., j][..., None, :, None] * f[j, ...][:, None, :]
        angles = term if angles is None else angles + term
    cos, sin = ns.astype(ns.cos(angles), out_dtype), ns.astype(ns.sin(angles), out_dtype)
    if target is None:
        return cos, sin
    return backends.to_device(cos, target), backends.to_device(sin, target)


def mixed_rope_frequencies(
    head_dim: int,
    num_heads: int,
    *,
    base: float = 10.0,
    seed: int | np.random.Generator | None = None,
) -> np.ndarray:
    """The RoPE-Mixed initialisation of 2-D per-head frequencies, float64 on the host.

    Head ``h`` draws a direction ``phi_h`` uniformly in ``[0, 2 pi)``; with the
    magnitudes ``m_i = base ** (-4i / head_dim)``, ``i < head_dim / 4``, its first
    ``head_dim / 4`` pairs get the frequency vector ``m_i (cos phi_h, sin phi_h)`` and
    the others ``m_i (cos(phi_h + pi/2), sin(phi_h + pi/2))`` (x and y components).

    Parameters
    ----------
    head_dim : int
        Features per head, a multiple of 4.
    num_heads : int
        Heads, each with its own direction.
    base : float
        Magnitude base (10 for RoPE-Mixed).
    seed : int or numpy.random.Generator, optional
        Source of the directions.

    Returns
    -------
    numpy.ndarray
        Shape ``(2, num_heads, head_dim // 2)``: x frequencies, then y frequencies.
        Convert it to a parameter of your framework to train it.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.mixed_rope_frequencies(8, 1, seed=0)
    >>> f.shape
    (2, 1, 4)
    >>> bool(np.allclose(np.hypot(f[0], f[1]), [[1.0, 10**-0.5, 1.0, 10**-0.5]]))  # magnitudes 10**(-4i/8)
    True
    """
    head_dim = checks.positive_int(head_dim, "head_dim")
    if head_dim % 4:
        raise ValueError(f"head_dim must be a multiple of 4 (two axes, pairs of features), got {head_dim}")
    num_heads = checks.positive_int(num_heads, "num_heads")
    base = checks.positive_real(base, "base")
    if not (seed is None or isinstance(seed, np.random.Generator)):
        seed = checks.non_negative_int(seed, "seed")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    mag = base ** (-np.arange(0, head_dim, 4, dtype=np.float64) / head_dim)
    phi = rng.uniform(0.0, 2 * math.pi, size=(num_heads, 1))
    fx = np.concatenate([mag * np.cos(phi), mag * np.cos(phi + math.pi / 2)], axis=-1)
    fy = np.concatenate([mag * np.sin(phi), mag * np.sin(phi + math.pi / 2)], axis=-1)
    return np.stack([fx, fy])
