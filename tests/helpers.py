"""Shared oracles and checks for the test suite, written independently of the code under test.

* Tolerances: :data:`POW_ULPS`, :func:`ulps`, :func:`tol`.
* Result checks: :func:`check_like` (namespace, array type, device, dtype, shape of a
  backend's result), :func:`xp_assert_close` (that, then values against a NumPy oracle),
  :func:`float_dtypes`.
* Inputs: :func:`random_case`; :func:`around`, a hypothesis strategy of integers that draws the edges
  of a range (lengths, offsets, original contexts) and their neighbours as often as the rest.
* Oracles from the published formulas, float64 NumPy: :func:`inv_freq_formula`,
  :func:`llama3_inv_freq`, :func:`rotation_matrix`, :func:`rope_by_matrix`,
  :func:`rope_by_complex`, :func:`rotate_half`, and :func:`exact_cos_sin`, the cos and
  sin of ``p * theta`` with the angle reduced exactly (rational arithmetic and a
  256-bit pi), for positions where a float64 product ``p * theta`` itself rounds.
"""

from __future__ import annotations

import contextlib
import functools
import math
from fractions import Fraction
from typing import Any

import array_api_compat
import numpy as np
from hypothesis import strategies as st

import arrayrope
from arrayrope.testing import assert_close, to_numpy

#: ulps by which two math libraries' float64 ``pow`` (or ``exp``/``log``) may differ: each is within an ulp
#: or two of the exact value (glibc's pow is correctly rounded in nearly all cases; NumPy's vectorised
#: AVX-512 power is within 1 ulp), so results of one formula may differ by up to 4.
POW_ULPS = 4


def ulps(dtype: str, n: int = 16) -> dict:
    """``rtol``/``atol`` of ``n`` units in the last place of ``dtype``: for two results of the same
    operations on the same values that differ only in order or in the math library's last bits."""
    tol = n * float(np.finfo(np.dtype("float32" if dtype == "bfloat16" else dtype)).eps)
    if dtype == "bfloat16":
        tol *= 2.0**16
    return {"rtol": tol, "atol": tol}


def tol(dtype: str) -> dict:
    """``rtol``/``atol`` of a float32 or float64 result against a float64 formula of the same inputs."""
    return dict(rtol=2e-6, atol=2e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)


def float_dtypes(backend) -> list[str]:
    """float32 and float64, where ``backend`` has them."""
    return [d for d in ("float32", "float64") if d in backend.dtypes]


_array_types: dict[str, Any] = {}


def check_like(out, backend, dtype: str, shape: tuple) -> None:
    """``out`` is an array of ``backend``'s namespace, array type and device, with this dtype and shape."""
    assert array_api_compat.array_namespace(out) is backend.xp, type(out)
    if backend.name not in _array_types:
        _array_types[backend.name] = type(backend.asarray(np.zeros(1, dtype=np.float32)))
    assert type(out) is _array_types[backend.name], (type(out), _array_types[backend.name])
    assert tuple(out.shape) == tuple(shape), (tuple(out.shape), shape)
    assert str(out.dtype).split(".")[-1] == dtype, (out.dtype, dtype)
    dev = array_api_compat.device(out)
    assert dev is None or on_device(dev, backend.device), (dev, backend.device)


def on_device(found, expected) -> bool:
    """Whether ``found`` is the device ``expected`` names, up to a default index (``cuda`` is ``cuda:0``)."""
    return found == expected or (":" not in str(expected) and str(found) == f"{expected}:0")


def xp_assert_close(out, desired, backend, dtype: str, *, rtol=None, atol=None) -> None:
    """Namespace, device, dtype and shape checks, then values against a NumPy oracle."""
    check_like(out, backend, dtype, np.shape(desired))
    # namespace, device, dtype and shape are checked against the backend above; values against the oracle here
    assert_close(out, desired, rtol=rtol, atol=atol, check_namespace=False, check_dtype=False)


def inv_freq_formula(rotary_dim: int, base: float) -> np.ndarray:
    """``theta_i = base ** (-2i / rotary_dim)``, element by element in Python floats."""
    return np.array([base ** (-(2.0 * i) / rotary_dim) for i in range(rotary_dim // 2)])


def llama3_inv_freq(rotary_dim: int, base: float, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """Llama 3.1's frequency rule, from its published definition, one frequency at a time."""
    out = []
    for t in inv_freq_formula(rotary_dim, base):
        wavelen = 2 * math.pi / t
        if wavelen < original / high:
            out.append(t)
        elif wavelen > original / low:
            out.append(t / factor)
        else:
            g = (original / wavelen - low) / (high - low)
            out.append((1 - g) * t / factor + g * t)
    return np.array(out)


def around(*edges: int, lo: int, hi: int, spread: int = 1) -> st.SearchStrategy[int]:
    """Integers in ``[lo, hi]``: half the draws from ``edge - spread .. edge + spread`` of each edge (the
    values where a comparison decides), half from the whole range."""
    near = sorted({e + k for e in edges for k in range(-spread, spread + 1) if lo <= e + k <= hi})
    return st.one_of(st.sampled_from(near), st.integers(lo, hi))


def random_case(shape, rotary_dim=None, base=10000.0, seed=0, start=0):
    """``x`` (standard normal, float64), its frequencies and positions ``start .. start + shape[-2] - 1``."""
    x = np.random.default_rng(seed).standard_normal(shape)
    f = arrayrope.rope_frequencies(shape[-1], base=base, rotary_dim=rotary_dim)
    return x, f, np.arange(start, start + shape[-2])


def rotation_matrix(angles: np.ndarray, layout: str, head_dim: int) -> np.ndarray:
    """The explicit block-diagonal rotation R (head_dim x head_dim) for one position, float64.

    Pair i rotates by angles[i]; its two features are (2i, 2i+1) when interleaved and
    (i, i + r/2) when half-split; features past r = 2 * len(angles) are left alone.
    """
    r = 2 * len(angles)
    R = np.eye(head_dim)
    for i, a in enumerate(angles):
        p, q = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
        R[p, p], R[p, q] = np.cos(a), -np.sin(a)
        R[q, p], R[q, q] = np.sin(a), np.cos(a)
    return R


def rope_by_matrix(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, layout: str) -> np.ndarray:
    """RoPE of x (..., S, D) at positions (S,) by explicit matrices, float64."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    for s, p in enumerate(np.asarray(positions, dtype=np.float64)):
        R = rotation_matrix(p * inv_freq, layout, x.shape[-1])
        out[..., s, :] = x[..., s, :] @ R.T
    return out


def rope_by_complex(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """Interleaved RoPE as complex multiplication x * e^{i m theta} (the RoFormer form), float64."""
    x = np.asarray(x, dtype=np.float64)
    r = 2 * len(inv_freq)
    z = x[..., :r:2] + 1j * x[..., 1:r:2]
    z = z * np.exp(1j * np.asarray(positions, dtype=np.float64)[:, None] * inv_freq)
    out = x.copy()
    out[..., :r:2], out[..., 1:r:2] = z.real, z.imag
    return out


def rotate_half(x: np.ndarray) -> np.ndarray:
    """Hugging Face's ``rotate_half``: ``[-x2, x1]`` for the halves ``x1, x2`` of the last axis."""
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def _arctan_inverse(n: int, bits: int) -> int:
    """``arctan(1 / n) * 2**bits`` rounded down, by its alternating series in integers."""
    guard = 32
    term = (1 << (bits + guard)) // n
    total, k, sign = 0, 1, 1
    while term:
        total += sign * (term // k)
        term //= n * n
        k += 2
        sign = -sign
    return total >> guard


#: pi to 256 bits by Machin's formula, pi = 16 arctan(1/5) - 4 arctan(1/239).
PI = Fraction(16 * _arctan_inverse(5, 256) - 4 * _arctan_inverse(239, 256), 1 << 256)


def exact_cos_sin(positions, inv_freq) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``p * theta`` for every position and frequency, float64, with the product taken exactly.

    The product of the (float) position and the float64 frequency is a rational number;
    it is reduced modulo ``2 pi`` against a 256-bit pi, and only the reduced angle, in
    ``[-pi, pi]``, is rounded to float64 for ``math.cos``/``math.sin``. The result is
    then within an ulp or two of the true values at any position, where a float64
    product ``p * theta`` carries an error of ``|p theta| 2**-53`` radians.
    """
    two_pi = 2 * PI
    pos = np.asarray(positions)
    cos = np.empty((*pos.shape, len(inv_freq)))
    sin = np.empty_like(cos)
    for index, p in np.ndenumerate(pos):
        exact_p = Fraction(int(p)) if pos.dtype.kind in "iu" else Fraction(float(p))
        for i, t in enumerate(inv_freq):
            angle = exact_p * Fraction(float(t))
            reduced = float(angle - round(angle / two_pi) * two_pi)
            cos[(*index, i)], sin[(*index, i)] = math.cos(reduced), math.sin(reduced)
    return cos, sin


def double_uses(model) -> list[str]:
    """Every float64 in an ONNX model: initializers, typed values (after shape inference, where onnx can infer),
    Cast/CastLike/... ``to`` attributes, Constant and other tensor attributes, in subgraphs and functions too."""
    import onnx
    from onnx import AttributeProto, TensorProto

    double = TensorProto.DOUBLE
    with contextlib.suppress(Exception):  # contrib ops: check what the model declares
        model = onnx.shape_inference.infer_shapes(model)
    found: list[str] = []

    def graph(g, where):
        found.extend(f"{where} initializer {t.name}" for t in g.initializer if t.data_type == double)
        values = [*g.input, *g.output, *g.value_info]
        found.extend(f"{where} value {v.name}" for v in values if v.type.tensor_type.elem_type == double)
        nodes(g.node, where)

    def nodes(ns, where):
        for n in ns:
            for a in n.attribute:
                if a.name == "to" and a.type == AttributeProto.INT and a.i == double:
                    found.append(f"{where} {n.op_type} {n.name} to DOUBLE")
                if a.type == AttributeProto.TENSOR and a.t.data_type == double:
                    found.append(f"{where} {n.op_type} {n.name} tensor attribute {a.name}")
                if a.type == AttributeProto.GRAPH:
                    graph(a.g, f"{where}/{n.name}")
                for sub in a.graphs:
                    graph(sub, f"{where}/{n.name}")

    graph(model.graph, "graph")
    for f in model.functions:
        nodes(f.node, f"function {f.name}")
    return found


__all__ = [
    "PI",
    "POW_ULPS",
    "check_like",
    "double_uses",
    "exact_cos_sin",
    "float_dtypes",
    "inv_freq_formula",
    "llama3_inv_freq",
    "on_device",
    "random_case",
    "rope_by_complex",
    "rope_by_matrix",
    "rotate_half",
    "rotation_matrix",
    "to_numpy",
    "tol",
    "ulps",
    "xp_assert_close",
]


@functools.cache
def dynamo_cannot_write(opset: int) -> str:
    """Why this PyTorch's dynamo exporter cannot write a dynamic-shape graph at ``opset``, or "" where it can."""
    import warnings

    import torch

    class Shape(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * x.shape[1]

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dims = {"x": {1: torch.export.Dim("S")}}
            torch.onnx.export(Shape(), (torch.ones(2, 3),), dynamo=True, opset_version=opset, dynamic_shapes=dims)
    except Exception as exc:
        name = type(exc).__name__
        return f"PyTorch {torch.__version__}'s dynamo exporter writes no dynamic graph at opset {opset}: {name}"
    return ""
