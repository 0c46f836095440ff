"""A ``RotaryEmbedding`` inside a model, copied the ways training code copies models: ``pickle``,
``copy.deepcopy``, ``copy.copy``, ``torch.save``/``torch.load`` of a whole module, a spawn-started worker
process and a dask.distributed worker; and the other objects a user holds (frequencies, export options,
reports, backends), pickled and deep-copied.

Oracles: the original instance's results on the same inputs, to the bit (a copy computes what the original
does), and explicit rotation matrices. A copy has its own lock, its own cache (empty, filled by its own calls)
and its own sequence-length state: calls on one never change the other.
"""

from __future__ import annotations

import copy
import io
import multiprocessing
import os
import pickle

import numpy as np
import pytest

import arrayrope as ar
from arrayrope.testing import Report, Row
from helpers import rope_by_matrix

DYNAMIC = {"rope_type": "dynamic", "factor": 4.0}
LONGROPE = {
    "rope_type": "longrope",
    "short_factor": [1.0] * 4,
    "long_factor": [1.5, 2.0, 3.0, 4.0],
    "original_max_position_embeddings": 16,
}


def _qk(s=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, 4, s, 8)).astype(np.float32), rng.standard_normal((2, 2, s, 8)).astype(np.float32)


def _oracle(x, positions, inv_freq):
    return np.stack([rope_by_matrix(x[b], positions, inv_freq, "half") for b in range(x.shape[0])])


def _warm(scaling):
    """An instance that has run calls: its cache is filled and, for the length-dependent types, its frequencies
    are those of a long call (a fresh instance's are not)."""
    rope = ar.RotaryEmbedding(8, scaling=scaling, max_position_embeddings=32 if scaling else None)
    q, k = _qk(s=40)
    rope(q, k)  # length 40: past max_position_embeddings
    return rope


COPIES = {
    "pickle": lambda r: pickle.loads(pickle.dumps(r)),
    "deepcopy": copy.deepcopy,
    "copy": copy.copy,
}


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("scaling", [None, DYNAMIC, LONGROPE], ids=["default", "dynamic", "longrope"])
def test_a_copy_rotates_as_the_original_and_shares_nothing(how, scaling):
    original = _warm(scaling)
    tables_before = dict(original._cache._tables)
    twin = COPIES[how](original)
    assert twin._lock is not original._lock and twin._cache is not original._cache
    assert not twin._cache._tables and twin._cache._last is None  # rebuilt where it is used
    assert twin.freqs == original.freqs and twin.freqs.inv_freq is not original.freqs.inv_freq
    assert not twin.freqs.inv_freq.flags.writeable
    q, k = _qk(s=3, seed=1)
    if scaling is DYNAMIC:  # the sequence-length state came along: length 36 keeps the frequencies of 40
        fresh = ar.RotaryEmbedding(8, scaling=scaling, max_position_embeddings=32)
        np.testing.assert_array_equal(twin(q, offset=33), original(q, offset=33))
        assert not np.array_equal(fresh(q, offset=33), twin(q, offset=33))
    # ...and moves on its own: a short call takes the copy back to its starting frequencies, not the original
    kept = original.freqs
    twin(q, offset=0)
    assert original.freqs is kept and (scaling is None or twin.freqs != kept)
    offsets = (0, 20, 5000, 2**20)  # in the cache, growing it, and past it
    got = [twin(q, k, offset=offset, return_freqs=True) for offset in offsets]
    assert twin._cache._tables and original._cache._tables.keys() == tables_before.keys()
    assert all(original._cache._tables[key] is tables for key, tables in tables_before.items())
    for offset, (q_rot, k_rot, used) in zip(offsets, got, strict=True):
        want_q, want_k, want_freqs = original(q, k, offset=offset, return_freqs=True)
        assert used == want_freqs
        for g, w, x in ((q_rot, want_q, q), (k_rot, want_k, k)):
            np.testing.assert_array_equal(g, w)
            # every feature rotates here, so the attention factor (LongRoPE's) scales all of them
            want = used.attention_factor * _oracle(x, np.arange(offset, offset + 3), used.inv_freq)
            np.testing.assert_allclose(g, want, atol=3e-6)


def test_a_copy_keeps_one_set_of_starting_frequencies():
    """The sequence-length state is the copy's own, and it, the cache and the instance share one starting set
    (the cache holds the tables of that set only), as in the original."""
    rope = _warm(DYNAMIC)
    twin = copy.deepcopy(rope)
    assert twin._resize is not rope._resize and twin._resize.current == rope._resize.current
    assert twin._resize.start is twin._start_freqs is twin._cache.freqs  # one set, as in the original


def test_torch_save_and_load_of_a_whole_module():
    """``torch.save(model)`` of a module holding a RotaryEmbedding: what comes back computes what the model did;
    the embedding holds no parameters or buffers (nothing of it is in the state dict), and its tables follow the
    inputs' dtype after the model moves."""
    torch = pytest.importorskip("torch")
    from model_with_rope import Attention

    torch.manual_seed(0)
    model = Attention(scaling=DYNAMIC, max_position_embeddings=32)
    x = torch.randn(2, 4, 40, 8)
    y = model(x)  # 40 > 32: the dynamic frequencies of length 40
    assert sorted(model.state_dict()) == ["proj.bias", "proj.weight"]
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    ema = copy.deepcopy(model)
    for other in (loaded, ema):
        assert other.rope is not model.rope and not other.rope._cache._tables
        assert torch.equal(other(x), y)
        assert torch.equal(other(x[:, :, :1], offset=70), model(x[:, :, :1], offset=70))
    loaded.double()  # moves the projection; the embedding has nothing to move, its tables follow the input
    with torch.no_grad():
        h = loaded.proj(x.double())
        np.testing.assert_allclose(
            loaded(x.double()).numpy(), _oracle(h.numpy(), np.arange(40), model.rope.freqs.inv_freq), atol=1e-12
        )
        short = x[:, :, :4]  # length 4: the starting frequencies, whose tables are cached
        loaded(short.double())
        loaded.float()(short)
    assert {str(t.dtype) for t, _ in loaded.rope._cache._tables.values()} == {"torch.float32", "torch.float64"}


def _rotate_in_worker(rope, q, k, offsets):
    """In a worker process: the rotations at ``offsets``, the process, and the instance after its calls."""
    return [rope(q, k, offset=o) for o in offsets], os.getpid(), rope


OFFSETS = (0, 33, 4096, 2**31)


def _check_worker_result(rope, q, k, result):
    rotated, pid, after = result
    assert pid != os.getpid()
    for offset, (qr, kr) in zip(OFFSETS, rotated, strict=True):
        want_q, want_k = rope(q, k, offset=offset)
        np.testing.assert_array_equal(qr, want_q)
        np.testing.assert_array_equal(kr, want_k)
    # the worker's instance came back with the state its calls left (the last call's frequencies), not ours
    assert after.freqs == rope.freqs and after._lock is not rope._lock
    np.testing.assert_array_equal(after(q, offset=3), rope(q, offset=3))


def test_a_spawn_worker_rotates_as_the_original():
    rope = _warm(DYNAMIC)
    q, k = _qk(s=2, seed=2)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result = pool.apply_async(_rotate_in_worker, (rope, q, k, OFFSETS)).get(timeout=120)
    _check_worker_result(rope, q, k, result)


def test_a_dask_distributed_worker_rotates_as_the_original():
    pytest.importorskip("distributed", reason="dask.distributed is not installed (the test extra installs it)")
    from distributed import Client, LocalCluster

    rope = _warm(DYNAMIC)
    q, k = _qk(s=2, seed=3)
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster, timeout=60) as client,
    ):
        result = client.submit(_rotate_in_worker, rope, q, k, OFFSETS, pure=False).result(timeout=120)
    _check_worker_result(rope, q, k, result)


# -- the other objects a user holds ------------------------------------------------------------------------


def _round_trips(obj):
    return [pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj), copy.copy(obj)]


def test_frequencies_copy_read_only():
    freqs = ar.rope_frequencies(
        16, rotary_dim=12, scaling={"rope_type": "yarn", "factor": 4.0}, max_position_embeddings=64
    )
    for other in _round_trips(freqs):
        assert other == freqs and other.rope_type == "yarn" and other.attention_factor == freqs.attention_factor
        assert not other.inv_freq.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            other.inv_freq[0] = 0.0
        np.testing.assert_array_equal(ar.rope_tables(other, 50)[1], ar.rope_tables(freqs, 50)[1])


def test_reports_and_backends():
    report = Report(
        (
            Row("numpy", "cpu", "float32", 1e-7, 1e-7, 5e-7, True),
            Row("torch", "cpu", "float32", 1e-3, 1e-3, 5e-7, False, note="off"),
        ),
        skipped=(("cupy", "no GPU"),),
        title="parity",
    )
    for other in _round_trips(report):
        assert other == report and other.verdict() == report.verdict() and str(other) == str(report)
    backend = ar.testing.available_backends("numpy")[0]
    for other in _round_trips(backend):
        assert other == backend and other.xp is backend.xp
        np.testing.assert_array_equal(other.asarray([1.0, 2.0]), backend.asarray([1.0, 2.0]))


def test_a_backend_pickled_where_its_library_is_missing(missing_library):
    """A backend unpickles as the receiving process's backend of that name; where there is none, the error
    says which and why (here: NumPy made to look uninstalled after pickling)."""
    data = pickle.dumps(ar.testing.available_backends("numpy")[0])
    message = missing_library("numpy")
    with pytest.raises(
        ValueError, match=f"backend 'numpy' is not available here: numpy unavailable: ImportError: {message}"
    ):
        pickle.loads(data)


def test_export_options_and_reports():
    pytest.importorskip("onnx")
    from arrayrope.export import ExportOptions, FusionReport, Rotation, TorchOptions, ValidationError

    options = ExportOptions(max_positions=64, target="portable", scaling={"rope_type": "linear", "factor": 2.0})
    for other in _round_trips(options):
        assert other == options and other.tables == "stored"
    deep = copy.deepcopy(options)
    assert deep.scaling is not options.scaling  # a deep copy shares no dict with the original
    for other in _round_trips(TorchOptions(target="ort", max_positions=128)):
        assert other == TorchOptions(target="ort", max_positions=128)
    fusion = FusionReport(
        (
            Rotation(
                "q",
                "q_rot",
                True,
                node="RotaryEmbedding",
                layout="half",
                rotary_dim=8,
                head_dim=8,
                heads=2,
                base=1e4,
                positions="ids",
                tables="stored, 64 rows",
                error=1e-7,
            ),
        ),
        "onnx23",
        "stored",
        10,
        3,
        17,
        23,
        Report(),
    )
    for other in _round_trips(fusion):
        assert other == fusion and str(other) == str(fusion)
    error = ValidationError("3 of 4 checks disagree", Report(title="validation"))
    for other in _round_trips(error):  # raised in a worker, it reaches the caller by pickling
        assert str(other) == str(error) and other.report == error.report
