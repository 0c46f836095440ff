"""``arrayrope check``: validate an exported rotary model (onnx is imported only when it runs)."""

from __future__ import annotations

import argparse

HELP = "validate a rotary ONNX model on ONNX Runtime and the reference evaluator against arrayrope's core"
VERDICT = True
PYTHON_NAMES = {"providers": "--provider"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx file written by 'arrayrope export'")
    parser.add_argument(
        "--provider",
        action="append",
        default=None,
        choices=("cuda", "cpu"),
        help="ONNX Runtime provider; repeatable (default: CUDA when available, then CPU); a provider "
        "named here that cannot run makes the verdict 'not verified'",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when numeric runs happened and all agreed, 1 when one disagreed, 3 when nothing numeric could run
    or a provider named with ``--provider`` could not run.

    A model that cannot be read (missing, not a regular file, not ONNX, not made by
    arrayrope) is an error: one line, exit status 2 (from :func:`arrayrope.cli.main`).
    """
    from arrayrope.export import validate
    from arrayrope.export._graph import PROVIDER_NAMES

    from ._verdict import conclude

    report = validate(args.model, providers=args.provider, seed=args.seed, raise_on_failure=False)
    print(report)
    missing = []
    for name in dict.fromkeys(args.provider or ()):
        full = PROVIDER_NAMES[name].removesuffix("ExecutionProvider")
        if not any(r.backend == "onnxruntime" and r.device.startswith(full) for r in report.rows):
            why = next(
                (why for what, why in report.skipped if what.startswith(f"onnxruntime {full}")), "it did not run"
            )
            missing.append((f"--provider {name}", why))
    return conclude(report, missing=missing)
