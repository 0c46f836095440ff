"""Targets, the Markdown table and the plot from the bench's records."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _us(seconds: float) -> str:
    if seconds is None or math.isnan(seconds):
        return "n/a"
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} µs"


def _find(records, **keys) -> list[dict]:
    return [r for r in records if all(r.get(k) == v for k, v in keys.items())]


def targets(records: list[dict], prefill: list[tuple]) -> list[dict]:
    """Each target of the speed work: the figure reached and whether it is met."""
    out = []

    def add(name: str, goal: str, figure: str, met: bool | None) -> None:
        out.append({"target": name, "goal": goal, "reached": figure, "met": met})

    for layout in ("half", "interleaved"):
        recs = [r for shape in prefill for r in _find(records, section="apply", backend="numpy", shape=list(shape),
                                                      layout=layout, dtype="float32", rotary_dim=shape[-1])]
        if recs:
            worst = max(r["x_copy"]["arrayrope"] for r in recs)
            add(f"NumPy prefill, {layout}", "≤ 2.0× x.copy()",
                f"{', '.join(_fmt(r['x_copy']['arrayrope']) for r in recs)}× copy ({len(recs)} shapes)", worst <= 2.0)
            if any("ORT fused" in r["x_copy"] for r in recs):
                ours = [r["seconds"]["arrayrope"] / r["seconds"]["ORT fused"] for r in recs]
                add(f"NumPy prefill, {layout}, vs ONNX Runtime", "ahead of ORT's fused kernel (same data, same run)",
                    f"{', '.join(_fmt(v) for v in ours)}× ORT's time (ORT {', '.join(_fmt(r['x_copy']['ORT fused']) for r in recs)}× copy)",
                    all(v < 1.0 for v in ours))
    mem = _find(records, section="memory", backend="numpy")
    if mem:
        worst = max(r["extra_over_x"]["arrayrope"] for r in mem)
        add("NumPy prefill peak extra memory", "≤ 0.5× size of x", f"{worst:.3f}× x (tracemalloc, both layouts)", worst <= 0.5)
    recs = [r for shape in prefill for layout in ("half", "interleaved")
            for r in _find(records, section="apply", backend="torch", shape=list(shape), layout=layout,
                           dtype="float32", rotary_dim=shape[-1])]
    if recs:
        worst = max(r["x_copy"]["arrayrope"] for r in recs)
        add("PyTorch CPU prefill", "≤ 3.0× x.clone()", f"{worst:.2f}× clone (worst of {len(recs)})", worst <= 3.0)
    recs = _find(records, section="apply", backend="numpy", dtype="float32")
    recs = [r for r in recs if r["shape"][2] == 1]
    if recs:
        worst = max(r["seconds"]["arrayrope"] / r["seconds"]["naive"] for r in recs)
        add("Decode apply_rotary (NumPy)", "≤ naive NumPy formula",
            f"{worst:.2f}× naive (worst of {len(recs)}: 2 shapes × 2 layouts)", worst <= 1.0)
    recs = _find(records, section="embedding", backend="numpy")
    if recs:
        worst = max(r["x_naive"]["RotaryEmbedding"] for r in recs)
        add("Decode RotaryEmbedding q, k, offset (NumPy)", "≤ 2× naive formula applied twice",
            f"{worst:.2f}× naive twice (worst of {len(recs)})", worst <= 2.0)
    recs = _find(records, section="far", backend="numpy")
    if recs:
        r = recs[0]
        first = r["first_call"]["offset 2**31"]
        add("Decode at offset 2**31 (NumPy RotaryEmbedding)", "< 1 s and < 200 MB extra, first call",
            f"{_us(first['seconds'])}, {first['peak_MB']:.2f} MB peak; warm calls {r['x_warm']['offset 2**31']:.1f}× "
            "a decode at offset 1000", first["seconds"] < 1.0 and first["peak_MB"] < 200)
    recs = _find(records, section="dask")
    if recs:
        worst = min(r["seconds"]["x * 1.0"] / r["seconds"]["arrayrope"] for r in recs)
        one = all(r["tasks_in_rotary_layer"] == r["chunks"] and not r["rechunks_x"] for r in recs)
        add("Dask 2 GiB chunked", "blockwise, one task per chunk, no rechunk; ≥ 0.5× throughput of x * 1.0",
            f"{worst:.2f}× throughput of x * 1.0; one task per chunk, x not rechunked: {one}", worst >= 0.5 and one)
    recs = _find(records, section="tables", backend="numpy")
    if recs:
        r = recs[0]
        err = r["max_error"]["arrayrope"]
        add(f"Tables {r['positions']} × {r['pairs']} (NumPy)", "error ≤ 1e-6, ≤ 2× float32 recipe",
            f"{r['x_recipe']['arrayrope']:.2f}× recipe, max error {err:.1e} (recipe {r['max_error']['float32 recipe']:.1e})",
            err <= 1e-6 and r["x_recipe"]["arrayrope"] <= 2.0)
    return out


def markdown(meta: dict, records: list[dict], tgts: list[dict]) -> str:
    lines = ["# arrayrope benchmark", ""]
    lines.append(f"Mode: **{meta['mode']}**, {meta['date']}. Machine: {meta['cpu']}, {meta['cores']} cores, "
                 f"**{meta['threads']} thread(s)**; {meta['platform']}, Python {meta['python']}.")
    libs = ", ".join(f"{k} {meta[k]}" for k in ("numpy", "torch", "jax", "dask", "onnxruntime", "onnx", "cupy") if k in meta)
    lines += [f"Versions: {libs}.", ""]
    if meta.get("missing"):
        lines += ["Not measured: " + "; ".join(f"{k} ({v})" for k, v in meta["missing"].items()) + ".", ""]
    lines += ["Medians over rounds in one process; variants of a workload run interleaved. "
              "Ratios are to `x.copy()` / `x.clone()` timed in the same rounds unless said otherwise.", ""]
    lines += ["## Targets", "", "| target | goal | reached | met |", "| --- | --- | --- | --- |"]
    for t in tgts:
        lines.append(f"| {t['target']} | {t['goal']} | {t['reached']} | {'yes' if t['met'] else 'no'} |")
    lines.append("")
    apply_recs = [r for r in records if r["section"] == "apply"]
    for backend in dict.fromkeys(r["backend"] for r in apply_recs):
        recs = [r for r in apply_recs if r["backend"] == backend]
        cols = list(dict.fromkeys(k for r in recs for k in r["seconds"] if k != "copy"))
        lines += [f"## Rotary application: {backend}", "",
                  "| shape | layout | rotary | dtype | copy | " + " | ".join(f"{c} (× copy)" for c in cols) + " |",
                  "| --- " * (5 + len(cols)) + "|"]
        for r in recs:
            cells = [_fmt(r["x_copy"].get(c)) for c in cols]
            lines.append(f"| {tuple(r['shape'])} | {r['layout']} | {r['rotary_dim']} | {r['dtype']} | "
                         f"{_us(r['seconds']['copy'])} | " + " | ".join(cells) + " |")
        lines.append("")
    emb = [r for r in records if r["section"] == "embedding"]
    if emb:
        lines += ["## Decode step: RotaryEmbedding(q, k, offset=1000), q (B, 32, 1, 128), k (B, 8, 1, 128)", "",
                  "| backend | B | layout | naive twice | RotaryEmbedding (× naive) | apply_rotary twice (× naive) | copy q, k (× naive) |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in emb:
            n = r["x_naive"]
            lines.append(f"| {r['backend']} | {r['shape'][0]} | {r['layout']} | {_us(r['seconds']['naive twice'])} | "
                         f"{_fmt(n['RotaryEmbedding'])} | {_fmt(n['apply_rotary twice'])} | {_fmt(n['copy q and k'])} |")
        lines.append("")
    far = [r for r in records if r["section"] == "far"]
    if far:
        lines += ["## Decode step far beyond the table cache: RotaryEmbedding(128), q (1, 32, 1, 128), "
                  "k (1, 8, 1, 128)", "",
                  "| backend | offset 1000 (warm) | offset 2**31 (× warm) | offset 2**62 (× warm) "
                  "| first call at 2**31 |",
                  "| --- | --- | --- | --- | --- |"]
        for r in far:
            f = r["first_call"]["offset 2**31"]
            lines.append(f"| {r['backend']} | {_us(r['seconds']['offset 1000 (warm)'])} | "
                         f"{_fmt(r['x_warm']['offset 2**31'])} | {_fmt(r['x_warm']['offset 2**62'])} | "
                         f"{_us(f['seconds'])}, {f['peak_MB']:.2f} MB |")
        lines.append("")
    mem = [r for r in records if r["section"] == "memory"]
    if mem:
        lines += ["## Peak extra memory beyond x and the output (× size of x)", "",
                  "| backend | method | shape | layout | " + " | ".join(mem[0]["extra_over_x"]) + " |",
                  "| --- " * (4 + len(mem[0]["extra_over_x"])) + "|"]
        for r in mem:
            lines.append(f"| {r['backend']} | {r['method']} | {tuple(r['shape'])} | {r['layout']} | "
                         + " | ".join(f"{k}: {_fmt(v, 3)}" if r['backend'] == 'torch-cuda' else _fmt(v, 3)
                                      for k, v in r["extra_over_x"].items()) + " |")
        lines.append("")
    dask = [r for r in records if r["section"] == "dask"]
    if dask:
        lines += ["## Dask (synchronous scheduler, results streamed to a discarding store)", "",
                  "| shape | chunks | layout | x * 1.0 | arrayrope | naive | GB/s x*1.0 / arrayrope / naive | tasks in rotary layer | graph tasks arrayrope / naive | x rechunked |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in dask:
            s, g = r["seconds"], r["throughput_GBps"]
            lines.append(f"| {tuple(r['shape'])} | {r['chunks']} | {r['layout']} | {_us(s['x * 1.0'])} | {_us(s['arrayrope'])} | "
                         f"{_us(s['naive'])} | {_fmt(g['x * 1.0'])} / {_fmt(g['arrayrope'])} / {_fmt(g['naive'])} | "
                         f"{r['tasks_in_rotary_layer']} | {r['arrayrope_tasks']} / {r['naive_tasks']} | {r['rechunks_x']} |")
        lines.append("")
    tab = [r for r in records if r["section"] == "tables"]
    if tab:
        lines += ["## Tables: cos/sin for positions 0..N-1, 64 frequencies", "",
                  "| backend | N | variant | time | × float32 recipe | max error vs float64 |", "| --- | --- | --- | --- | --- | --- |"]
        for r in tab:
            for k, v in r["seconds"].items():
                lines.append(f"| {r['backend']} | {r['positions']} | {k} | {_us(v)} | {_fmt(r['x_recipe'][k])} | {r['max_error'][k]:.1e} |")
        lines.append("")
    sweep = [r for r in records if r["section"] == "sweep"]
    if sweep:
        cols = list(dict.fromkeys(k for r in sweep for k in r["seconds"] if k != "copy"))
        lines += ["## Sweep over sequence length, (1, 8, S, 128) float32 (plot: rotary_vs_copy.png)", "",
                  "| backend | S | copy | " + " | ".join(f"{c} (× copy)" for c in cols) + " |", "| --- " * (3 + len(cols)) + "|"]
        for r in sweep:
            lines.append(f"| {r['backend']} | {r['shape'][2]} | {_us(r['seconds']['copy'])} | "
                         + " | ".join(_fmt(r["x_copy"].get(c)) for c in cols) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(sweep: list[dict], path: Path, meta: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"arrayrope half": "-", "arrayrope interleaved": "--", "naive half": ":", "ORT fused half": "-."}
    colors = {}
    for backend in dict.fromkeys(r["backend"] for r in sweep):
        recs = [r for r in sweep if r["backend"] == backend]
        xs = [r["shape"][2] for r in recs]
        for variant, style in styles.items():
            ys = [r["x_copy"].get(variant, math.nan) for r in recs]
            if all(math.isnan(y) for y in ys):
                continue
            line, = ax.plot(xs, ys, style, marker="o", ms=3, color=colors.get(backend),
                            label=f"{backend}: {variant}")
            colors.setdefault(backend, line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("sequence length S, x = (1, 8, S, 128) float32")
    ax.set_ylabel("time / copy of x (same backend, same run)")
    ax.set_title(f"Rotary application relative to a copy ({meta['threads']} thread, {meta['cpu'][:40]})")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
