"""The checks of an exported rotary model that run nothing: onnx's checker, strict shape inference, and the
frequencies its metadata states against those the arguments it also states make."""

from __future__ import annotations

import math
import warnings

import numpy as np
import onnx

import arrayrope
from arrayrope._lib.verdicts import Row

from .build._spec import MS_DOMAIN, Spec


def structure_checks(model: onnx.ModelProto, spec: Spec) -> tuple[list[Row], list[tuple[str, str]]]:
    """A row for each check that ran, and ``(check, why)`` for each that could not."""
    rows: list[Row] = []
    skipped: list[tuple[str, str]] = []
    try:
        onnx.checker.check_model(model, full_check=True)
        rows.append(_structure("onnx.checker (full)", spec, True))
    except Exception as exc:
        rows.append(_structure("onnx.checker (full)", spec, False, str(exc).splitlines()[0][:160]))
    for check in (_made_check(spec), _shape_check(model, spec)):
        if isinstance(check, Row):
            rows.append(check)
        else:
            skipped.append(check)
    return rows, skipped


def _structure(check: str, spec: Spec, ok: bool, note: str = "") -> Row:
    nan = math.nan
    return Row("onnx", "-", spec.options.dtype, nan, nan, nan, ok, note, check, numeric=False)


def _made_check(spec: Spec) -> Row | tuple[str, str]:
    """The stated frequencies and attention factor against those their stated arguments give (the graph is
    compared with the stated ones: a factor dropped from both would pass that comparison)."""
    check = "metadata frequencies"
    f = spec.freqs
    if f.made_from is None:
        return check, "frequencies given directly, not made by rope_frequencies: the stated ones are taken as made"
    try:
        with warnings.catch_warnings():  # what the arguments warn of, the export warned of when it made them
            warnings.simplefilter("ignore")
            again = arrayrope.rope_frequencies(**f.made_from)
    except (TypeError, ValueError) as exc:
        return _structure(check, spec, False, f"its arguments do not make frequencies: {exc}"[:200])
    wrong = []
    if again.attention_factor != f.attention_factor:
        wrong.append(f"attention factor {f.attention_factor:.6g} stated, {again.attention_factor:.6g} computed")
    if again.inv_freq.shape != f.inv_freq.shape or not np.allclose(again.inv_freq, f.inv_freq, rtol=1e-12, atol=0):
        wrong.append("inv_freq differs from the one computed")
    if again.rotary_dim != f.rotary_dim or again.rope_type != f.rope_type:
        stated, computed = f"{f.rotary_dim} / {f.rope_type}", f"{again.rotary_dim} / {again.rope_type}"
        wrong.append(f"rotary_dim / rope type {stated} stated, {computed} computed")
    if not wrong:
        return _structure(check, spec, True, f"as {f.rope_type} computes them from the stated arguments")
    return _structure(check, spec, False, "; ".join(wrong) + " from the stated arguments")


def _shape_check(model: onnx.ModelProto, spec: Spec) -> Row | tuple[str, str]:
    from onnx import shape_inference

    check = "shape inference (strict)"
    if any(n.domain == MS_DOMAIN for n in model.graph.node):
        return check, "onnx cannot infer com.microsoft ops"
    try:
        inferred = shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        return _structure(check, spec, False, str(exc).splitlines()[0][:160])
    by_name = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    inputs = {i.name: i for i in inferred.graph.input}
    pairs = [("q", "q_rot"), ("k", "k_rot")] if spec.options.qk else [("x", "y")]
    for i, o in pairs:
        t_in, t_out = inputs[i].type.tensor_type, by_name[o].type.tensor_type
        if t_out.elem_type != t_in.elem_type or len(t_out.shape.dim) != len(t_in.shape.dim):
            return _structure(check, spec, False, f"{o} has type/rank other than {i}")
    return _structure(check, spec, True)
