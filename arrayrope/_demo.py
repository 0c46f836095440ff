"""``arrayrope demo``, the main job: one implementation, every installed array library.

Each encoding runs through :func:`arrayrope.testing.check_parity` on every
installed backend from the same NumPy inputs and is compared with an independent
float64 NumPy formula; the demo ends with a one-line verdict and exits 1 when a
row fails.

More rows come from optional modules, found at run time: a module listed in
``EXTRA_ROWS`` that defines ``_demo_case()`` contributes what that function
returns, preferably a :class:`arrayrope.testing.ParityCase` (run on every
backend), else a :class:`~arrayrope.testing.ParityReport`, a
:class:`~arrayrope.testing.ParityRow`, or a mapping with ``"ok"`` and optionally
``"name"``, ``"backend"``, ``"device"``, ``"dtype"``, ``"max_abs_error"``,
``"max_rel_error"``, ``"tolerance"`` and ``"note"`` (one row, e.g. an ONNX export
validated on ONNX Runtime). A module that is absent adds nothing; one whose
dependencies are missing is listed as not run; one that raises is a failed row.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import time
from typing import Any, Mapping

HELP = "the main job: every encoding on every installed backend against float64 references, with a verdict"

# module -> label of the row(s) its _demo_case() adds
EXTRA_ROWS = {
    "arrayrope.export": "ONNX export, validated on ONNX Runtime",
    "arrayrope.axial": "2-D axial RoPE on an image grid",
}

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
        "--backends", default=None, help="comma-separated backends (default: ARRAYROPE_BACKENDS or all installed)"
    )


def run(args: argparse.Namespace) -> int:
    from arrayrope.testing import backends as available
    from arrayrope.testing._cases import builtin_cases

    from ._parity_cli import print_skipped, run_cases, split

    t0 = time.perf_counter()
    names = split(args.backends)
    print(INTRO)
    print("looking for installed array libraries...", flush=True)
    try:
        found = available(names)
    except ValueError as exc:
        print(f"arrayrope demo: error: {exc}")
        return 2
    print("backends here:", ", ".join(f"{b.name} ({b.device_label})" for b in found) or "none", flush=True)
    cases: list[Any] = builtin_cases()
    cases = cases[:1] + [dataclasses.replace(c, dtypes=("float32",)) for c in cases[1:]]
    extras, absent = _extras()
    report = run_cases(cases + extras, backends=names)
    from arrayrope.testing import ParityReport

    report = report + ParityReport(skipped=tuple(absent))
    print_skipped(report)
    print(_verdict(report, found, time.perf_counter() - t0))
    return 0 if report.ok and report.rows else 1


def _verdict(report: Any, found: list, seconds: float) -> str:
    rows, failed = report.rows, report.failures
    libs = sorted({r.backend for r in rows})
    if not rows:
        return f"verdict: NOTHING RAN: no backend available ({seconds:.0f} s)"
    if failed:
        worst = "; ".join(f"{r.case} on {r.backend} {r.dtype}: {r.note}" for r in failed[:3])
        return f"verdict: FAIL: {len(failed)} of {len(rows)} rows disagree ({worst}) ({seconds:.0f} s)"
    return (
        f"verdict: PASS: all {len(rows)} rows agree with their float64 references "
        f"on {len(libs)} backends ({', '.join(libs)}) in {seconds:.0f} s"
    )


def _extras() -> tuple[list[Any], list[tuple[str, str]]]:
    """Row makers from the optional modules, and (label, reason) for those that cannot run here."""
    makers: list[Any] = []
    absent: list[tuple[str, str]] = []
    for module_name, label in EXTRA_ROWS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if exc.name != module_name:  # the module exists, a dependency of it does not
                absent.append((label, f"{type(exc).__name__}: {exc}"))
            continue
        make = getattr(module, "_demo_case", None)
        if callable(make):
            makers.append(_ExtraCase(label, make))
    return makers, absent


@dataclasses.dataclass
class _ExtraCase:
    name: str
    make: Any

    def run(self, *, backends: Any = None, dtypes: Any = None) -> Any:
        from arrayrope.testing import ParityCase, ParityReport, ParityRow

        try:
            got = self.make()
            if isinstance(got, ParityCase):
                if not got.name:
                    got = dataclasses.replace(got, name=self.name)
                return got.run(backends=backends, dtypes=dtypes)
            if isinstance(got, ParityReport):
                return got
            if isinstance(got, ParityRow):
                return ParityReport((got,))
            if isinstance(got, Mapping):
                return ParityReport((_row_from_mapping(got, self.name),))
            raise TypeError(f"_demo_case() returned {type(got).__name__}; expected a ParityCase, report, row or dict")
        except Exception as exc:  # a failing extra is a failed row, the demo goes on
            nan = math.nan
            note = f"raised {type(exc).__name__}: {exc}"
            return ParityReport((ParityRow("-", "-", "-", nan, nan, nan, False, note, self.name),))


def _row_from_mapping(m: Mapping, label: str) -> Any:
    from arrayrope.testing import ParityRow

    def num(key: str) -> float:
        value = m.get(key)
        return math.nan if value is None else float(value)

    return ParityRow(
        backend=str(m.get("backend", "-")),
        device=str(m.get("device", "-")),
        dtype=str(m.get("dtype", "-")),
        max_abs_error=num("max_abs_error"),
        max_rel_error=num("max_rel_error"),
        tolerance=num("tolerance"),
        ok=bool(m["ok"]),
        note=str(m.get("note", "")),
        case=str(m.get("name", label)),
    )
