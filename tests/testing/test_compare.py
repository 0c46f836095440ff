"""``assert_close``, ``default_tolerance`` and ``tolerance_at`` (``testing/_compare.py``, ``_lib/verdicts.py``).

``assert_close`` is strict by default: a result of another library, dtype, shape or
device fails even where its values agree, and each keyword relaxes its own check
only. Tolerances are checked against NumPy's machine epsilons and bounds worked out
here by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from arrayrope.testing import assert_close, default_tolerance, tolerance_at

EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


@pytest.mark.parametrize("name", ["float16", "float32", "float64"])
def test_default_tolerance_is_a_few_ulps_of_the_dtype(name):
    eps = float(np.finfo(name).eps)
    ulps = 4096 if name == "float64" else 4  # float64 chains round in float64: see the derivation in the docs
    assert default_tolerance(name) == (ulps * eps, ulps * eps)
    assert default_tolerance(np.dtype(name)) == default_tolerance(name)


def test_default_tolerance_of_bfloat16_and_of_other_libraries_dtypes():
    assert default_tolerance("bfloat16") == (4 * 2.0**-7, 4 * 2.0**-7)  # 8 significant bits
    torch = pytest.importorskip("torch")
    assert default_tolerance(torch.bfloat16) == default_tolerance("bfloat16")
    assert default_tolerance(torch.float32) == default_tolerance("float32")


@pytest.mark.parametrize("dtype", ["int32", "complex64", "float8"])
def test_default_tolerance_refuses_other_dtypes(dtype):
    with pytest.raises(ValueError, match=f"dtype must be one of .*got '{dtype}'"):
        default_tolerance(dtype)


def test_tolerance_at_is_atol_plus_rtol_times_scale():
    assert tolerance_at("float32", 3.0) == 4 * 2.0**-23 * (1 + 3.0)
    assert tolerance_at("float64", 10.0, rtol=1e-6) == 4096 * 2.0**-52 + 1e-6 * 10.0
    assert tolerance_at("float16", 10.0, atol=0.0) == 4 * 2.0**-10 * 10.0
    assert tolerance_at("float32", 5.0, rtol=0.0, atol=0.0) == 0.0


# -- the strict checks, one at a time ---------------------------------------------------------


def _strict():
    return pytest.importorskip("array_api_strict")


def test_namespaces_must_match():
    strict = _strict()
    with pytest.raises(
        AssertionError,
        match=r"namespaces differ: actual is a numpy array, desired a array_api_strict "
        r"array \(pass check_namespace=False",
    ):
        assert_close(np.ones(3), strict.ones(3, dtype=strict.float64))
    with pytest.raises(AssertionError, match="namespaces differ: actual is a numpy array, desired a list array"):
        assert_close(np.ones(2), [1.0, 1.0])


@pytest.mark.parametrize("library", ["dask.array", "jax.numpy", "torch", "array_api_strict"])
def test_relaxed_namespace_compares_values_across_libraries(library):
    lib = pytest.importorskip(library)
    other = lib.asarray(np.float32([1.0, 2.0]), dtype=lib.float32)  # dtypes each library prints its own way
    with pytest.raises(AssertionError, match="namespaces differ"):
        assert_close(other, np.float32([1.0, 2.0]))
    assert_close(other, np.float32([1.0, 2.0]), check_namespace=False)
    with pytest.raises(AssertionError, match="1 of 2 elements differ"):
        assert_close(other, np.float32([1.0, 2.5]), check_namespace=False)


def test_dtypes_must_match():
    with pytest.raises(AssertionError, match=r"dtypes differ: actual float32, desired float64 \(pass check_dtype="):
        assert_close(np.float32([1.0, 2.0]), np.array([1.0, 2.0]))
    with pytest.raises(AssertionError, match="dtypes differ: actual float16, desired float32"):
        assert_close(np.float16([1.0]), np.float32([1.0]))
    assert_close(np.float32([1.0, 2.0]), np.array([1.0, 2.0]), check_dtype=False)
    with pytest.raises(AssertionError, match="dtypes differ: actual int32, desired int64"):
        assert_close(np.ones(2, np.int32), np.ones(2, np.int64))


def test_shapes_must_match():
    with pytest.raises(AssertionError, match=r"shapes differ: actual \(3,\), desired \(1, 3\)"):
        assert_close(np.ones(3), np.ones((1, 3)))
    assert_close(np.ones(3), np.ones((1, 3)), check_shape=False)
    assert_close(np.ones((2, 3)), np.ones(3), check_shape=False)  # broadcast
    with pytest.raises(AssertionError, match=r"shapes do not broadcast: actual \(3,\), desired \(2,\)"):
        assert_close(np.ones(3), np.ones(2), check_shape=False)


def test_devices_must_match():
    strict = _strict()
    a = strict.ones(3, device=strict.Device("CPU_DEVICE"))
    b = strict.ones(3, device=strict.Device("device1"))
    with pytest.raises(AssertionError, match=r"devices differ: actual on .*CPU_DEVICE.*, desired on .*device1"):
        assert_close(a, b)
    assert_close(a, b, check_device=False)
    with pytest.raises(AssertionError, match="1 of 3 elements differ"):
        assert_close(a, strict.asarray([1.0, 1.0, 2.0], device=strict.Device("device1")), check_device=False)


def test_each_keyword_relaxes_its_own_check_only():
    strict = _strict()
    # wrong library and dtype: relaxing the namespace still fails on the dtype
    with pytest.raises(AssertionError, match="dtypes differ"):
        assert_close(strict.ones(2, dtype=strict.float32), np.ones(2), check_namespace=False)
    # wrong dtype and shape: relaxing the dtype still fails on the shape
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_close(np.float32([1.0, 1.0]), np.ones((1, 2)), check_dtype=False)
    # wrong shape and device: relaxing the shape still fails on the device
    f32 = strict.float32
    a = strict.ones(2, dtype=f32, device=strict.Device("device1"))
    with pytest.raises(AssertionError, match="devices differ"):
        assert_close(a, strict.ones((1, 2), dtype=f32, device=strict.Device("device2")), check_shape=False)
    # wrong device and values: relaxing the device still fails on the values
    with pytest.raises(AssertionError, match="elements differ"):
        assert_close(a, strict.zeros(2, dtype=f32, device=strict.Device("device2")), check_device=False)
    # everything relaxed: values alone, here equal
    assert_close(a, np.ones((1, 2)), check_namespace=False, check_dtype=False, check_shape=False, check_device=False)


def test_same_backend_passes_and_any_other_library_fails(backend):
    a = backend.asarray(np.array([1.0, 2.0]), dtype="float32")
    assert_close(a, backend.asarray(np.array([1.0, 2.0]), dtype="float32"))
    with pytest.raises(AssertionError, match="1 of 2 elements differ"):
        assert_close(a, backend.asarray(np.array([1.0, 2.5]), dtype="float32"))
    host = np.float32([1.0, 2.0])
    if backend.library == "numpy":
        assert_close(a, host)
    else:
        with pytest.raises(AssertionError, match=f"namespaces differ: actual is a {backend.library} array"):
            assert_close(a, host)
    assert_close(a, host, check_namespace=False, check_dtype=False)


# -- values -----------------------------------------------------------------------------------


def test_values_within_the_bound_pass_and_beyond_it_fail():
    desired = np.float32([1.0, 2.0, 3.0, 4.0, 5.0])
    bound = 4 * EPS["float32"] * (1 + np.abs(desired.astype(np.float64)))  # atol + rtol |desired|, float32 default
    assert_close(
        desired.astype(np.float64) + bound, desired.astype(np.float64), rtol=4 * EPS["float32"], atol=4 * EPS["float32"]
    )
    actual = desired.copy()
    actual[1] += np.float32(1e-5)  # type: ignore[index]
    actual[3] += np.float32(1e-4)  # type: ignore[index]
    with pytest.raises(
        AssertionError,
        match=r"2 of 5 elements differ beyond rtol=4\.76837e-07, atol=4\.76837e-07 "
        r"\(float32\); worst at index \(3,\): actual .*4\.0001.*, desired .*4\.0",
    ):
        assert_close(actual, desired)
    assert_close(actual, desired, rtol=0.0, atol=1.1e-4)
    with pytest.raises(AssertionError, match=r"1 of 1 elements differ.*worst at index \(\)"):
        assert_close(np.float64(1.0), np.float64(1.5))


def test_the_coarser_dtype_sets_the_default_tolerance():
    desired = np.float32([1.0, -1.0])
    actual16 = np.float16([1.0 + 2**-9, -1.0])  # 2 ulps of float16 at 1: within its 4
    assert_close(actual16, desired, check_dtype=False)
    with pytest.raises(AssertionError, match=r"1 of 2 elements differ .*\(float32\)"):
        assert_close(actual16.astype(np.float32), desired)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # inf - inf and NaN are judged, not warned about
def test_assert_close_infinities_and_nans():
    assert_close(np.array([np.inf, -np.inf, np.nan, 1.0]), np.array([np.inf, -np.inf, np.nan, 1.0]))
    for a, d in ([np.inf], [-np.inf]), ([np.nan], [1.0]), ([1.0], [np.nan]), ([1.0], [1.001]), ([np.nan], [np.inf]):
        with pytest.raises(AssertionError, match="differ"):
            assert_close(np.array(a), np.array(d))
