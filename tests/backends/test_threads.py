"""The block schedule shared by the CPU kernels, the PyTorch kernel on several threads, and prepared tables.

Oracles: explicit rotation matrices (helpers.rope_by_matrix) and the pure Array API
reference; results must not depend on how many threads computed them.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import arrayrope
from arrayrope._lib.rotation import rotate_reference
from arrayrope.backends import blocks, dispatch
from arrayrope.testing import assert_close
from helpers import rope_by_matrix

RNG = np.random.default_rng(11)


def test_run_calls_every_block_once_with_per_thread_scratch():
    seen: list[int] = []
    owners: dict[int, int] = {}
    lock = threading.Lock()

    def work(i, scratch):
        scratch.setdefault("id", threading.get_ident())
        assert scratch["id"] == threading.get_ident()  # scratch is private to a thread
        with lock:
            seen.append(i)
            owners[i] = scratch["id"]

    blocks.run(200, work, threads=3)
    assert sorted(seen) == list(range(200))
    blocks.run(0, work, threads=3)  # nothing to do
    assert len(seen) == 200


def test_run_raises_the_error_of_a_block_after_the_others_finish():
    done = []

    def work(i, scratch):
        if i == 5:
            raise ValueError("block 5")
        done.append(i)

    with pytest.raises(ValueError, match="block 5"):
        blocks.run(40, work, threads=2)
    assert 5 not in done


def test_run_enters_the_context_in_helper_threads_only():
    import contextlib

    entered = []

    @contextlib.contextmanager
    def ctx():
        entered.append(threading.get_ident())
        yield

    caller = threading.get_ident()
    blocks.run(50, lambda i, scratch: None, threads=2, enter=ctx)
    assert caller not in entered


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("rotary_dim", [64, 48])
def test_torch_blocks_same_on_any_thread_count(monkeypatch, layout, dtype, rotary_dim):
    """Bitwise the same result from whole-tensor ops, on 1 and 3 threads (helper threads taking blocks) and
    in one-row blocks, and close to rotation matrices."""
    torch = _torch()
    from arrayrope.backends import torch as kernels

    f = arrayrope.rope_frequencies(64, rotary_dim=rotary_dim)
    positions = np.arange(20, 20 + 300)
    cos, sin = (torch.from_numpy(t) for t in arrayrope.rope_tables(f, positions, dtype="float64"))
    if dtype != "float64":
        cos, sin = cos.float(), sin.float()
    x64 = RNG.standard_normal((2, 3, 300, 64))
    x = torch.from_numpy(x64).to(getattr(torch, dtype))
    assert x.numel() > kernels.GRAIN
    before = x.clone()
    results = []
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        results.append(arrayrope.apply_rotary(x, cos, sin, layout=layout))  # whole-tensor ops where they win
        monkeypatch.setattr(kernels, "HELPERS_MIN", 0)
        monkeypatch.setattr(kernels, "WHOLE_HALF", 0)
        monkeypatch.setattr(kernels, "WHOLE_INTERLEAVED", 0)
        for n in (1, 3):
            torch.set_num_threads(n)
            results.append(arrayrope.apply_rotary(x, cos, sin, layout=layout))
        monkeypatch.setattr(kernels, "GRAIN", 0)
        results.append(arrayrope.apply_rotary(x, cos, sin, layout=layout))
    finally:
        torch.set_num_threads(threads)
    for out in results[1:]:
        assert torch.equal(out, results[0])
    assert torch.equal(x, before)
    expected = rope_by_matrix(x.double().numpy(), positions, f.inv_freq, layout)
    tol = {"float64": 1e-12, "float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    assert_close(results[0], expected, rtol=tol, atol=tol, check_namespace=False, check_dtype=False)


def test_torch_blocks_in_inference_mode_and_strided_tables(monkeypatch):
    """Helper threads run in the caller's inference mode; sliced (non-contiguous) tables are read as they are."""
    torch = _torch()
    from arrayrope.backends import torch as kernels

    monkeypatch.setattr(kernels, "HELPERS_MIN", 0)
    f = arrayrope.rope_frequencies(32)
    cos, sin = (torch.from_numpy(t) for t in arrayrope.rope_tables(f, 4000))
    c, s = cos[1000:3000], sin[1000:3000]
    x = torch.from_numpy(RNG.standard_normal((1, 4, 2000, 32)).astype(np.float32))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a helper thread takes blocks too
    try:
        with torch.inference_mode():
            out = arrayrope.apply_rotary(x, c, s)
            assert out.is_inference()
    finally:
        torch.set_num_threads(threads)
    expected = rope_by_matrix(x.double().numpy(), np.arange(1000, 3000), f.inv_freq, "half")
    assert_close(out, expected, rtol=2e-6, atol=2e-6, check_namespace=False, check_dtype=False)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    "shape,table_shape",
    [((1, 8, 1, 64), (1, 32)), ((2, 4, 3, 64), (3, 32)), ((2, 3, 4, 64), (3, 1, 32)), ((3, 64), (3, 32))],
)
def test_prepared_tables_match_reference(lib, layout, shape, table_shape):
    """rotate with prepared tables (RotaryEmbedding's path) against the reference on the same tables."""
    if lib == "torch":
        torch = _torch()
        conv = torch.from_numpy
    else:
        conv = np.asarray
    angles = RNG.uniform(-5, 5, table_shape)
    x = conv(RNG.standard_normal(shape).astype(np.float32))
    cos, sin = conv(np.cos(angles).astype(np.float32)), conv(np.sin(angles).astype(np.float32))
    prepared = dispatch.prepare(x, cos, sin, layout)
    assert prepared is not None
    out = dispatch.rotate(dispatch.module_of(x), None, x, cos, sin, layout, prepared)
    assert_close(out, rotate_reference(arrayrope.backends.namespace(x), x, cos, sin, layout), rtol=2e-7, atol=2e-7)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_embedding_keeps_no_stale_step(backend, layout):
    """Decode steps at changing offsets, lengths and dtypes: each against rotation matrices."""
    rope = arrayrope.RotaryEmbedding(32, layout=layout)
    f = rope.freqs
    q = RNG.standard_normal((1, 4, 3, 32))
    k = RNG.standard_normal((1, 2, 3, 32))
    dtypes = ["float32"] + (["float64"] if "float64" in backend.dtypes else [])
    # each step twice in a row: the second call takes the prepared rows (every layer after the first)
    for offset, seq, dtype in [
        (7, 1, "float32"),
        (7, 1, "float32"),
        (8, 1, "float32"),
        (8, 1, "float32"),
        (7, 3, "float32"),
        (7, 3, "float32"),
        (7, 1, dtypes[-1]),
        (7, 1, dtypes[-1]),
        (7, 1, "float32"),
        (300, 2, "float32"),
        (300, 2, "float32"),
    ]:
        qs, ks = q[:, :, :seq], k[:, :, :seq]
        qr, kr = rope(backend.asarray(qs, dtype), backend.asarray(ks, dtype), offset=offset)
        pos = np.arange(offset, offset + seq)
        tol = 3e-6 if dtype == "float32" else 1e-12
        for got, x in ((qr, qs), (kr, ks)):
            expected = np.stack([rope_by_matrix(x[0], pos, f.inv_freq, layout)])
            assert_close(got, expected, rtol=tol, atol=tol, check_namespace=False, check_dtype=False)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rows_are_prepared_from_their_second_call(lib, layout):
    """A new step rotates with the plain rows; from the next call with the same rows on, the prepared ones."""
    from arrayrope.encodings import _cache

    conv = _torch().from_numpy if lib == "torch" else np.asarray
    rope = arrayrope.RotaryEmbedding(32, layout=layout)
    q = conv(RNG.standard_normal((1, 4, 1, 32)).astype(np.float32))
    expected = rope_by_matrix(np.asarray(q, dtype=np.float64)[0], np.array([9]), rope.freqs.inv_freq, layout)
    first = rope(q, offset=9)
    assert rope._cache._last[1][2] is _cache._LATER  # type: ignore[index]  # one call so far: nothing prepared
    second = rope(q, offset=9)
    assert rope._cache._last[1][2] is not _cache._LATER and rope._cache._last[1][2] is not None  # type: ignore[index]
    for out in (first, second):
        assert_close(out, expected[None], rtol=3e-6, atol=3e-6, check_namespace=False, check_dtype=False)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_prepared_rows_rotate_trailing_features(lib, layout):
    """DeepSeek's layout (the last 16 of 48 features rotate) through the prepared rows of a repeated step."""
    conv = _torch().from_numpy if lib == "torch" else np.asarray
    rope = arrayrope.RotaryEmbedding(48, rotary_dim=16, layout=layout, rotary_features="trailing")
    x = RNG.standard_normal((1, 3, 1, 48)).astype(np.float32)
    rotated = rope_by_matrix(x[0, :, :, 32:].astype(np.float64), np.array([5]), rope.freqs.inv_freq, layout)
    for _ in range(3):  # a new step, then its rows prepared, then prepared rows kept
        out = np.asarray(rope(conv(x), offset=5))
        np.testing.assert_array_equal(out[..., :32], x[..., :32])  # passed through unchanged
        np.testing.assert_allclose(out[0, :, :, 32:], rotated, rtol=3e-6, atol=3e-6)
