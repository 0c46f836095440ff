"""Token grids of the multi-axis encodings (``encodings/_grid.py``) against NumPy's ``unravel_index``."""

from __future__ import annotations

import re

import numpy as np
import pytest

from arrayrope.encodings._grid import coordinate_array, grid_coordinates, grid_shape, with_prefix
from arrayrope.testing import to_numpy
from helpers import check_like


def row_major(grid):
    """Token t of a grid at ``unravel_index(t, grid)``: the last axis varies fastest."""
    return np.stack(np.unravel_index(np.arange(int(np.prod(grid))), grid), axis=-1)


@pytest.mark.parametrize(
    "value, expected",
    [
        ((3, 4), (3, 4)),
        ([2, 3, 4], (2, 3, 4)),
        ((np.int64(5),), (5,)),
        ((), None),
        ([], None),
        ((2.0, 3), None),
        ((True, 2), None),
        (np.array([2, 3]), None),
        ([[0, 1], [2, 3]], None),
        ("ab", None),
        (5, None),
    ],
)
def test_grid_shape_is_a_tuple_or_list_of_ints_only(value, expected):
    assert grid_shape(value) == expected


@pytest.mark.parametrize("grid", [(3, 0), [0], (2, -1, 4)])
def test_grid_shape_refuses_empty_axes(grid):
    with pytest.raises(ValueError, match="grid shape must have sizes >= 1, got " + re.escape(str(tuple(grid)))):
        grid_shape(grid)


@pytest.mark.parametrize("grid", [(5,), (2, 3), (2, 3, 4)])
def test_grid_coordinates_are_row_major(backend, grid):
    ns, coords, device = grid_coordinates(grid, None, 0, backend.xp, backend.device)
    assert ns is backend.xp and device == backend.device
    check_like(coords, backend, "int32", (int(np.prod(grid)), len(grid)))
    np.testing.assert_array_equal(to_numpy(coords), row_major(grid))


def test_grid_coordinates_rescaled_to_the_training_grid_with_a_prefix(backend):
    grid, train = (2, 4), (4, 6)
    _, coords, _ = grid_coordinates(grid, train, 2, backend.xp, backend.device)
    dtype = "float64" if "float64" in backend.dtypes else "float32"
    check_like(coords, backend, dtype, (2 + 8, 2))
    expected = np.concatenate([np.zeros((2, 2)), row_major(grid) * [4 / 2, 6 / 4]])
    np.testing.assert_array_equal(to_numpy(coords), expected)  # c * train / grid is exact for these sizes


def test_grid_coordinates_bad_training_grid():
    with pytest.raises(ValueError, match=r"train_grid=\[2\] must have one size per grid axis, grid is \(3, 3\)"):
        grid_coordinates((3, 3), (2,), 0, None, None)
    with pytest.raises(ValueError, match="train_grid must contain positive ints"):
        grid_coordinates((3, 3), (2, 0), 0, None, None)


def test_coordinate_array_keeps_arrays_and_reads_nested_lists():
    ns, coords = coordinate_array([[0.5, 1.0], [2.0, 3.0]], None)
    assert isinstance(coords, np.ndarray) and coords.shape == (2, 2)
    np.testing.assert_array_equal(coords, [[0.5, 1.0], [2.0, 3.0]])
    strict = pytest.importorskip("array_api_strict")
    ns, coords = coordinate_array(strict.asarray([[1, 2, 3]]), None)
    assert ns is strict and tuple(coords.shape) == (1, 3)


@pytest.mark.parametrize("value", [2.5, True, None, "3x3"])
def test_coordinate_array_refuses_scalars(value):
    with pytest.raises(TypeError, match=r"positions must be a grid shape .* or an array of coordinates"):
        coordinate_array(value, None)


@pytest.mark.parametrize("shape", [(), (4, 0)])
def test_coordinate_array_needs_an_axis_of_coordinates(shape):
    with pytest.raises(ValueError, match="n_axes >= 1, got shape " + re.escape(str(shape))):
        coordinate_array(np.zeros(shape), None)


def test_with_prefix_prepends_zero_coordinates(backend):
    coords64 = np.arange(12.0).reshape(2, 3, 2) + 1
    coords = backend.asarray(coords64, dtype="float32")
    out = with_prefix(backend.xp, coords, 2, backend.device)
    check_like(out, backend, "float32", (2, 5, 2))
    np.testing.assert_array_equal(to_numpy(out), np.concatenate([np.zeros((2, 2, 2)), coords64], axis=1))
    assert with_prefix(backend.xp, coords, 0, backend.device) is coords


def test_with_prefix_needs_a_token_axis():
    with pytest.raises(ValueError, match=r"num_prefix_tokens needs a token axis.*got shape \(3,\)"):
        with_prefix(np, np.zeros(3), 1, None)
