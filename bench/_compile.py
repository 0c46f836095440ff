"""torch.compile: RotaryEmbedding eager against compiled (``fullgraph=True``), prefill and decode steps.

Beside them, the naive formula that users compile (Hugging Face's ``x * cos + rotate_half(x) * sin`` on the
rows of tables a model holds, in q's dtype), eager and compiled the same way; for float32 and bfloat16 q and
k. A decode step moves to the next position on every call, as a generation loop does: the compiled step is
one graph for every offset (dynamo makes the int offset dynamic at its second value), whose tables come from
the positions inside the graph; eager steps take the rows of the instance's cached tables. ``graphs`` counts
what dynamo compiled for each variant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import arrayrope

from ._config import Config
from ._libs import Lib, naive
from ._records import Record, Say, host_tables, naive_tables, ratios
from ._timing import measure

#: The first decode position, and how many positions the steps run through before they start over.
START, SPAN = 1000, 1000
#: Calls of each variant before timing: dynamo compiles at the first two, the first runs of a graph cost more.
WARM_CALLS = 5


#: The dtypes of q and k: float32, and bfloat16 (the naive formula then holds bfloat16 tables, as models do).
DTYPES = ("float32", "bfloat16")


def compile_cases(lib: Lib, config: Config, say: Say) -> list[Record]:
    """Prefill on the first prefill shape, then every decode step of ``config``, in each of :data:`DTYPES`;
    PyTorch backends only."""
    if lib.backend.library != "torch":
        return []
    b, h, s, d = config.prefill[0]
    out = []
    for dtype in DTYPES:
        out.append(compile_case(lib, "prefill", (b, h, s, d), (b, max(1, h // 4), s, d), dtype, config, say))
        out += [
            compile_case(lib, "decode", (b, hq, 1, 128), (b, hk, 1, 128), dtype, config, say)
            for b, hq, hk in config.steps
        ]
    return out


def compile_case(
    lib: Lib, phase: str, q_shape: tuple[int, ...], k_shape: tuple[int, ...], dtype: str, config: Config, say: Say
) -> Record:
    torch = lib.backend.native
    say(f"compile: {lib.name} {phase} {dtype} q {q_shape} k {k_shape} ({config.compiler})")
    torch._dynamo.reset()  # each case compiles afresh (the functions below share their code objects)
    counters = torch._dynamo.utils.counters
    rng = np.random.default_rng(6)
    q = lib.array(rng.standard_normal(q_shape), dtype)
    k = lib.array(rng.standard_normal(k_shape), dtype)
    d, s = q_shape[-1], q_shape[2]
    rope = arrayrope.RotaryEmbedding(d)
    cos, sin = host_tables(START + SPAN + s, d)
    full = naive_tables(lib, cos, sin, dtype)
    ops, ready = lib.ops, lib.ops.ready

    def step(q: Any, k: Any, offset: int) -> tuple[Any, Any]:
        q_rot, k_rot = rope(q, k, offset=offset)
        return q_rot, k_rot

    def naive_step(q: Any, k: Any, offset: int) -> tuple[Any, Any]:
        rows = tuple(t[offset : offset + s] for t in full)
        return naive(ops, "half", q, rows, d), naive(ops, "half", k, rows, d)

    def compiled(fn: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
        out: Callable[..., tuple[Any, Any]] = torch.compile(fn, fullgraph=True, backend=config.compiler)
        return out

    graphs: dict[str, int] = {}

    def timed(name: str, fn: Callable[..., tuple[Any, Any]]) -> Callable[[], object]:
        offsets = iter(range(1 << 62))

        def call() -> object:
            before = counters["stats"]["unique_graphs"]
            offset = 0 if phase == "prefill" else START + next(offsets) % SPAN
            got = tuple(ready(a) for a in fn(q, k, offset))
            graphs[name] = graphs.get(name, 0) + counters["stats"]["unique_graphs"] - before
            return got

        return call

    variants = {
        "eager": timed("eager", step),
        "compiled": timed("compiled", compiled(step)),
        "naive": timed("naive", naive_step),
        "naive compiled": timed("naive compiled", compiled(naive_step)),
    }
    for call in variants.values():  # compiled: both graphs, and the first runs of the second, before timing
        for _ in range(WARM_CALLS):
            call()
    times = measure(variants, sync=lib.sync, rounds=config.rounds, batch_s=config.batch_s, budget_s=30.0)
    return {
        "section": "compile",
        "backend": lib.name,
        "phase": phase,
        "shape": list(q_shape),
        "k_shape": list(k_shape),
        "layout": "half",
        "dtype": dtype,
        "compiler": config.compiler,
        "seconds": times,
        "x_eager": ratios(times, "eager"),
        "x_naive": ratios(times, "naive"),
        "graphs": graphs,
    }
