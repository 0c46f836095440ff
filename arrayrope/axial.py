"""Multi-axis rotary tables: images (2-D), video (3-D), M-RoPE and learned mixed frequencies.

Every function here returns ``(cos, sin)`` for :func:`~arrayrope.apply_rotary`:
pair ``i`` of the rotary features rotates by the angle whose cos/sin are
``cos[..., i]``/``sin[..., i]``, in either layout. What changes from 1-D RoPE
is which coordinate drives each pair:

* :func:`axial_rope_tables`: consecutive blocks of pairs, one per axis, each a 1-D
  RoPE of its own width (frequencies ``base ** (-2i / axis_dim)``). With two
  axes of ``head_dim / 2`` features this is ``base ** (-4i / head_dim)``, the
  2-D construction of the RoFormer author's image notes.
* :func:`mrope_tables`: one set of frequencies, and a section of them per axis
  (Qwen2-VL), or the axes taking frequencies in turn (Qwen3-VL).
* :func:`mixed_rope_tables`: per-head frequencies for every axis, summed into
  one angle per pair (RoPE-Mixed); differentiable, so the frequencies can be trained.

In the interleaved layout pair ``i`` is features ``(2i, 2i + 1)``, so block ``j``
of pairs is block ``j`` of features. In the half-split layout pair ``i`` is
``(i, i + r/2)``, as in Hugging Face vision rotaries, which concatenate the
per-axis frequencies and apply ``rotate_half``; the two results are one
:func:`~arrayrope.to_half` permutation apart.

Fixed frequencies go through :func:`~arrayrope.rope_tables`: float64 angles where
the device has float64, the exact float32 method where it does not.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np

from . import _checks, _xp
from .frequencies import RopeFrequencies, rope_frequencies
from .tables import _dtype, rope_tables

__all__ = ["axial_rope_tables", "mrope_tables", "mixed_rope_tables", "mixed_rope_frequencies"]


def axial_rope_tables(
    positions: Any,
    head_dim: int,
    *,
    base: float = 100.0,
    axis_dims: Sequence[int] | None = None,
    rotary_dim: int | None = None,
    train_grid: Sequence[int] | None = None,
    num_prefix_tokens: int = 0,
    xp: Any = None,
    dtype: Any = None,
    device: Any = None,
) -> tuple[Any, Any]:
    """Cos/sin tables of axial RoPE: feature block ``j`` rotates by coordinate ``j``.

    Parameters
    ----------
    positions : tuple of int or array
        A grid shape such as ``(H, W)`` or ``(T, H, W)``: its tokens are taken in
        row-major order (the last axis varies fastest) and token ``t`` has
        coordinates ``unravel_index(t, grid)``, so for ``(H, W)`` coordinate 0 is
        the row and coordinate 1 the column. Or an array of coordinates of shape
        ``(..., n_axes)``, integer or real (fractional coordinates allowed).
    head_dim : int
        Features per head (even).
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
    xp, dtype, device
        As for :func:`~arrayrope.rope_tables`: namespace for a grid (default NumPy),
        table dtype (default float32), device (default: the coordinates').

    Returns
    -------
    cos, sin : arrays
        Shape ``(num_prefix_tokens + prod(grid), rotary_dim // 2)`` for a grid,
        ``positions.shape[:-1] + (rotary_dim // 2,)`` (tokens extended by the prefix)
        for coordinates.

    Raises
    ------
    ValueError
        A grid size < 1, ``axis_dims`` odd or not summing to the rotary dim, an
        uneven default split, coordinates whose trailing size is not the number of
        axes, non-finite coordinates (checked on eager backends only; JAX and Dask
        arrays are not inspected).

    Examples
    --------
    The 2-D case of the notes, interleaved, on a 14-wide grid: ``x = t mod W``
    rotates the first half of the features, ``y = t div W`` the second.

    >>> import numpy as np, arrayrope
    >>> t = np.arange(14 * 14)
    >>> coords = np.stack([t % 14, t // 14], axis=-1)
    >>> cos, sin = arrayrope.axial_rope_tables(coords, 128)
    >>> cos.shape
    (196, 64)
    >>> q = np.ones((2, 196, 128), dtype=np.float32)
    >>> arrayrope.apply_rotary(q, cos, sin, layout="interleaved").shape
    (2, 196, 128)

    A video grid, 16 temporal and 24 + 24 spatial features, and a class token:

    >>> cos, sin = arrayrope.axial_rope_tables((4, 6, 6), 64, axis_dims=(16, 24, 24), num_prefix_tokens=1)
    >>> cos.shape, float(cos[0].min()), float(sin[0].max())
    ((145, 32), 1.0, 0.0)
    """
    head_dim = _checks.positive_int(head_dim, "head_dim", even=True)
    rotary = _checks.rotary_dim(rotary_dim, head_dim)
    prefix = _checks.non_negative_int(num_prefix_tokens, "num_prefix_tokens")
    grid = _grid(positions)
    if grid is not None:
        ns, coords, device = _grid_coords(grid, train_grid, prefix, xp, device)
    else:
        if train_grid is not None:
            raise ValueError("train_grid applies to a grid shape; rescale coordinate arrays before passing them")
        ns, coords = _coordinate_array(positions, xp, device)
        coords = _with_prefix(ns, coords, prefix, device)
    n_axes = coords.shape[-1]
    dims = _axis_dims(axis_dims, n_axes, rotary, from_grid=grid is not None)
    cos, sin = [], []
    for j, d in enumerate(dims):
        c, s = rope_tables(rope_frequencies(d, base=base), coords[..., j], xp=ns, dtype=dtype, device=device)
        cos.append(c)
        sin.append(s)
    if len(dims) == 1:
        return cos[0], sin[0]
    return ns.concat(cos, axis=-1), ns.concat(sin, axis=-1)


def mrope_tables(
    freqs: RopeFrequencies,
    positions: Any,
    *,
    sections: Sequence[int],
    interleaved: bool = False,
    xp: Any = None,
    dtype: Any = None,
    device: Any = None,
) -> tuple[Any, Any]:
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
        ``mrope_section``: frequencies per axis, positive, summing to ``rotary_dim // 2``.
    interleaved : bool
        Qwen3-VL's assignment instead of consecutive sections.
    xp, dtype, device
        As for :func:`~arrayrope.rope_tables`.

    Returns
    -------
    cos, sin : arrays
        Shape ``positions.shape[1:] + (rotary_dim // 2,)``; for queries ``(B, heads, S, d)``
        index them as ``cos[:, None]``.

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
    half = freqs.rotary_dim // 2
    sections = _int_sequence(sections, "sections", positive=True)
    if sum(sections) != half:
        raise ValueError(
            f"sections={list(sections)} sum to {sum(sections)} but freqs has rotary_dim // 2 = {half} "
            "frequencies; they must sum to it"
        )
    if not isinstance(interleaved, (bool, np.bool_)):
        raise TypeError(f"interleaved must be a bool, got {interleaved!r}")
    n = len(sections)
    if not _xp.compat.is_array_api_obj(positions):
        if isinstance(positions, (bool, int, float, str)) or positions is None:
            raise TypeError(f"positions must be an array of shape ({n}, ...), got {positions!r}")
        ns = _xp.namespace(xp=xp) if xp is not None else _xp.namespace()
        positions = ns.asarray(np.asarray(positions), device=device)
    if positions.ndim < 1 or positions.shape[0] != n:
        raise ValueError(
            f"positions must have shape (len(sections), ...) = ({n}, ...), e.g. (3, batch, seq); "
            f"got shape {tuple(positions.shape)}"
        )
    cos_all, sin_all = rope_tables(freqs, positions, xp=xp, dtype=dtype, device=device)
    ns = _xp.namespace(cos_all)
    axis_of = _mrope_assignment(sections, interleaved)
    cos, sin = cos_all[0, ...], sin_all[0, ...]
    dev = _xp.device_of(cos_all) if device is None else device
    for a in range(1, n):
        mask = ns.asarray(axis_of == a, device=dev)
        cos = ns.where(mask, cos_all[a, ...], cos)
        sin = ns.where(mask, sin_all[a, ...], sin)
    return cos, sin


def _mrope_assignment(sections: Sequence[int], interleaved: bool) -> np.ndarray:
    """The axis driving each frequency (host, int array of length ``sum(sections)``)."""
    n = len(sections)
    if not interleaved:
        return np.repeat(np.arange(n), sections)
    k = np.arange(sum(sections))
    axis_of = np.zeros_like(k)
    for a in range(1, n):
        axis_of[(k % n == a) & (k < n * sections[a])] = a
    return axis_of


def mixed_rope_tables(
    freqs: Any,
    positions: Any,
    *,
    num_prefix_tokens: int = 0,
    xp: Any = None,
    dtype: Any = None,
) -> tuple[Any, Any]:
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

    Returns
    -------
    cos, sin : arrays
        Shape ``positions.shape[:-2] + (num_heads, N, rotary_dim // 2)`` (``N``
        including the prefix), on ``freqs``' namespace and device: they broadcast
        against queries ``(B, num_heads, N, head_dim)``.

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
    _xp.check_array(freqs, "freqs")
    ns = _xp.namespace(freqs, xp=xp, names=("freqs",))
    if not ns.isdtype(freqs.dtype, "real floating"):
        raise TypeError(f"freqs must have a real floating dtype, got {freqs.dtype}")
    if freqs.ndim != 3:
        raise ValueError(
            f"freqs must have shape (n_axes, num_heads, rotary_dim // 2), got shape {tuple(freqs.shape)}"
        )
    prefix = _checks.non_negative_int(num_prefix_tokens, "num_prefix_tokens")
    device = _xp.device_of(freqs)
    out_dtype = freqs.dtype if dtype is None else _dtype(ns, dtype, device)
    work = ns.float64 if _xp.has_float64(ns, device) else freqs.dtype
    grid = _grid(positions)
    if grid is not None:
        _, coords, _ = _grid_coords(grid, None, prefix, ns, device)
    else:
        _, coords = _coordinate_array(positions, ns, device)
        _xp.same_device(freqs, coords, "freqs", "positions")
        if coords.ndim < 2:
            raise ValueError(f"positions must have shape (..., N, n_axes), got shape {tuple(coords.shape)}")
        coords = _with_prefix(ns, coords, prefix, device)
    n_axes = freqs.shape[0]
    if coords.shape[-1] != n_axes:
        raise ValueError(
            f"positions has {coords.shape[-1]} coordinates per token (its trailing size) but freqs has "
            f"n_axes = freqs.shape[0] = {n_axes}; they must match"
        )
    coords = ns.astype(coords, work)
    f = ns.astype(freqs, work)
    angles = None
    for j in range(n_axes):
        term = coords[..., j][..., None, :, None] * f[j, ...][:, None, :]
        angles = term if angles is None else angles + term
    return ns.astype(ns.cos(angles), out_dtype), ns.astype(ns.sin(angles), out_dtype)


def mixed_rope_frequencies(
    head_dim: int,
    num_heads: int,
    *,
    base: float = 10.0,
    seed: Any = None,
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
    head_dim = _checks.positive_int(head_dim, "head_dim")
    if head_dim % 4:
        raise ValueError(f"head_dim must be a multiple of 4 (two axes, pairs of features), got {head_dim}")
    num_heads = _checks.positive_int(num_heads, "num_heads")
    base = _checks.positive_real(base, "base")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    mag = base ** (-np.arange(0, head_dim, 4, dtype=np.float64) / head_dim)
    phi = rng.uniform(0.0, 2 * math.pi, size=(num_heads, 1))
    fx = np.concatenate([mag * np.cos(phi), mag * np.cos(phi + math.pi / 2)], axis=-1)
    fy = np.concatenate([mag * np.sin(phi), mag * np.sin(phi + math.pi / 2)], axis=-1)
    return np.stack([fx, fy])


# -- shared helpers ---------------------------------------------------------------------------


def _int_sequence(value: Any, name: str, *, positive: bool) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise TypeError(f"{name} must be a non-empty sequence of ints, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must contain ints, got {value!r}")
        if positive and v < 1:
            raise ValueError(f"{name} must contain positive ints, got {list(value)}")
        out.append(int(v))
    return tuple(out)


def _grid(positions: Any) -> tuple[int, ...] | None:
    """``positions`` as a grid shape, or ``None`` when it is a coordinate array."""
    if not isinstance(positions, (tuple, list)) or not positions:
        return None
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in positions):
        return None
    grid = tuple(int(v) for v in positions)
    if any(g < 1 for g in grid):
        raise ValueError(f"positions as a grid shape must have sizes >= 1, got {grid}")
    return grid


def _grid_coords(
    grid: tuple[int, ...], train_grid: Any, prefix: int, xp: Any, device: Any
) -> tuple[Any, Any, Any]:
    """Row-major coordinates of a grid, rescaled and prefixed on the host, then moved to ``device``."""
    coords = np.indices(grid).reshape(len(grid), -1).T
    if train_grid is not None:
        train = _int_sequence(train_grid, "train_grid", positive=True)
        if len(train) != len(grid):
            raise ValueError(f"train_grid={list(train)} must have one size per grid axis, grid is {grid}")
        coords = coords * (np.array(train, dtype=np.float64) / np.array(grid, dtype=np.float64))
    else:
        coords = coords.astype(np.int32 if max(grid) < 2**31 else np.int64)
    if prefix:
        coords = np.concatenate([np.zeros((prefix, len(grid)), dtype=coords.dtype), coords])
    ns = _xp.namespace(xp=xp) if xp is not None else _xp.namespace()
    if not _xp.has_float64(ns, device) and coords.dtype == np.float64:
        coords = coords.astype(np.float32)
    return ns, ns.asarray(coords, device=device), device


def _coordinate_array(positions: Any, xp: Any, device: Any = None) -> tuple[Any, Any]:
    if isinstance(positions, (bool, numbers.Number, str)) or positions is None:
        raise TypeError(
            f"positions must be a grid shape (tuple of ints) or an array of coordinates (..., n_axes), "
            f"got {positions!r}"
        )
    if not _xp.compat.is_array_api_obj(positions):
        ns = _xp.namespace(xp=xp) if xp is not None else _xp.namespace()
        positions = ns.asarray(np.asarray(positions), device=device)
    ns = _xp.namespace(positions, xp=xp, names=("positions",))
    if positions.ndim < 1 or not _xp.known(positions.shape[-1]) or positions.shape[-1] < 1:
        raise ValueError(
            f"positions must be a grid shape or coordinates (..., n_axes) with n_axes >= 1, "
            f"got shape {tuple(positions.shape)}"
        )
    return ns, positions


def _with_prefix(xp: Any, coords: Any, prefix: int, device: Any) -> Any:
    if not prefix:
        return coords
    if coords.ndim < 2:
        raise ValueError(
            f"num_prefix_tokens needs a token axis: positions must have shape (..., N, n_axes), "
            f"got shape {tuple(coords.shape)}"
        )
    dev = _xp.device_of(coords) if device is None else device
    zeros = xp.zeros(tuple(coords.shape[:-2]) + (prefix, coords.shape[-1]), dtype=coords.dtype, device=dev)
    return xp.concat([zeros, coords], axis=-2)


def _axis_dims(axis_dims: Any, n_axes: int, rotary: int, *, from_grid: bool) -> tuple[int, ...]:
    if axis_dims is None:
        if rotary % (2 * n_axes):
            raise ValueError(
                f"rotary_dim={rotary} does not split evenly into {n_axes} axes of an even number of "
                "features; pass axis_dims"
            )
        return (rotary // n_axes,) * n_axes
    dims = _int_sequence(axis_dims, "axis_dims", positive=True)
    odd = [d for d in dims if d % 2]
    if odd:
        raise ValueError(f"axis_dims must be even (features rotate in pairs), got {list(dims)}")
    if len(dims) != n_axes:
        where = "the grid has" if from_grid else "positions has a trailing size of"
        raise ValueError(
            f"axis_dims={list(dims)} gives {len(dims)} axes but {where} {n_axes}; "
            "give one feature count per coordinate"
        )
    if sum(dims) != rotary:
        raise ValueError(f"axis_dims={list(dims)} sum to {sum(dims)}; they must sum to the rotary dim {rotary}")
    return dims


def _demo_case(*, width: int = 14, head_dim: int = 128) -> Any:
    """The demo's 2-D row: axial RoPE of a ``width x width`` grid (x = t mod W, y = t div W).

    A :class:`~arrayrope.testing.ParityCase` whose reference is the complex form with
    frequencies ``100^(-4i/d)``, written independently of this module.
    """
    from .rotary import apply_rotary
    from .testing import ParityCase

    t = np.arange(width * width)
    coords = np.stack([t % width, t // width], axis=-1).astype(np.int64)

    def rotate(x: Any, c: Any) -> Any:
        ns = _xp.namespace(x)
        cos, sin = axial_rope_tables(c, head_dim, dtype=ns.float64 if x.dtype == ns.float64 else ns.float32)
        return apply_rotary(x, cos, sin, layout="interleaved")

    def reference(x: np.ndarray, c: np.ndarray) -> np.ndarray:
        theta = 100.0 ** (-np.arange(0, head_dim, 4) / head_dim)  # base^(-4i/d), i < d/4
        angle = np.concatenate([np.outer(c[:, 0], theta), np.outer(c[:, 1], theta)], axis=-1)
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angle)
        return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)

    x = np.random.default_rng(0).standard_normal((2, width * width, head_dim))
    return ParityCase(f"2-D axial RoPE, {width}x{width} grid, interleaved", rotate, (x, coords), reference=reference)
