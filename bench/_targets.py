"""The targets of the speed work, computed from the records: the figure reached and whether it is met.

Each target is evaluated per thread setting (``threads`` of each row); rows whose
figures were not measured under a setting are left out for it. Nothing here
asserts: a target not met is a row with ``met: False``, one that could not be
evaluated in this run ``met: None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Record = dict[str, Any]
Target = dict[str, Any]

#: The decode step whose RotaryEmbedding call is held to 1.5x the naive formula: q heads, kv heads.
STEP = (1, 8, 2)


def _fmt(v: float) -> str:
    return "n/a" if v is None or math.isnan(v) else f"{v:.2f}"


def _find(records: list[Record], **keys: Any) -> list[Record]:
    return [r for r in records if all(r.get(k) == v for k, v in keys.items())]


def _over(r: Record, variant: str, base: str) -> float:
    """``variant``'s time over ``base``'s in one record (nan where either is missing)."""
    s = r["seconds"]
    a, b = s.get(variant, math.nan), s.get(base, math.nan)
    return a / b if b and not math.isnan(b) else math.nan


def _worst(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return max(finite) if len(finite) == len(values) and finite else math.nan


def targets(records: list[Record], meta: dict[str, Any]) -> list[Target]:
    """Every target under every thread setting of the run."""
    prefill = [list(p) for p in meta.get("prefill", [])]
    settings = meta.get("settings") or list(dict.fromkeys(r.get("threads", "1") for r in records))
    busy = (meta.get("load") or {}).get("busy processes", 0)
    out: list[Target] = []
    loaded: list[Target] = []
    for setting in settings:
        recs = [r for r in records if r.get("threads", "1") == setting]

        def add(name: str, goal: str, figure: str, met: bool | None, setting: str = setting) -> None:
            out.append({"target": name, "goal": goal, "threads": setting, "reached": figure, "met": met})

        _speed_targets(recs, prefill, add)
        _user_targets(recs, add)
        decode = _decode_step(recs)
        if decode is not None:
            add(*decode)
        slower = _never_slower(recs)
        if slower is not None:
            add(*slower)
        name, goal, figure, met = _with_load(busy, decode, slower)
        loaded.append({"target": name, "goal": goal, "threads": setting, "reached": figure, "met": met})
    return out + loaded


Add = Callable[..., None]


def _speed_targets(records: list[Record], prefill: list[list[int]], add: Add) -> None:
    """The targets of the speed work on one thread setting's records."""
    for layout in ("half", "interleaved"):
        recs = [
            r
            for shape in prefill
            for r in _find(
                records,
                section="apply",
                backend="numpy",
                shape=shape,
                layout=layout,
                dtype="float32",
                rotary_dim=shape[-1],
            )
        ]
        if recs:
            worst = _worst([r["x_copy"]["arrayrope"] for r in recs])
            add(
                f"NumPy prefill, {layout}",
                "≤ 2.0× x.copy()",
                f"{', '.join(_fmt(r['x_copy']['arrayrope']) for r in recs)}× copy ({len(recs)} shapes)",
                worst <= 2.0,
            )
            if all("ORT fused" in r["seconds"] for r in recs):
                ours = [_over(r, "arrayrope", "ORT fused") for r in recs]
                add(
                    f"NumPy prefill, {layout}, vs ONNX Runtime",
                    "ahead of ORT's fused kernel (same data, same run)",
                    f"{', '.join(_fmt(v) for v in ours)}× ORT's time "
                    f"(ORT {', '.join(_fmt(r['x_copy']['ORT fused']) for r in recs)}× copy)",
                    all(v < 1.0 for v in ours),
                )
            _out_target(recs, layout, add)
    mem = _find(records, section="memory", backend="numpy")
    if mem:
        worst = max(r["extra_over_x"]["arrayrope"] for r in mem)
        add(
            "NumPy prefill peak extra memory",
            "≤ 0.5× size of x",
            f"{worst:.3f}× x (tracemalloc, both layouts)",
            worst <= 0.5,
        )
    recs = [
        r
        for shape in prefill
        for layout in ("half", "interleaved")
        for r in _find(
            records, section="apply", backend="torch", shape=shape, layout=layout, dtype="float32", rotary_dim=shape[-1]
        )
    ]
    if recs:
        worst = _worst([r["x_copy"]["arrayrope"] for r in recs])
        add("PyTorch CPU prefill", "≤ 3.0× x.clone()", f"{_fmt(worst)}× clone (worst of {len(recs)})", worst <= 3.0)
    recs = [r for r in _find(records, section="apply", backend="numpy", dtype="float32") if r["shape"][2] == 1]
    if recs:
        worst = _worst([_over(r, "arrayrope", "naive") for r in recs])
        shapes = len({tuple(r["shape"]) for r in recs})
        add(
            "Decode apply_rotary (NumPy)",
            "≤ naive NumPy formula",
            f"{_fmt(worst)}× naive (worst of {len(recs)}: {shapes} shape{'s' if shapes > 1 else ''} × 2 layouts)",
            worst <= 1.0,
        )
    recs = [r for r in _find(records, section="apply", backend="torch", dtype="float32") if r["shape"][2] == 1]
    if recs:
        worst = _worst([_over(r, "arrayrope", "naive") for r in recs])
        add(
            "Decode apply_rotary (PyTorch)",
            "≤ 1.3× naive formula",
            f"{_fmt(worst)}× naive (worst of {len(recs)})",
            worst <= 1.3,
        )
    recs = _find(records, section="embedding", backend="numpy")
    if recs:
        worst = _worst([_over(r, "RotaryEmbedding", "naive twice") for r in recs])
        add(
            "Decode RotaryEmbedding q, k, offset (NumPy)",
            "≤ 2× naive formula applied twice",
            f"{_fmt(worst)}× naive twice (worst of {len(recs)})",
            worst <= 2.0,
        )
    recs = _find(records, section="dask")
    if recs:
        worst = min(_over(r, "x * 1.0", "arrayrope") for r in recs)
        one = all(r["tasks_in_rotary_layer"] == r["chunks"] and not r["rechunks_x"] for r in recs)
        add(
            "Dask 2 GiB chunked",
            "blockwise, one task per chunk, no rechunk; ≥ 0.5× throughput of x * 1.0",
            f"{_fmt(worst)}× throughput of x * 1.0; one task per chunk, x not rechunked: {one}",
            worst >= 0.5 and one,
        )
    recs = _find(records, section="tables", backend="numpy")
    if recs:
        r = recs[0]
        err = r["max_error"]["arrayrope"]
        add(
            f"Tables {r['positions']} × {r['pairs']} (NumPy)",
            "error ≤ 1e-6, ≤ 2× float32 recipe",
            f"{r['x_recipe']['arrayrope']:.2f}× recipe, max error {err:.1e} "
            f"(recipe {r['max_error']['float32 recipe']:.1e})",
            err <= 1e-6 and r["x_recipe"]["arrayrope"] <= 2.0,
        )


_DECODE_NAME = "Decode RotaryEmbedding, q (1, 8, 1, 128), k (1, 2, 1, 128)"
_SLOWER_NAME = "Never slower than naive"
LOW = ("float16", "bfloat16")


#: The out= variants of the apply section: into a buffer, into x itself, into a KV cache's slice.
OUT_VARIANTS = {"arrayrope out=": "buffer", "arrayrope in place": "in place", "arrayrope into cache slice": "cache"}


def _out_target(recs: list[Record], layout: str, add: Add) -> None:
    """NumPy prefill with out=: each destination against the fresh output and ORT's fused kernel (worst shape)."""
    if not all(v in r["seconds"] for r in recs for v in OUT_VARIANTS):
        return
    fresh = {name: _worst([_over(r, v, "arrayrope") for r in recs]) for v, name in OUT_VARIANTS.items()}
    figure = ", ".join(f"{name} {_fmt(v)}" for name, v in fresh.items()) + "× the fresh output"
    met = all(v <= 0.8 for v in fresh.values())
    goal = "≤ 0.8× the fresh output (worst shape)"
    if all("ORT fused" in r["seconds"] for r in recs):
        ort = {name: _worst([_over(r, v, "ORT fused") for r in recs]) for v, name in OUT_VARIANTS.items()}
        figure += "; " + ", ".join(f"{name} {_fmt(v)}" for name, v in ort.items()) + "× ORT's time"
        met = met and all(v < 1.0 for v in ort.values())
        goal += ", ahead of ORT's fused kernel"
    add(f"NumPy prefill, {layout}, out=", goal, figure, met)


def _user_targets(records: list[Record], add: Add) -> None:
    """Low precision against a copy; start-up and the pytest plugin; a far first position."""
    recs = [r for r in _find(records, section="apply") if r["dtype"] in LOW and r["backend"] in ("numpy", "torch")]
    if recs:
        worst = _worst([r["x_copy"]["arrayrope"] for r in recs])
        figure = "; ".join(f"{r['backend']} {r['dtype']} {r['layout']} {_fmt(r['x_copy']['arrayrope'])}" for r in recs)
        add("float16 / bfloat16 prefill", "≤ 4× a copy (NumPy, PyTorch CPU)", f"{figure}× copy", worst <= 4.0)
    for r in _find(records, section="startup"):
        extra, heavy = r["import_over_numpy_ms"], r["heavy_modules"]
        add(
            "Start-up: import arrayrope",
            "≤ import numpy + 60 ms; no optional backend, ONNX, numpy.testing/f2py",
            f"+{extra:.0f} ms over import numpy ({r['seconds']['import numpy'] * 1e3:.0f} ms, "
            f"{r['rounds']} interpreters); {r['modules_beyond_numpy']} modules beyond numpy's; "
            f"heavy modules: {', '.join(heavy) or 'none'}",
            extra <= 60 and not heavy,
        )
        plugin = r["plugin_ms"]
        add(
            "pytest plugin, no test asking for its fixtures",
            "≤ 40 ms; imports no backend",
            f"{plugin:+.0f} ms against -p no:arrayrope (pytest {r['seconds']['pytest'] * 1e3:.0f} ms); "
            f"loads {', '.join(r['plugin_loads']) or 'neither arrayrope nor numpy'}",
            plugin <= 40 and not r["plugin_loads"],
        )
    for r in _find(records, section="compile", phase="prefill"):
        eager, compiled = r["x_naive"].get("eager", math.nan), _over(r, "compiled", "naive compiled")
        add(
            f"Prefill against the naive formula ({r['backend']}, {r.get('dtype', 'float32')}, {r['compiler']})",
            "RotaryEmbedding ≤ the naive formula on tables of q's dtype, eager and compiled alike",
            f"eager {_fmt(eager)}×, compiled {_fmt(compiled)}× (naive compiled)",
            eager <= 1.0 and compiled <= 1.0,
        )
    for r in _find(records, section="compile", phase="decode", shape=[STEP[0], STEP[1], 1, 128]):
        ratio = r["x_eager"].get("compiled", math.nan)
        graphs = r["graphs"].get("compiled", 0)
        add(
            f"Compiled decode step ({r['backend']}, {r.get('dtype', 'float32')}, {r['compiler']})",
            "torch.compile(fullgraph=True) step with a new offset each call ≤ eager; ≤ 2 graphs",
            f"{_fmt(ratio)}× eager; {graphs} graph{'s' if graphs != 1 else ''} for every offset",
            ratio <= 1.0 and graphs <= 2,
        )
    for r in _find(records, section="far"):
        ratio = r["x_warm"].get(f"fresh, offset {r['offset']}", math.nan)
        peak = r.get("peak_MB")
        memory = f", peak {peak:.0f} MB (tracemalloc)" if peak is not None else ""
        add(
            f"A far position costs what it uses ({r['backend']}, offset {r['offset']})",
            "fresh RotaryEmbedding's first step ≤ 20× a warm step, < 100 MB extra",
            f"{_fmt(ratio)}× a warm step at offset {r['offset']}{memory}",
            ratio <= 20 and (peak is None or peak < 100),
        )


def _decode_step(records: list[Record]) -> tuple[str, str, str, bool] | None:
    """RotaryEmbedding(q, k, offset) in the small decode step against the naive formula on q and k."""
    batch, hq, hk = STEP
    recs = [
        r
        for r in _find(records, section="embedding", shape=[batch, hq, 1, 128], k_shape=[batch, hk, 1, 128])
        if r["backend"] in ("numpy", "torch")
    ]
    if not recs:
        return None
    ratio = {(r["backend"], r["layout"]): _over(r, "RotaryEmbedding", "naive q and k") for r in recs}
    worst = _worst(list(ratio.values()))
    figure = "; ".join(
        f"{b} {', '.join(_fmt(ratio[(b, lay)]) for lay in ('half', 'interleaved') if (b, lay) in ratio)}"
        for b in dict.fromkeys(b for b, _ in ratio)
    )
    limit = {"torch": 1.0, "numpy": 1.5}
    return (
        _DECODE_NAME,
        "≤ 1.0× (PyTorch), ≤ 1.5× (NumPy) naive formula on q and k, rows precomputed",
        f"{figure}× naive (half, interleaved)",
        not math.isnan(worst) and all(v <= limit[b] for (b, _), v in ratio.items()),
    )


def _never_slower(records: list[Record]) -> tuple[str, str, str, bool] | None:
    """apply_rotary against the naive formula on every application workload of this setting."""
    recs = [r for r in _find(records, section="apply") if "naive" in r["seconds"]]
    if not recs:
        return None
    ratio = [(_over(r, "arrayrope", "naive"), r) for r in recs]
    slower = [(v, r) for v, r in ratio if not v <= 1.0]
    v, r = max(ratio, key=lambda p: -math.inf if math.isnan(p[0]) else p[0])
    where = f"{r['backend']} {tuple(r['shape'])} {r['layout']} {r['dtype']} rotary {r['rotary_dim']}"
    return (
        _SLOWER_NAME,
        "apply_rotary ≤ naive formula on every application row (all backends, dtypes, shapes, rotary dims)",
        f"{len(slower)} of {len(recs)} rows slower; worst {_fmt(v)}× naive ({where})",
        not slower,
    )


def _with_load(
    busy: int, decode: tuple[str, str, str, bool] | None, slower: tuple[str, str, str, bool] | None
) -> tuple[str, str, str, bool | None]:
    """The two targets above, in a run with other busy processes (``--load``)."""
    name = "With one busy process"
    goal = "the decode RotaryEmbedding and never-slower targets hold with --load 1"
    if busy < 1:
        return name, goal, "not measured: this run had no other busy process (run with --load 1)", None
    parts = [t for t in (decode, slower) if t is not None]
    if not parts:
        return name, goal, f"{busy} busy process(es): neither target measured", None
    figure = f"{busy} busy process(es): " + "; ".join(f"{t[0]}: {t[2]}" for t in parts)
    return name, goal, figure, all(t[3] for t in parts)
