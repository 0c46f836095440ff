"""``arrayrope export fuse``: one fused node per rotary application of an existing ONNX model."""

from __future__ import annotations

import argparse
import sys

HELP = "replace each rotary embedding of an ONNX model with one fused node, checked on ONNX Runtime"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx file to read (it is not changed)")
    parser.add_argument("-o", "--output", required=True, help="where to write the fused model")
    parser.add_argument("--target", choices=("onnx23", "ort"), default="onnx23",
                        help="onnx23: the standard RotaryEmbedding (the model is converted to opset 23 if older); "
                             "ort: ONNX Runtime's com.microsoft.RotaryEmbedding at the model's opset")
    parser.add_argument("--tables", choices=("exact", "model"), default="exact",
                        help="exact: arrayrope's float64-computed caches (no Cos/Sin, exact at long positions); "
                             "model: the model's own cos/sin computation")
    parser.add_argument("--max-positions", type=int, default=None,
                        help="rows of the exact caches: position ids must stay below it (default 4096)")
    parser.add_argument("--inputs", default=None,
                        help="an .npz of the model's inputs, for models that sample inputs cannot run "
                             "(past key/value caches)")
    parser.add_argument("--no-validate", action="store_true", help="do not compare the two models on ONNX Runtime")
    parser.add_argument("--provider", action="append", default=None, choices=("cuda", "cpu"),
                        help="ONNX Runtime provider for the validation (repeatable; default: CUDA when available, "
                             "then CPU)")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the model was written, 1 when the fused model failed validation (nothing written), 2 on errors."""
    import numpy as np
    import onnx

    from arrayrope.export import fuse_rotary

    try:
        feed = None if args.inputs is None else dict(np.load(args.inputs))
        fused, report = fuse_rotary(args.model, target=args.target, tables=args.tables,
                                    max_positions=args.max_positions, inputs=feed, validate=not args.no_validate,
                                    providers=args.provider)
    except (TypeError, ValueError, OSError) as exc:
        print(f"arrayrope export fuse: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(report)
    if not report.ok:
        print(f"verdict: the fused model differs from the original; {args.output} not written")
        return 1
    large = fused.ByteSize() >= 2**31 - 1  # protobuf's limit: keep the tensors in a file of their own
    onnx.save(fused, args.output, save_as_external_data=large)
    print(f"wrote {args.output}: {report.fused} of {len(report.rotations)} rotary applications fused")
    return 0
