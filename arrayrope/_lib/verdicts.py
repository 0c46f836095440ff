"""Verdicts: the report of a comparison, and the tolerance rule every row is judged by.

One report type (rows of backend, device, dtype, errors, tolerance, verdict) serves
:func:`~arrayrope.testing.check_parity` and :func:`arrayrope.export.validate`, so a
parity check on array libraries and a validation on ONNX runtimes read, print,
combine and conclude the same way; :func:`tolerance_at` is the rule of both.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

from . import checks

__all__ = [
    "EPS",
    "EXIT_STATUS",
    "ULPS",
    "Report",
    "Row",
    "Status",
    "default_tolerance",
    "tolerance_at",
    "tolerance_value",
]

EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
#: Units in the last place that a correct result may differ by, per dtype (see default_tolerance).
ULPS = {"float16": 4, "bfloat16": 4, "float32": 4, "float64": 4096}

Status: TypeAlias = Literal["verified", "failed", "not verified"]
"""What a report concludes: every numeric check agreed, one disagreed, or nothing numeric ran."""

#: The exit status of a command whose verdict is each status (2 is kept for usage and input errors).
EXIT_STATUS: dict[Status, int] = {"verified": 0, "failed": 1, "not verified": 3}


@dataclasses.dataclass(frozen=True)
class Row:
    """One comparison: a backend (or runtime), device and dtype against the reference.

    Parameters
    ----------
    backend : str
        The backend or runtime that computed the result (``"numpy"``, ``"onnxruntime"``...).
    device : str
        Its device (``"cpu"``, ``"cuda:0"``...).
    dtype : str
        The dtype compared.
    max_abs_error : float
        The largest absolute difference from the reference (NaN where nothing ran).
    max_rel_error : float
        ``max_abs_error`` divided by the largest absolute reference value (elementwise
        relative errors are meaningless where the reference crosses zero).
    tolerance : float
        The absolute error allowed (:func:`tolerance_at`).
    ok : bool
        ``max_abs_error <= tolerance``, and the output had the expected namespace,
        device, dtype and shape.
    note : str
        Why a row failed, or what it is.
    case : str
        The case compared (a parity case or an export input).
    numeric : bool
        False for a check that compares no values (``onnx.checker``, shape inference):
        such a row can fail a report but never verifies one.

    Examples
    --------
    >>> from arrayrope.testing import Row
    >>> Row("numpy", "cpu", "float32", 1e-7, 1e-7, 5e-7, True).ok
    True
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
    numeric: bool = True


@dataclasses.dataclass(frozen=True)
class Report:
    """Rows of a parity check or of an export validation; prints as a table.

    Reports combine with ``+``.

    Parameters
    ----------
    rows : tuple of Row
        One per comparison that ran.
    skipped : tuple of (str, str)
        ``(what, reason)`` for backends, dtypes or runtimes that could not run here; a
        skip is not a failure, and it verifies nothing.
    title : str
        What was checked.

    Notes
    -----
    ``status`` concludes: ``"failed"`` when a row failed, ``"not verified"`` when no
    numeric row ran (everything was skipped, or only structural checks ran),
    ``"verified"`` otherwise. ``ok`` is ``status == "verified"``: a report in which
    nothing was compared is never ok. ``verdict()`` says it in one line, with what
    ran and what did not (the reasons are in ``skipped`` and in the printed report).

    Examples
    --------
    >>> from arrayrope.testing import Report, Row
    >>> Report(skipped=(("cupy", "No module named 'cupy'"),)).status
    'not verified'
    >>> Report((Row("numpy", "cpu", "float32", 1e-7, 1e-7, 5e-7, True),)).verdict()
    'verified: 1 numeric check agrees (numpy cpu)'
    """

    rows: tuple[Row, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    title: str = ""

    @property
    def status(self) -> Status:
        """``"failed"``, ``"not verified"`` (no numeric row) or ``"verified"``."""
        if any(not r.ok for r in self.rows):
            return "failed"
        return "verified" if any(r.numeric for r in self.rows) else "not verified"

    @property
    def ok(self) -> bool:
        """Whether numeric checks ran and every row passed (``status == "verified"``)."""
        return self.status == "verified"

    @property
    def exit_status(self) -> int:
        """0 verified, 1 failed, 3 not verified: the exit status of a command with this verdict."""
        return EXIT_STATUS[self.status]

    def verdict(self) -> str:
        """One line: the status, how many numeric checks agreed or failed and where, and what did not run."""
        numeric = [r for r in self.rows if r.numeric]
        where = sorted({_where(dataclasses.replace(r, case="", dtype="")) for r in numeric if r.ok})
        failed = self.failures
        if failed:
            worst = "; ".join(_where(r) + (f": {r.note}" if r.note else "") for r in failed[:3])
            text = f"failed: {len(failed)} of {len(self.rows)} checks disagree ({worst})"
        elif numeric:
            agree = "agrees" if len(numeric) == 1 else "agree"
            text = f"verified: {_count(len(numeric), 'numeric check')} {agree} ({', '.join(where)})"
        else:
            ran = f" ({_count(len(self.rows), 'structural check')} passed)" if self.rows else ""
            text = f"not verified: no numeric check could run here{ran}"
        if self.skipped:
            text += "; not run here: " + ", ".join(what for what, _ in self.skipped) + " (the report says why)"
        return text

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


def _where(r: Row) -> str:
    """``case on backend device dtype``, the parts a row has."""
    at = " ".join(p for p in (r.backend, r.device, r.dtype) if p and p != "-")
    return " on ".join(p for p in (r.case, at) if p)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _num(v: float) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.2e}"


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    out = []
    for i, (c, w) in enumerate(zip(cells, widths, strict=False)):
        right = 3 <= i - (len(cells) - 7) <= 5  # the numeric columns
        out.append(c.rjust(w) if right else c.ljust(w))
    return "  ".join(out).rstrip()


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """Give the ``(rtol, atol)`` that a correct result in ``dtype`` meets: ``ULPS[dtype]`` units in the last place.

    Parameters
    ----------
    dtype : dtype or str
        One of float16, bfloat16, float32 and float64 (of any library, or its name).

    Returns
    -------
    tuple of float
        ``(rtol, atol)``, equal.

    Notes
    -----
    How the figures are derived:

    * float16, bfloat16, float32: 4 ulps. Results in these dtypes are best computed in
      a wider type and rounded once (arrayrope builds tables in float64 and rotates
      half-precision inputs in float32), so their error is the rounding of the inputs,
      the tables and the output, half an ulp each, whatever the math library.
    * float64: 4096 ulps (``2**-40``, 9.1e-13). A float64 result has no wider type to be
      computed in: every step of the chain rounds in float64, within half an ulp for
      ``+ - * /`` and within a few ulps for ``pow``, ``exp``, ``cos`` and ``sin``, where
      the vectorised kernels that NumPy and other libraries pick by CPU (AVX-512 among
      them) differ from the C library, and from one CPU to the next, by an ulp or more.
      A relative error in an intermediate reaches the result multiplied by the size of
      what follows it: a frequency ``theta`` one ulp apart moves the angle ``p * theta``
      by ``p * theta * 2**-52`` radians, which cos and sin pass on unchanged. 4096 ulps
      cover frequencies a few ulps apart at angles up to about a thousand radians
      (positions up to about 1000 on the fastest pair, 4096 with frequencies one ulp
      apart); a defect (a wrong layout, a position off by one, a base off by 1e-6, any
      step done in float32) is larger by orders of magnitude.

    Far positions. A float64 reference that computes ``cos(p * theta)`` as written is
    itself off by up to half an ulp of the angle, ``|p * theta| * 2**-53`` (6e-11 at
    ``p = 2**20``, ``theta = 1``), which exceeds the float64 tolerance while a library
    that reduces angles exactly, as arrayrope does, is right. Either reduce the
    reference's angles exactly (:func:`arrayrope.testing.exact_angles`, or mpmath), or add the
    reference's own error to the tolerance: ``atol=default_tolerance("float64")[1] +
    2**-52 * max|p * theta| * max|x|``.

    ``rtol`` applies to the magnitude of the expected values and ``atol`` equals it, so
    values near zero are held to the same absolute error as the largest ones.

    Examples
    --------
    >>> from arrayrope.testing import default_tolerance
    >>> default_tolerance("float32")
    (4.76837158203125e-07, 4.76837158203125e-07)
    >>> default_tolerance("float64")
    (9.094947017729282e-13, 9.094947017729282e-13)
    """
    name = str(dtype).split(".")[-1]
    if name not in EPS:
        raise ValueError(f"dtype must be one of {sorted(EPS)}, got {dtype!r}")
    tol = ULPS[name] * EPS[name]
    return tol, tol


def tolerance_at(dtype: Any, scale: float, *, rtol: float | None = None, atol: float | None = None) -> float:
    """Give the absolute error allowed for results of ``dtype`` whose largest magnitude is ``scale``.

    ``atol + rtol * scale``, with :func:`default_tolerance` of ``dtype`` where
    ``rtol`` or ``atol`` is not given: the rule of :func:`~arrayrope.testing.check_parity` rows and of
    :func:`arrayrope.export.validate`.

    Parameters
    ----------
    dtype : dtype or str
        The dtype of the results.
    scale : float
        The largest magnitude of the expected values, >= 0.
    rtol : float, optional
        Relative tolerance (default: :func:`default_tolerance` of ``dtype``).
    atol : float, optional
        Absolute tolerance (default: :func:`default_tolerance` of ``dtype``).

    Returns
    -------
    float
        ``atol + rtol * scale``.

    Examples
    --------
    >>> from arrayrope.testing import tolerance_at
    >>> tolerance_at("float32", 3.0) == 4 * 2**-23 * (1 + 3.0)
    True
    """
    d_rtol, d_atol = default_tolerance(dtype)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not scale >= 0:
        raise (TypeError if not isinstance(scale, numbers.Real) or isinstance(scale, bool) else ValueError)(
            f"scale must be a real number >= 0 (the largest magnitude of the result), got {scale!r}"
        )
    rtol = d_rtol if rtol is None else tolerance_value(rtol, "rtol")
    atol = d_atol if atol is None else tolerance_value(atol, "atol")
    return atol + rtol * float(scale)


def tolerance_value(value: object, name: str) -> float:
    """A tolerance: a finite real >= 0."""
    out = checks.finite_real(value, name)
    if out < 0:
        raise ValueError(f"{name} must be >= 0, got {out}")
    return out
