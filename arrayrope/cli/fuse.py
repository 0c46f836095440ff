"""``arrayrope export fuse``: one fused node per rotary application of an existing ONNX model."""

from __future__ import annotations

import argparse
import os

from ._output import check_output

HELP = "replace each rotary embedding of an ONNX model with one fused node, checked on ONNX Runtime"
VERDICT = True
PYTHON_NAMES = {"providers": "--provider", "validate": "--no-validate"}
EPILOG = """\
exit status, and the word of the verdict line ('verdict: <word>: ...'):
  0  verified: the fused model was compared with the original on ONNX Runtime, agreed, and was written
  1  failed: the fused model differs from the original; nothing was written
  2  usage or input error, or nothing to fuse (one line on stderr: 'arrayrope export fuse: error: ...',
     naming what was found instead: no rotary embedding, or attention nodes that rotate inside); nothing
     was written
  3  not verified: the fused model was written, each fused rotation checked on its own, but the whole
     model was not compared with the original (--no-validate, or no provider asked for could run it); or
     no rotation found could be fused (each left alone with its reason), and nothing was written"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx file to read (it is not changed)")
    parser.add_argument("-o", "--output", required=True, help="where to write the fused model (required)")
    parser.add_argument(
        "--target",
        choices=("onnx23", "ort"),
        default="onnx23",
        help="onnx23: the standard RotaryEmbedding (the model is converted to opset 23 if older); "
        "ort: ONNX Runtime's com.microsoft.RotaryEmbedding at the model's opset",
    )
    parser.add_argument(
        "--tables",
        choices=("stored", "computed", "model"),
        default=None,
        help="stored: arrayrope's float64-computed tables of --max-positions rows; computed: cos/sin "
        "built in the graph from the position ids by the exact float32 method (both: no Cos/Sin, "
        "exact at long positions); model: the model's own cos/sin computation (default: stored "
        "with --max-positions, else computed)",
    )
    parser.add_argument(
        "--max-positions",
        type=int,
        default=None,
        help="a bound on the positions: tables of this many rows are stored, and position ids "
        "must stay below it (default: no bound; cos/sin computed in the graph from the position "
        "ids, right at every position below 2**30)",
    )
    parser.add_argument(
        "--inputs",
        default=None,
        help="an .npz of the model's inputs, for models that sample inputs cannot run; default: inputs "
        "made from the model's input names, types and shapes (a decoder's past key/values, attention mask and "
        "position ids consistent with each other)",
    )
    parser.add_argument(
        "--no-validate",
        action="store_true",
        help="do not compare the two models on ONNX Runtime (the verdict is then 'not verified')",
    )
    parser.add_argument(
        "--provider",
        action="append",
        default=None,
        choices=("cuda", "cpu"),
        help="ONNX Runtime provider for the validation; repeatable (default: CUDA when available, "
        "then CPU); a provider named here that cannot run makes the verdict 'not verified'",
    )


def _check_arguments(args: argparse.Namespace) -> None:
    """Every argument that can be checked without reading the model, before any work."""
    if args.max_positions is not None and args.max_positions < 1:
        raise ValueError(f"--max-positions must be a positive int, got {args.max_positions}")
    for option, path in (("model", args.model), ("--inputs", args.inputs)):
        if path is not None and not os.path.isfile(path):
            what = "is not a regular file" if os.path.exists(path) else "does not exist"
            raise ValueError(f"{option} {path}: {what}")
    check_output(args.output, args.model)


def run(args: argparse.Namespace) -> int:
    """Exit 0 written and verified, 1 the fused model differs (nothing written), 3 written but not verified."""
    _check_arguments(args)
    import numpy as np

    from arrayrope.export import fuse_rotary

    from ._verdict import NOT_VERIFIED, conclude

    try:
        feed = None if args.inputs is None else dict(np.load(args.inputs))
    except Exception as exc:
        said = "" if "pickled" in str(exc) else f" ({exc})"  # NumPy's guess for a file of another kind
        raise ValueError(
            f"--inputs {args.inputs}: not an .npz of arrays, as numpy.savez writes (one per input name){said}"
        ) from None
    result = fuse_rotary(
        args.model,
        target=args.target,
        tables=args.tables,
        max_positions=args.max_positions,
        inputs=feed,
        validate=not args.no_validate,
        providers=args.provider,
    )
    report = result.report
    print(report)
    if not report.fused:
        print(
            f"verdict: not verified: {'none of the' if len(report.rotations) > 1 else 'the'} "
            f"{_applications(len(report.rotations))} found {'was' if len(report.rotations) > 1 else 'was not'} fused "
            f"(each line above says why it was left alone); {args.output} not written"
        )
        return NOT_VERIFIED
    validation = report.validation
    if validation is None:
        result.save(args.output)
        data = "" if report.data_folder is None else f" (its weights in {args.output}.data)"
        print(
            "verdict: not verified: the fused model was not compared with the original (--no-validate); "
            f"each fused rotation was checked on its own\nwrote {args.output}{data}: {report.fused} of "
            f"{_applications(len(report.rotations))} fused"
        )
        return NOT_VERIFIED
    missing = []
    for name in dict.fromkeys(args.provider or ()):
        device = "CUDA" if name == "cuda" else "CPU"
        if not any(r.device == device for r in validation.rows):
            missing.append(
                (
                    f"--provider {name}",
                    next((why for what, why in validation.skipped if device in what), "it did not run"),
                )
            )
    status = conclude(validation, missing=missing)
    if validation.status == "failed":
        print(f"{args.output} not written: the fused model differs from the original")
        return status
    result.save(args.output)  # weights kept in external data files are copied to one beside it
    data = "" if report.data_folder is None else f" (its weights in {args.output}.data)"
    print(f"wrote {args.output}{data}: {report.fused} of {_applications(len(report.rotations))} fused")
    return status


def _applications(n: int) -> str:
    """``n`` rotary application(s), in words."""
    return f"{n} rotary application{'' if n == 1 else 's'}"
