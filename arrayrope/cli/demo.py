"""``arrayrope demo``, the main job: one implementation, every installed array library.

Each encoding runs through :func:`arrayrope.testing.check_parity` on every
installed backend from the same NumPy inputs and is compared with an independent
float64 NumPy formula; when the ``onnx`` extra is installed, an exported model is
validated on ONNX Runtime and ONNX's reference evaluator against the float64 core.
The demo ends with a one-line verdict; its exit status follows :mod:`arrayrope.cli._verdict`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from typing import Any

HELP = "the main job: every encoding on every installed backend against float64 references, with a verdict"
VERDICT = True

INTRO = """\
arrayrope demo: one implementation of the encodings, run unchanged on every installed array library.
Each row runs one encoding on one backend (library and device) in one dtype, from the same NumPy
inputs, and compares it with an independent float64 NumPy formula. 'max rel err' is the largest
error relative to the largest reference value; 'ok' means within the dtype's default tolerance at the
scale of the result (4 units in the last place; 2**-40 for float64, whose chain of operations rounds
in float64). The first encoding runs in every dtype, the others in float32.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated backends (default: ARRAYROPE_BACKENDS or all installed); a backend named here that "
        "cannot run makes the verdict 'not verified'",
    )


def run(args: argparse.Namespace) -> int:
    from arrayrope.backends import available
    from arrayrope.testing._cases import builtin_cases

    from ._verdict import conclude
    from .parity import print_skipped, requested, run_cases

    t0 = time.perf_counter()
    names, missing = requested(args.backends)
    print(INTRO)
    print("looking for installed array libraries...", flush=True)
    found = available(names)
    print("backends here:", ", ".join(f"{b.name} ({b.device_label})" for b in found) or "none", flush=True)
    cases: list[Any] = builtin_cases()
    cases = cases[:1] + [dataclasses.replace(c, dtypes=("float32",)) for c in cases[1:]]
    report = run_cases([*cases, _export_case], backends=names)
    print_skipped(report)
    print(f"({time.perf_counter() - t0:.0f} s)")
    return conclude(report, missing=missing)


def _export_case(*, backends: Any = None, dtypes: Any = None) -> Any:
    """An ONNX model exported and validated on ONNX Runtime (CUDA first, then CPU) and the reference evaluator."""
    from arrayrope.testing import Report, Row

    name = "ONNX export, validated on ONNX Runtime"
    try:
        from arrayrope.export import rotary_model, validate
    except ImportError as exc:
        return Report(skipped=((name, f"{type(exc).__name__}: {exc} (install the 'onnx' extra)"),))
    try:
        model = rotary_model(128, max_positions=8192)
        report = validate(model, raise_on_failure=False)
    except Exception as exc:  # a failing export is a failed row; the demo goes on
        nan = math.nan
        return Report((Row("-", "-", "-", nan, nan, nan, False, f"raised {type(exc).__name__}: {exc}", name),))
    fused = [n.op_type for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    target = fused[0] if fused else "portable"
    label = f"ONNX export ({target}, {len(model.graph.node)} node(s)), validated"
    rows = tuple(dataclasses.replace(r, case=label) for r in report.rows if r.numeric or not r.ok)
    return Report(rows, report.skipped)


_export_case.__name__ = "ONNX export, validated on ONNX Runtime and the reference evaluator"
