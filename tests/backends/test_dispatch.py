"""Every backend kernel behind apply_rotary, RotaryEmbedding and rope_tables against the references.

The reference for rotary application is the pure Array API path
(``rotary._rotate_generic``); it is itself checked against explicit rotation
matrices here and in the core tests. Table kernels are checked against float64
cos/sin computed in the test.
"""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import arrayrope
from arrayrope import apply as rotary
from arrayrope.backends import numpy as _np_kernels
from arrayrope.testing import assert_close, backends, default_tolerance, to_numpy

from helpers import rope_by_matrix, ulps

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

FIXTURE_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
RNG = np.random.default_rng(7)


def _tolerance(dtype: str) -> dict:
    # The kernels may order float16/bfloat16 roundings differently from the reference
    # (e.g. a fused multiply-add); a few units in the last place of the dtype.
    # float64: the same operations in another order, 16 ulps (not the default budget for independent chains).
    if dtype == "float64":
        return ulps("float64")
    rtol, atol = default_tolerance(dtype)
    return {"rtol": 2 * rtol, "atol": 2 * atol} if dtype in ("float16", "bfloat16") else {"rtol": rtol, "atol": atol}


def check_like(out, backend, dtype: str, shape: tuple) -> None:
    """``out`` is an array of ``backend``'s library and device, with this dtype and shape."""
    probe = backend.asarray(np.zeros(1, dtype=np.float32))
    assert type(out).__module__.split(".")[0] == type(probe).__module__.split(".")[0], type(out)
    assert tuple(out.shape) == tuple(shape), (tuple(out.shape), shape)
    assert str(out.dtype).split(".")[-1] == dtype, (out.dtype, dtype)
    dev = array_api_compat.device(out)
    assert dev is None or dev == backend.device, (dev, backend.device)


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
        tshape = (lead[-2], 1, h)
    angles = RNG.uniform(-7.0, 7.0, size=tshape)
    x = RNG.standard_normal(tuple(lead) + (head_dim,))
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


@pytest.fixture(params=["default", "forced"])
def thresholds(request, monkeypatch):
    """Default size thresholds, or none: every array takes the blocked/PyTorch kernels, in tiny blocks."""
    if request.param == "forced":
        monkeypatch.setattr(_np_kernels, "_SMALL", 0)
        monkeypatch.setattr(_np_kernels, "_SMALL_HALF", 0)
        monkeypatch.setattr(_np_kernels, "BLOCK_BYTES", 96)
        try:
            from arrayrope.backends import torch as _torch_kernels
        except ImportError:  # no torch here: only the NumPy thresholds matter
            return request.param
        monkeypatch.setattr(_torch_kernels, "GRAIN", 0)  # one-row blocks, on every thread PyTorch may use
        monkeypatch.setattr(_torch_kernels, "ONE_THREAD_BLOCK", 0)
        monkeypatch.setattr(_torch_kernels, "HELPERS_MIN", 0)
    return request.param


@FIXTURE_OK
@given(data=st.data())
def test_dispatch_matches_reference(backend, thresholds, data):
    """Small arrays of any shape, layout, partial rotary, table broadcasting and dtype."""
    if backend.name == "jax":
        pytest.skip("test_dispatch_matches_reference_jax: fewer examples, each shape compiles")
    _check_dispatch(backend, data)


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_dispatch_matches_reference_jax(data):
    jax = [b for b in backends(["jax"])] if _has("jax") else []
    if not jax:
        pytest.skip("jax is not installed")
    _check_dispatch(jax[0], data)


def _has(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _check_dispatch(backend, data) -> None:
    lead, head_dim, rotary_dim, pattern, layout, dtype = data.draw(cases(backend.dtypes))
    (x, cos, sin), _ = _case(backend, lead, head_dim, rotary_dim, pattern, dtype)
    before = to_numpy(x).copy()
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    ref = rotary._rotate_generic(backend.xp, x, cos, sin, layout)
    check_like(out, backend, dtype, tuple(x.shape))
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
    assert_close(out, rotary._rotate_generic(backend.xp, x, cos, sin, layout), **_tolerance(dtype))


@pytest.mark.parametrize("dtype,table_dtype", [("float16", "float32"), ("bfloat16", "float32"),
                                               ("float32", "float64"), ("float16", "float16")])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_mixed_dtypes_large(backend, dtype, table_dtype, layout):
    """Casting kernels (x narrower or wider than the tables) on block-sized arrays."""
    if dtype not in backend.dtypes or table_dtype not in backend.dtypes:
        pytest.skip(f"{backend.name} lacks {dtype} or {table_dtype}")
    (x, cos, sin), _ = _case(backend, (2, 3, 2400), 128, 96, "seq", dtype, table_dtype)
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    check_like(out, backend, dtype, tuple(x.shape))
    assert_close(out, rotary._rotate_generic(backend.xp, x, cos, sin, layout), **_tolerance(dtype))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_numpy_blocks_against_rotation_matrix(layout):
    """The blocked NumPy kernel in float64 against explicit rotation matrices (independent oracle)."""
    f = arrayrope.rope_frequencies(64, rotary_dim=48)
    positions = np.arange(3000, 3000 + 1100)
    cos, sin = arrayrope.rope_tables(f, positions, dtype="float64")
    x = RNG.standard_normal((2, 1100, 64))
    assert x.nbytes > _np_kernels._SMALL
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    assert_close(out, rope_by_matrix(x, positions, f.inv_freq, layout), rtol=1e-12, atol=1e-12, check_namespace=False, check_dtype=False)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_numpy_strided_inputs(layout):
    """Views the kernels must not flatten: transposed, reversed, a slice of a wider last axis."""
    base = RNG.standard_normal((3, 700, 4, 160)).astype(np.float32)
    cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(128), 700)
    for x in (
        np.swapaxes(base, 1, 2)[..., :128],  # (3, 4, 700, 128), rows not contiguous
        base[:, ::-1].swapaxes(1, 2)[..., 32:],  # negative strides
        np.asfortranarray(base).swapaxes(1, 2)[..., :128],  # last axis not contiguous
    ):
        before = x.copy()
        out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
        assert_close(out, rotary._rotate_generic(arrayrope.backends.namespace(x), x, cos, sin, layout))
        np.testing.assert_array_equal(x, before)


def test_numpy_output_is_fresh():
    x = RNG.standard_normal((1, 2, 3000, 64)).astype(np.float32)
    cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(64), 3000)
    for layout in ("half", "interleaved"):
        out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
        assert not np.shares_memory(out, x) and not np.shares_memory(out, cos)


def test_dask_is_one_task_per_chunk_and_lazy():
    da = pytest.importorskip("dask.array")
    import dask

    calls = []

    def source(block):
        calls.append(1)
        return block

    base = da.from_array(RNG.standard_normal((2, 4, 96, 32)).astype(np.float32), chunks=(1, 2, 48, 32))
    x = base.map_blocks(source, dtype=base.dtype, meta=np.empty((0, 0, 0, 0), np.float32))
    f = arrayrope.rope_frequencies(32)
    cos, sin = arrayrope.rope_tables(f, da.arange(96, chunks=96))
    y = arrayrope.apply_rotary(x, cos, sin)
    assert calls == []  # nothing computed while building
    assert y.chunks == x.chunks
    graph = y.__dask_graph__()
    assert set(x.__dask_graph__().layers) <= set(graph.layers)  # x's graph is reused as is
    new = [name for name in graph.layers if name not in x.__dask_graph__().layers]
    top = y.name
    assert len(graph.layers[top]) == x.npartitions  # one task per chunk of x
    assert not any(n.startswith(("rechunk", "concatenate")) and n in x.__dask_graph__().layers for n in new)
    with dask.config.set(scheduler="synchronous"):
        got = y.compute()
    assert_close(got, rotary._rotate_generic(np, x.compute(), cos.compute(), sin.compute(), "half"))


def test_dask_chunked_features_use_reference():
    da = pytest.importorskip("dask.array")
    x = da.from_array(RNG.standard_normal((4, 16, 64)), chunks=(2, 8, 32))  # last axis in 2 chunks
    cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(64), da.arange(16, chunks=16), dtype="float64")
    y = arrayrope.apply_rotary(x, cos, sin, layout="interleaved")
    ref = rope_by_matrix(x.compute(), np.arange(16), arrayrope.rope_frequencies(64).inv_freq, "interleaved")
    assert_close(y.compute(), ref, rtol=1e-12, atol=1e-12, check_namespace=False, check_dtype=False)


def test_torch_autograd_uses_reference():
    torch = pytest.importorskip("torch")
    f = arrayrope.rope_frequencies(16)
    cos, sin = arrayrope.rope_tables(f, 5, xp=torch, dtype="float64")
    x = torch.tensor(RNG.standard_normal((2, 5, 16)), requires_grad=True)
    w = torch.tensor(RNG.standard_normal((2, 5, 16)))
    (arrayrope.apply_rotary(x, cos, sin) * w).sum().backward()
    # d/dx <R x, w> = R^T w: rotating w by the negative angles
    expected = rope_by_matrix(w.numpy(), -np.arange(5.0), f.inv_freq, "half")
    assert_close(x.grad, expected, rtol=1e-12, atol=1e-12, check_namespace=False, check_dtype=False)
    with torch.no_grad():
        out = arrayrope.apply_rotary(x, cos, sin)
    assert not out.requires_grad
    assert_close(out, rope_by_matrix(x.detach().numpy(), np.arange(5), f.inv_freq, "half"), rtol=1e-12, atol=1e-12, check_namespace=False, check_dtype=False)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_jax_kernel_under_jit(layout):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    f = arrayrope.rope_frequencies(32, rotary_dim=16)
    x = jnp.asarray(RNG.standard_normal((2, 6, 32)).astype(np.float32))
    positions = jnp.arange(6)
    fn = jax.jit(lambda a, p: arrayrope.apply_rotary(a, *arrayrope.rope_tables(f, p), layout=layout))
    ref = rope_by_matrix(np.asarray(x), np.arange(6), f.inv_freq, layout)
    assert_close(fn(x, positions), ref, rtol=2e-6, atol=2e-6, check_namespace=False, check_dtype=False)


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


@pytest.mark.parametrize("n", [1, 5, 1023, 1024, 1025, 5000])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_numpy_tables_kernel_against_float64(n, dtype):
    """Positions 0..n-1 by angle addition: within float rounding of float64 cos/sin."""
    f = arrayrope.rope_frequencies(128, base=500000.0)
    cos, sin = arrayrope.rope_tables(f, n, dtype=dtype)
    angles = np.arange(n, dtype=np.float64)[:, None] * f.inv_freq
    assert cos.shape == sin.shape == (n, 64) and cos.dtype == np.dtype(dtype)
    tol = 2.0 ** -24 * 1.01 if dtype == "float32" else 2.0 ** -11 * 1.01  # half an ulp at 1
    assert np.abs(cos - np.cos(angles)).max() <= tol
    assert np.abs(sin - np.sin(angles)).max() <= tol


def test_numpy_tables_kernel_attention_factor_and_empty():
    import dataclasses

    f = dataclasses.replace(arrayrope.rope_frequencies(32), attention_factor=1.25)
    cos, sin = arrayrope.rope_tables(f, 2000)
    angles = np.arange(2000.0)[:, None] * f.inv_freq
    assert np.abs(cos - 1.25 * np.cos(angles)).max() <= 1.25 * 2.0 ** -24 * 1.01
    assert np.abs(sin - 1.25 * np.sin(angles)).max() <= 1.25 * 2.0 ** -24 * 1.01
    cos, sin = arrayrope.rope_tables(f, 2000, apply_attention_factor=False)
    assert np.abs(cos - np.cos(angles)).max() <= 2.0 ** -24 * 1.01
    empty = arrayrope.rope_tables(f, 0)
    assert empty[0].shape == (0, 16) and empty[1].shape == (0, 16)


def test_tables_same_on_every_backend(backend):
    """The NumPy kernel and the other backends' float64 (or exact float32) paths agree."""
    f = arrayrope.rope_frequencies(64)
    cos, sin = arrayrope.rope_tables(f, 3000, xp=backend.xp, device=backend.device)
    ref_c, ref_s = arrayrope.rope_tables(f, 3000)
    tol = 2e-7 if "float64" not in backend.dtypes else 1.2e-7
    assert_close(cos, ref_c, rtol=0, atol=tol, check_namespace=False, check_dtype=False)
    assert_close(sin, ref_s, rtol=0, atol=tol, check_namespace=False, check_dtype=False)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
def test_numpy_kernels_against_onnx_reference(layout, rotary_dim):
    """NumPy kernels above the block threshold against ONNX's reference RotaryEmbedding (opset 23)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    b, n, s, d, h = 2, 4, 520, 64, rotary_dim // 2
    x = RNG.standard_normal((b, n, s, d)).astype(np.float32)
    f = arrayrope.rope_frequencies(d, rotary_dim=rotary_dim)
    cos, sin = arrayrope.rope_tables(f, np.arange(7, 7 + s))
    assert x.nbytes > _np_kernels._SMALL
    tensors = [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
               for name, shape in (("X", [b, n, s, d]), ("cos", [b, s, h]), ("sin", [b, s, h]))]
    node = helper.make_node("RotaryEmbedding", ["X", "cos", "sin"], ["Y"],
                            interleaved=int(layout == "interleaved"), rotary_embedding_dim=rotary_dim)
    graph = helper.make_graph([node], "rotary", tensors,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [b, n, s, d])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    feeds = {"X": x, "cos": np.broadcast_to(cos, (b, s, h)).copy(), "sin": np.broadcast_to(sin, (b, s, h)).copy()}
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    assert_close(arrayrope.apply_rotary(x, cos, sin, layout=layout), expected, rtol=1e-6, atol=1e-6, check_namespace=False, check_dtype=False)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_torch_strided_inputs(layout):
    """Tensors the blocked kernel must not flatten (transposed, sliced) take the slice kernel."""
    torch = pytest.importorskip("torch")
    base = torch.from_numpy(RNG.standard_normal((2, 900, 4, 160)).astype(np.float32))
    cos, sin = (torch.from_numpy(t) for t in arrayrope.rope_tables(arrayrope.rope_frequencies(128), 900))
    for x in (base.transpose(1, 2)[..., :128], base.transpose(1, 2)[..., 32:]):
        before = x.clone()
        out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
        assert_close(out, rotary._rotate_generic(arrayrope.backends.namespace(x), x, cos, sin, layout))
        assert torch.equal(x, before)
