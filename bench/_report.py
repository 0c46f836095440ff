"""results.json, results.md (the thread settings side by side) and the plot, from the merged records."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

Record = dict[str, Any]
Meta = dict[str, Any]


def write(out: Path, meta: Meta, records: list[Record], targets: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(
        json.dumps({"machine": meta, "targets": targets, "records": records}, indent=1, default=str)
    )
    (out / "results.md").write_text(markdown(meta, records, targets))
    plot([r for r in records if r["section"] == "sweep"], out / "rotary_vs_copy.png", meta)


# --------------------------------------------------------------------------- formatting


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _us(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "n/a"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def settings_of(meta: Meta, records: list[Record]) -> list[str]:
    return list(meta.get("settings") or dict.fromkeys(r.get("threads", "1") for r in records))


def setting_label(meta: Meta, setting: str) -> str:
    """``1 thread`` or ``default (torch: 2 threads)``."""
    if setting != "default":
        return f"{setting} thread{'s' if setting != '1' else ''}"
    pools = (meta.get("runs", {}).get(setting) or {}).get("library threads") or {}
    inner = ", ".join(f"{k}: {v}" for k, v in pools.items())
    return f"default ({inner} threads)" if inner else "default"


def _group(records: list[Record], key: Callable[[Record], Any]) -> dict[Any, dict[str, Record]]:
    """Records of the same workload under each thread setting: key -> {setting: record}."""
    out: dict[Any, dict[str, Record]] = {}
    for r in records:
        out.setdefault(key(r), {})[r.get("threads", "1")] = r
    return out


def _cells(by: dict[str, Record], settings: list[str], fn: Callable[[Record], str]) -> str:
    """One value per thread setting, side by side: ``1.76 / 1.80``."""
    return " / ".join(fn(by[s]) if s in by else "—" for s in settings)


def _at(field: str, key: str, fmt: Callable[[Any], str] = _fmt) -> Callable[[Record], str]:
    """A cell: ``fmt(record[field][key])``, n/a where the record has no such value."""

    def cell(r: Record) -> str:
        return fmt((r.get(field) or {}).get(key))

    return cell


def _sci(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1e}"


def _apply_key(r: Record) -> tuple[Any, ...]:
    return r["backend"], tuple(r["shape"]), r["layout"], r["dtype"], r["rotary_dim"]


# --------------------------------------------------------------------------- results.md


def markdown(meta: Meta, records: list[Record], tgts: list[dict[str, Any]]) -> str:
    settings = settings_of(meta, records)
    labels = [setting_label(meta, s) for s in settings]
    lines = ["# arrayrope benchmark", ""]
    lines.append(
        f"Mode: **{meta['mode']}**, {meta['date']}. Machine: {meta['cpu']}, {meta['cores']} cores; "
        f"{meta['platform']}, Python {meta['python']}."
    )
    libs = ", ".join(
        f"{k} {meta[k]}" for k in ("numpy", "torch", "jax", "dask", "onnxruntime", "onnx", "cupy") if k in meta
    )
    lines += [f"Versions: {libs}.", ""]
    lines += [
        f"Thread settings, each in its own process: **{' / '.join(labels)}**. A count sets "
        "OMP/MKL/OpenBLAS/numexpr threads, XLA's and PyTorch's before the libraries load, and ORT's intra-op "
        "threads; `default` sets nothing, as users meet the libraries. "
        "Cells with several values give them in this order.",
        "",
    ]
    lines += [_load_line(meta.get("load") or {}), ""]
    if meta.get("missing"):
        lines += ["Not measured: " + "; ".join(f"{k} ({v})" for k, v in meta["missing"].items()) + ".", ""]
    lines += [
        "Medians over rounds in one process; variants of a workload run interleaved. "
        "Ratios are to `x.copy()` / `x.clone()` timed in the same rounds unless said otherwise.",
        "",
    ]
    lines += _targets_table(tgts, settings, labels)
    lines += _decode_overhead(records, settings, labels)
    lines += _apply_tables(records, settings)
    lines += _embedding_table(records, settings)
    lines += _compile_table(records, settings)
    lines += _memory_table(records)
    lines += _dask_table(records)
    lines += _tables_table(records, settings)
    lines += _far_table(records)
    lines += _startup_table(records)
    lines += _sweep_table(records, settings)
    return "\n".join(lines)


def _load_line(load: dict[str, Any]) -> str:
    if not load:
        return "Load: not recorded in this run."
    n = load.get("busy processes", 0)
    avg = f"1-minute load average {_fmt(load.get('load average before'))} before"
    if "load average after" in load:
        avg += f", {_fmt(load.get('load average after'))} after"
    if not n:
        return f"Load: **no other busy process** started by the bench ({avg})."
    stayed = "" if load.get("stayed busy", True) else " (one stopped early)"
    each = " each" if n > 1 else ""
    return (
        f"Load: **{n} other busy process{'es' if n > 1 else ''}** (a pure-Python spin loop{each}) ran through "
        f"every measurement{stayed}; {avg}."
    )


def _targets_table(tgts: list[dict[str, Any]], settings: list[str], labels: list[str]) -> list[str]:
    rows = _group_targets(tgts)
    head = "| target | goal | " + " | ".join(f"{lab} | met" for lab in labels) + " |"
    lines = ["## Targets", "", head, "| --- " * (2 + 2 * len(settings)) + "|"]
    for (name, goal), by in rows.items():
        cells = []
        for s in settings:
            t = by.get(s)
            cells += [t["reached"], {True: "yes", False: "no", None: "n/a"}[t["met"]]] if t else ["—", ""]
        lines.append(f"| {name} | {goal} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _group_targets(tgts: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    rows: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for t in tgts:
        rows.setdefault((t["target"], t["goal"]), {})[t.get("threads", "1")] = t
    return rows


def _decode_overhead(records: list[Record], settings: list[str], labels: list[str]) -> list[str]:
    """The per-call cost users meet in decoding: both calls against the naive formula they replace."""
    emb = _group(
        [r for r in records if r["section"] == "embedding" and r["shape"][:2] == [1, 8]],
        lambda r: (r["backend"], r["layout"]),
    )
    app = _group(
        [r for r in records if r["section"] == "apply" and r["shape"] == [1, 8, 1, 128] and r["dtype"] == "float32"],
        lambda r: (r["backend"], r["layout"]),
    )
    if not emb and not app:
        return []
    lines = [
        "## Decode per-call overhead, float32 (" + " / ".join(labels) + ")",
        "",
        "RotaryEmbedding(q, k, offset=1000) with q (1, 8, 1, 128), k (1, 2, 1, 128) against the naive formula "
        "on q and k with this step's cos/sin rows precomputed; apply_rotary on x (1, 8, 1, 128) against the "
        "naive formula on x.",
        "",
        "`new step` moves to the next position on every call; the other call repeats one step, as every layer "
        "sharing an instance does.",
        "",
        "| backend | layout | naive q and k | RotaryEmbedding (× naive) | RotaryEmbedding, new step (× naive) "
        "| naive x | apply_rotary (× naive) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key in dict.fromkeys([*emb, *app]):
        e, a = emb.get(key, {}), app.get(key, {})
        lines.append(
            f"| {key[0]} | {key[1]} | {_cells(e, settings, _at('seconds', 'naive q and k', _us))} | "
            f"{_cells(e, settings, _at('x_naive', 'RotaryEmbedding'))} | "
            f"{_cells(e, settings, _at('x_naive', 'RotaryEmbedding, new step'))} | "
            f"{_cells(a, settings, _at('seconds', 'naive', _us))} | "
            f"{_cells(a, settings, _at('x_naive', 'arrayrope'))} |"
        )
    return [*lines, ""]


def _apply_tables(records: list[Record], settings: list[str]) -> list[str]:
    recs = [r for r in records if r["section"] == "apply"]
    lines: list[str] = []
    for backend in dict.fromkeys(r["backend"] for r in recs):
        groups = _group([r for r in recs if r["backend"] == backend], _apply_key)
        cols = list(
            dict.fromkeys(k for by in groups.values() for r in by.values() for k in r["seconds"] if k != "copy")
        )
        has_ort = any("x_ort" in r for by in groups.values() for r in by.values())
        extra = ["arrayrope (× naive)"] + (["arrayrope (× ORT fused)"] if has_ort else [])
        lines += [
            f"## Rotary application: {backend}",
            "",
            "| shape | layout | rotary | dtype | copy | "
            + " | ".join(f"{c} (× copy)" for c in cols)
            + " | "
            + " | ".join(extra)
            + " |",
            "| --- " * (5 + len(cols) + len(extra)) + "|",
        ]
        for (_, shape, layout, dtype, rdim), by in groups.items():
            cells = [_cells(by, settings, _at("x_copy", c)) for c in cols]
            cells.append(_cells(by, settings, _at("x_naive", "arrayrope")))
            if has_ort:
                cells.append(_cells(by, settings, _at("x_ort", "arrayrope")))
            lines.append(
                f"| {shape} | {layout} | {rdim} | {dtype} | "
                f"{_cells(by, settings, _at('seconds', 'copy', _us))} | " + " | ".join(cells) + " |"
            )
        lines.append("")
    return lines


def _embedding_table(records: list[Record], settings: list[str]) -> list[str]:
    groups = _group(
        [r for r in records if r["section"] == "embedding"],
        lambda r: (r["backend"], tuple(r["shape"]), tuple(r.get("k_shape", ())), r["layout"]),
    )
    if not groups:
        return []
    names: tuple[str, ...] = (
        "RotaryEmbedding",
        "RotaryEmbedding, new step",
        "naive twice",
        "apply_rotary twice",
        "copy q and k",
    )
    if any("RotaryEmbedding out=" in r["seconds"] for by in groups.values() for r in by.values()):
        names = (*names[:1], "RotaryEmbedding out=", *names[1:])
    lines = [
        "## Decode steps: RotaryEmbedding(q, k, offset=1000), float32",
        "",
        "Ratios to the naive formula on q and k with the step's rows precomputed; `naive twice` and "
        "`apply_rotary twice` look the rows up in the full tables in the call.",
        "",
        "| backend | q | k | layout | naive q and k | " + " | ".join(f"{n} (× naive)" for n in names) + " |",
        "| --- " * (5 + len(names)) + "|",
    ]
    for (backend, q, k, layout), by in groups.items():
        cells = [_cells(by, settings, _at("x_naive", n)) for n in names]
        lines.append(
            f"| {backend} | {q} | {k} | {layout} | "
            f"{_cells(by, settings, _at('seconds', 'naive q and k', _us))} | " + " | ".join(cells) + " |"
        )
    return [*lines, ""]


def _compile_table(records: list[Record], settings: list[str]) -> list[str]:
    groups = _group(
        [r for r in records if r["section"] == "compile"],
        lambda r: (
            r["backend"],
            r["phase"],
            r.get("dtype", "float32"),
            tuple(r["shape"]),
            tuple(r["k_shape"]),
            r["compiler"],
        ),
    )
    if not groups:
        return []
    names = ("compiled", "naive", "naive compiled")
    lines = [
        "## torch.compile: RotaryEmbedding eager and compiled (fullgraph=True), half-split",
        "",
        "Ratios to the eager call. Decode steps move to the next position on every call (offset 1000 on); "
        "`naive` is Hugging Face's formula on the rows of tables of q's dtype held beside it, compiled the "
        "same way; `graphs` is what dynamo compiled for the compiled variants over all the calls.",
        "",
        "| backend | phase | dtype | q | k | compiler | eager | "
        + " | ".join(f"{n} (× eager)" for n in names)
        + " | graphs: compiled, naive compiled |",
        "| --- " * (8 + len(names)) + "|",
    ]
    for (backend, phase, dtype, q, k, compiler), by in groups.items():
        cells = [_cells(by, settings, _at("x_eager", n)) for n in names]
        graphs = _cells(
            by, settings, lambda r: f"{r['graphs'].get('compiled', 0)}, {r['graphs'].get('naive compiled', 0)}"
        )
        lines.append(
            f"| {backend} | {phase} | {dtype} | {q} | {k} | {compiler} | "
            f"{_cells(by, settings, _at('seconds', 'eager', _us))} | " + " | ".join(cells) + f" | {graphs} |"
        )
    return [*lines, ""]


def _memory_table(records: list[Record]) -> list[str]:
    mem = [r for r in records if r["section"] == "memory"]
    if not mem:
        return []
    lines = [
        "## Peak extra memory beyond x and the output (× size of x)",
        "",
        "| backend | method | shape | layout | " + " | ".join(mem[0]["extra_over_x"]) + " |",
        "| --- " * (4 + len(mem[0]["extra_over_x"])) + "|",
    ]
    lines += [
        f"| {r['backend']} | {r['method']} | {tuple(r['shape'])} | {r['layout']} | "
        + " | ".join(_fmt(v, 3) for v in r["extra_over_x"].values())
        + " |"
        for r in mem
    ]
    return [*lines, ""]


def _dask_table(records: list[Record]) -> list[str]:
    dask = [r for r in records if r["section"] == "dask"]
    if not dask:
        return []
    lines = [
        "## Dask (synchronous scheduler, results streamed to a discarding store)",
        "",
        "| shape | chunks | layout | x * 1.0 | arrayrope | naive | GB/s x*1.0 / arrayrope / naive "
        "| tasks in rotary layer | graph tasks arrayrope / naive | x rechunked |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in dask:
        s, g = r["seconds"], r["throughput_GBps"]
        lines.append(
            f"| {tuple(r['shape'])} | {r['chunks']} | {r['layout']} | {_us(s['x * 1.0'])} | "
            f"{_us(s['arrayrope'])} | {_us(s['naive'])} | {_fmt(g['x * 1.0'])} / {_fmt(g['arrayrope'])} / "
            f"{_fmt(g['naive'])} | {r['tasks_in_rotary_layer']} | {r['arrayrope_tasks']} / "
            f"{r['naive_tasks']} | {r['rechunks_x']} |"
        )
    return [*lines, ""]


def _tables_table(records: list[Record], settings: list[str]) -> list[str]:
    groups = _group([r for r in records if r["section"] == "tables"], lambda r: (r["backend"], r["positions"]))
    if not groups:
        return []
    lines = [
        "## Tables: cos/sin for positions 0..N-1, 64 frequencies",
        "",
        "| backend | N | variant | time | × float32 recipe | max error vs float64 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (backend, n), by in groups.items():
        for k in dict.fromkeys(k for r in by.values() for k in r["seconds"]):
            time = _cells(by, settings, _at("seconds", k, _us))
            ratio = _cells(by, settings, _at("x_recipe", k))
            error = _cells(by, settings, _at("max_error", k, _sci))
            lines.append(f"| {backend} | {n} | {k} | {time} | {ratio} | {error} |")
    return [*lines, ""]


def _far_table(records: list[Record]) -> list[str]:
    far = [r for r in records if r["section"] == "far"]
    if not far:
        return []
    lines = [
        "## A far position: a fresh RotaryEmbedding's first decode step",
        "",
        "q (1, 8, 1, 128), k (1, 2, 1, 128), float32; peak memory of the first call from tracemalloc (NumPy).",
        "",
        "| backend | offset | warm step | fresh instance, first step | × warm | peak memory |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in far:
        key = f"fresh, offset {r['offset']}"
        peak = "n/a" if r.get("peak_MB") is None else f"{r['peak_MB']:.1f} MB"
        lines.append(
            f"| {r['backend']} | {r['offset']} | {_us(r['seconds']['warm decode step'])} | "
            f"{_us(r['seconds'][key])} | {_fmt(r['x_warm'][key])} | {peak} |"
        )
    return [*lines, ""]


def _startup_table(records: list[Record]) -> list[str]:
    rows = [r for r in records if r["section"] == "startup"]
    if not rows:
        return []
    r = rows[0]
    s = r["seconds"]
    lines = [
        f"## Start-up (fresh interpreters, wall time, medians of {r['rounds']} interleaved rounds)",
        "",
        "| variant | time | note |",
        "| --- | --- | --- |",
        f"| python -c pass | {_us(s['python'])} | |",
        f"| import numpy | {_us(s['import numpy'])} | |",
        f"| import arrayrope | {_us(s['import arrayrope'])} | {r['import_over_numpy_ms']:+.0f} ms over numpy; "
        f"{r['modules_beyond_numpy']} modules beyond numpy's |",
        f"| pytest, one trivial test | {_us(s['pytest'])} | plugin {r['plugin_ms']:+.0f} ms |",
        f"| pytest -p no:arrayrope | {_us(s['pytest -p no:arrayrope'])} | |",
    ]
    return [*lines, ""]


def _sweep_table(records: list[Record], settings: list[str]) -> list[str]:
    groups = _group([r for r in records if r["section"] == "sweep"], lambda r: (r["backend"], r["shape"][2]))
    if not groups:
        return []
    cols = list(dict.fromkeys(k for by in groups.values() for r in by.values() for k in r["seconds"] if k != "copy"))
    lines = [
        "## Sweep over sequence length, (1, 8, S, 128) float32 (plot: rotary_vs_copy.png)",
        "",
        "| backend | S | copy | " + " | ".join(f"{c} (× copy)" for c in cols) + " |",
        "| --- " * (3 + len(cols)) + "|",
    ]
    for (backend, s), by in groups.items():
        lines.append(
            f"| {backend} | {s} | {_cells(by, settings, _at('seconds', 'copy', _us))} | "
            + " | ".join(_cells(by, settings, _at("x_copy", c)) for c in cols)
            + " |"
        )
    return [*lines, ""]


# --------------------------------------------------------------------------- plot


def plot(sweep: list[Record], path: Path, meta: Meta) -> None:
    """Time over a copy against sequence length: one panel per thread setting."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    settings = settings_of(meta, sweep)
    if not sweep or not settings:
        return
    # one panel per thread setting, stacked: the figure keeps a page's width, and its text stays legible there
    fig, axes = plt.subplots(len(settings), 1, figsize=(8, 6.2 * len(settings)), sharex=False, squeeze=False)
    for ax, setting in zip(axes[:, 0], settings, strict=True):
        _panel(ax, [r for r in sweep if r.get("threads", "1") == setting])
        ax.set_title(f"{setting_label(meta, setting)}, {meta['cpu'][:40]}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel(ax: Any, sweep: list[Record]) -> None:
    """One line per backend and variant, each its own colour; the variant also by its line style."""
    styles = {"arrayrope half": "-", "arrayrope interleaved": "--", "naive half": ":", "ORT fused half": "-."}
    series = [
        (backend, variant)
        for backend in dict.fromkeys(r["backend"] for r in sweep)
        for variant in styles
        if any(not math.isnan(r["x_copy"].get(variant, math.nan)) for r in sweep if r["backend"] == backend)
    ]
    palette = [f"C{i}" for i in range(10)] + ["black", "olive", "teal", "navy"]
    for (backend, variant), color in zip(series, palette * (1 + len(series) // len(palette)), strict=False):
        recs = [r for r in sweep if r["backend"] == backend]
        xs = [r["shape"][2] for r in recs]
        ys = [r["x_copy"].get(variant, math.nan) for r in recs]
        ax.plot(xs, ys, styles[variant], marker="o", ms=3, color=color, label=f"{backend}: {variant}")
    from matplotlib.ticker import FormatStrFormatter, LogLocator

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # values readable off the axis
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter(""))
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("sequence length S, x = (1, 8, S, 128) float32", fontsize=10)
    ax.set_ylabel("time / time of a copy of x\n(lower is faster)", fontsize=10)
    ax.tick_params(labelsize=10)
    ax.legend(fontsize=9, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # below: the plot keeps the width
    ax.grid(True, which="both", alpha=0.3)
