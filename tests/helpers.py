"""Shared oracles and checks for the test suite (independent of the code under test)."""

from __future__ import annotations

import contextlib

import array_api_compat
import numpy as np

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


def check_like(out, backend, dtype: str, shape: tuple) -> None:
    """``out`` is an array of ``backend``'s namespace and device, with this dtype and shape."""
    assert array_api_compat.array_namespace(out) is backend.xp, type(out)
    assert tuple(out.shape) == tuple(shape), (tuple(out.shape), shape)
    assert str(out.dtype).split(".")[-1] == dtype, (out.dtype, dtype)
    dev = array_api_compat.device(out)
    assert dev is None or dev == backend.device, (dev, backend.device)


def xp_assert_close(out, desired, backend, dtype: str, *, rtol=None, atol=None) -> None:
    """Namespace, device, dtype and shape checks, then values against a NumPy oracle."""
    check_like(out, backend, dtype, np.shape(desired))
    # namespace, device, dtype and shape are checked against the backend above; values against the oracle here
    assert_close(out, desired, rtol=rtol, atol=atol, check_namespace=False, check_dtype=False)


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


def inv_freq_formula(rotary_dim: int, base: float) -> np.ndarray:
    return np.array([base ** (-(2.0 * i) / rotary_dim) for i in range(rotary_dim // 2)])


def double_uses(model) -> list[str]:
    """Every float64 in an ONNX model: initializers, typed values (after shape inference, where onnx can infer),
    Cast/CastLike/... ``to`` attributes, Constant and other tensor attributes, in subgraphs and functions too."""
    import onnx
    from onnx import AttributeProto, TensorProto

    double = TensorProto.DOUBLE
    with contextlib.suppress(Exception):  # contrib ops: check what the model declares
        model = onnx.shape_inference.infer_shapes(model)
    found = []

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
    "POW_ULPS",
    "check_like",
    "double_uses",
    "inv_freq_formula",
    "rope_by_complex",
    "rope_by_matrix",
    "rotation_matrix",
    "to_numpy",
    "ulps",
    "xp_assert_close",
]
