"""The Dask fast path (``backends/dask.py``): one blockwise task per chunk of x on x's own graph, chunked
features through the reference, and results that build without computing and compute in one pass."""

from __future__ import annotations

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function, patch_lazy_xp_functions

import arrayrope
from arrayrope import rope_tables
from arrayrope._lib.rotation import rotate_reference
from arrayrope.testing import assert_close
from helpers import random_case, rope_by_matrix

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

RNG = np.random.default_rng(7)


def rotated_values(x, cos, sin):
    """The interleaved rotation of ``x``, built, then computed."""
    y = arrayrope.apply_rotary(x, cos, sin, layout="interleaved")
    assert isinstance(y, da.Array) and y.shape == x.shape
    return y.compute()


# Under patch_lazy_xp_functions: rope_tables may not compute at all, rotated_values once (the final compute,
# so building computed nothing and the result's graph runs in one scheduler pass, no compute nested in a task).
lazy_xp_function(rope_tables)
lazy_xp_function(rotated_values, allow_dask_compute=1)


def test_builds_lazily_and_computes_in_one_pass(request):
    x, f, pos = random_case((4, 2, 8, 16))
    xd = da.from_array(x.astype(np.float32), chunks=(1, 2, 8, 16))
    with patch_lazy_xp_functions(request, xp=da):
        c, s = rope_tables(f, da.from_array(pos))
        result = rotated_values(xd, c, s)
    np.testing.assert_allclose(result, rope_by_matrix(x, pos, f.inv_freq, "interleaved"), atol=2e-6)


def test_one_task_per_chunk_and_lazy():
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
    assert_close(got, rotate_reference(np, x.compute(), cos.compute(), sin.compute(), "half"))


def test_chunked_features_use_reference():
    x = da.from_array(RNG.standard_normal((4, 16, 64)), chunks=(2, 8, 32))  # last axis in 2 chunks
    cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(64), da.arange(16, chunks=16), dtype="float64")
    y = arrayrope.apply_rotary(x, cos, sin, layout="interleaved")
    ref = rope_by_matrix(x.compute(), np.arange(16), arrayrope.rope_frequencies(64).inv_freq, "interleaved")
    assert_close(y.compute(), ref, rtol=1e-12, atol=1e-12, check_namespace=False, check_dtype=False)
