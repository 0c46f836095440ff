"""``arrayrope export fuse`` or ``arrayrope audit`` on a model whose weights are many GB of external data.

Run from the repository root: ``python -m bench.large_model --gb 4 --out FOLDER [--command audit]``. It writes a
decoder-like model (token embedding tables gathered by ``input_ids``, a query projection, a
rotary embedding in standard ops, an output projection) whose tables fill ``--gb`` GB of one
external data file, written sparse (zeros that take no disk), runs the command on it in a
subprocess (``audit`` against a config of the same rotation) and writes ``results.md`` (or
``results-audit.md``) into ``FOLDER``: the data size, the wall time and the subprocess's peak
resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np
import onnx
from onnx import StringStringEntryProto, TensorProto, external_data_helper, helper, numpy_helper

#: Heads and head dim of the synthetic model (hidden size HEADS * HEAD_DIM).
HEADS, HEAD_DIM = 2, 16
HIDDEN = HEADS * HEAD_DIM


def _const(name: str, value: object) -> TensorProto:
    a = np.asarray(value)
    return numpy_helper.from_array(a.astype(np.float32 if a.dtype.kind == "f" else np.int64), name)


def rope_decoder(tables: list[TensorProto], small: list[TensorProto], layers: int = 1) -> onnx.ModelProto:
    """The graph: ``sum_k tables[k][input_ids] + bias``, a query projection, ``x * cos + rotate_half(x) * sin``
    (cos/sin from ``Cos/Sin(Cast(position_ids) * inv_freq)``), an output projection. ``small`` holds the
    projections and the bias (``wq``, ``wo``, ``bias``). With ``layers`` > 1, each of as many layers rotates a
    query and a key (node names ``/model/layers.<i>/q/...``, as exporters name them) and adds them to the
    residual stream."""
    half = HEAD_DIM // 2
    inv = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    consts = [
        _const("inv_freq", inv.astype(np.float32)),
        _const("ax1", [1]),
        _const("ax2", [2]),
        _const("last", [-1]),
        _const("zero", [0]),
        _const("half", [half]),
        _const("big", [2**62]),
        _const("heads", [0, 0, HEADS, HEAD_DIM]),
        _const("flat", [0, 0, HIDDEN]),
    ]
    n = helper.make_node
    nodes = [n("Gather", [t.name, "input_ids"], [f"e{i}"]) for i, t in enumerate(tables)]
    total = "bias"
    for i in range(len(tables)):
        nodes.append(n("Add", [total, f"e{i}"], [f"sum{i}"]))
        total = f"sum{i}"
    nodes += [
        n("Unsqueeze", ["position_ids", "ax2"], ["p3"]),
        n("Cast", ["p3"], ["pf"], to=TensorProto.FLOAT),
        n("Mul", ["pf", "inv_freq"], ["f"]),
        n("Concat", ["f", "f"], ["ang"], axis=-1),
        n("Cos", ["ang"], ["c"]),
        n("Sin", ["ang"], ["s"]),
        n("Unsqueeze", ["c", "ax1"], ["c4"]),
        n("Unsqueeze", ["s", "ax1"], ["s4"]),
    ]
    for layer in range(layers):  # the tables computed once, as exporters write them; each layer rotates q and k
        outputs = []
        for which in ("q", "k") if layers > 1 else ("q",):
            p = f"/model/layers.{layer}/{which}/" if layers > 1 else ""

            shared = {total, "wq", "wo", "heads", "flat", "zero", "half", "big", "last", "c4", "s4"}

            def m(
                op: str, inputs: list[str], out: str, p: str = p, keep: set[str] = shared, **kw: Any
            ) -> onnx.NodeProto:
                return n(op, [i if i in keep else p + i for i in inputs], [p + out], name=p + out, **kw)

            nodes += [
                m("MatMul", [total, "wq"], "q"),
                m("Reshape", ["q", "heads"], "q4"),
                m("Transpose", ["q4"], "x", perm=[0, 2, 1, 3]),
                m("Slice", ["x", "zero", "half", "last"], "x1"),
                m("Slice", ["x", "half", "big", "last"], "x2"),
                m("Neg", ["x2"], "nx2"),
                m("Concat", ["nx2", "x1"], "rot", axis=-1),
                m("Mul", ["x", "c4"], "xc"),
                m("Mul", ["rot", "s4"], "rs"),
                m("Add", ["xc", "rs"], "rotated"),
                m("Transpose", ["rotated"], "back", perm=[0, 2, 1, 3]),
                m("Reshape", ["back", "flat"], "attn"),
                m("MatMul", ["attn", "wo"], "y"),
            ]
            outputs.append(p + "y")
        if layers == 1:
            break
        for out in outputs:
            nodes.append(n("Add", [total, out], [out + "/residual"]))
            total = out + "/residual"
    if layers > 1:
        nodes.append(n("Identity", [total], ["y"]))
    graph = helper.make_graph(
        nodes,
        "decoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", HIDDEN])],
        [*tables, *small, *consts],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _projections(rng: np.random.Generator) -> list[TensorProto]:
    return [
        _const("wq", rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)),
        _const("wo", rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)),
        _const("bias", rng.standard_normal(HIDDEN)),
    ]


def write_model(folder: str, nbytes: int, tables: int = 4, sparse: bool = False, seed: int = 0, layers: int = 1) -> str:
    """Write ``model.onnx`` and ``model.data`` (all its initializers) into ``folder``; returns the model's path.

    The ``tables`` embedding tables hold ``nbytes`` together (float32 rows of ``HIDDEN``).
    ``sparse``: the tables are zeros, a hole of the data file that takes no disk nor time to
    write, and only they are external (the rest is held in the graph); else every float
    initializer, random, is external, ``inv_freq`` of the rotation too (the int64 axes and
    shapes stay in the graph, where ONNX Runtime's shape inference needs to read them).
    """
    rng = np.random.default_rng(seed)
    rows = max(1, nbytes // (tables * HIDDEN * 4))
    path = os.path.join(folder, "model.onnx")
    if not sparse:
        embed = [_const(f"embed{k}", rng.standard_normal((rows, HIDDEN))) for k in range(tables)]
        model = rope_decoder(embed, _projections(rng), layers)
        for t in model.graph.initializer:
            if t.data_type == TensorProto.FLOAT:
                external_data_helper.set_external_data(t, "model.data")
        onnx.save(model, path)  # appends each float tensor to model.data, in order
        return path
    embed, size = [], rows * HIDDEN * 4
    for k in range(tables):
        t = TensorProto(name=f"embed{k}", data_type=TensorProto.FLOAT, dims=[rows, HIDDEN])
        t.data_location = TensorProto.EXTERNAL
        t.external_data.extend(
            StringStringEntryProto(key=key, value=value)
            for key, value in (("location", "model.data"), ("offset", str(k * size)), ("length", str(size)))
        )
        embed.append(t)
    with open(os.path.join(folder, "model.data"), "wb") as f:
        f.truncate(tables * size)
    onnx.save(rope_decoder(embed, _projections(rng), layers), path)
    return path


#: The config of the synthetic model's rotation, for ``arrayrope audit``.
CONFIG = {"head_dim": HEAD_DIM, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 4096}


def measure(model: str, output: str, command: str = "fuse") -> tuple[float, int, int]:
    """``arrayrope export fuse model -o output`` (or ``arrayrope audit model --config output``) in a subprocess:
    wall seconds, peak RSS in bytes, exit status."""
    cmd = [sys.executable, "-m", "arrayrope", "export", "fuse", model, "-o", output, "--provider", "cpu"]
    if command == "audit":
        cmd = [sys.executable, "-m", "arrayrope", "audit", model, "--config", output]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    if done.returncode not in (0, 3):
        sys.stderr.write(done.stdout + done.stderr)
    return wall, peak, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_model", description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=4.0, help="GB (1e9 bytes) of external weights (default 4)")
    parser.add_argument("--out", required=True, help="folder for the model, the fused model and results.md")
    parser.add_argument("--command", choices=("fuse", "audit"), default="fuse", help="what to run on it")
    parser.add_argument("--layers", type=int, default=1, help="layers, each rotating a query and a key (default 1)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    model = write_model(args.out, int(args.gb * 1e9), sparse=True, layers=args.layers)
    data = os.path.getsize(os.path.join(args.out, "model.data"))
    target = os.path.join(args.out, "fused.onnx")
    if args.command == "audit":
        target = os.path.join(args.out, "config.json")
        with open(target, "w") as f:
            json.dump({**CONFIG, "num_hidden_layers": args.layers}, f)
    wall, peak, status = measure(model, target, args.command)
    title = "arrayrope export fuse" if args.command == "fuse" else "arrayrope audit"
    lines = [
        f"# `{title}` on a model with external weights",
        "",
        f"{sys.platform}, Python {sys.version.split()[0]}, onnx {onnx.__version__}; "
        "weights: zeros of a sparse file, one external data file; ONNX Runtime on the CPU",
        "",
        "| external data | layers | wall time | peak RSS (subprocess) | exit status |",
        "|---:|---:|---:|---:|---:|",
        f"| {data / 1e9:.2f} GB | {args.layers} | {wall:.1f} s | {peak / 1e6:.0f} MB | {status} |",
        "",
    ]
    with open(os.path.join(args.out, "results.md" if args.command == "fuse" else "results-audit.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if status in (0, 3) else 1


if __name__ == "__main__":
    sys.exit(main())
