"""The token coordinates of the multi-axis encodings: a grid shape or an array of coordinates.

A grid shape such as ``(H, W)`` takes its tokens in row-major order (the last axis
varies fastest), so token ``t`` has coordinates ``unravel_index(t, grid)``; tokens
before the grid (a class token, registers) get coordinate 0 on every axis, which
leaves them unrotated.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.positions import position_array
from .._lib.types import Array, Device, Namespace

__all__ = ["coordinate_array", "grid_coordinates", "grid_shape", "with_prefix"]


def grid_shape(positions: Any) -> tuple[int, ...] | None:
    """``positions`` as a grid shape, or ``None`` when it is a coordinate array."""
    if not isinstance(positions, (tuple, list)) or not positions:
        return None
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in positions):
        return None
    grid = tuple(int(v) for v in positions)
    if any(g < 1 for g in grid):
        raise ValueError(f"positions as a grid shape must have sizes >= 1, got {grid}")
    return grid


def grid_coordinates(
    grid: tuple[int, ...],
    train_grid: Sequence[int] | None,
    prefix: int,
    xp: Namespace | None,
    device: Device,
    *,
    kind: str = "index",
    indexing: str = "ij",
    offset: float = 0.0,
    suffix: int = 0,
) -> tuple[Namespace, Array, Device]:
    """Row-major coordinates of a grid, rescaled and extended on the host, then moved to ``device``.

    ``kind``: ``"index"`` (``0 .. s-1``, plus ``offset``), ``"pixel"`` (``s`` points evenly spaced
    in ``[-1, 1]``) or ``"centered"`` (``2 (k + 0.5 + offset) / s - 1``, cell centres in
    ``[-1, 1]``); ``train_grid`` rescales each axis by ``train / s`` (before centred
    coordinates are mapped to ``[-1, 1]``); ``indexing="xy"`` swaps the first two
    coordinates (x, the column, first). ``prefix`` tokens before the grid and ``suffix``
    tokens after it get coordinate 0.
    """
    ns = backends.namespace(xp=xp)
    backends.check_device(ns, device)
    n = len(grid)
    train = None
    if train_grid is not None:
        train = checks.int_sequence(train_grid, "train_grid", positive=True)
        if len(train) != n:
            raise ValueError(f"train_grid={list(train)} must have one size per grid axis, grid is {grid}")
    if kind == "index" and train is None and offset == 0:
        axes = [np.arange(g, dtype=np.int32 if max(grid) < 2**31 else np.int64) for g in grid]
    else:
        axes = []
        for j, g in enumerate(grid):
            if kind == "pixel":
                c = np.linspace(-1.0, 1.0, g)
            elif kind == "centered":
                c = (np.arange(g, dtype=np.float64) + 0.5 + offset) / g
            else:
                c = np.arange(g, dtype=np.float64) + offset
            if train is not None:
                c = c * (train[j] / g)
            axes.append(2.0 * c - 1.0 if kind == "centered" else c)
    coords: np.ndarray = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, n)
    if indexing == "xy" and n >= 2:
        coords = coords[:, [1, 0, *range(2, n)]]
    zeros = np.zeros((1, n), dtype=coords.dtype)
    coords = np.concatenate([np.repeat(zeros, prefix, 0), coords, np.repeat(zeros, suffix, 0)])
    if not backends.has_float64(ns, device) and coords.dtype == np.float64:
        coords = coords.astype(np.float32)
    return ns, ns.asarray(coords, device=device), device


def coordinate_array(positions: Any, xp: Namespace | None, device: Device = None) -> tuple[Namespace, Array]:
    """An array of coordinates ``(..., n_axes)``, checked as positions are."""
    if isinstance(positions, (bool, numbers.Number, str)) or positions is None:
        raise TypeError(
            f"positions must be a grid shape (tuple of ints) or an array of coordinates (..., n_axes), "
            f"got {positions!r}"
        )
    ns, coords, _ = position_array(positions, xp=xp, device=device)
    if coords.ndim < 1 or not backends.known(coords.shape[-1]) or coords.shape[-1] < 1:
        raise ValueError(
            f"positions must be a grid shape or coordinates (..., n_axes) with n_axes >= 1, "
            f"got shape {tuple(coords.shape)}"
        )
    return ns, coords


def with_prefix(xp: Namespace, coords: Array, prefix: int, device: Device, suffix: int = 0) -> Array:
    """``coords`` with ``prefix`` tokens of coordinate 0 before the others and ``suffix`` after them
    (along ``coords.shape[-2]``)."""
    if not prefix and not suffix:
        return coords
    if coords.ndim < 2:
        raise ValueError(
            f"{'num_prefix_tokens' if prefix else 'num_suffix_tokens'} needs a token axis: positions must have shape "
            f"(..., N, n_axes), got shape {tuple(coords.shape)}"
        )
    dev = backends.device_of(coords) if device is None else device
    parts = []
    for count, last in ((prefix, False), (suffix, True)):
        if count:
            zeros = xp.zeros((*tuple(coords.shape[:-2]), count, coords.shape[-1]), dtype=coords.dtype, device=dev)
            parts.append((last, zeros))
    pieces = [z for last, z in parts if not last] + [coords] + [z for last, z in parts if last]
    return xp.concat(pieces, axis=-2)
