"""``arrayrope check``: validate an exported rotary model (onnx is imported only when it runs)."""

from __future__ import annotations

import argparse

HELP = "validate a rotary ONNX model on ONNX Runtime and the reference evaluator against arrayrope's core"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx file written by 'arrayrope export'")
    parser.add_argument("--provider", action="append", default=None, choices=("cuda", "cpu"),
                        help="ONNX Runtime provider (repeatable; default: CUDA when available, then CPU)")
    parser.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every check that ran passed, 1 when one failed, 2 when a requested provider did not run.

    A model that cannot be read (missing, not a regular file, not ONNX, not made by
    arrayrope) is an error: one line, exit status 2 (from :func:`arrayrope.cli.main`).
    """
    from arrayrope.export import validate

    report = validate(args.model, providers=args.provider, seed=args.seed, raise_on_failure=False)
    print(report)
    print("verdict: " + ("valid" if report.ok else "INVALID"))
    if not report.ok:
        return 1
    wanted = args.provider or ()
    if any(what.startswith("onnxruntime") and any(p.upper() in what for p in wanted) for what, _ in report.skipped):
        return 2
    return 0
