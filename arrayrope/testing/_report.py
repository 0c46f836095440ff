"""The report of a comparison: rows of (backend, device, dtype, errors, tolerance, verdict).

One type serves :func:`~arrayrope.testing.check_parity` and
:func:`arrayrope.export.validate`, so a parity check on array libraries and a
validation on ONNX runtimes read, print and combine the same way.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

__all__ = ["Report", "Row"]


@dataclasses.dataclass(frozen=True)
class Row:
    """One comparison: a backend (or runtime), device and dtype against the reference.

    ``max_rel_error`` is the largest absolute error divided by the largest absolute
    reference value (elementwise relative errors are meaningless where the reference
    crosses zero); ``ok`` means ``max_abs_error <= tolerance`` and that the output had
    the expected namespace, device, dtype and shape. ``note`` says why a row failed.
    """

    backend: str
    device: str
    dtype: str
    max_abs_error: float
    max_rel_error: float
    tolerance: float
    ok: bool
    note: str = ""
    case: str = ""


@dataclasses.dataclass(frozen=True)
class Report:
    """Rows of a parity check or of an export validation; prints as a table.

    ``ok`` is true when every row passed. ``skipped`` lists ``(what, reason)`` for
    backends, dtypes or runtimes that could not run here; a skip is not a failure.
    ``title`` says what was checked. Reports combine with ``+``.
    """

    rows: tuple[Row, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    title: str = ""

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def failures(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if not r.ok)

    def worst(self) -> Row | None:
        """The failed row furthest beyond its tolerance (a row without numbers counts as furthest)."""
        failed = self.failures
        if not failed:
            return None

        def excess(r: Row) -> float:
            if math.isnan(r.max_abs_error) or math.isnan(r.tolerance) or r.tolerance <= 0:
                return math.inf
            return r.max_abs_error / r.tolerance

        return max(failed, key=excess)

    def __add__(self, other: object) -> Report:
        if not isinstance(other, Report):
            return NotImplemented
        skipped = self.skipped + tuple(s for s in other.skipped if s not in self.skipped)
        return Report(self.rows + other.rows, skipped, self.title or other.title)

    def format(self, *, header: bool = True, skipped: bool = True) -> str:
        """The table as text (what ``str(report)`` gives), with or without column titles and skips."""
        with_case = any(r.case for r in self.rows)
        numbers = ["max abs err", "max rel err", "tolerance"]
        cols = [*(["case"] if with_case else []), "backend", "device", "dtype", *numbers, "ok"]
        lines = []
        for r in self.rows:
            cells = ([r.case] if with_case else []) + [
                r.backend,
                r.device,
                r.dtype,
                _num(r.max_abs_error),
                _num(r.max_rel_error),
                _num(r.tolerance),
                "yes" if r.ok else "FAIL" + (f": {r.note}" if r.note else ""),
            ]
            lines.append(cells)
        widths = [max([len(c)] + [len(cells[i]) for cells in lines]) for i, c in enumerate(cols)]
        widths[-1] = 0
        text = [self.title] if self.title and header else []
        if header and lines:
            text.append(_line(cols, widths))
        text.extend(_line(cells, widths) for cells in lines)
        for what, reason in self.skipped if skipped else ():
            text.append(f"skipped {what}: {reason}")
        return "\n".join(text)

    def __str__(self) -> str:
        return self.format()


def _num(v: float) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.2e}"


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    out = []
    for i, (c, w) in enumerate(zip(cells, widths, strict=False)):
        right = 3 <= i - (len(cells) - 7) <= 5  # the numeric columns
        out.append(c.rjust(w) if right else c.ljust(w))
    return "  ".join(out).rstrip()


