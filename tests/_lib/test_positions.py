"""Positions read one way everywhere (``_lib/positions.py``): counts, arrays of any backend, sequences,
the namespace and device they end on, and errors that name the argument."""

from __future__ import annotations

import numpy as np
import pytest

from arrayrope._lib.positions import as_positions
from arrayrope.testing import to_numpy
from helpers import check_like, on_device


def test_a_count_stays_an_int_on_the_requested_namespace(backend):
    ns, pos, device = as_positions(5, xp=backend.xp, device=backend.device)
    assert ns is backend.xp and pos == 5 and type(pos) is int and device == backend.device
    ns, pos, _ = as_positions(np.int64(0))
    assert pos == 0 and type(pos) is int and ns is as_positions([0])[0]  # NumPy's namespace by default


def test_a_negative_count_is_refused():
    with pytest.raises(
        ValueError,
        match=r"^offset as an int is a count n \(positions 0..n-1\) and must be >= 0, "
        r"got -2$",
    ):
        as_positions(-2, "offset")


def test_an_int_is_an_array_when_counts_are_not_meant():
    _, pos, _ = as_positions(3, count=False)
    assert isinstance(pos, np.ndarray) and pos.shape == () and int(pos) == 3


@pytest.mark.parametrize("value", [1.5, True, None, 2j, "3", b"3"])
def test_scalars_that_are_not_counts_name_the_argument(value):
    with pytest.raises(
        TypeError,
        match=f"^positions must be an int count or an array of integer or real positions, got {value!r}$".replace(
            "(", r"\("
        ).replace(")", r"\)"),
    ):
        as_positions(value)
    with pytest.raises(TypeError, match=r"^coords must be an array of integer or real positions"):
        as_positions(value, "coords", count=False)


def test_arrays_keep_their_namespace_device_and_values(backend):
    for dtype, values in (("float32", [0.5, -3.0, 1e4]), (None, [0, 7, -2])):
        x = backend.asarray(np.array(values), dtype=dtype)
        ns, pos, device = as_positions(x)
        assert ns is backend.xp and pos is x and on_device(device, backend.device)
        np.testing.assert_array_equal(to_numpy(pos), values)


def test_sequences_become_arrays_of_the_requested_namespace(backend):
    ns, pos, device = as_positions([[0, 1], [5, 6]], xp=backend.xp, device=backend.device)
    assert ns is backend.xp and device == backend.device
    check_like(pos, backend, str(pos.dtype).split(".")[-1], (2, 2))  # type: ignore[union-attr]
    assert str(pos.dtype).split(".")[-1] in ("int32", "int64")  # type: ignore[union-attr]
    np.testing.assert_array_equal(to_numpy(pos), [[0, 1], [5, 6]])


def test_sequences_follow_like():
    strict = pytest.importorskip("array_api_strict")
    q = strict.ones((2, 3), device=strict.Device("device1"))
    ns, pos, _ = as_positions([1.0, 2.5], like=q)
    assert ns is strict and pos.device == strict.Device("device1")  # type: ignore[union-attr]
    np.testing.assert_array_equal(to_numpy(pos), [1.0, 2.5])


@pytest.mark.parametrize(
    "value, message",
    [
        (["a", "b"], r"must have an integer or real floating dtype, got <U1 from \['a', 'b'\]$"),
        ([1 + 2j], r"must have an integer or real floating dtype, got complex128 from \[\(1\+2j\)\]$"),
        ([True, False], r"must have an integer or real floating dtype, got bool from \[True, False\]$"),
        ([[1, 2], [3]], r"must be an array of integer or real positions, got \[\[1, 2\], \[3\]\]$"),
    ],
)
def test_sequences_that_are_not_positions(value, message):
    with pytest.raises(TypeError, match="^positions " + message):
        as_positions(value)


def test_arrays_of_other_dtypes_are_refused(backend):
    flags = backend.xp.asarray(np.array([True, False]), device=backend.device)
    with pytest.raises(TypeError, match=r"^offset must have an integer or real floating dtype, got "):
        as_positions(flags, "offset")


def test_non_finite_positions_are_caught_on_eager_backends(backend):
    """Eager arrays of every library are checked (JAX's too); a Dask graph's values are never inspected."""
    x = backend.asarray(np.array([0.0, np.inf]), dtype="float32")
    if backend.library == "dask":
        ns, pos, _ = as_positions(x)
        assert ns is backend.xp and np.isinf(to_numpy(pos)[1])
    else:
        with pytest.raises(ValueError, match=r"^positions must be finite; got NaN or infinity$"):
            as_positions(x)


def test_positions_move_to_the_requested_device():
    strict = pytest.importorskip("array_api_strict")
    x = strict.asarray([1, 2], device=strict.Device("device1"))
    _, pos, device = as_positions(x, device=strict.Device("CPU_DEVICE"))
    assert pos.device == strict.Device("CPU_DEVICE") and device == strict.Device("CPU_DEVICE")  # type: ignore[union-attr]
    np.testing.assert_array_equal(to_numpy(pos), [1, 2])


def test_positions_on_another_device_than_like_are_refused():
    strict = pytest.importorskip("array_api_strict")
    q = strict.ones((2, 3), device=strict.Device("CPU_DEVICE"))
    with pytest.raises(ValueError, match=r"^offset is on device .*device1.* but q is on device .*CPU_DEVICE"):
        as_positions(strict.asarray([1, 2], device=strict.Device("device1")), "offset", like=q)


def test_positions_of_another_library_than_xp_or_like_are_refused():
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(TypeError, match=r"^positions is a numpy array but xp=array_api_strict"):
        as_positions(np.arange(3), xp=strict)
    with pytest.raises(TypeError, match=r"^offset is a numpy array but q is a array_api_strict array"):
        as_positions(np.arange(3), "offset", like=strict.ones(3))
