"""Dtype rules (``_lib/dtypes.py``) on every backend, against the dtypes each backend declares."""

from __future__ import annotations

import numpy as np
import pytest

from arrayrope._lib.dtypes import DEFAULT_TABLE, host_dtype, rotation_dtype, table_dtype, table_dtype_for, work_dtype


def test_tables_default_to_float32(backend):
    assert DEFAULT_TABLE == "float32"
    assert table_dtype(backend.xp, None, backend.device) == backend.xp.float32


def test_every_declared_dtype_is_a_table_dtype_by_name_and_by_object(backend):
    for name in backend.dtypes:
        dtype = getattr(backend.xp, name)
        assert table_dtype(backend.xp, name, backend.device) == dtype
        assert table_dtype(backend.xp, dtype, backend.device) == dtype


def test_float64_where_the_device_has_none():
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(
        ValueError,
        match=r"^dtype float64 is not supported by array_api_strict on device "
        r".*no_float64",
    ):
        table_dtype(strict, "float64", strict.Device("no_float64"))
    assert table_dtype(strict, "float64", strict.Device("CPU_DEVICE")) == strict.float64


#: how messages name each library's namespace
NAMES = {
    "numpy": "numpy",
    "array_api_strict": "array_api_strict",
    "torch": "torch",
    "jax": "jax.numpy",
    "dask": "dask.array",
    "cupy": "cupy",
}


def test_dtypes_that_are_no_table_dtypes(backend):
    xp = backend.xp
    with pytest.raises(ValueError, match=rf"^dtype 'float80' is not available in {NAMES[backend.library]}$"):
        table_dtype(xp, "float80", backend.device)
    for name in ("int32", "bool"):
        with pytest.raises(TypeError, match=r"^dtype must be a real floating dtype of .*, got "):
            table_dtype(xp, getattr(xp, name), backend.device)
    with pytest.raises(TypeError, match=r"^dtype must be a real floating dtype"):
        table_dtype(xp, "int32", backend.device)


def test_work_dtype_is_float64_where_the_backend_has_it(backend):
    expected = "float64" if "float64" in backend.dtypes else "float32"
    assert work_dtype(backend.xp, backend.device) == getattr(backend.xp, expected)


def test_inputs_below_float64_rotate_with_float32_tables(backend):
    xp = backend.xp
    for name in backend.dtypes:
        expected = xp.float64 if name == "float64" else xp.float32
        assert table_dtype_for(xp, getattr(xp, name)) == expected


def test_rotations_compute_in_float64_or_float32(backend):
    """float64 when the input or a table is float64, else float32: half-precision values are never multiplied in
    their own dtype."""
    xp = backend.xp
    for a in backend.dtypes:
        for b in backend.dtypes:
            expected = xp.float64 if "float64" in (a, b) else xp.float32
            assert rotation_dtype(xp, getattr(xp, a), getattr(xp, b)) == expected, (a, b)
            assert rotation_dtype(xp, getattr(xp, a), getattr(xp, b), getattr(xp, b)) == expected, (a, b)


def test_float64_of_either_byte_order_and_wider_floats_rotate_in_float64():
    """NumPy's big-endian float64 and longdouble are float64 work (equality with np.float64 misses them)."""
    for wide in (np.dtype(">f8"), np.dtype("<f8"), np.dtype(np.longdouble)):
        assert rotation_dtype(np, wide, np.dtype(np.float32)) == np.float64
        assert table_dtype_for(np, wide) == np.float64
    assert rotation_dtype(np, np.dtype(">f4"), np.dtype(">f2")) == np.float32


def test_host_dtype_holds_the_table():
    from arrayrope.backends import default_namespace

    xp = default_namespace()
    assert host_dtype(xp, xp.float64) == np.float64
    assert host_dtype(xp, xp.float32) == np.float32
    assert host_dtype(xp, xp.float16) == np.float32  # anything narrower than float64 is held in float32
