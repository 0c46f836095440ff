"""ONNX Runtime timings of the exported rotary graphs, as ratios to an Identity model.

Run ``python bench/bench_onnx.py`` (or call :func:`main` from a benchmark suite).
It writes ``onnx.md`` and ``onnx.json`` (``onnx-cuda.*`` with ``--provider cuda``,
where inputs and outputs stay on the GPU through I/O binding). Every model
runs in the same process, interleaved round by round, so that the ratios to the
Identity model (a plain copy of x) and to hand-built fused ops share conditions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

SHAPES = {"prefill": (1, 32, 2048, 128), "decode": (1, 8, 1, 128)}
MAX_POSITIONS = 4096
RESULTS = Path(__file__).resolve().parent / "results"


def _hand_fused(domain: str, opset: int) -> tuple[Any, str]:
    """A fused RotaryEmbedding node written directly with onnx.helper (the yardstick for ours)."""
    from onnx import TensorProto, helper, numpy_helper

    h = 64
    ang = np.arange(MAX_POSITIONS)[:, None] * 10000.0 ** (-np.arange(h) / h)
    inits = [
        numpy_helper.from_array(np.cos(ang).astype(np.float32), "cos"),
        numpy_helper.from_array(np.sin(ang).astype(np.float32), "sin"),
    ]
    order = ["x", "pos", "cos", "sin"] if domain else ["x", "cos", "sin", "pos"]
    node = helper.make_node("RotaryEmbedding", order, ["y"], domain=domain or None)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "N", "S", 128])
    pos = helper.make_tensor_value_info("pos", TensorProto.INT64, ["B", "S"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "N", "S", 128])
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    g = helper.make_graph([node], "hand", [x, pos], [y], inits)
    return helper.make_model(g, opset_imports=ops, ir_version=11 if opset >= 23 else 8), "pos"


def _identity() -> tuple[Any, None]:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "N", "S", 128])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "N", "S", 128])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), None


def models() -> dict[str, tuple[Any, str | None]]:
    from arrayrope.export import ExportKeywords, rotary_model

    out: dict[str, tuple[Any, str | None]] = {
        "identity": _identity(),
        "hand-built onnx23 op": _hand_fused("", 23),
        "hand-built contrib op": _hand_fused("com.microsoft", 17),
    }
    stored: ExportKeywords = {"max_positions": MAX_POSITIONS}
    variants: dict[str, ExportKeywords] = {
        "onnx23": {**stored, "target": "onnx23"},
        "ort": {**stored, "target": "ort"},
        "portable": {**stored, "target": "portable"},
        "portable, interleaved": {**stored, "target": "portable", "layout": "interleaved"},
        "portable, computed tables": {"target": "portable", "tables": "computed"},
    }
    for label, kw in variants.items():
        out[label] = (rotary_model(128, **kw), "position_ids")
    return out


PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def _session(model: Any, threads: int, provider: str) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=[PROVIDERS[provider]])
    if sess.get_providers()[0] != PROVIDERS[provider]:
        raise RuntimeError(f"onnxruntime ran on {sess.get_providers()}, not {PROVIDERS[provider]}")
    return sess


def _runner(sess: Any, feed: dict[str, Any], provider: str) -> Any:
    """A call that runs ``sess`` once; on CUDA, inputs and output stay on the device (I/O binding)."""
    if provider == "cpu":
        return lambda: sess.run(None, feed)
    import onnxruntime as ort

    binding = sess.io_binding()
    for name, value in feed.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
    binding.bind_output(sess.get_outputs()[0].name, "cuda")
    return lambda: sess.run_with_iobinding(binding)


def measure(rounds: int = 15, threads: int = 1, target_seconds: float = 0.02, provider: str = "cpu") -> dict[str, Any]:
    """Seconds per run for every model and shape: the fastest round (rounds interleave the models,
    so the minimum is the least disturbed by other load on a shared machine) and the median."""
    rng = np.random.default_rng(0)
    built = models()
    results = {}
    for shape_name, shape in SHAPES.items():
        x = rng.standard_normal(shape).astype(np.float32)
        pos = (np.arange(shape[2]) + (MAX_POSITIONS - shape[2] - 1))[None].astype(np.int64)
        runs: dict[str, tuple[Any, int, list[float]]] = {}
        for label, (model, pos_name) in built.items():
            feed = {"x": x} if pos_name is None else {"x": x, pos_name: pos}
            run = _runner(_session(model, threads, provider), feed, provider)
            run()
            t0 = time.perf_counter()
            run()
            reps = max(1, int(target_seconds / max(time.perf_counter() - t0, 1e-7)))
            runs[label] = (run, reps, [])
        for _ in range(rounds):
            for run, reps, times in runs.values():
                t0 = time.perf_counter()
                for _ in range(reps):
                    run()
                times.append((time.perf_counter() - t0) / reps)
        base = min(runs["identity"][2])
        results[shape_name] = {
            label: {
                "seconds": min(t),
                "median_seconds": statistics.median(t),
                "x_identity": min(t) / base,
                "nodes": len(built[label][0].graph.node),
                "bytes": built[label][0].ByteSize(),
            }
            for label, (_, _, t) in runs.items()
        }
    return results


def render(results: dict[str, Any], meta: dict[str, Any]) -> str:
    where = "CUDA, inputs and output bound on the GPU" if meta.get("provider") == "cuda" else "CPU"
    lines = [
        f"# Rotary embedding on ONNX Runtime {where}",
        "",
        f"float32, {meta['threads']} intra-op thread(s), fastest of {meta['rounds']} interleaved rounds; "
        f"onnxruntime {meta['onnxruntime']}, onnx {meta['onnx']}, {meta['machine']}.",
        "Ratios are to an Identity model (a copy of x) in the same run; positions end at the table end.",
        "",
    ]
    for shape_name, rows in results.items():
        lines += [
            f"## {shape_name} {SHAPES[shape_name]}",
            "",
            "| graph | nodes | time | x Identity | x hand-built fused |",
            "| --- | --- | --- | --- | --- |",
        ]
        for label, r in rows.items():
            ref = "hand-built contrib op" if label == "ort" else "hand-built onnx23 op"
            rel = r["seconds"] / rows[ref]["seconds"]
            t = r["seconds"]
            tt = f"{t * 1e3:.2f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} µs"
            lines.append(f"| {label} | {r['nodes']} | {tt} | {r['x_identity']:.2f} | {rel:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: a new bench/runs/<time>-onnx; the committed results are bench/results)",
    )
    parser.add_argument(
        "--provider", choices=sorted(PROVIDERS), default="cpu", help="ONNX Runtime execution provider (default: cpu)"
    )
    args = parser.parse_args(argv)
    results = measure(rounds=args.rounds, threads=args.threads, provider=args.provider)
    meta = {
        "threads": args.threads,
        "rounds": args.rounds,
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "shapes": SHAPES,
        "max_positions": MAX_POSITIONS,
        "provider": args.provider,
    }
    stem = "onnx" if args.provider == "cpu" else f"onnx-{args.provider}"
    if args.out is None:
        args.out = RESULTS.parent / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(render(results, meta))
    print(render(results, meta))
    return results


if __name__ == "__main__":
    main()
