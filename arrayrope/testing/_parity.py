"""``check_parity``: one function, every backend and dtype, one float64 NumPy reference."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeAlias

import numpy as np

from .. import backends as _backends
from .._lib import checks
from .._lib.verdicts import Report, Row, tolerance_at
from ..backends import Backend, to_numpy

__all__ = ["DTYPES", "ParityCase", "check_parity"]

DTYPES = ("float32", "float64", "float16", "bfloat16")

#: What ``backends=`` accepts: a backend or library name, a Backend, several of those, or None for all.
BackendSpec: TypeAlias = str | Backend | Iterable[str | Backend] | None
#: What ``reference=`` accepts: ``fn`` itself in float64, or an independent oracle with ``fn``'s signature.
Reference: TypeAlias = Literal["float64"] | Callable[..., object]


@dataclasses.dataclass(frozen=True)
class ParityCase:
    """A named call ``fn(*args)`` with its reference, ready for :func:`check_parity`.

    Used by ``arrayrope parity`` and ``arrayrope demo`` for the built-in encodings.

    Parameters
    ----------
    name : str
        What the case computes; each row of its report carries it.
    fn : callable
        As for :func:`check_parity`.
    args : tuple
        As for :func:`check_parity`.
    reference : callable or "float64"
        As for :func:`check_parity`.
    dtypes : tuple of str, optional
        The dtypes the case runs in (default: all of a backend's).
    rtol : float, optional
        As for :func:`check_parity`.
    atol : float, optional
        As for :func:`check_parity`.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> from arrayrope.testing import ParityCase
    >>> case = ParityCase("tables", lambda p: arrayrope.rope_tables(arrayrope.rope_frequencies(8), p)[0],
    ...                   (np.arange(4),), dtypes=("float32",))
    >>> case.run(backends=["numpy"]).status
    'verified'
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[object, ...] = ()
    reference: Reference = "float64"
    dtypes: tuple[str, ...] | None = None
    rtol: float | None = None
    atol: float | None = None

    def run(self, *, backends: BackendSpec = None, dtypes: Iterable[str] | None = None) -> Report:
        """:func:`check_parity` of this case; the rows carry the case's name."""
        if dtypes is not None and self.dtypes is not None:
            dtypes = [d for d in dtypes if d in self.dtypes]
            if not dtypes:  # none of the requested dtypes applies to this case
                return Report()
        report = check_parity(
            self.fn,
            *self.args,
            backends=backends,
            dtypes=self.dtypes if dtypes is None else dtypes,
            reference=self.reference,
            rtol=self.rtol,
            atol=self.atol,
        )
        rows = tuple(dataclasses.replace(r, case=self.name) for r in report.rows)
        return Report(rows, report.skipped)


def check_parity(
    fn: Callable[..., Any],
    *args: object,
    backends: BackendSpec = None,
    dtypes: Iterable[str] | None = None,
    reference: Reference = "float64",
    rtol: float | None = None,
    atol: float | None = None,
    check_dtype: bool = True,
) -> Report:
    """Run ``fn(*args)`` on every backend and dtype and compare each with a float64 NumPy run.

    Floating NumPy arrays in ``args`` are converted to each backend (on its device) in
    each dtype; integer and boolean NumPy arrays keep their dtype; anything else is
    passed unchanged. The reference is computed from the same input values (after
    rounding to the row's dtype), converted to float64 NumPy arrays, so a row measures
    only the error of the computation, not of the input's rounding.

    Parameters
    ----------
    fn : callable
        The function under test; it may return an array or a tuple/list of arrays.
    *args
        Its positional arguments, as NumPy arrays or plain values (use
        ``functools.partial`` or a lambda for keyword arguments).
    backends : iterable of str or Backend, optional
        Backend or library names (``"numpy"``, ``"torch"``, ``"torch-cuda"``...) or
        :class:`Backend` objects. Default: :func:`backends` (every installed one, or
        the ``ARRAYROPE_BACKENDS`` environment variable). A requested library that is
        not installed is listed in ``report.skipped`` with the reason.
    dtypes : iterable of str, optional
        Among ``float32, float64, float16, bfloat16``; default all. Dtypes a backend
        lacks are listed in ``report.skipped``.
    reference : "float64" or callable
        ``"float64"``: ``fn`` itself on float64 NumPy inputs (checks the backends
        against each other). A callable with ``fn``'s signature: an independent
        oracle, run on float64 NumPy inputs (checks ``fn`` against it).
    rtol, atol : float, optional
        A row passes when ``max_abs_error <= atol + rtol * max|reference|``; default
        :func:`default_tolerance` of the row's dtype.
    check_dtype : bool
        Also require floating outputs to have the row's dtype.

    Returns
    -------
    Report
        ``report.ok`` is true only when every row passed; ``print(report)`` shows the table.

    Notes
    -----
    A row fails, and the others still run, when ``fn`` raises on that backend, or
    returns an array of another library, device, dtype or shape than expected, or NaN
    where the reference has none. The reference run itself must succeed: its
    exception propagates. Lazy results (Dask, JAX) are computed for the comparison.
    A report whose every backend was skipped is ``"not verified"`` and not ``ok``.

    An oracle's own error belongs in the tolerance. A float64 oracle that computes
    ``cos(p * theta)`` as written rounds the angle by up to ``|p * theta| * 2**-53``
    (6e-11 at position ``2**20``), more than the float64 tolerance: at far positions
    give it exact angles (:func:`exact_angles`, mpmath) or widen ``atol`` by that bound
    (see :func:`default_tolerance`).

    Examples
    --------
    >>> import numpy as np
    >>> from arrayrope.testing import check_parity
    >>> x = np.linspace(-1.0, 1.0, 8)
    >>> report = check_parity(lambda a: a * a, x, backends=["numpy"], dtypes=["float32", "float64"])
    >>> report.ok, [r.dtype for r in report.rows]
    (True, ['float32', 'float64'])
    >>> check_parity(lambda a: a + 1e-3, x, backends=["numpy"], dtypes=["float32"],
    ...              reference=lambda a: a).ok
    False
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not (reference == "float64" if isinstance(reference, str) else callable(reference)):
        raise ValueError(f"reference must be 'float64' or a callable oracle, got {reference!r}")
    check_dtype = checks.boolean(check_dtype, "check_dtype")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if tol is not None and not checks.finite_real(tol, name) >= 0:
            raise ValueError(f"{name} must be >= 0, got {tol}")
    wanted = _dtypes(dtypes)
    selected, skipped = _selected(backends)
    ref_fn = fn if isinstance(reference, str) else reference
    refs: dict[str, list[np.ndarray]] = {}
    rows: list[Row] = []
    for b in selected:
        for dtype in wanted:
            if dtype not in b.dtypes:
                if dtypes is not None:
                    skipped.append((f"{b.name} {dtype}", f"{b.name} has no {dtype}"))
                continue
            if dtype not in refs:
                refs[dtype] = _flatten(ref_fn(*[_rounded(a, dtype) for a in args]), "reference")
            rows.append(_row(fn, args, b, dtype, refs[dtype], rtol, atol, check_dtype))
    return Report(tuple(rows), tuple(skipped))


def _dtypes(dtypes: Iterable[str] | None) -> tuple[str, ...]:
    if dtypes is None:
        return DTYPES
    if isinstance(dtypes, str):
        dtypes = [d for d in dtypes.split(",") if d]
    if not isinstance(dtypes, Iterable):
        raise TypeError(f"dtypes must be dtype names such as ['float32', 'float64'], got {dtypes!r}")
    dtypes = tuple(dtypes)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise ValueError(f"dtypes must be a non-empty selection of {list(DTYPES)}, got {list(dtypes)}")
    return dtypes


def _selected(spec: BackendSpec) -> tuple[list[Backend], list[tuple[str, str]]]:
    if spec is None:
        found, missing = _backends.available(with_reasons=True)
        return found, list(missing.items())
    if isinstance(spec, (str, Backend)):
        spec = [spec]
    if not isinstance(spec, Iterable):
        raise TypeError(f"backends must be backend names or Backend objects, got {spec!r}")
    objs = [s for s in spec if isinstance(s, Backend)]
    names = [s for s in spec if not isinstance(s, Backend)]
    for s in names:
        if not isinstance(s, str):
            raise TypeError(f"backends must be names or Backend objects, got {s!r}")
    found, missing = _backends.available(names, with_reasons=True) if names else ([], {})
    return objs + found, list(missing.items())


def _rounded(a: Any, dtype: str) -> Any:
    """A floating NumPy argument rounded to ``dtype`` and widened back to float64."""
    if not (isinstance(a, np.ndarray) and a.dtype.kind == "f"):
        return a
    if dtype == "bfloat16":
        bits = a.astype(np.float32).view(np.uint32)
        bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        return bits.view(np.float32).astype(np.float64)
    return a.astype(dtype).astype(np.float64)


def _convert(a: Any, b: Backend, dtype: str) -> Any:
    if isinstance(a, np.ndarray):
        if a.dtype.kind == "f":
            return b.asarray(a, dtype=dtype)
        return b.xp.asarray(a, device=b.device)
    return a


def _flatten(out: Any, what: str) -> list[Any]:
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    if not items:
        raise ValueError(f"{what} returned an empty {type(out).__name__}; expected arrays")
    return items


def _row(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    b: Backend,
    dtype: str,
    ref: list[Any],
    rtol: float | None,
    atol: float | None,
    check_dtype: bool,
) -> Row:
    nan = float("nan")

    def fail(note: str, err: float = nan, rel: float = nan, tol: float = nan) -> Row:
        return Row(b.name, b.device_label, dtype, err, rel, tol, False, note)

    try:
        out = _flatten(fn(*[_convert(a, b, dtype) for a in args]), "fn")
    except Exception as exc:  # the row fails; the other backends still run
        return fail(f"raised {type(exc).__name__}: {_short(exc)}")
    if len(out) != len(ref):
        return fail(f"returned {len(out)} outputs, the reference {len(ref)}")
    lib = b.library
    worst_abs, worst_rel, worst_tol, ok = 0.0, 0.0, 0.0, True
    excess = -math.inf
    for i, (o, r) in enumerate(zip(out, ref, strict=True)):
        which = f"output {i} " if len(out) > 1 else ""
        if not _backends.is_array(o) or _backends.library_of(o) != lib:
            found = _backends.library_of(o) or type(o).__module__.split(".")[0]
            return fail(f"{which}is a {found} {type(o).__name__}, expected an array of {lib}")
        dev = _backends.device_of(o)
        if dev is not None and not _same_device(dev, b.device):
            return fail(f"{which}is on device {dev}, expected {b.device_label}")
        try:
            a = to_numpy(o)
        except Exception as exc:
            return fail(f"{which}could not be computed: {type(exc).__name__}: {_short(exc)}")
        r = np.asarray(to_numpy(r))
        if a.shape != r.shape:
            return fail(f"{which}has shape {a.shape}, the reference {r.shape}")
        got = str(o.dtype).split(".")[-1]
        if check_dtype and r.dtype.kind == "f" and got != dtype:
            return fail(f"{which}has dtype {got}, expected {dtype}")
        a64, r64 = a.astype(np.float64), r.astype(np.float64)
        if np.any(np.isnan(a64) & ~np.isnan(r64)):
            return fail(f"{which}has NaN where the reference has none")
        err = np.abs(a64 - r64)
        err = np.where(np.isnan(a64) & np.isnan(r64), 0.0, err)
        scale = float(np.nanmax(np.abs(r64))) if r64.size else 0.0
        max_err = float(np.max(err)) if err.size else 0.0
        tol = tolerance_at(dtype, scale, rtol=rtol, atol=atol)
        rel = max_err / scale if scale > 0 else (0.0 if max_err == 0 else math.inf)
        ok = ok and max_err <= tol
        if max_err - tol > excess:
            excess, worst_abs, worst_rel, worst_tol = max_err - tol, max_err, rel, tol
    note = "" if ok else "error above tolerance"
    return Row(b.name, b.device_label, dtype, worst_abs, worst_rel, worst_tol, ok, note)


def _same_device(found: Any, expected: Any) -> bool:
    """Devices equal up to a default index (PyTorch's ``cuda`` is ``cuda:0``)."""
    f, e = str(found), str(expected)
    return f == e or (":" not in e and f == e + ":0")


def _short(exc: BaseException, limit: int = 120) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
