"""``arrayrope export``: write a rotary-embedding ONNX model (onnx is imported only when it runs)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from . import fuse as fuse_command

HELP = (
    "write an ONNX model that applies rotary embeddings (tables from arrayrope's float64 core); "
    "'arrayrope export fuse' fuses those of an existing model"
)
PYTHON_NAMES = {"freqs (an int head_dim)": "--head-dim"}


class _Given(argparse.Action):
    """Stores the value and records that the flag was given (a config and these flags are exclusive)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        given = set(getattr(namespace, "_given", ()))
        namespace._given = given | {option_string or self.dest}


class _Layout(argparse.Action):
    """Stores the layout and records that it was given (else a config's family gives it)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.layout_given = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--head-dim",
        type=int,
        default=None,
        action=_Given,
        help="features per head (required unless --config gives it)",
    )
    parser.add_argument(
        "--num-heads",
        type=int,
        default=None,
        help="heads of x or q (required for --rank 3; default: from --config, else not fixed)",
    )
    parser.add_argument(
        "--num-kv-heads",
        type=int,
        default=None,
        help="heads of k with --qk (grouped-query attention; default: --num-heads)",
    )
    parser.add_argument(
        "--rank",
        type=int,
        choices=(3, 4),
        default=4,
        help="4: (batch, heads, seq, head_dim); 3: (batch, seq, heads*head_dim)",
    )
    parser.add_argument(
        "--layout",
        choices=("half", "interleaved"),
        default="half",
        action=_Layout,
        help="which features pair up: half-split (Llama's rotate_half) or interleaved (GPT-J); with "
        "--config, the layout of the config's family",
    )
    parser.add_argument(
        "--target",
        choices=("auto", "onnx23", "ort", "portable"),
        default="auto",
        help="the nodes: onnx23 (standard RotaryEmbedding), ort (ONNX Runtime's contrib op), portable "
        "(standard ops); auto: the fastest the other options allow",
    )
    parser.add_argument(
        "--max-positions",
        type=int,
        default=None,
        help="a bound on the positions: store cos/sin tables of this many rows, and position ids must "
        "be below it (default: no bound; cos/sin computed in the graph from the position ids, "
        "right at every position below 2**30)",
    )
    parser.add_argument("--base", type=float, default=10000.0, action=_Given, help="rope_theta (or from --config)")
    parser.add_argument(
        "--rotary-dim",
        type=int,
        default=None,
        action=_Given,
        help="leading features that rotate (default: all, or from --config)",
    )
    parser.add_argument(
        "--config",
        default=None,
        help="a Hugging Face config.json or its folder (head_dim, rope_theta, rotary dim, scaling, "
        "heads); not combined with --head-dim, --base, --rotary-dim (default: none, the flags say "
        "it)",
    )
    parser.add_argument(
        "--layer-type",
        default=None,
        help="with --config: the layer type whose rope to export, where it differs per layer type "
        "(full_attention, sliding_attention; transformers' names; default: none, for a config with one set)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "float16", "bfloat16", "float64"),
        default="float32",
        help="element type of the rotated tensors and the tables",
    )
    parser.add_argument(
        "--tables",
        choices=("stored", "computed"),
        default=None,
        help="stored: tables of --max-positions rows in the graph; computed: cos/sin built in the "
        "graph from the position ids (default: stored with --max-positions, else computed)",
    )
    parser.add_argument(
        "--opset", type=int, default=None, help="default-domain opset (default: 23 for onnx23, 17 otherwise)"
    )
    parser.add_argument("--no-position-ids", action="store_true", help="positions 0..seq-1 instead of an input")
    parser.add_argument("--qk", action="store_true", help="inputs q and k, outputs q_rot and k_rot")
    parser.add_argument("-o", "--output", default=None, help="where to write the .onnx file (required)")
    from . import add_command

    actions = parser.add_subparsers(dest="action", metavar="fuse", title="on an existing model")
    add_command(actions, "fuse", fuse_command, "arrayrope export fuse")


def _freqs_from_config(path: str, args: argparse.Namespace) -> Any:
    from arrayrope.config import load_config, settings

    given = sorted(getattr(args, "_given", ()))
    if given:
        raise ValueError(
            f"--config gives head_dim, rope_theta and the rotary dim; it is not combined with {', '.join(given)} "
            "(edit the config, or pass the flags without --config)"
        )
    s = settings(path, layer_type=args.layer_type)  # the config read once: frequencies, rotary features, layout
    freqs = s.freqs
    from arrayrope.export.audit._expect import length_context

    changes = length_context(s)
    if changes is not None:  # one length's frequencies in a graph: said once it is written
        args.length_note = (
            f"note: rope_type {freqs.rope_type!r} changes its frequencies past sequences of {changes[0]}; this "
            f"graph holds those of sequences up to {changes[0]}, as the model starts (arrayrope repair writes "
            "the frequencies of each run's length into a model)"
        )
    if s.rotary_features != "leading":
        raise ValueError(
            f"--config: transformers' {s.model_type} rotates the trailing features of each head (MLA's "
            "q_pe after q_nope), which these graphs do not; export the rotary part alone "
            "(--head-dim, --base, --rotary-dim)"
        )
    if not getattr(args, "layout_given", False):
        if s.layout is None:
            raise ValueError(f"--config: {s.why_no_layout}; pass --layout half or --layout interleaved")
        args.layout = s.layout
    config = load_config(path)
    text = config.get("text_config")
    if not any(k in config for k in ("head_dim", "hidden_size")) and isinstance(text, dict):
        config = text
    if args.num_heads is None:
        args.num_heads = config.get("num_attention_heads")
    if args.num_kv_heads is None and args.qk:
        args.num_kv_heads = config.get("num_key_value_heads", args.num_heads)
    return freqs


def run(args: argparse.Namespace) -> int:
    if args.output is None:
        raise ValueError("-o/--output is required (or use: arrayrope export fuse IN.onnx -o OUT.onnx)")

    output = os.path.abspath(args.output)
    if not os.path.isdir(os.path.dirname(output)):
        raise ValueError(f"-o {args.output}: the folder {os.path.dirname(output)!r} does not exist")
    if args.layer_type is not None and not args.config:
        raise ValueError("--layer-type chooses among the rope parameters of a --config; pass --config too")
    if args.config:
        freqs = _freqs_from_config(args.config, args)
        extra = {}
    else:
        if args.head_dim is None:
            raise ValueError("pass --head-dim (or --config config.json)")
        freqs = args.head_dim
        extra = {"base": args.base, "rotary_dim": args.rotary_dim}

    import onnx

    from arrayrope.export import rotary_model

    model = rotary_model(
        freqs,
        layout=args.layout,
        target=args.target,
        rank=args.rank,
        num_heads=args.num_heads,
        num_kv_heads=args.num_kv_heads,
        max_positions=args.max_positions,
        position_ids=not args.no_position_ids,
        tables=args.tables,
        dtype=args.dtype,
        opset=args.opset,
        qk=args.qk,
        **extra,
    )
    try:
        onnx.save(model, args.output)
    except OSError as err:
        raise ValueError(f"-o {args.output}: cannot write the model: {err.strerror or err}") from None
    print(f"wrote {args.output}: {model.graph.doc_string}")
    if getattr(args, "length_note", None):
        print(args.length_note, file=sys.stderr)
    ops = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    print(
        f"{len(model.graph.node)} nodes, opsets {ops}, IR version {model.ir_version}, "
        f"{os.path.getsize(args.output) / 1e6:.2f} MB"
    )
    return 0
