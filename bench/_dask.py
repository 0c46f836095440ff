"""Dask: a chunked array far larger than a chunk, every result streamed to a store that drops it.

Every chunk is a view of one block in memory, so the array can be gigabytes
without taking them; the synchronous scheduler runs the chunks one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import arrayrope

from ._config import Config
from ._libs import Lib, naive
from ._records import LAYOUTS, Layout, Record, Say, record
from ._timing import measure


def dask_case(lib: Lib, config: Config, say: Say) -> list[Record]:
    import dask

    da = lib.backend.native
    block = np.random.default_rng(3).standard_normal(config.dask_block).astype(np.float32)
    x = da.concatenate(
        [da.from_array(block, chunks=block.shape, name=f"block-{i}") for i in range(config.dask_copies)], axis=0
    )
    f = arrayrope.rope_frequencies(block.shape[-1])
    s = block.shape[2]
    cos, sin = arrayrope.rope_tables(f, da.arange(s, chunks=s))
    tables = (da.concatenate([cos, cos], -1), da.concatenate([sin, sin], -1), cos, sin)
    with dask.config.set(scheduler="synchronous"):
        return [_layout(lib, x, cos, sin, tables, layout, config, say) for layout in LAYOUTS]


def _layout(
    lib: Lib, x: Any, cos: Any, sin: Any, tables: tuple[Any, Any, Any, Any], layout: Layout, config: Config, say: Say
) -> Record:
    say(f"dask: {x.nbytes / 2**30:.2f} GiB in {x.npartitions} chunks, {layout}")
    ops, force = lib.ops, lib.ops.ready
    rdim = x.shape[-1]
    y = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    naive_y = naive(ops, layout, x, tables, rdim)
    graph, xgraph = y.__dask_graph__(), x.__dask_graph__()
    new_layers = [n for n in graph.layers if n not in xgraph.layers]
    variants: dict[str, Callable[[], object]] = {
        "x * 1.0": lambda: force(ops.copy(x)),
        "arrayrope": lambda: force(arrayrope.apply_rotary(x, cos, sin, layout=layout)),
        "naive": lambda: force(naive_y),
    }
    times = measure(variants, rounds=min(3, config.rounds), batch_s=0.0, budget_s=60.0)
    return record(
        "dask",
        lib.name,
        x.shape,
        layout,
        "float32",
        rdim,
        times,
        copy="x * 1.0",
        chunks=x.npartitions,
        tasks_in_rotary_layer=len(graph.layers[y.name]),
        rechunks_x=any(
            n.startswith("rechunk") and any(d in xgraph.layers for d in graph.dependencies.get(n, ()))
            for n in new_layers
        ),
        throughput_GBps={k: x.nbytes / v / 1e9 for k, v in times.items()},
        naive_tasks=len(dict(naive_y.__dask_graph__())) - len(dict(xgraph)),
        arrayrope_tasks=len(dict(graph)) - len(dict(xgraph)),
    )
