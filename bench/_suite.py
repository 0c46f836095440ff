"""The measurements of one process under one thread setting: rotary application, decode steps, the sweep.

Imported by :mod:`bench._worker` after the thread settings are made; the other
sections live in :mod:`._compile`, :mod:`._memory`, :mod:`._dask` and :mod:`._tables`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import arrayrope
from arrayrope._lib.rotation import rotate_reference

from . import _compile, _dask, _far, _machine, _memory, _numexpr, _ort, _startup, _tables
from ._config import Config, Shape, thread_count
from ._libs import Lib, naive, naive_complex, select
from ._records import LAYOUTS, Layout, Record, Say, Tables, host_tables, naive_tables, ratios, record
from ._timing import measure


def run(config: Config, say: Say) -> tuple[dict[str, Any], list[Record]]:
    """Every section of ``config`` on every backend it names: (metadata, records)."""
    libs, missing = select(config.backends)
    n = thread_count(config.threads)
    for lib in libs:
        if n is not None and lib.ops.set_threads is not None:
            lib.ops.set_threads(n)
    eager = [lib for lib in libs if lib.ops.per_call]
    meta = _machine.process_meta(config, libs)
    meta["missing"] = missing
    meta["onnxruntime fused"] = _ort.available()
    say(f"backends: {[lib.name for lib in libs]}; missing: {missing or 'none'}")
    records: list[Record] = []
    if "apply" in config.sections:
        for lib in eager:
            records.extend(apply_all(lib, config, say))
    if "embedding" in config.sections:
        for lib in eager:
            records.extend(
                embedding_decode(lib, step, layout, config, say) for step in config.steps for layout in LAYOUTS
            )
    if "compile" in config.sections:
        for lib in eager:
            records.extend(_compile.compile_cases(lib, config, say))
    if "memory" in config.sections:
        records.extend(_memory.memory(eager, config, say))
    if "dask" in config.sections:
        for lib in libs:
            if not lib.ops.per_call:
                records.extend(_dask.dask_case(lib, config, say))
    if "tables" in config.sections:
        records.extend(_tables.tables_case(lib, config, say) for lib in eager)
    if "sweep" in config.sections:
        records.extend(sweep_case(lib, s, config, say) for lib in eager for s in config.sweep)
    if "far" in config.sections:
        for lib in eager:
            if lib.backend.library in ("numpy", "torch"):
                records.extend(_far.far_cases(lib, config, say))
    if "startup" in config.sections:
        records.extend(_startup.startup(config, say))
    for rec in records:
        rec["threads"] = config.threads
    return meta, records


# --------------------------------------------------------------------------- application


def apply_all(lib: Lib, config: Config, say: Say) -> list[Record]:
    """Both layouts on the decode and prefill shapes; low precision and partial rotary on one shape."""
    out: list[Record] = []
    for shape in config.decode + config.prefill:
        for layout in LAYOUTS:
            cases = [("float32", shape[-1])]
            if shape == config.extras:
                cases += [("float32", shape[-1] // 2)] + [(dt, shape[-1]) for dt in lib.low]
            out.extend(apply_case(lib, shape, layout, dtype, rdim, config, say) for dtype, rdim in cases)
    return out


def apply_case(lib: Lib, shape: Shape, layout: Layout, dtype: str, rdim: int, config: Config, say: Say) -> Record:
    """apply_rotary against a copy, the reference path, the naive formulas and ORT's fused kernel; into a
    buffer, x itself and a KV cache's slice (``out=``) where the library's arrays take it; numexpr where
    installed."""
    say(f"apply: {lib.name} {shape} {layout} rotary {rdim} {dtype}")
    x_np = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    cos, sin = host_tables(shape[2], rdim)
    tdt = "float64" if dtype == "float64" else "float32"
    x = lib.array(x_np, dtype)
    c, sn = lib.array(cos, tdt), lib.array(sin, tdt)
    tables = naive_tables(lib, cos, sin, dtype)
    ops, ready, xp = lib.ops, lib.ops.ready, lib.backend.xp
    variants: dict[str, Callable[[], object]] = {"copy": lambda: ready(ops.copy(x))}
    if ops.copy_into is not None:
        dst, copy_into = ops.copy(x), ops.copy_into
        variants["copy into"] = lambda: copy_into(dst, x)
    variants["arrayrope"] = lambda: ready(arrayrope.apply_rotary(x, c, sn, layout=layout))
    if ops.copy_into is not None:  # a library whose arrays take out=: a buffer, x itself, a KV cache's slice
        buffer, own, cache = ops.copy(x), ops.copy(x), _cache_for(lib, x, dtype)
        slot = cache[:, :, shape[2] :]
        variants["arrayrope out="] = lambda: ready(arrayrope.apply_rotary(x, c, sn, layout=layout, out=buffer))
        variants["arrayrope in place"] = lambda: ready(arrayrope.apply_rotary(own, c, sn, layout=layout, out=own))
        variants["arrayrope into cache slice"] = lambda: ready(
            arrayrope.apply_rotary(x, c, sn, layout=layout, out=slot)
        )
    variants["reference path"] = lambda: ready(rotate_reference(xp, x, c, sn, layout))
    variants["naive"] = lambda: ready(naive(ops, layout, x, tables, rdim))
    if layout == "interleaved" and ops.complex_mul is not None:
        fc = lib.array((cos + 1j * sin).astype(np.complex64))
        variants["naive complex"] = lambda: ready(naive_complex(ops, x, fc, rdim))
    if ops.jit is not None:
        jitted = ops.jit(lambda a: naive(ops, layout, a, tables, rdim))
        variants["naive jit"] = lambda: ready(jitted(x))
    if isinstance(x, np.ndarray) and _ort.available() and dtype in ("float32", "float16"):
        variants["ORT fused"] = _ort.fused_rotary(
            x, tables[2], tables[3], layout=layout, threads=thread_count(config.threads)
        )
    if isinstance(x, np.ndarray) and _numexpr.available() and dtype == "float32" and rdim == shape[-1]:
        variants["numexpr"] = _numexpr.fused_rotary(x, cos, sin, layout=layout)
    times = measure(variants, sync=lib.sync, rounds=config.rounds, batch_s=config.batch_s, budget_s=25.0)
    rec = record("apply", lib.name, shape, layout, dtype, rdim, times, x_naive=ratios(times, "naive"))
    if "ORT fused" in times:
        rec["x_ort"] = ratios(times, "ORT fused")
    return rec


def _cache_for(lib: Lib, x: Any, dtype: str) -> Any:
    """A (B, H, 2 S, D) cache for x (B, H, S, D), zeros: its positions S..2S-1 are the slice rotated into."""
    b, h, s, d = x.shape
    return lib.array(np.zeros((b, h, 2 * s, d), np.float32), dtype)


# --------------------------------------------------------------------------- decode steps


def embedding_decode(lib: Lib, step: tuple[int, int, int], layout: Layout, config: Config, say: Say) -> Record:
    """RotaryEmbedding(q, k, offset) in a decode step against the naive formula on q and k.

    The naive references: with the rows of this step precomputed (what a model that
    builds cos/sin once per forward pass holds in each layer), and with the rows
    looked up in the full tables in the call. ``RotaryEmbedding`` repeats one step
    (as every layer sharing an instance does); ``RotaryEmbedding, new step`` moves
    to the next position on every call.
    """
    batch, hq, hk = step
    say(f"embedding: {lib.name} decode q {(batch, hq, 1, 128)} k {(batch, hk, 1, 128)} {layout}")
    rng = np.random.default_rng(1)
    q = lib.array(rng.standard_normal((batch, hq, 1, 128)), "float32")
    k = lib.array(rng.standard_normal((batch, hk, 1, 128)), "float32")
    # one instance per variant: a variant's calls would otherwise move the step another's cache holds, and each
    # of its rounds would start with a lookup its steady state does not make
    rope, stepping, into = (arrayrope.RotaryEmbedding(128, layout=layout) for _ in range(3))
    off = 1000
    cos, sin = host_tables(4096, 128)
    full = naive_tables(lib, cos, sin, "float32")
    rows: Tables = (full[0][off : off + 1], full[1][off : off + 1], full[2][off : off + 1], full[3][off : off + 1])
    cx, sx = full[2], full[3]
    ops, ready = lib.ops, lib.ops.ready

    steps = iter(range(1 << 62))

    def both(pair: tuple[Any, Any]) -> tuple[Any, Any]:  # waited for as the naive variants wait for theirs
        return ready(pair[0]), ready(pair[1])

    def next_offset() -> tuple[Any, ...]:  # a new step every call (positions 1000..1999 stay in the cache)
        return both(stepping(q, k, offset=1000 + next(steps) % 1000))

    def naive_lookup() -> tuple[Any, Any]:
        looked: Tables = (
            full[0][off : off + 1],
            full[1][off : off + 1],
            full[2][off : off + 1],
            full[3][off : off + 1],
        )
        return ready(naive(ops, layout, q, looked, 128)), ready(naive(ops, layout, k, looked, 128))

    variants: dict[str, Callable[[], object]] = {
        "copy q and k": lambda: (ready(ops.copy(q)), ready(ops.copy(k))),
        "naive q and k": lambda: (ready(naive(ops, layout, q, rows, 128)), ready(naive(ops, layout, k, rows, 128))),
        "naive twice": naive_lookup,
        "RotaryEmbedding": lambda: both(rope(q, k, offset=off)),
        "RotaryEmbedding, new step": next_offset,
        "apply_rotary twice": lambda: (
            ready(arrayrope.apply_rotary(q, cx[off : off + 1], sx[off : off + 1], layout=layout)),
            ready(arrayrope.apply_rotary(k, cx[off : off + 1], sx[off : off + 1], layout=layout)),
        ),
    }
    if ops.copy_into is not None:  # the step's q and k written into buffers (a KV cache's slot for k)
        q_buf, k_buf = ops.copy(q), ops.copy(k)
        variants["RotaryEmbedding out="] = lambda: both(into(q, k, offset=off, q_out=q_buf, k_out=k_buf))
    times = measure(variants, sync=lib.sync, rounds=config.rounds, batch_s=config.batch_s)
    return record(
        "embedding",
        lib.name,
        (batch, hq, 1, 128),
        layout,
        "float32",
        128,
        times,
        copy="copy q and k",
        k_shape=[batch, hk, 1, 128],
        x_naive=ratios(times, "naive q and k"),
    )


# --------------------------------------------------------------------------- sweep for the plot


def sweep_case(lib: Lib, s: int, config: Config, say: Say) -> Record:
    shape = (1, 8, s, 128)
    say(f"sweep: {lib.name} {shape}")
    x_np = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    cos, sin = host_tables(s, 128)
    x, c, sn = lib.array(x_np, "float32"), lib.array(cos, "float32"), lib.array(sin, "float32")
    tables = naive_tables(lib, cos, sin, "float32")
    ops, ready = lib.ops, lib.ops.ready
    variants: dict[str, Callable[[], object]] = {
        "copy": lambda: ready(ops.copy(x)),
        "arrayrope half": lambda: ready(arrayrope.apply_rotary(x, c, sn)),
        "arrayrope interleaved": lambda: ready(arrayrope.apply_rotary(x, c, sn, layout="interleaved")),
        "naive half": lambda: ready(naive(ops, "half", x, tables, 128)),
    }
    if isinstance(x, np.ndarray) and _ort.available():
        variants["ORT fused half"] = _ort.fused_rotary(x, c, sn, layout="half", threads=thread_count(config.threads))
    rounds = config.rounds if config.mode != "full" else (3 if s >= 16384 else 5)
    times = measure(variants, sync=lib.sync, rounds=rounds, batch_s=config.batch_s, budget_s=15.0)
    return record("sweep", lib.name, shape, "both", "float32", 128, times)
