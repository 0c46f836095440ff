"""Speed of repaired models: ``arrayrope repair``'s output against the export it repairs, on ONNX Runtime's CPU.

Run from the repository root: ``python -m bench.repair [--out FOLDER] [--tiny]`` (a minute). It writes
``repair.md`` into a new ``bench/runs/<time>-repair``, or into ``--out`` (``--out bench/results`` rewrites
the committed table). For each of the exporters' wrong models in the test fixtures (optimum-onnx's Phi-3
LongRoPE, repaired with tables computed in the graph and with stored ones; ONNX Runtime GenAI's Qwen2 YaRN,
whose repair changes its caches only; both exporters' Llama with dynamic NTK, whose repair computes the
frequencies of each run's length past 512) it times a prefill of 512 tokens and a decode step after them
(dynamic NTK: and one at position 2000), the reference and the repaired model taking turns, at one thread and
at ONNX Runtime's default count, quiet and beside a busy process, and reports the median time of each and
their ratio (repaired / reference: the target is at most 1.05). The reference is the export, except for
GenAI's dynamic NTK, which cannot run past 512 positions: there it is the export holding stored caches of the
context. ``--tiny`` runs the first case a few times, at one thread and quiet: that the bench runs.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._load import busy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
FIXTURES = ROOT / "tests" / "fixtures" / "exporters"
PREFILL = 512
#: (exporter, family, max_positions given to the repair)
CASES = (
    ("optimum", "phi3_longrope", None),
    ("optimum", "phi3_longrope", 1024),
    ("genai", "qwen2_yarn", None),
    ("optimum", "llama_dynamic", None),
    ("genai", "llama_dynamic", None),
)
#: Dynamic NTK's decode step far past max_position_embeddings (512): frequencies of that length.
FAR = 2000


def _feeds(sess: Any, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A prefill of PREFILL tokens from an empty cache, one decode step after them, and one after FAR."""
    rng = np.random.default_rng(0)
    names = {i.name for i in sess.get_inputs()}
    kv_heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]

    def feed(tokens: int, past: int) -> dict[str, Any]:
        f: dict[str, Any] = {
            "input_ids": rng.integers(0, config["vocab_size"], (1, tokens)),
            "attention_mask": np.ones((1, past + tokens), np.int64),
        }
        if "position_ids" in names:
            f["position_ids"] = np.arange(past, past + tokens)[None]
        shape = (1, kv_heads, past, head_dim)
        f |= {n: rng.standard_normal(shape).astype(np.float32) for n in names if n.startswith("past")}
        return f

    return feed(PREFILL, 0), feed(1, PREFILL), feed(1, FAR)


def _reference(exporter: str, family: str, model: Any, config: dict[str, Any]) -> tuple[Any, str]:
    """The model the repaired one is timed against, and its name: the export itself; for GenAI's dynamic NTK,
    whose 512 rows ONNX Runtime refuses past position 511, the export holding stored caches of the context
    (rows of one length's frequencies: what the fastest fixed tables cost)."""
    if (exporter, family) != ("genai", "llama_dynamic"):
        return model, "export"
    import onnx
    from onnx import numpy_helper

    import arrayrope

    rows = 4 * config["max_position_embeddings"]
    freqs = arrayrope.rope_frequencies_from_config(config, seq_len=rows)
    tables = arrayrope.rope_tables(freqs, np.arange(rows), dtype=np.float64)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for t in copy.graph.initializer:
        if t.name in ("cos_cache", "sin_cache"):
            t.CopyFrom(numpy_helper.from_array(np.asarray(tables[t.name == "sin_cache"], np.float32), t.name))
    return copy, f"export, caches of {rows} stored rows"


def _time(sessions: dict[str, Any], feed: dict[str, Any], repeats: int) -> dict[str, float]:
    """Median seconds of each session on ``feed``, the sessions taking turns."""
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for sess in sessions.values():  # a first run each, not timed
        sess.run(["logits"], feed)
    for _ in range(repeats):
        for name, sess in sessions.items():
            start = time.perf_counter()
            sess.run(["logits"], feed)
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def rows(tiny: bool) -> list[dict[str, Any]]:
    import onnx
    import onnxruntime as ort

    from arrayrope.export import repair_rotary

    out = []
    for exporter, family, max_positions in CASES[:1] if tiny else CASES:
        folder = FIXTURES / exporter / family
        config = json.loads((folder / "config.json").read_text())
        model = onnx.load(str(folder / "model.onnx"))
        repaired = repair_rotary(model, config, max_positions=max_positions).model
        reference, against = _reference(exporter, family, model, config)
        for threads in (1,) if tiny else (1, 0):
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            sessions = {
                name: ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
                for name, m in (("export", reference), ("repaired", repaired))
            }
            prefill, decode, far = _feeds(sessions["export"], config)
            for load in (0,) if tiny else (0, 1):
                with busy(load):
                    steps = [("prefill 512", prefill, 3 if tiny else 30), ("decode", decode, 5 if tiny else 200)]
                    if "dynamic" in family:
                        steps.append((f"decode at {FAR}", far, 5 if tiny else 200))
                    for step, feed, repeats in steps:
                        t = _time(sessions, feed, repeats)
                        out.append(
                            {
                                "model": f"{exporter} {family}",
                                "against": against,
                                "tables": "the config's caches, per length past 512"
                                if (exporter, family) == ("genai", "llama_dynamic")
                                else "the config's caches"
                                if exporter == "genai"
                                else "computed"
                                if max_positions is None
                                else f"stored, {max_positions} rows",
                                "threads": threads or "default",
                                "busy": load,
                                "step": step,
                                "export ms": 1e3 * t["export"],
                                "repaired ms": 1e3 * t["repaired"],
                                "ratio": t["repaired"] / t["export"],
                            }
                        )
                        print(out[-1], flush=True)
    return out


def markdown(found: list[dict[str, Any]]) -> str:
    import onnxruntime as ort

    head = [
        "# Repaired models against the exports they repair (ONNX Runtime CPU)",
        "",
        f"onnxruntime {ort.__version__}, {platform.machine()}, Python {platform.python_version()}; "
        "median times, the two models taking turns; ratio = repaired / reference (target: at most 1.05).",
        "",
        "| model | repaired tables | timed against | threads | busy processes | step | reference ms | repaired ms "
        "| ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines = [
        f"| {r['model']} | {r['tables']} | {r['against']} | {r['threads']} | {r['busy']} | {r['step']} | "
        f"{r['export ms']:.3f} | "
        f"{r['repaired ms']:.3f} | {r['ratio']:.3f} |"
        for r in found
    ]
    return "\n".join(head + lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.repair", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: a new bench/runs/<time>-repair; the committed table is in bench/results)",
    )
    parser.add_argument("--tiny", action="store_true", help="a few runs of each case: that the bench runs")
    args = parser.parse_args(argv)
    out = args.out or RESULTS.parent / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-repair"
    found = rows(args.tiny)
    out.mkdir(parents=True, exist_ok=True)
    (out / "repair.md").write_text(markdown(found))
    print(f"wrote {out / 'repair.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
