"""Rotary fusion in exported transformers models: arrayrope's ``fuse_rotary`` against the tools users have.

Run from the repository root: ``python -m bench.fusion [--out FOLDER]`` (a few minutes;
it exports 12 models). It writes ``fusion.md`` into a new ``bench/runs/<time>-fusion``, or
into ``--out`` (``--out bench/results`` rewrites the committed table). For each model family (small
random models, tests/hf_models.py) and exporter (dynamo at opset 18 and 23,
TorchScript at opset 17) it counts the rotary applications (q and k of each layer)
and the ``RotaryEmbedding`` nodes each tool leaves in the graph:

* PyTorch's exporter: the nodes in the exported model itself;
* onnxscript's opset-23 fusion (``onnxscript.rewriter.onnx_fusions``), on the model
  converted to opset 23 (the fusion runs at opset 23 only);
* onnxscript's ONNX Runtime fusions (``onnxscript.rewriter.ort_fusions.optimize_for_ort``);
* ONNX Runtime's graph optimizer (a session at ``ORT_ENABLE_ALL``, optimized model saved)
  and its transformers optimizer (``onnxruntime.transformers.optimizer``, the model type
  that fits the family);
* arrayrope's ``fuse_rotary`` (targets ``onnx23`` and ``ort``, exact caches),

with arrayrope's node counts before and after and the largest difference of its
fused model's logits from the exported model's (ONNX Runtime CPU, positions 0..6)
and from eager PyTorch (positions 200..210, other batch and length).
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the models the tests build

import hf_models  # noqa: E402

#: ONNX Runtime transformers optimizer model types per family (the closest it has).
ORT_MODEL_TYPE = {"llama": "gpt2", "qwen2": "qwen3", "neox": "gpt_neox", "gptj": "gpt2"}
LAYERS = 2


def _rotary_nodes(model: Any) -> int:
    return sum(n.op_type == "RotaryEmbedding" for n in model.graph.node)


def _guarded(fn: Any) -> str:
    """``fn()`` as a count, or what stopped it."""
    try:
        return str(fn())
    except Exception as exc:  # a tool that fails on a model is a finding of the table
        return f"fails ({type(exc).__name__})"


def _onnxscript_opset23(model: Any) -> int:
    import onnx_ir as ir
    from onnx import version_converter
    from onnxscript.rewriter import onnx_fusions

    converted = version_converter.convert_version(model, 23)
    m = ir.from_proto(converted)
    onnx_fusions.fuse(m)
    return _rotary_nodes(ir.to_proto(m))


def _onnxscript_ort(model: Any) -> int:
    import onnx
    import onnx_ir as ir
    from onnxscript.rewriter import ort_fusions

    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # onnx_ir takes over the proto's tensors
    m = ir.from_proto(copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_fusions.optimize_for_ort(m)
    return _rotary_nodes(ir.to_proto(m))


def _ort_session_optimizer(model: Any, folder: str) -> int:
    import onnx
    import onnxruntime as ort

    path = os.path.join(folder, "ort_optimized.onnx")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.optimized_model_filepath = path
    opts.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return _rotary_nodes(onnx.load(path))


def _ort_transformers_optimizer(model: Any, family: str, folder: str) -> int:
    import onnx
    from onnxruntime.transformers import optimizer

    path = os.path.join(folder, "in.onnx")
    onnx.save(model, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimized = optimizer.optimize_model(
            path, model_type=ORT_MODEL_TYPE[family], num_heads=4, hidden_size=64, opt_level=0
        )
    return _rotary_nodes(optimized.model)


def _difference(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def row(family: str, exporter: str) -> dict[str, Any]:
    """One line of the table: one family exported one way, every tool on it."""
    import onnxruntime as ort

    from arrayrope.export import fuse_rotary

    net = hf_models.model(family, LAYERS)
    start = time.perf_counter()
    model = hf_models.export(net, exporter)
    seconds = time.perf_counter() - start
    exported = _rotary_nodes(model)
    out: dict[str, Any] = {
        "family": family,
        "exporter": exporter,
        "opset": hf_models.EXPORTERS[exporter][1],
        "applications": 2 * LAYERS,
        "export_s": seconds,
        "pytorch": exported,
    }
    with tempfile.TemporaryDirectory() as folder:  # nodes each tool adds to those of the export
        out["onnxscript_23"] = _guarded(lambda: _onnxscript_opset23(model) - exported)
        out["onnxscript_ort"] = _guarded(lambda: _onnxscript_ort(model) - exported)
        out["ort_session"] = _guarded(lambda: _ort_session_optimizer(model, folder) - exported)
        out["ort_transformers"] = _guarded(lambda: _ort_transformers_optimizer(model, family, folder) - exported)
    for target in ("onnx23", "ort"):
        fused, report = fuse_rotary(model, target=target, max_positions=512, providers="cpu")
        out[f"arrayrope_{target}"] = f"{report.fused}/{len(report.rotations)}" + ("" if report.ok else " (invalid)")
        if target == "onnx23":
            out["nodes"] = f"{report.nodes_before} -> {report.nodes_after}"
            rows = report.validation.rows if report.validation is not None else ()
            out["vs_export"] = max((r.max_abs_error for r in rows), default=float("nan"))
            feed = hf_models.inputs(batch=3, seq=11, start=200, seed=1)
            sess = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
            got = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})[0]
            out["vs_pytorch"] = _difference(got, hf_models.logits(net, feed))
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    import onnx
    import onnxruntime
    import onnxscript
    import torch
    import transformers

    head = (
        "| family | exporter | opset | rotary applications | PyTorch's exporter | onnxscript opset-23 fusion | "
        "onnxscript ORT fusions | ORT session optimizer | ORT transformers optimizer | arrayrope onnx23 | "
        "arrayrope ort | nodes before -> after (arrayrope onnx23) | max diff vs export | max diff vs PyTorch |"
    )
    lines = [
        "# Rotary fusion in exported transformers models",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}, {platform.platform()}, Python "
        f"{platform.python_version()}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"onnx {onnx.__version__}, onnxscript {onnxscript.__version__}, onnxruntime {onnxruntime.__version__}.",
        "",
        f"Random models, hidden 64, 4 heads, {LAYERS} layers (Qwen2: 2 key heads; GPT-NeoX: rotary_pct 0.25; "
        "GPT-J: rotary_dim 8 of 16). PyTorch's column counts the RotaryEmbedding nodes of the export (each "
        "computing Cos and Sin in float32), the other tools' columns the nodes each one adds to them; arrayrope's "
        "cells count the rotations it leaves computed by one fused node on exact caches, of those it found (at "
        "opset 23 PyTorch's own nodes get exact caches). Differences are of the logits on ONNX Runtime CPU; "
        "arrayrope's fused models use caches of 512 rows. Written by `python -m bench.fusion`.",
        "",
        head,
        "|" + " --- |" * (head.count("|") - 1),
    ]
    lines.extend(
        f"| {r['family']} | {r['exporter']} | {r['opset']} | {r['applications']} | {r['pytorch']} | "
        f"{r['onnxscript_23']} | {r['onnxscript_ort']} | {r['ort_session']} | {r['ort_transformers']} | "
        f"{r['arrayrope_onnx23']} | {r['arrayrope_ort']} | {r['nodes']} | {r['vs_export']:.1e} | "
        f"{r['vs_pytorch']:.1e} |"
        for r in rows
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="python -m bench.fusion", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: a new bench/runs/<time>-fusion; the committed table is in bench/results)",
    )
    args = parser.parse_args(argv)
    out = args.out or RESULTS.parent / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-fusion"
    rows = []
    for family in hf_models.FAMILIES:
        for exporter in hf_models.EXPORTERS:
            r = row(family, exporter)
            print(r, flush=True)
            rows.append(r)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fusion.md").write_text(markdown(rows))
    print(f"wrote {out / 'fusion.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
