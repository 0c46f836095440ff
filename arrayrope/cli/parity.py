"""``arrayrope parity``: the built-in encodings through ``check_parity`` on the installed backends."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from arrayrope.testing import ParityCase, Report

HELP = "run the built-in encodings on every installed backend and dtype against float64 NumPy formulas"
VERDICT = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated backends, e.g. numpy,torch,torch-cuda (default: ARRAYROPE_BACKENDS or all installed); "
        "a backend named here that cannot run makes the verdict 'not verified'",
    )
    parser.add_argument(
        "--dtypes", default=None, help="comma-separated dtypes among float32,float64,float16,bfloat16 (default: all)"
    )


def split(value: str | None, option: str = "--backends") -> list[str] | None:
    """The names of a comma-separated option (None where it was not given); an empty list is a usage error."""
    if value is None:
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise ValueError(f"{option} {value!r} names none; name at least one, or leave {option} out")
    return names


def run_cases(
    cases: Iterable[ParityCase | Callable[..., Report]],
    *,
    backends: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    out: TextIO | None = None,
) -> Report:
    """Run each case, printing its table as soon as it is done; the combined report.

    A case is a :class:`~arrayrope.testing.ParityCase` or a callable returning a
    :class:`~arrayrope.testing.Report` (given ``backends`` and ``dtypes``).
    """
    from arrayrope.testing import Report

    out = out or sys.stdout
    cases = list(cases)
    total = Report()
    for i, case in enumerate(cases, 1):
        name = getattr(case, "name", None) or getattr(case, "__name__", "case")
        print(f"[{i}/{len(cases)}] {name}", file=out, flush=True)
        t0 = time.perf_counter()
        if hasattr(case, "run"):
            report = case.run(backends=backends, dtypes=dtypes)
        else:
            report = case(backends=backends, dtypes=dtypes)
        plain = type(report)(tuple(dataclasses.replace(r, case="") for r in report.rows), report.skipped)
        table = plain.format(skipped=False)
        if table:
            print("\n".join("    " + line for line in table.splitlines()), file=out)
        print(f"    ({time.perf_counter() - t0:.1f} s)", file=out, flush=True)
        total = total + report
    return total


def print_skipped(report: Report, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for what, reason in report.skipped:
        print(f"not run here: {what}: {reason.split(': ', 1)[-1]}", file=out)


def requested(value: str | None, option: str = "--backends") -> tuple[list[str] | None, list[tuple[str, str]]]:
    """The backend names of ``--backends`` (None: the default selection), and those of them that cannot run here.

    An unknown name is an error that names the option.
    """
    from arrayrope.backends import available

    names = split(value, option)
    if names is None:
        return None, []
    try:
        _, missing = available(names, with_reasons=True)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None
    return names, [(f"{option} {name}", reason) for name, reason in missing.items()]


def run(args: argparse.Namespace) -> int:
    from arrayrope.testing._cases import builtin_cases
    from arrayrope.testing._parity import _dtypes

    from ._verdict import conclude

    names, missing = requested(args.backends)
    dtypes = split(args.dtypes, "--dtypes")
    if dtypes is not None:
        _dtypes(dtypes)  # a bad name: the error names --dtypes (main)
    report = run_cases(builtin_cases(), backends=names, dtypes=dtypes)
    print_skipped(report)
    return conclude(report, missing=missing)
