"""Validation of exported rotary models against the core's float64 result."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import onnx

import arrayrope

from ._api import load_model
from ._spec import META_KEY, MS_DOMAIN, Spec, np_dtype

PROVIDER_NAMES = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}


class ValidationError(AssertionError):
    """An exported model disagrees with the core, or fails a structural check; ``.report`` has every row."""

    def __init__(self, message: str, report: "ValidationReport"):
        super().__init__(message)
        self.report = report


@dataclasses.dataclass
class Check:
    """One row of a :class:`ValidationReport`; ``passed`` is None when the check was skipped."""

    name: str
    passed: bool | None
    max_error: float | None = None
    tolerance: float | None = None
    detail: str = ""


@dataclasses.dataclass
class ValidationReport:
    """What :func:`validate` checked and found."""

    description: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.passed is not False for c in self.checks)

    @property
    def skipped(self) -> list[Check]:
        return [c for c in self.checks if c.passed is None]

    def worst(self) -> Check | None:
        """The failed row with the largest error relative to its tolerance (or the first failed)."""
        failed = [c for c in self.checks if c.passed is False]
        if not failed:
            return None
        return max(failed, key=lambda c: (c.max_error or np.inf) / (c.tolerance or 1.0) if c.max_error is not None else np.inf)

    def __str__(self) -> str:
        lines = [self.description, f"{'check':<44} {'max error':>10} {'tolerance':>10}  result"]
        for c in self.checks:
            err = f"{c.max_error:10.2e}" if c.max_error is not None else f"{'-':>10}"
            tol = f"{c.tolerance:10.2e}" if c.tolerance is not None else f"{'-':>10}"
            res = {True: "ok", False: "FAILED", None: "skipped"}[c.passed]
            lines.append(f"{c.name:<44} {err} {tol}  {res}{': ' + c.detail if c.detail else ''}")
        lines.append("verdict: " + ("valid" if self.ok else "INVALID"))
        return "\n".join(lines)


def _spec_of(model: onnx.ModelProto) -> Spec:
    meta = {p.key: p.value for p in model.metadata_props}
    if META_KEY not in meta:
        raise ValueError(
            f"model has no {META_KEY!r} metadata: validate checks models made by arrayrope.export.rotary_model"
        )
    return Spec.from_json(meta[META_KEY])


def _providers(providers: Any) -> list[str]:
    import onnxruntime as ort

    if providers is None:
        avail = ort.get_available_providers()
        return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in avail or p.startswith("CPU")]
    if isinstance(providers, str):
        providers = [providers]
    out = []
    for p in providers:
        if not isinstance(p, str):
            raise TypeError(f"providers must be names such as 'cuda', 'cpu' or 'CUDAExecutionProvider', got {p!r}")
        full = PROVIDER_NAMES.get(p.lower(), p)
        if not full.endswith("ExecutionProvider"):
            raise ValueError(f"providers: unknown provider {p!r}; use 'cuda', 'cpu' or a full ONNX Runtime name")
        out.append(full)
    return out


def _cases(spec: Spec, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Random inputs at random positions, positions at the table end, and a one-token decode step."""
    limit = spec.position_limit
    heads = spec.num_heads or 3
    kv = spec.num_kv_heads or (2 if spec.num_heads is None else heads)
    cases = []
    shapes = [(2, 7, "random"), (2, 5, "end"), (1, 1, "end")]
    if spec.dtype in ("float16", "bfloat16"):  # enough values for a stable maximum rounding error
        shapes[0] = (4, 64, "random")
    for batch, seq, where in shapes:
        if spec.position_ids:
            if where == "random":
                pos = rng.integers(0, limit, (batch, seq))
            else:
                pos = limit - 1 - rng.integers(0, min(limit, 4), (batch, seq))
            pos = pos.astype(np.int64)
        else:
            seq = min(seq, spec.max_positions)
            pos = np.broadcast_to(np.arange(seq, dtype=np.int64), (batch, seq))
        names = [("q", heads), ("k", kv)] if spec.qk else [("x", heads)]
        xs = {}
        for name, h in names:
            shape = (batch, h, seq, spec.head_dim) if spec.rank == 4 else (batch, seq, h * spec.head_dim)
            xs[name] = rng.standard_normal(shape)
        cases.append({"positions": pos, "x64": xs, "heads": dict(names)})
    return cases


def reference(spec: Spec, x: np.ndarray, positions: np.ndarray, heads: int, table_dtype: Any = None) -> np.ndarray:
    """The core's result in float64 NumPy for one input of the model (tables rounded to ``table_dtype`` if given)."""
    cos, sin = arrayrope.rope_tables(spec.freqs, positions, dtype=np.float64)
    if table_dtype is not None:
        cos, sin = (np.asarray(t).astype(table_dtype).astype(np.float64) for t in (cos, sin))
    x = np.asarray(x, dtype=np.float64)
    if spec.rank == 4:
        return np.asarray(arrayrope.apply_rotary(x, cos[:, None], sin[:, None], layout=spec.layout))
    b, s, _ = x.shape
    y = arrayrope.apply_rotary(x.reshape(b, s, heads, -1), cos[:, :, None], sin[:, :, None], layout=spec.layout)
    return np.asarray(y).reshape(b, s, -1)


def _compare(spec: Spec, run: Any, cases: list[dict[str, Any]], roundings: float = 1.5) -> tuple[float, float, str]:
    """Worst (error, tolerance, where) over all cases, against the core on the values fed."""
    dt = np_dtype(spec.dtype)
    worst = (-1.0, 1.0, "")
    outputs = ["q_rot", "k_rot"] if spec.qk else ["y"]
    for i, case in enumerate(cases):
        feed = {k: v.astype(dt) for k, v in case["x64"].items()}
        if spec.position_ids:
            feed["position_ids"] = case["positions"]
        got = run(feed)
        for (name, x64), out_name, y in zip(case["x64"].items(), outputs, got):
            heads = case["heads"][name]
            fed = feed[name].astype(np.float64)
            expected = reference(spec, fed, case["positions"], heads)
            if spec.dtype in ("float32", "float64"):
                tol = (1e-6 if spec.dtype == "float32" else 1e-12) * max(1.0, spec.freqs.attention_factor)
                if spec.dtype == "float64":  # float64 angles p * theta themselves round by ~eps * p
                    tol += 4 * np.finfo(np.float64).eps * float(np.max(case["positions"], initial=0)) * float(
                        np.max(np.abs(fed), initial=0))
            else:  # 1.5x the error of rounding the float64 result to the dtype ...
                rounded = expected.astype(dt).astype(np.float64)
                tol = roundings * max(float(np.max(np.abs(rounded - expected))), 1e-7)
                if spec.target != "portable":  # ... plus what rounding the caches (typed like x) causes
                    tol += float(np.max(np.abs(reference(spec, fed, case["positions"], heads, dt) - expected)))
            diff = np.abs(np.asarray(y).astype(np.float64) - expected)
            err = float(np.max(diff)) if diff.size else 0.0
            if not np.isfinite(err):
                err = np.inf
            if err / tol > worst[0] / worst[1]:
                at = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
                worst = (err, tol, f"case {i} {out_name}{list(map(int, at))}")
    return worst


def _ort_runs(model: onnx.ModelProto, providers: list[str], bfloat16: bool) -> list[tuple[str, Any, str | None]]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    data = model.SerializeToString()
    runs = []
    for prov in providers:
        for level_name, level in (("off", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                                  ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
            label = f"onnxruntime {prov.replace('ExecutionProvider', '')} optimisation {level_name}"
            if prov not in available:
                runs.append((label, None, f"{prov} is not available in this onnxruntime build"))
                continue
            opts = ort.SessionOptions()
            opts.graph_optimization_level = level
            opts.log_severity_level = 3
            try:
                sess = ort.InferenceSession(data, opts, providers=[prov] + (["CPUExecutionProvider"] if prov != "CPUExecutionProvider" else []))
            except Exception as exc:  # e.g. no kernel for this dtype on this provider
                runs.append((label, None, f"session not created: {str(exc).splitlines()[0][:120]}"))
                continue
            if bfloat16:
                runs.append((label, None, "session created; onnxruntime's Python API cannot return bfloat16 arrays"))
                continue
            if sess.get_providers()[0] != prov:
                runs.append((label, None, f"{prov} did not take the graph"))
                continue
            runs.append((label, lambda feed, s=sess: s.run(None, feed), None))
    return runs


def validate(
    model: Any,
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
    random positions, at positions near the table end, and for a one-token step.

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
        Raise :class:`ValidationError` naming the worst mismatch when a check fails.

    Returns
    -------
    ValidationReport
        Rows of (check, max error, tolerance, result); ``str()`` prints a table.

    Notes
    -----
    Every run is compared with the core applied in float64 to the very values fed
    to the model. Tolerances: float32 within 1e-6 (times the attention factor when
    it exceeds 1); float64 within 1e-12 plus the rounding of float64 angles at
    large positions; float16 and bfloat16 within 1.5 times the largest error made
    by rounding that float64 result to the dtype (checked on a larger sample),
    plus, for the fused targets, whose caches must have the dtype of ``x``, the
    error that rounding the caches to it causes. Portable graphs compute
    float16/bfloat16 in float32 and round once, so they need no such allowance.
    The reference evaluator computes the standard op in float16 itself (three
    roundings), so its float16 rows allow 3 times the rounding error.

    Examples
    --------
    >>> from arrayrope.export import rotary_model, validate
    >>> report = validate(rotary_model(32, target="portable", max_positions=64), providers="cpu")
    >>> report.ok
    True
    """
    model = load_model(model)
    spec = _spec_of(model)
    desc = (
        f"rotary model: target={spec.target} layout={spec.layout} head_dim={spec.head_dim} "
        f"rotary_dim={spec.rotary_dim} rank={spec.rank} dtype={spec.dtype} tables={spec.tables} "
        f"positions<{spec.position_limit} opset={spec.opset} ir={model.ir_version} nodes={len(model.graph.node)}"
    )
    checks: list[Check] = []
    try:
        onnx.checker.check_model(model, full_check=True)
        checks.append(Check("onnx.checker (full)", True))
    except Exception as exc:
        checks.append(Check("onnx.checker (full)", False, detail=str(exc).splitlines()[0][:160]))
    checks.append(_shape_check(model, spec))
    rng = np.random.default_rng(seed)
    cases = _cases(spec, rng)
    for label, run, why in _ort_runs(model, _providers(providers), spec.dtype == "bfloat16"):
        checks.append(_numeric(label, spec, run, cases) if run is not None else Check(label, None, detail=why))
    if reference_evaluator:
        if any(n.domain == MS_DOMAIN for n in model.graph.node):
            checks.append(Check("onnx reference evaluator", None, detail="it has no com.microsoft ops"))
        else:
            from onnx.reference import ReferenceEvaluator

            ev = ReferenceEvaluator(model)
            # It computes a fused op in the dtype itself, rounding after each multiply and add.
            roundings = 3.0 if spec.target == "onnx23" else 1.5
            checks.append(_numeric("onnx reference evaluator", spec, lambda feed: ev.run(None, feed), cases, roundings))
    report = ValidationReport(desc, checks)
    if raise_on_failure and not report.ok:
        w = report.worst()
        extra = f"max error {w.max_error:.3e} > tolerance {w.tolerance:.3e} " if w.max_error is not None else ""
        raise ValidationError(f"{w.name}: {extra}{w.detail}\n{report}", report)
    return report


def _numeric(label: str, spec: Spec, run: Any, cases: list, roundings: float = 1.5) -> Check:
    try:
        err, tol, where = _compare(spec, run, cases, roundings)
    except Exception as exc:
        return Check(label, False, detail=f"run failed: {str(exc).splitlines()[0][:160]}")
    return Check(label, err <= tol, err, tol, "" if err <= tol else f"worst at {where}")


def _shape_check(model: onnx.ModelProto, spec: Spec) -> Check:
    from onnx import shape_inference

    if any(n.domain == MS_DOMAIN for n in model.graph.node):
        return Check("shape inference (strict)", None, detail="onnx cannot infer com.microsoft ops")
    try:
        inferred = shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        return Check("shape inference (strict)", False, detail=str(exc).splitlines()[0][:160])
    by_name = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    inputs = {i.name: i for i in inferred.graph.input}
    pairs = [("q", "q_rot"), ("k", "k_rot")] if spec.qk else [("x", "y")]
    for i, o in pairs:
        t_in, t_out = inputs[i].type.tensor_type, by_name[o].type.tensor_type
        if t_out.elem_type != t_in.elem_type or len(t_out.shape.dim) != len(t_in.shape.dim):
            return Check("shape inference (strict)", False, detail=f"{o} has type/rank other than {i}")
    return Check("shape inference (strict)", True)
