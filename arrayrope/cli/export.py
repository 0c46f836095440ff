"""``arrayrope export``: write a rotary-embedding ONNX model (onnx is imported only when it runs)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import fuse as fuse_command

HELP = ("write an ONNX model that applies rotary embeddings (tables from arrayrope's float64 core); "
        "'arrayrope export fuse' fuses those of an existing model")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--head-dim", type=int, default=None, help="features per head (or from --config)")
    parser.add_argument("--num-heads", type=int, default=None, help="heads (required for --rank 3; or from --config)")
    parser.add_argument("--num-kv-heads", type=int, default=None, help="heads of k with --qk (grouped-query attention)")
    parser.add_argument("--rank", type=int, choices=(3, 4), default=4,
                        help="4: (batch, heads, seq, head_dim); 3: (batch, seq, heads*head_dim)")
    parser.add_argument("--layout", choices=("half", "interleaved"), default="half")
    parser.add_argument("--target", choices=("auto", "onnx23", "ort", "portable"), default="auto")
    parser.add_argument("--max-positions", type=int, default=4096, help="table rows: position ids must be below it")
    parser.add_argument("--base", type=float, default=10000.0, help="rope_theta")
    parser.add_argument("--rotary-dim", type=int, default=None, help="leading features that rotate (default all)")
    parser.add_argument("--config", default=None, help="a Hugging Face config.json (head_dim, rope_theta, scaling)")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16", "float64"), default="float32")
    parser.add_argument("--tables", choices=("constant", "computed"), default="constant",
                        help="computed: cos/sin built in the graph (portable only)")
    parser.add_argument("--opset", type=int, default=None)
    parser.add_argument("--no-position-ids", action="store_true", help="positions 0..seq-1 instead of an input")
    parser.add_argument("--qk", action="store_true", help="inputs q and k, outputs q_rot and k_rot")
    parser.add_argument("-o", "--output", default=None, help="where to write the .onnx file (required)")
    actions = parser.add_subparsers(dest="action", metavar="fuse", title="on an existing model")
    fuse = actions.add_parser("fuse", help=fuse_command.HELP, description=fuse_command.HELP)
    fuse_command.add_arguments(fuse)
    fuse.set_defaults(_run=fuse_command.run)


def _freqs_from_config(path: str, args: argparse.Namespace) -> Any:
    import arrayrope

    try:
        freqs = arrayrope.rope_frequencies_from_config(path)
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise SystemExit(f"arrayrope export: --config {path!r}: {exc}") from None
    config = config.get("text_config", config)
    if args.num_heads is None:
        args.num_heads = config.get("num_attention_heads")
    if args.num_kv_heads is None and args.qk:
        args.num_kv_heads = config.get("num_key_value_heads", args.num_heads)
    return freqs


def run(args: argparse.Namespace) -> int:
    import os

    import onnx

    from arrayrope.export import rotary_model

    if args.output is None:
        print("arrayrope export: -o/--output is required (or use: arrayrope export fuse IN.onnx -o OUT.onnx)",
              file=sys.stderr)
        return 2

    if args.config:
        freqs = _freqs_from_config(args.config, args)
        extra = {}
    else:
        if args.head_dim is None:
            raise SystemExit("arrayrope export: pass --head-dim (or --config config.json)")
        freqs = args.head_dim
        extra = {"base": args.base, "rotary_dim": args.rotary_dim}
    try:
        model = rotary_model(
            freqs, layout=args.layout, target=args.target, rank=args.rank, num_heads=args.num_heads,
            num_kv_heads=args.num_kv_heads, max_positions=args.max_positions, position_ids=not args.no_position_ids,
            tables=args.tables, dtype=args.dtype, opset=args.opset, qk=args.qk, **extra,
        )
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"arrayrope export: {exc}") from None
    onnx.save(model, args.output)
    print(f"wrote {args.output}: {model.graph.doc_string}")
    ops = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    print(f"{len(model.graph.node)} nodes, opsets {ops}, IR version {model.ir_version}, "
          f"{os.path.getsize(args.output) / 1e6:.2f} MB")
    return 0
