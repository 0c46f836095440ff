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


def test_a_local_cluster_of_worker_processes_rotates_blockwise():
    """RotaryEmbedding and apply_rotary over chunked arrays on a dask.distributed LocalCluster of two worker
    processes: one task per chunk of q, k and x in the rotation layers, no rechunk of them, every task run
    in a worker process, and the values of the NumPy calls on the same data (to the bit: each chunk takes
    the NumPy kernel with the same tables)."""
    pytest.importorskip("distributed", reason="dask.distributed is not installed (the test extra installs it)")
    from distributed import Client, LocalCluster, get_task_stream

    rng = np.random.default_rng(5)
    q_np = rng.standard_normal((2, 8, 64, 64)).astype(np.float32)
    k_np = rng.standard_normal((2, 2, 64, 64)).astype(np.float32)
    x_np = rng.standard_normal((4, 64, 64)).astype(np.float32)
    q = da.from_array(q_np, chunks=(1, 4, 32, 64))  # 8 chunks
    k = da.from_array(k_np, chunks=(1, 2, 64, 64))  # 2 chunks
    x = da.from_array(x_np, chunks=(2, 16, 64))  # 8 chunks
    rope = arrayrope.RotaryEmbedding(64, layout="interleaved")
    q_rot, k_rot = rope(q, k, offset=100)
    f = arrayrope.rope_frequencies(64)
    cos, sin = arrayrope.rope_tables(f, da.arange(64, chunks=64) + 7)
    y = arrayrope.apply_rotary(x, cos, sin)
    pairs = [(q_rot, q), (k_rot, k), (y, x)]
    for out, src in pairs:
        graph = out.__dask_graph__()
        assert out.chunks == src.chunks and len(graph.layers[out.name]) == src.npartitions  # one task per chunk
        new = set(graph.layers) - set(src.__dask_graph__().layers)
        rechunked = [name for name in new if name.startswith("rechunk") and src.name in graph.dependencies[name]]
        assert not rechunked, rechunked  # the tables may be rechunked to x's chunks; x never is
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster, timeout=60) as client,
        get_task_stream(client) as stream,
    ):
        got = client.compute([q_rot, k_rot, y], sync=True)
        workers = set(cluster.scheduler_info["workers"])
    layers = {out.name for out, _ in pairs}
    ran = [t for t in stream.data if _layer(t["key"]) in layers]
    assert len(ran) == sum(src.npartitions for _, src in pairs)  # each chunk's task once
    assert {t["worker"] for t in ran} <= workers
    want_q, want_k = rope(q_np, k_np, offset=100)
    np.testing.assert_array_equal(got[0], want_q)
    np.testing.assert_array_equal(got[1], want_k)
    np.testing.assert_array_equal(got[2], arrayrope.apply_rotary(x_np, *arrayrope.rope_tables(f, np.arange(64) + 7)))


def _layer(key):
    """The layer name of a task key (``(name, i, j, ...)`` or a string)."""
    return key[0] if isinstance(key, tuple) else key
