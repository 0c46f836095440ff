"""The measurements of ``python -m bench`` (imported after threads are pinned)."""

from __future__ import annotations

import math
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np

import arrayrope
from arrayrope import apply as rotary

from . import _backends, _ort, _report, run as _run
from ._timing import measure


def run(args: Any, say: Callable[[str], None]) -> int:
    quick = args.quick
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        pass
    libs, missing = _backends.available(names)
    meta = _run.machine(args.threads)
    meta["mode"] = "quick" if quick else "full"
    meta["missing"] = missing
    meta["onnxruntime fused"] = _ort.available()
    records: list[dict] = []
    rounds = 3 if quick else 7
    prefill = _run.QUICK_PREFILL if quick else _run.PREFILL
    meta["prefill"] = [list(p) for p in prefill]
    say(f"backends: {[lib.name for lib in libs]}; missing: {missing or 'none'}")

    for lib in libs:
        for shape in prefill:
            for layout in ("half", "interleaved"):
                cases = [("float32", shape[-1])]
                if shape == prefill[0]:
                    cases += [("float32", shape[-1] // 2)] + [(dt, shape[-1]) for dt in lib.low]
                for dtype, rdim in cases:
                    records.append(apply_case(lib, shape, layout, dtype, rdim, rounds, say))
        for shape in _run.DECODE:
            for layout in ("half", "interleaved"):
                records.append(apply_case(lib, shape, layout, "float32", shape[-1], rounds, say))
        records.extend(embedding_decode(lib, rounds, say))
        records.extend(far_decode(lib, rounds, say))
    records.extend(memory(libs, prefill[0], say))
    if "dask" in names:
        records.extend(dask_case(quick, say))
    records.extend(tables(libs, quick, say))
    sweep = sweep_case(libs, quick, say)
    records.extend(sweep)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    targets = _report.targets(records, prefill)
    _run.write(out, meta, records, targets, _report.markdown(meta, records, targets))
    _report.plot(sweep, out / "rotary_vs_copy.png", meta)
    say(f"wrote {out / 'results.md'}, {out / 'results.json'}, {out / 'rotary_vs_copy.png'}")
    return 0


# --------------------------------------------------------------------------- application


def _tables(lib, s: int, rdim: int, layout: str, dtype: str, positions: np.ndarray | None = None):
    f = arrayrope.rope_frequencies(rdim)
    pos = np.arange(s) if positions is None else positions
    cos, sin = arrayrope.rope_tables(f, pos, dtype="float64")
    tdt = "float64" if dtype == "float64" else "float32"
    return f, cos, sin, tdt


def apply_case(lib, shape, layout: str, dtype: str, rdim: int, rounds: int, say) -> dict:
    rng = np.random.default_rng(0)
    s = shape[2]
    what = f"{lib.name} {shape} {layout} rotary {rdim} {dtype}"
    say(f"apply: {what}")
    x_np = rng.standard_normal(shape).astype(np.float32)
    _, cos, sin, tdt = _tables(lib, s, rdim, layout, dtype)
    x = lib.array(x_np, dtype)
    c, sn = lib.array(cos, tdt), lib.array(sin, tdt)
    # what a user of the naive formulas holds: tables in x's dtype, full width for half-split
    cf, sf = lib.array(np.concatenate([cos, cos], -1), dtype), lib.array(np.concatenate([sin, sin], -1), dtype)
    cx, sx = lib.array(cos, dtype), lib.array(sin, dtype)
    ready = lib.ready
    xp = arrayrope.backends.namespace(x)
    variants: dict[str, Callable] = {"copy": lambda: ready(lib.copy(x))}
    if lib.copy_into is not None:
        dst = lib.copy(x)
        variants["copy into"] = lambda: lib.copy_into(dst, x)
    variants["arrayrope"] = lambda: ready(arrayrope.apply_rotary(x, c, sn, layout=layout))
    variants["reference path"] = lambda: ready(rotary._rotate_generic(xp, x, c, sn, layout))
    if layout == "half":
        variants["naive"] = lambda: ready(_backends.naive_half(lib, x, cf, sf, rdim))
    else:
        variants["naive"] = lambda: ready(_backends.naive_interleaved(lib, x, cx, sx, rdim))
        if dtype != "float16" or lib.name != "torch":
            fc = lib.put((cos + 1j * sin).astype(np.complex64))
            variants["naive complex"] = lambda: ready(_backends.naive_complex(lib, x, fc, rdim))
    if lib.name == "jax":
        import jax

        jit_naive = jax.jit(lambda a: _backends.naive_half(lib, a, cf, sf, rdim) if layout == "half"
                            else _backends.naive_interleaved(lib, a, cx, sx, rdim))
        variants["naive jit"] = lambda: ready(jit_naive(x))
    if lib.name == "numpy" and _ort.available() and dtype in ("float32", "float16"):
        variants["ORT fused"] = _ort.fused_rotary(x, cx, sx, layout=layout)
    times = measure(variants, sync=lib.sync, rounds=rounds, budget_s=25.0)
    return _record("apply", lib.name, shape, layout, dtype, rdim, times, x_np.size * np.dtype(np.float32).itemsize)


def _record(section, backend, shape, layout, dtype, rdim, times, nbytes=None, **extra) -> dict:
    ref = times.get("copy") or times.get("x * 1.0")
    return {
        "section": section, "backend": backend, "shape": list(shape), "layout": layout, "dtype": dtype,
        "rotary_dim": rdim, "seconds": times,
        "x_copy": {k: v / ref for k, v in times.items()} if ref else {}, **extra,
    }


def embedding_decode(lib, rounds: int, say) -> list[dict]:
    """RotaryEmbedding(q, k, offset) against the naive formula applied to q and k (GQA decode)."""
    out = []
    rng = np.random.default_rng(1)
    for batch in (1, 64):
        for layout in ("half", "interleaved"):
            say(f"embedding: {lib.name} decode batch {batch} {layout}")
            q = lib.array(rng.standard_normal((batch, 32, 1, 128)), "float32")
            k = lib.array(rng.standard_normal((batch, 8, 1, 128)), "float32")
            rope = arrayrope.RotaryEmbedding(128, layout=layout)
            off = 1000
            _, cos, sin, _ = _tables(lib, 4096, 128, layout, "float32")
            cf = lib.array(np.concatenate([cos, cos], -1), "float32")
            sf = lib.array(np.concatenate([sin, sin], -1), "float32")
            cx, sx = lib.array(cos, "float32"), lib.array(sin, "float32")
            ready = lib.ready
            if layout == "half":
                def naive2():
                    c, s = cf[off : off + 1], sf[off : off + 1]
                    return ready(_backends.naive_half(lib, q, c, s, 128)), ready(_backends.naive_half(lib, k, c, s, 128))
            else:
                def naive2():
                    c, s = cx[off : off + 1], sx[off : off + 1]
                    return (ready(_backends.naive_interleaved(lib, q, c, s, 128)),
                            ready(_backends.naive_interleaved(lib, k, c, s, 128)))
            variants = {
                "copy q and k": lambda: (ready(lib.copy(q)), ready(lib.copy(k))),
                "naive twice": naive2,
                "RotaryEmbedding": lambda: tuple(ready(a) for a in rope(q, k, offset=off)),
                "apply_rotary twice": lambda: (
                    ready(arrayrope.apply_rotary(q, cx[off : off + 1], sx[off : off + 1], layout=layout)),
                    ready(arrayrope.apply_rotary(k, cx[off : off + 1], sx[off : off + 1], layout=layout)),
                ),
            }
            times = measure(variants, sync=lib.sync, rounds=rounds)
            rec = _record("embedding", lib.name, (batch, 32, 1, 128), layout, "float32", 128, times)
            rec["x_naive"] = {k_: v / times["naive twice"] for k_, v in times.items()}
            out.append(rec)
    return out


def far_decode(lib, rounds: int, say) -> list[dict]:
    """A decode step far beyond the table cache against one inside it (warm): its own tables only."""
    say(f"embedding: {lib.name} decode at offsets 1000, 2**31, 2**62")
    rng = np.random.default_rng(2)
    q = lib.array(rng.standard_normal((1, 32, 1, 128)), "float32")
    k = lib.array(rng.standard_normal((1, 8, 1, 128)), "float32")
    rope = arrayrope.RotaryEmbedding(128)
    ready = lib.ready
    offsets = {"offset 1000 (warm)": 1000, "offset 2**31": 2**31, "offset 2**62": 2**62}
    first = {}
    for name, off in offsets.items():
        tracemalloc.start()
        t0 = time.perf_counter()
        for a in rope(q, k, offset=off):
            ready(a)
        first[name] = {"seconds": time.perf_counter() - t0, "peak_MB": tracemalloc.get_traced_memory()[1] / 2**20}
        tracemalloc.stop()
    variants = {name: (lambda off=off: tuple(ready(a) for a in rope(q, k, offset=off)))
                for name, off in offsets.items()}
    times = measure(variants, sync=lib.sync, rounds=rounds)
    rec = _record("far", lib.name, (1, 32, 1, 128), "half", "float32", 128, times)
    rec["x_warm"] = {k_: v / times["offset 1000 (warm)"] for k_, v in times.items()}
    rec["first_call"] = first  # tracemalloc sees NumPy's allocations (host memory of other libraries: not)
    return [rec]


# --------------------------------------------------------------------------- memory


def memory(libs, shape, say) -> list[dict]:
    """Peak memory beyond x and the output during one call on the first prefill shape."""
    out = []
    x_np = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    nbytes = x_np.nbytes
    _, cos, sin, _ = _tables(None, shape[2], shape[-1], "half", "float32")
    cos, sin = cos.astype(np.float32), sin.astype(np.float32)
    cf, sf = np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
    np_lib = _backends._numpy()
    for layout in ("half", "interleaved"):
        fns = {
            "arrayrope": lambda: arrayrope.apply_rotary(x_np, cos, sin, layout=layout),
            "reference path": lambda: rotary._rotate_generic(arrayrope.backends.namespace(x_np), x_np, cos, sin, layout),
            "naive": (lambda: _backends.naive_half(np_lib, x_np, cf, sf, shape[-1])) if layout == "half"
            else (lambda: _backends.naive_interleaved(np_lib, x_np, cos, sin, shape[-1])),
        }
        peaks = {}
        for name, fn in fns.items():
            say(f"memory: numpy {layout} {name} (tracemalloc)")
            fn()
            tracemalloc.start()
            y = fn()
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            peaks[name] = (peak - y.nbytes) / nbytes
            del y
        out.append({"section": "memory", "backend": "numpy", "method": "tracemalloc", "shape": list(shape),
                    "layout": layout, "extra_over_x": peaks})
    if any(lib.name == "torch" for lib in libs):
        for layout in ("half", "interleaved"):
            peaks = {}
            for name in ("arrayrope", "reference path", "naive"):
                say(f"memory: torch {layout} {name} (peak RSS in a fresh process)")
                peaks[name] = _torch_rss(shape, layout, name)
            out.append({"section": "memory", "backend": "torch", "method": "peak RSS growth", "shape": list(shape),
                        "layout": layout, "extra_over_x": peaks})
    for lib in libs:
        if lib.name == "torch-cuda":
            import torch

            peaks = {}
            x = lib.array(x_np, "float32")
            c, s = lib.array(cos, "float32"), lib.array(sin, "float32")
            for layout in ("half", "interleaved"):
                for name, fn in {
                    "arrayrope": lambda: arrayrope.apply_rotary(x, c, s, layout=layout),
                    "reference path": lambda: rotary._rotate_generic(arrayrope.backends.namespace(x), x, c, s, layout),
                }.items():
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    y = fn()
                    torch.cuda.synchronize()
                    peaks[f"{name} {layout}"] = (torch.cuda.max_memory_allocated() - base - y.nbytes) / nbytes
                    del y
            out.append({"section": "memory", "backend": "torch-cuda", "method": "torch.cuda.max_memory_allocated",
                        "shape": list(shape), "layout": "both", "extra_over_x": peaks})
    return out


_RSS_CODE = """
import numpy as np, torch, arrayrope
from arrayrope import apply as rotary
torch.set_num_threads(1)
shape, layout, name = {shape!r}, {layout!r}, {name!r}
x = torch.empty(shape).normal_()  # no temporary: the peak so far is x itself
f = arrayrope.rope_frequencies(shape[-1])
c, s = (torch.from_numpy(t) for t in arrayrope.rope_tables(f, shape[2]))
cf, sf = torch.cat([c, c], -1), torch.cat([s, s], -1)
def run(a):
    if name == "arrayrope":
        return arrayrope.apply_rotary(a, c, s, layout=layout)
    if name == "reference path":
        return rotary._rotate_generic(arrayrope.backends.namespace(a), a, c, s, layout)
    if layout == "half":
        return a * cf + torch.cat([-a[..., a.shape[-1] // 2:], a[..., : a.shape[-1] // 2]], -1) * sf
    e, o = a[..., 0::2], a[..., 1::2]
    return torch.stack([e * c - o * s, e * s + o * c], -1).flatten(-2)
def hwm():  # this process's peak resident memory (VmHWM; ru_maxrss would include the parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
run(x[:, :1].clone())
before = hwm()
y = run(x)
after = hwm()
print(max(after - before - y.nbytes, 0) / x.nbytes)  # pages freed earlier may be reused: a lower bound
"""


def _torch_rss(shape, layout: str, name: str) -> float | None:
    return _run.rss_peak_extra(_RSS_CODE.format(shape=tuple(shape), layout=layout, name=name))


# --------------------------------------------------------------------------- Dask


class _Sink:
    """A store target that drops what it gets, so the result is computed but never kept."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def dask_case(quick: bool, say) -> list[dict]:
    try:
        import dask
        import dask.array as da
    except ImportError:
        return []
    block = np.random.default_rng(3).standard_normal((1, 32, 2048, 128) if not quick else (1, 8, 1024, 128))
    block = block.astype(np.float32)
    copies = 64 if not quick else 8  # 64 x 32 MiB = 2 GiB, every chunk a view of one block in memory
    x = da.concatenate([da.from_array(block, chunks=block.shape, name=f"block-{i}") for i in range(copies)], axis=0)
    f = arrayrope.rope_frequencies(128)
    s = block.shape[2]
    cos, sin = arrayrope.rope_tables(f, da.arange(s, chunks=s))
    cf = da.concatenate([cos, cos], -1)
    sf = da.concatenate([sin, sin], -1)
    out = []
    with dask.config.set(scheduler="synchronous"):
        for layout in ("half", "interleaved"):
            say(f"dask: {x.nbytes / 2**30:.2f} GiB in {x.npartitions} chunks, {layout}")
            y = arrayrope.apply_rotary(x, cos, sin, layout=layout)
            naive = (_backends.naive_half(_DaskLib, x, cf, sf, 128) if layout == "half"
                     else _backends.naive_interleaved(_DaskLib, x, cos, sin, 128))
            graph, xgraph = y.__dask_graph__(), x.__dask_graph__()
            new_layers = [n for n in graph.layers if n not in xgraph.layers]
            tasks_top = len(graph.layers[y.name])
            variants = {
                "x * 1.0": lambda: da.store(x * 1.0, _Sink(), lock=False),
                "arrayrope": lambda: da.store(arrayrope.apply_rotary(x, cos, sin, layout=layout), _Sink(), lock=False),
                "naive": lambda: da.store(naive, _Sink(), lock=False),
            }
            times = measure(variants, rounds=3, batch_s=0.0, budget_s=60.0)
            rec = _record("dask", "dask", x.shape, layout, "float32", 128, times)
            rec.update({
                "chunks": x.npartitions,
                "tasks_in_rotary_layer": tasks_top,
                "rechunks_x": any(n.startswith("rechunk") and any(
                    d in xgraph.layers for d in graph.dependencies.get(n, ())) for n in new_layers),
                "throughput_GBps": {k: x.nbytes / v / 1e9 for k, v in times.items()},
                "naive_tasks": len(dict(naive.__dask_graph__())) - len(dict(xgraph)),
                "arrayrope_tasks": len(dict(graph)) - len(dict(xgraph)),
            })
            out.append(rec)
    return out


class _DaskLib:
    """The two joins the naive formulas need, for Dask arrays."""

    @staticmethod
    def cat(arrays, axis):
        import dask.array as da

        return da.concatenate(arrays, axis=axis)

    @staticmethod
    def stack(arrays, axis):
        import dask.array as da

        return da.stack(arrays, axis=axis)


# --------------------------------------------------------------------------- tables


def tables(libs, quick: bool, say) -> list[dict]:
    n = 1 << (16 if quick else 20)
    f = arrayrope.rope_frequencies(128)
    out = []
    inv32 = f.inv_freq.astype(np.float32)
    for lib in libs:
        say(f"tables: {lib.name} {n} positions x 64")
        ready = lib.ready
        if lib.name == "numpy":
            variants = {
                "float32 recipe": lambda: _recipe_np(n, inv32),
                "arrayrope": lambda: arrayrope.rope_tables(f, n),
                "reference path": lambda: arrayrope.rope_tables(f, np.arange(n)),
            }
        else:
            xp = arrayrope.backends.namespace(lib.put(np.zeros(1, np.float32)))
            dev = arrayrope.backends.device_of(lib.put(np.zeros(1, np.float32)))
            inv = lib.put(inv32)
            mod = lib.mod

            def recipe(mod=mod, inv=inv):
                a = mod.arange(n, dtype=mod.float32)
                a = a.to(inv.device) if lib.name.startswith("torch") else a
                a = a[:, None] * inv
                return ready(mod.cos(a)), ready(mod.sin(a))

            variants = {
                "float32 recipe": recipe,
                "arrayrope": lambda xp=xp, dev=dev: tuple(ready(t) for t in arrayrope.rope_tables(f, n, xp=xp, device=dev)),
            }
        times = measure(variants, sync=lib.sync, rounds=3, batch_s=0.0, budget_s=60.0)
        errors = {}
        for name, fn in variants.items():
            c, s = fn()
            errors[name] = _table_error(c, s, f.inv_freq)
        rec = {"section": "tables", "backend": lib.name, "positions": n, "pairs": 64, "seconds": times,
               "x_recipe": {k: v / times["float32 recipe"] for k, v in times.items()}, "max_error": errors}
        out.append(rec)
    return out


def _recipe_np(n: int, inv32: np.ndarray):
    a = np.arange(n, dtype=np.float32)[:, None] * inv32
    return np.cos(a), np.sin(a)


def _table_error(c: Any, s: Any, inv: np.ndarray) -> float:
    from arrayrope.testing import to_numpy

    c, s = to_numpy(c).astype(np.float64), to_numpy(s).astype(np.float64)
    worst = 0.0
    for i in range(0, c.shape[0], 1 << 16):
        a = np.arange(i, min(i + (1 << 16), c.shape[0]), dtype=np.float64)[:, None] * inv
        worst = max(worst, float(np.abs(c[i : i + len(a)] - np.cos(a)).max()), float(np.abs(s[i : i + len(a)] - np.sin(a)).max()))
    return worst


# --------------------------------------------------------------------------- sweep for the plot


def sweep_case(libs, quick: bool, say) -> list[dict]:
    lengths = _run.QUICK_SWEEP if quick else _run.SWEEP
    out = []
    rng = np.random.default_rng(4)
    for lib in libs:
        for s in lengths:
            shape = (1, 8, s, 128)
            say(f"sweep: {lib.name} {shape}")
            x_np = rng.standard_normal(shape).astype(np.float32)
            _, cos, sin, _ = _tables(lib, s, 128, "half", "float32")
            x, c, sn = lib.array(x_np, "float32"), lib.array(cos, "float32"), lib.array(sin, "float32")
            cf, sf = lib.array(np.concatenate([cos, cos], -1), "float32"), lib.array(np.concatenate([sin, sin], -1), "float32")
            ready = lib.ready
            variants = {
                "copy": lambda: ready(lib.copy(x)),
                "arrayrope half": lambda: ready(arrayrope.apply_rotary(x, c, sn)),
                "arrayrope interleaved": lambda: ready(arrayrope.apply_rotary(x, c, sn, layout="interleaved")),
                "naive half": lambda: ready(_backends.naive_half(lib, x, cf, sf, 128)),
            }
            if lib.name == "numpy" and _ort.available():
                variants["ORT fused half"] = _ort.fused_rotary(x, c, sn, layout="half")
            times = measure(variants, sync=lib.sync, rounds=3 if quick or s >= 16384 else 5, budget_s=15.0)
            out.append(_record("sweep", lib.name, shape, "both", "float32", 128, times))
    return out
