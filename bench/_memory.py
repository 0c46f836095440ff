"""Peak memory beyond x and the output during one call, each library measured the way it can be.

NumPy reports its allocations to ``tracemalloc``; PyTorch's CPU allocator does
not, so each PyTorch call runs in a fresh interpreter that reports its peak
resident memory; on CUDA the caching allocator keeps its own peak.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

import arrayrope
from arrayrope._lib.rotation import rotate_reference

from ._config import Config, Shape
from ._libs import Lib, naive
from ._records import LAYOUTS, Layout, Record, Say, host_tables


def memory(libs: list[Lib], config: Config, say: Say) -> list[Record]:
    """Peak extra memory on ``config.extras`` for every backend whose library has a method here."""
    out: list[Record] = []
    for lib in libs:
        method = METHODS.get(lib.backend.library)
        if method is not None:
            out.extend(method(lib, config.extras, config, say))
    return out


def _host_tables(shape: Shape) -> tuple[np.ndarray, np.ndarray]:
    cos, sin = host_tables(shape[2], shape[-1])
    return cos.astype(np.float32), sin.astype(np.float32)


def _x(shape: Shape) -> np.ndarray:
    return np.random.default_rng(2).standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- NumPy


def _numpy(lib: Lib, shape: Shape, config: Config, say: Say) -> list[Record]:
    x = _x(shape)
    cos, sin = _host_tables(shape)
    tables = (np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1), cos, sin)
    return [_numpy_layout(lib, x, cos, sin, tables, layout, say) for layout in LAYOUTS]


def _numpy_layout(
    lib: Lib, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, tables: tuple[np.ndarray, ...], layout: Layout, say: Say
) -> Record:
    xp = lib.backend.xp
    fns: dict[str, Callable[[], np.ndarray]] = {
        "arrayrope": lambda: arrayrope.apply_rotary(x, cos, sin, layout=layout),
        "reference path": lambda: rotate_reference(xp, x, cos, sin, layout),
        "naive": lambda: naive(lib.ops, layout, x, (tables[0], tables[1], tables[2], tables[3]), x.shape[-1]),
    }
    peaks = {}
    for name, fn in fns.items():
        say(f"memory: numpy {layout} {name} (tracemalloc)")
        fn()
        tracemalloc.start()
        y = fn()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peaks[name] = (peak - y.nbytes) / x.nbytes
        del y
    return {
        "section": "memory",
        "backend": lib.name,
        "method": "tracemalloc",
        "shape": list(x.shape),
        "layout": layout,
        "extra_over_x": peaks,
    }


# --------------------------------------------------------------------------- PyTorch


def _torch(lib: Lib, shape: Shape, config: Config, say: Say) -> list[Record]:
    if lib.backend.device_label.startswith("cuda"):
        return _torch_cuda(lib, shape)
    if not config.rss:
        return []
    out = []
    for layout in LAYOUTS:
        peaks = {}
        for name in ("arrayrope", "reference path", "naive"):
            say(f"memory: torch {layout} {name} (peak RSS in a fresh process)")
            peaks[name] = rss_peak_extra(_RSS_CODE.format(shape=tuple(shape), layout=layout, name=name))
        out.append(
            {
                "section": "memory",
                "backend": lib.name,
                "method": "peak RSS growth",
                "shape": list(shape),
                "layout": layout,
                "extra_over_x": peaks,
            }
        )
    return out


def _torch_cuda(lib: Lib, shape: Shape) -> list[Record]:
    torch = lib.backend.native
    cos, sin = _host_tables(shape)
    x, c, s = lib.array(_x(shape), "float32"), lib.array(cos, "float32"), lib.array(sin, "float32")
    tables = (torch.cat([c, c], -1), torch.cat([s, s], -1), c, s)
    return [_torch_cuda_layout(lib, x, c, s, tables, layout) for layout in LAYOUTS]


def _torch_cuda_layout(lib: Lib, x: Any, c: Any, s: Any, tables: tuple[Any, ...], layout: Layout) -> Record:
    torch = lib.backend.native
    fns: dict[str, Callable[[], Any]] = {
        "arrayrope": lambda: arrayrope.apply_rotary(x, c, s, layout=layout),
        "reference path": lambda: rotate_reference(lib.backend.xp, x, c, s, layout),
        "naive": lambda: naive(lib.ops, layout, x, tables, x.shape[-1]),
    }
    peaks = {}
    for name, fn in fns.items():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        y = fn()
        torch.cuda.synchronize()
        peaks[name] = (torch.cuda.max_memory_allocated() - base - y.nbytes) / x.nbytes
        del y
    return {
        "section": "memory",
        "backend": lib.name,
        "method": "torch.cuda.max_memory_allocated",
        "shape": list(x.shape),
        "layout": layout,
        "extra_over_x": peaks,
    }


_RSS_CODE = """
import numpy as np, torch, arrayrope
from arrayrope._lib.rotation import rotate_reference
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
        return rotate_reference(arrayrope.backends.namespace(a), a, c, s, layout)
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


def rss_peak_extra(code: str) -> float | None:
    """Run ``code`` in a fresh interpreter; it prints the peak RSS growth in bytes beyond its output."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ, check=False
        )
        return float(done.stdout.strip().splitlines()[-1])
    except Exception:
        return None


#: Backend.library -> how the bench measures peak memory on it.
METHODS: dict[str, Callable[[Lib, Shape, Config, Say], list[Record]]] = {"numpy": _numpy, "torch": _torch}
