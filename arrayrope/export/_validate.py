"""Validation of exported rotary models against the core's float64 result."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt
import onnx

import arrayrope
from arrayrope._lib import checks
from arrayrope._lib.verdicts import Report, Row, tolerance_at

from ._graph import ModelSource, load_model, providers_named
from ._structure import structure_checks
from .build._spec import META_KEY, MS_DOMAIN, Spec, np_dtype

Feed: TypeAlias = dict[str, npt.NDArray[Any]]
"""The inputs of one run, by name."""
Runner: TypeAlias = Callable[[Feed], Sequence[npt.NDArray[Any]]]
"""Runs the model on a feed and returns its outputs."""


class ValidationError(AssertionError):
    """An exported model disagrees with the core, fails a structural check, or could not run at all.

    Parameters
    ----------
    message : str
        What failed, in one line.
    report : Report
        Every row of the validation (also ``.report``).

    Examples
    --------
    >>> from arrayrope.export import ValidationError, rotary_model, validate
    >>> try:
    ...     validate(rotary_model(8, max_positions=16), providers=[], reference_evaluator=False)
    ... except ValidationError as exc:
    ...     exc.report.status
    'not verified'
    """

    def __init__(self, message: str, report: Report):
        super().__init__(message)
        self.report = report

    def __reduce__(self) -> tuple[type[ValidationError], tuple[str, Report]]:
        # raised in a worker process, it reaches the caller by pickling (an exception pickles its args alone)
        return type(self), (str(self), self.report)


#: Validation reports are :class:`arrayrope.testing.Report` objects (one row per check).
ValidationReport = Report


def _spec_of(model: onnx.ModelProto) -> Spec:
    meta = {p.key: p.value for p in model.metadata_props}
    if META_KEY not in meta:
        raise ValueError(
            f"model has no {META_KEY!r} metadata: validate needs a model made by arrayrope.export.rotary_model "
            "(arrayrope export); another model's rotations are checked against its config by audit_rotary "
            "(arrayrope audit MODEL --config CONFIG)"
        )
    return Spec.from_json(meta[META_KEY])


@dataclasses.dataclass(frozen=True)
class Case:
    """Inputs of one run in float64, the positions they are at, and the heads of each input."""

    positions: npt.NDArray[np.int64]
    x64: dict[str, npt.NDArray[np.float64]]
    heads: dict[str, int]


def outside_ids(spec: Spec) -> npt.NDArray[np.int64]:
    """Position ids a graph has no table row for (NaN in the result), with valid ones between them."""
    if spec.options.tables == "computed":
        limit = spec.position_limit  # (-limit, limit) rotates, negative ids backwards
        return np.array([[-(limit - 1), -7, limit, -limit, 2**40, -(2**62), 0, limit - 1]], dtype=np.int64)
    n = spec.options.rows
    return np.array([[-1, n, n + 5, -(2**40), 2**62, 0, n - 1, -n]], dtype=np.int64)


def _cases(spec: Spec, rng: np.random.Generator) -> list[Case]:
    """Random inputs at random positions, positions at the table end, a one-token decode step, and ids
    outside the tables."""
    o = spec.options
    limit = spec.position_limit
    heads = o.num_heads or 3
    kv = o.num_kv_heads or (2 if o.num_heads is None else heads)
    cases = []
    shapes = [(2, 7, "random"), (2, 5, "end"), (1, 1, "end")]
    if o.dtype in ("float16", "bfloat16"):  # enough values for a stable maximum rounding error
        shapes[0] = (4, 64, "random")
    if o.position_ids:
        shapes.append((1, outside_ids(spec).shape[1], "outside"))
    for batch, seq, where in shapes:
        if o.position_ids:
            if where == "random":
                pos = rng.integers(0, limit, (batch, seq))
            elif where == "outside":
                pos = outside_ids(spec)
            else:
                pos = limit - 1 - rng.integers(0, min(limit, 4), (batch, seq))
            pos = pos.astype(np.int64)
            if spec.mrope_axes is not None:  # M-RoPE: one row of ids per axis, each its own
                pos = np.stack([np.roll(pos, a, axis=-1) if a else pos for a in range(spec.mrope_axes)])
        else:
            seq = min(seq, spec.position_limit)
            pos = np.broadcast_to(np.arange(seq, dtype=np.int64), (batch, seq))
        names = [("q", heads), ("k", kv)] if o.qk else [("x", heads)]
        xs = {}
        for name, h in names:
            shape = (batch, h, seq, spec.head_dim) if o.rank == 4 else (batch, seq, h * spec.head_dim)
            xs[name] = rng.standard_normal(shape)
        cases.append(Case(pos, xs, dict(names)))
    return cases


def reference(
    spec: Spec,
    x: npt.ArrayLike,
    positions: npt.NDArray[np.integer[Any]],
    heads: int,
    table_dtype: npt.DTypeLike | None = None,
) -> npt.NDArray[np.float64]:
    """The core's result in float64 NumPy for one input of the model (tables rounded to ``table_dtype`` if given);
    NaN in the rotated features of positions the graph has no table row for (M-RoPE: in the pairs of
    the axis whose id it is)."""
    o = spec.options
    if o.mrope_sections is None:
        cos, sin = (np.asarray(t) for t in arrayrope.rope_tables(spec.freqs, positions, dtype=np.float64))
    else:
        cos, sin = (
            np.asarray(t)
            for t in arrayrope.mrope_tables(
                spec.freqs, positions, sections=o.mrope_sections, interleaved=o.mrope_interleaved, dtype=np.float64
            )
        )
    if table_dtype is not None:
        cos, sin = (t.astype(table_dtype).astype(np.float64) for t in (cos, sin))
    if o.tables == "computed":
        outside = np.abs(positions) >= spec.position_limit
    else:
        outside = (positions < 0) | (positions >= o.rows)
    if o.mrope_sections is not None:  # (axes, B, S) -> (B, S, pairs): each pair outside where its axis is
        outside = np.moveaxis(outside[spec.mrope_axis_of()], 0, -1)
    cos[outside], sin[outside] = np.nan, np.nan
    x64 = np.asarray(x, dtype=np.float64)
    layout = spec.options.layout
    if spec.options.rank == 4:
        return np.asarray(arrayrope.apply_rotary(x64, cos[:, None], sin[:, None], layout=layout), dtype=np.float64)
    b, s, _ = x64.shape
    y = arrayrope.apply_rotary(x64.reshape(b, s, heads, -1), cos[:, :, None], sin[:, :, None], layout=layout)
    return np.asarray(y, dtype=np.float64).reshape(b, s, -1)


def _tolerance(spec: Spec, expected: npt.NDArray[np.float64], positions: npt.NDArray[np.int64]) -> float:
    """The error allowed for one output: the dtype's rule at the scale of the result (see validate)."""
    dtype = spec.options.dtype
    scale = float(np.nanmax(np.abs(expected), initial=0.0))
    tol = tolerance_at(dtype, scale)
    if dtype == "float64":  # float64 angles p * theta (in the graph or the core) round by ~eps * p * theta
        inside = positions[np.abs(positions) < spec.position_limit]
        tol += 4 * float(np.finfo(np.float64).eps) * float(np.max(np.abs(inside), initial=0)) * scale
    return tol


class Worst(NamedTuple):
    """The largest error relative to its tolerance, and where it is."""

    error: float
    relative: float
    tolerance: float
    where: str


def _compare(spec: Spec, run: Runner, cases: list[Case]) -> Worst:
    """The worst error over all cases, against the core on the values fed."""
    o = spec.options
    dt = np_dtype(o.dtype)
    worst = Worst(-1.0, math.nan, 1.0, "")
    outputs = ["q_rot", "k_rot"] if o.qk else ["y"]
    for i, case in enumerate(cases):
        feed: Feed = {k: v.astype(dt) for k, v in case.x64.items()}
        if o.position_ids:
            feed["position_ids"] = case.positions
        got = run(feed)
        for name, out_name, y in zip(case.x64, outputs, got, strict=True):
            fed = feed[name].astype(np.float64)
            expected = reference(spec, fed, case.positions, case.heads[name])
            tol = _tolerance(spec, expected, case.positions)
            y64 = np.asarray(y).astype(np.float64)
            nan = np.isnan(expected)
            diff = np.abs(np.where(nan, 0.0, y64) - np.where(nan, 0.0, expected))
            diff[nan != np.isnan(y64)] = math.inf  # NaN exactly where there is no table row
            err = float(np.max(diff)) if diff.size else 0.0
            if not np.isfinite(err):
                err = math.inf
            if err / tol > worst.error / worst.tolerance:
                at = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
                scale = float(np.nanmax(np.abs(expected), initial=0.0))
                rel = err / scale if scale > 0 else math.nan
                worst = Worst(err, rel, tol, f"case {i} {out_name}{list(map(int, at))}")
    return worst


class Run(NamedTuple):
    """One run of the model: where, and how (None when it cannot run here, with the reason)."""

    runtime: str
    device: str
    run: Runner | None
    why: str


def _ort_runs(model: onnx.ModelProto, providers: list[str], bfloat16: bool) -> list[Run]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    data = model.SerializeToString()
    runs: list[Run] = []
    for prov in providers:
        for level_name, level in (
            ("off", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
            ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        ):
            device = f"{prov.replace('ExecutionProvider', '')} (optimisation {level_name})"
            if prov not in available:
                runs.append(Run("onnxruntime", device, None, f"{prov} is not available in this onnxruntime build"))
                continue
            opts = ort.SessionOptions()
            opts.graph_optimization_level = level
            opts.log_severity_level = 3
            fallback = ["CPUExecutionProvider"] if prov != "CPUExecutionProvider" else []
            try:
                sess = ort.InferenceSession(data, opts, providers=[prov, *fallback])
            except Exception as exc:  # e.g. no kernel for this dtype on this provider
                runs.append(Run("onnxruntime", device, None, f"session not created: {str(exc).splitlines()[0][:120]}"))
                continue
            if sess.get_providers()[0] != prov:
                runs.append(Run("onnxruntime", device, None, f"{prov} did not take the graph"))
                continue
            run = functools.partial(_run_bound, sess) if bfloat16 else functools.partial(sess.run, None)
            runs.append(Run("onnxruntime", device, run, ""))
    return runs


def _run_bound(sess: Any, feed: Feed) -> list[npt.NDArray[Any]]:
    """``sess`` run on ``feed`` through an I/O binding: ONNX Runtime's ``run`` takes and returns no bfloat16
    arrays, so bfloat16 values go in and come out as their bits (uint16), here in host memory."""
    import ctypes

    import onnxruntime as ort

    binding = sess.io_binding()
    kept = []  # the bound inputs' memory, alive until the run returns
    for name, value in feed.items():
        arr = np.require(value, requirements="C")  # 0-d stays 0-d (ascontiguousarray makes it 1-d)
        kept.append(arr)
        if arr.dtype.name == "bfloat16":
            bits = arr.view(np.uint16)
            binding.bind_ortvalue_input(
                name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)
            )
        else:
            binding.bind_cpu_input(name, arr)
    for out in sess.get_outputs():
        binding.bind_output(out.name, "cpu")
    sess.run_with_iobinding(binding)
    del kept
    results = []
    for value in binding.get_outputs():
        if value.data_type() != "tensor(bfloat16)":
            results.append(value.numpy())
            continue
        shape = tuple(value.shape())
        n = math.prod(shape)
        bits = (
            np.array((ctypes.c_uint16 * n).from_address(value.data_ptr()), dtype=np.uint16)
            if n
            else np.empty(0, np.uint16)
        )
        results.append(bits.view(np_dtype("bfloat16")).reshape(shape))
    return results


def _reference_runner(model: onnx.ModelProto) -> Runner:
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)

    def run(feed: Feed) -> Sequence[npt.NDArray[Any]]:
        outputs = evaluator.run(None, feed)
        return list(outputs.values()) if isinstance(outputs, dict) else outputs

    return run


def validate(
    model: ModelSource,
    *,
    providers: Sequence[str] | str | None = None,
    reference_evaluator: bool = True,
    seed: int = 0,
    raise_on_failure: bool = True,
) -> ValidationReport:
    """Check an exported rotary model structurally and numerically against the core.

    Runs ``onnx.checker`` (full check), strict shape inference, ONNX Runtime on each
    provider with graph optimisation off and fully on, and ONNX's reference
    evaluator where it knows the ops (not for ``target="ort"``). Each run is
    compared with :func:`arrayrope.apply_rotary` in float64 on random inputs at
    random positions, at positions near the table end, for a one-token step, and
    at ids outside the tables, which must give NaN exactly in their rotated features.

    Parameters
    ----------
    model : onnx.ModelProto or path
        A model from :func:`rotary_model` (it carries the metadata the reference needs).
    providers : str or list of str, optional
        ``"cuda"``, ``"cpu"`` or full ONNX Runtime names. Default: CUDA first when
        available, then CPU. A requested provider that is not available (or has no
        kernel for the model's dtype) gives a skipped row, not a failure.
    reference_evaluator : bool
        Also run ``onnx.reference.ReferenceEvaluator``.
    seed : int
        Seed of the random inputs.
    raise_on_failure : bool
        Raise :class:`ValidationError` naming the worst mismatch when a check fails,
        or saying so when no numeric run could happen here (``report.status`` is
        ``"not verified"``: a model that nothing ran is never called valid).

    Returns
    -------
    arrayrope.testing.Report
        One row per check (runtime, device, dtype, max error, tolerance, result),
        ``skipped`` for the runs that cannot happen here; ``str()`` prints a table.
        ``report.status`` is ``"verified"`` (numeric runs happened and all agreed;
        ``report.ok``), ``"failed"`` or ``"not verified"`` (only the structural checks
        ran: for example a bfloat16 ``target="ort"`` model on a machine without CUDA,
        where ONNX Runtime's CPU provider has no kernel and the reference evaluator no
        contrib ops); ``report.verdict()`` says it in one line.

    Notes
    -----
    Every run is compared with the core applied in float64 to the very values fed
    to the model, by the rule of :func:`arrayrope.testing.check_parity`: the error
    may reach :func:`arrayrope.testing.tolerance_at` of the dtype at the scale of
    the result, ``default_tolerance(dtype) * (1 + max|y|)``, that is 4 units in the
    last place of the dtype for float32, float16 and bfloat16. That budget covers
    what the dtype's rounding costs: the input and the output (half an ulp each),
    the tables (half an ulp of cos and of sin, which the fused targets must store
    in the dtype of ``x``) and the intermediate roundings of a runtime that
    computes in that dtype (ONNX's reference evaluator rounds after each multiply
    and add). Float64 graphs also allow the rounding of float64 angles
    ``p * theta``, about ``4 eps p`` at position ``p``.

    Examples
    --------
    >>> from arrayrope.export import rotary_model, validate
    >>> report = validate(rotary_model(32, target="portable", max_positions=64), providers="cpu")
    >>> report.ok
    True
    """
    reference_evaluator = checks.boolean(reference_evaluator, "reference_evaluator")
    raise_on_failure = checks.boolean(raise_on_failure, "raise_on_failure")
    seed = checks.non_negative_int(seed, "seed")
    provider_names = providers_named(providers)
    model = load_model(model)
    spec = _spec_of(model)
    o = spec.options
    title = (
        f"rotary model: target={spec.target} layout={o.layout} head_dim={spec.head_dim} "
        f"rotary_dim={spec.rotary_dim} rank={o.rank} dtype={o.dtype} tables={o.tables} "
        f"positions<{spec.position_limit} opset={spec.opset} ir={model.ir_version} nodes={len(model.graph.node)}"
    )
    rows, skipped = structure_checks(model, spec)
    rng = np.random.default_rng(seed)
    cases = _cases(spec, rng)
    runs = _ort_runs(model, provider_names, o.dtype == "bfloat16")
    if reference_evaluator:
        if any(n.domain == MS_DOMAIN for n in model.graph.node):
            runs.append(Run("onnx reference evaluator", "-", None, "it has no com.microsoft ops"))
        else:
            runs.append(Run("onnx reference evaluator", "-", _reference_runner(model), ""))
    for runtime, device, run, why in runs:
        if run is None:
            skipped.append((f"{runtime} {device}".replace(" -", ""), why))
        else:
            rows.append(_numeric(runtime, device, spec, run, cases))
    report = Report(tuple(rows), tuple(skipped), title)
    if raise_on_failure and not report.ok:
        w = report.worst()
        if w is None:  # nothing failed, and nothing numeric ran
            raise ValidationError(f"{report.verdict()}\n{report}", report)
        extra = "" if math.isnan(w.max_abs_error) else f"max error {w.max_abs_error:.3e} > tolerance {w.tolerance:.3e} "
        raise ValidationError(f"{w.backend} {w.device}: {extra}{w.note}\n{report}", report)
    return report


def _numeric(runtime: str, device: str, spec: Spec, run: Runner, cases: list[Case]) -> Row:
    nan = math.nan
    dtype = spec.options.dtype
    try:
        err, rel, tol, where = _compare(spec, run, cases)
    except Exception as exc:
        return Row(runtime, device, dtype, nan, nan, nan, False, f"run failed: {str(exc).splitlines()[0][:160]}")
    ok = err <= tol
    return Row(runtime, device, dtype, err, rel, tol, ok, "" if ok else f"error above tolerance, worst at {where}")
