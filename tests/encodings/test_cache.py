"""``RotaryEmbedding``'s table cache (``encodings/_cache.py``) at its edges, against rotation matrices.

The cache holds cos/sin of positions ``0 .. N-1``, N the smallest power of two (at least 256)
that the calls so far needed, up to ``2**17``; a call that ends past N grows it, a call that ends
at N reads it as it is, without the lock (entries are replaced, never changed), and a call past
``2**17`` computes the tables of its own positions. Each edge is taken exactly and one row past it,
by one thread and by threads that all wait at the lock for the one that builds. The oracle is
``helpers.rope_by_matrix`` (float64 rotation matrices).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import arrayrope as ar
from arrayrope.encodings import _cache
from arrayrope.testing import to_numpy
from helpers import around, rope_by_matrix

D = 8
RNG = np.random.default_rng(26)


def _check(rope, out, x, offset):
    """``out`` is ``x`` (B, H, S, D) rotated to positions ``offset ..``, by rotation matrices."""
    x = to_numpy(x).astype(np.float64)
    pos = np.arange(offset, offset + x.shape[2])
    want = np.stack([rope_by_matrix(x[b], pos, rope.freqs.inv_freq, "half") for b in range(x.shape[0])])
    got = to_numpy(out).astype(np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=3e-6, atol=3e-6)


def _rows(rope) -> int:
    """The positions the cache holds (one namespace, device and dtype)."""
    ((cos, _),) = rope._cache._tables.values()
    return int(cos.shape[0])


class _Counted:
    """A lock that counts the threads that came to it; ``wait_for(n)`` waits until ``n`` came."""

    def __init__(self):
        self._lock = threading.Lock()
        self._came = threading.Condition()
        self.arrivals = 0

    def __enter__(self):
        with self._came:
            self.arrivals += 1
            self._came.notify_all()
        self._lock.acquire()

    def __exit__(self, *exc):
        self._lock.release()

    def wait_for(self, n: int) -> None:
        with self._came:
            self._came.wait_for(lambda: self.arrivals >= n, timeout=10)


@pytest.fixture
def builds(monkeypatch):
    """The number of positions of each table the cache builds, in order."""
    sizes: list[int] = []
    real = _cache.rope_tables  # type: ignore[attr-defined]

    def counted(freqs, n, **kwargs):
        sizes.append(n)
        return real(freqs, n, **kwargs)

    monkeypatch.setattr(_cache, "rope_tables", counted)
    return sizes


def test_a_decode_step_one_row_past_the_cache(backend, builds):
    """A prefill of 256 tokens fills the cache exactly; the decode step at 256 needs one row more."""
    if backend.lazy:
        pytest.skip("the cache keeps no traced or lazy tables")
    rope = ar.RotaryEmbedding(D)
    lock = rope._cache._lock = _Counted()  # type: ignore[assignment]
    x = RNG.standard_normal((1, 2, 256, D))

    def call(seq, offset):
        xb = backend.asarray(x[:, :, :seq], dtype="float32")
        _check(rope, rope(xb, offset=offset), xb, offset)

    call(256, 0)
    assert builds == [256] and _rows(rope) == 256  # exactly what the prefill needs: a power of two, not twice it
    call(1, 255)  # ends at the cached length: read as it is, without the lock
    assert builds == [256] and lock.arrivals == 1
    call(1, 256)  # one row past: the cache doubles
    assert builds == [256, 512] and _rows(rope) == 512 and lock.arrivals == 2
    call(12, 500)  # ends at 512 exactly
    assert builds == [256, 512] and lock.arrivals == 2
    call(13, 500)  # ends at 513
    assert builds == [256, 512, 1024] and _rows(rope) == 1024


def test_a_first_call_builds_the_smallest_cache_that_holds_it(builds):
    rope = ar.RotaryEmbedding(D)
    x = RNG.standard_normal((1, 1, 1, D)).astype(np.float32)
    for offset, rows in ((0, 256), (256, 512), (511, 512), (512, 1024), (1023, 1024), (1024, 2048)):
        _check(rope, rope(x, offset=offset), x, offset)
        assert _rows(rope) == rows, (offset, _rows(rope), rows)
    assert builds == [256, 512, 1024, 2048]
    fresh = ar.RotaryEmbedding(D)
    _check(fresh, fresh(x, offset=257), x, 257)
    assert _rows(fresh) == 512


@given(
    calls=st.lists(
        st.tuples(around(0, 256, 512, 1024, lo=0, hi=1100, spread=3), st.integers(1, 4)), min_size=1, max_size=5
    )
)
def test_calls_around_the_edges_in_any_order(calls):
    """Calls starting at and around the cache's sizes, in any order: each rotated as rotation matrices say, and
    the cache always the smallest power of two (at least 256) that holds every call so far."""
    rope = ar.RotaryEmbedding(4)
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    end = 0
    for offset, seq in calls:
        _check(rope, rope(x[:, :, :seq], offset=offset), x[:, :, :seq], offset)
        end = max(end, offset + seq)
        rows = 256
        while rows < end:
            rows *= 2
        assert _rows(rope) == rows, (calls, _rows(rope), rows)


def test_the_largest_cache_and_one_position_past_it(builds):
    """A call ending at ``MAX_CACHE`` is served by the cache (grown to exactly that); one ending a row later
    computes the tables of its own positions and leaves the cache as it is."""
    rope = ar.RotaryEmbedding(D)
    x = RNG.standard_normal((1, 1, 2, D)).astype(np.float32)
    edge = _cache.MAX_CACHE
    _check(rope, rope(x, offset=edge - 2), x, edge - 2)
    assert builds == [edge] and _rows(rope) == edge
    _check(rope, rope(x, offset=edge - 1), x, edge - 1)  # positions edge - 1 and edge: past the cache
    _check(rope, rope(x[:, :, :1], offset=edge), x[:, :, :1], edge)
    assert builds == [edge] and _rows(rope) == edge


@pytest.mark.parametrize(
    ("cached", "offset", "seq", "size"),
    [
        (256, 256, 1, 512),  # every thread needs one row more than the cache holds
        (256, 511, 1, 512),  # every thread ends exactly where the table the first one builds ends
        (512, 500, 13, 1024),  # one row past a cache of 512, as a chunk
        (None, 0, 256, 256),  # an empty cache, filled to exactly what the threads need
    ],
)
def test_threads_waiting_at_the_lock_take_the_table_one_of_them_built(monkeypatch, builds, cached, offset, seq, size):
    """Every thread finds the cache too short and waits at the lock while the first builds (its build waits
    until all have come); the others must then take that table, which holds what they need."""
    n = 4
    rope = ar.RotaryEmbedding(D)
    if cached is not None:
        rope(np.zeros((1, 1, 1, D), np.float32), offset=cached - 1)
        assert _rows(rope) == cached
    builds.clear()
    lock = rope._cache._lock = _Counted()  # type: ignore[assignment]
    counted = _cache.rope_tables  # type: ignore[attr-defined]

    def slow(freqs, n_rows, **kwargs):
        lock.wait_for(n)
        return counted(freqs, n_rows, **kwargs)

    monkeypatch.setattr(_cache, "rope_tables", slow)
    xs = [RNG.standard_normal((1, 2, seq, D)).astype(np.float32) for _ in range(n)]
    outs: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i):
        try:
            outs[i] = rope(xs[i], offset=offset)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert lock.arrivals == n  # every thread took the locked path
    assert builds == [size] and _rows(rope) == size  # one built, the others took it
    for i in range(n):
        _check(rope, outs[i], xs[i], offset)
