"""Every backend's fast path behind apply_rotary, RotaryEmbedding and rope_tables against the references
(``backends/dispatch.py``): the same answers from every library, with and without the size thresholds.

The reference for rotary application is the pure Array API path
(``arrayrope._lib.rotation.rotate_reference``); it is itself checked against explicit rotation
matrices here and in test_apply.py. Table kernels are checked against float64
cos/sin computed in the test. What only one library's kernel does (NumPy's blocks
and strides, Dask's graph, PyTorch's autograd and strides, JAX under jit) is tested
in that library's module, test_numpy.py, test_dask.py, test_torch.py, test_jax.py.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arrayrope
from arrayrope import rope_tables
from arrayrope._lib.rotation import rotate_reference
from arrayrope.testing import assert_close, available_backends, default_tolerance, to_numpy
from helpers import check_like, rope_by_matrix, ulps

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
RNG = np.random.default_rng(7)

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(rope_tables)


def _tolerance(dtype: str) -> dict:
    # The kernels may order float16/bfloat16 roundings differently from the reference
    # (e.g. a fused multiply-add); a few units in the last place of the dtype.
    # float64: the same operations in another order, 16 ulps (not the default budget for independent chains).
    if dtype == "float64":
        return ulps("float64")
    rtol, atol = default_tolerance(dtype)
    return {"rtol": 2 * rtol, "atol": 2 * atol} if dtype in ("float16", "bfloat16") else {"rtol": rtol, "atol": atol}


def _table_dtype(backend, dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


def _case(backend, lead, head_dim, rotary_dim, pattern, dtype, table_dtype=None):
    """x, cos, sin on ``backend`` (and their NumPy float64 values) for a table pattern."""
    h = rotary_dim // 2
    if pattern == "seq":  # (S, h): one row per position, shared by batch and heads
        tshape = (lead[-1], h)
    elif pattern == "one":  # (1, h): one decode position for everything
        tshape = (1, h)
    elif pattern == "batch":  # (B, 1, S, h): per-row offsets
        tshape = (lead[0],) + (1,) * (len(lead) - 2) + (lead[-1], h)
    else:  # "bshd": (S, 1, h) against (B, S, H, D)
        tshape = (lead[-2], 1, h)  # type: ignore[assignment]
    angles = RNG.uniform(-7.0, 7.0, size=tshape)
    x = RNG.standard_normal((*lead, head_dim))
    tdt = table_dtype or _table_dtype(backend, dtype)
    args = backend.asarray(x, dtype), backend.asarray(np.cos(angles), tdt), backend.asarray(np.sin(angles), tdt)
    return args, (x, np.cos(angles), np.sin(angles))


def _patterns(nd: int) -> list[str]:
    return ["seq", "one", "batch"] + (["bshd"] if nd == 3 else [])


@st.composite
def cases(draw, dtypes):
    nd = draw(st.integers(1, 3))
    lead = tuple(draw(st.lists(st.integers(1, 5), min_size=nd, max_size=nd)))
    head_dim = 2 * draw(st.integers(1, 12))
    rotary_dim = 2 * draw(st.integers(1, head_dim // 2))
    pattern = draw(st.sampled_from(_patterns(nd) if nd >= 2 else ["seq", "one"]))
    layout = draw(st.sampled_from(["half", "interleaved"]))
    dtype = draw(st.sampled_from(dtypes))
    return lead, head_dim, rotary_dim, pattern, layout, dtype


@FIXTURE_OK
@given(data=st.data())
def test_dispatch_matches_reference(backend, thresholds, data):
    """Small arrays of any shape, layout, partial rotary, table broadcasting and dtype."""
    if backend.name == "jax":
        pytest.skip("test_dispatch_matches_reference_jax: fewer examples, each shape compiles")
    _check_dispatch(backend, data)


@st.composite
def jax_cases(draw, dtypes):
    """Cases from a few shapes: each distinct shape, layout and table pattern compiles once under jax.jit,
    and the values vary freely, so hundreds of examples stay cheap."""
    lead = draw(st.sampled_from([(2, 5), (2, 3, 4)]))
    head_dim = 8
    rotary_dim = draw(st.sampled_from([4, 8]))
    pattern = draw(st.sampled_from(_patterns(len(lead))))
    layout = draw(st.sampled_from(["half", "interleaved"]))
    return lead, head_dim, rotary_dim, pattern, layout, draw(st.sampled_from(dtypes))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_dispatch_matches_reference_jax(data):
    jax = list(available_backends(["jax"])) if _has("jax") else []
    if not jax:
        pytest.skip("jax is not installed")
    _check_dispatch(jax[0], data, jax_cases(("float32",)))


def _has(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _check_dispatch(backend, data, strategy=None) -> None:
    strategy = cases(backend.dtypes) if strategy is None else strategy  # a strategy's truth value is no choice
    lead, head_dim, rotary_dim, pattern, layout, dtype = data.draw(strategy)
    (x, cos, sin), _ = _case(backend, lead, head_dim, rotary_dim, pattern, dtype)
    before = to_numpy(x).copy()
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    ref = rotate_reference(backend.xp, x, cos, sin, layout)
    check_like(out, backend, dtype, tuple(x.shape))
    if backend.lazy and backend.library == "dask":  # one computation for the three (500 examples stay cheap)
        out, ref, x = backend.native.compute(out, ref, x, scheduler="sync")
    assert_close(out, ref, **_tolerance(dtype))
    np.testing.assert_array_equal(to_numpy(x), before)


# Sizes that cross the NumPy kernel's thresholds (whole-array ufuncs up to 1 MiB, then blocks)
LARGE = [
    ((2, 4, 600, 128), 128, "seq"),  # blocks, long period cut into blocks
    ((3, 5, 300, 96), 64, "seq"),  # partial rotary, period not a multiple of the block
    ((64, 8, 1, 128), 128, "one"),  # decode batch: one table row broadcast over blocks
    ((4, 700, 2, 64), 32, "bshd"),  # tables that do not repeat with a period: whole-array path
    ((4, 2, 700, 64), 64, "batch"),
]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("shape,rotary_dim,pattern", LARGE)
def test_large_arrays_match_reference(backend, shape, rotary_dim, pattern, layout):
    """Arrays above the kernels' size thresholds, with the default block size."""
    dtype = "float32" if "float32" in backend.dtypes else backend.dtypes[0]
    (x, cos, sin), _ = _case(backend, shape[:-1], shape[-1], rotary_dim, pattern, dtype)
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    check_like(out, backend, dtype, shape)
    assert_close(out, rotate_reference(backend.xp, x, cos, sin, layout), **_tolerance(dtype))


@pytest.mark.parametrize(
    "dtype,table_dtype",
    [("float16", "float32"), ("bfloat16", "float32"), ("float32", "float64"), ("float16", "float16")],
)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_mixed_dtypes_large(backend, dtype, table_dtype, layout):
    """Casting kernels (x narrower or wider than the tables) on block-sized arrays."""
    if dtype not in backend.dtypes or table_dtype not in backend.dtypes:
        pytest.skip(f"{backend.name} lacks {dtype} or {table_dtype}")
    (x, cos, sin), _ = _case(backend, (2, 3, 2400), 128, 96, "seq", dtype, table_dtype)
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    check_like(out, backend, dtype, tuple(x.shape))
    assert_close(out, rotate_reference(backend.xp, x, cos, sin, layout), **_tolerance(dtype))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("axes", ["bhsd", "bshd"])
def test_embedding_uses_kernels_like_reference(backend, layout, axes):
    """RotaryEmbedding (cached tables, offsets) against explicit rotation matrices."""
    dtype = "float32" if "float32" in backend.dtypes else backend.dtypes[0]
    rope = arrayrope.RotaryEmbedding(64, rotary_dim=32, layout=layout, axes=axes)
    shape_q, shape_k = ((2, 4, 3, 64), (2, 2, 3, 64)) if axes == "bhsd" else ((2, 3, 4, 64), (2, 3, 2, 64))
    q, k = RNG.standard_normal(shape_q), RNG.standard_normal(shape_k)
    q_rot, k_rot = rope(backend.asarray(q, dtype), backend.asarray(k, dtype), offset=1000)
    for got, x in ((q_rot, q), (k_rot, k)):
        xs = x if axes == "bhsd" else np.swapaxes(x, 1, 2)
        ref = rope_by_matrix(xs, np.arange(1000, 1003), rope.freqs.inv_freq, layout)
        ref = ref if axes == "bhsd" else np.swapaxes(ref, 1, 2)
        check_like(got, backend, dtype, x.shape)
        assert_close(got, ref, rtol=2e-6, atol=2e-6, check_namespace=False, check_dtype=False)


def test_tables_same_on_every_backend(xp, backend):
    """The NumPy kernel and the other backends' float64 (or exact float32) paths agree."""
    f = arrayrope.rope_frequencies(64)
    cos, sin = rope_tables(f, 3000, xp=backend.xp, device=backend.device)
    ref_c, ref_s = arrayrope.rope_tables(f, 3000)
    tol = 2e-7 if "float64" not in backend.dtypes else 1.2e-7
    assert_close(cos, ref_c, rtol=0, atol=tol, check_namespace=False, check_dtype=False)
    assert_close(sin, ref_s, rtol=0, atol=tol, check_namespace=False, check_dtype=False)
