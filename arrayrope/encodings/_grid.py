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
    grid: tuple[int, ...], train_grid: Sequence[int] | None, prefix: int, xp: Namespace | None, device: Device
) -> tuple[Namespace, Array, Device]:
    """Row-major coordinates of a grid, rescaled and prefixed on the host, then moved to ``device``."""
    ns = backends.namespace(xp=xp)
    backends.check_device(ns, device)
    coords: np.ndarray = np.indices(grid).reshape(len(grid), -1).T
    if train_grid is not None:
        train = checks.int_sequence(train_grid, "train_grid", positive=True)
        if len(train) != len(grid):
            raise ValueError(f"train_grid={list(train)} must have one size per grid axis, grid is {grid}")
        coords = coords * (np.array(train, dtype=np.float64) / np.array(grid, dtype=np.float64))
    else:
        coords = coords.astype(np.int32 if max(grid) < 2**31 else np.int64)
    if prefix:
        coords = np.concatenate([np.zeros((prefix, len(grid)), dtype=coords.dtype), coords])
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


def with_prefix(xp: Namespace, coords: Array, prefix: int, device: Device) -> Array:
    """``coords`` with ``prefix`` tokens of coordinate 0 before the others (along ``coords.shape[-2]``)."""
    if not prefix:
        return coords
    if coords.ndim < 2:
        raise ValueError(
            f"num_prefix_tokens needs a token axis: positions must have shape (..., N, n_axes), "
            f"got shape {tuple(coords.shape)}"
        )
    dev = backends.device_of(coords) if device is None else device
    zeros = xp.zeros((*tuple(coords.shape[:-2]), prefix, coords.shape[-1]), dtype=coords.dtype, device=dev)
    return xp.concat([zeros, coords], axis=-2)
