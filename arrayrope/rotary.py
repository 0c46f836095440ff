"""Rotary application: the third stage, and the converters between the two pair layouts.

Layouts of the rotary features ``x[..., :r]`` (``r = 2 * cos.shape[-1]``):

* ``"half"`` (GPT-NeoX, Llama, Mistral): feature ``i`` pairs with ``i + r/2``;
  ``y = x * [cos, cos] + [-x2, x1] * [sin, sin]``.
* ``"interleaved"`` (RoFormer paper, GPT-J, GLM, complex ``freqs_cis``): feature
  ``2i`` pairs with ``2i + 1``.

Pair ``i`` rotates by the angle whose cos/sin are ``cos[..., i]``/``sin[..., i]``.
"""

from __future__ import annotations

from typing import Any

import array_api_compat.numpy as _NUMPY_NS  # the namespace NumPy arrays resolve to
import numpy as np

from . import _checks, _kernels, _xp

__all__ = ["apply_rotary", "to_interleaved", "to_half", "permute_rotary_rows"]


def apply_rotary(x: Any, cos: Any, sin: Any, *, layout: str = "half") -> Any:
    """Rotate the leading ``2 * cos.shape[-1]`` features of ``x``'s last axis.

    Parameters
    ----------
    x : array
        Real floating array ``(..., head_dim)``; never modified.
    cos, sin : array
        Tables of one shape ``(..., rotary_dim // 2)`` from :func:`rope_tables`, same
        namespace and device as ``x``; their leading axes broadcast against
        ``x.shape[:-1]``. Features past ``rotary_dim`` pass through unchanged.
    layout : {"half", "interleaved"}
        Which features pair up (see the module docstring).

    Returns
    -------
    array
        Rotated copy of ``x``: same namespace, device, dtype and shape. The
        arithmetic runs in the wider of ``x``'s and the tables' dtypes (float16 or
        bfloat16 ``x`` with float32 tables rounds once, at the end).

    Notes
    -----
    Shapes, dtypes, namespaces and devices are checked on every backend, also
    while JAX traces; values are never inspected, so Dask builds the result
    lazily and ``jax.jit`` traces it.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.rope_frequencies(4)
    >>> cos, sin = arrayrope.rope_tables(f, np.array([1]))
    >>> x = np.array([[1.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    >>> y = arrayrope.apply_rotary(x, cos, sin)
    >>> bool(np.allclose(y, [[np.cos(1.0), 0.0, np.sin(1.0), 0.0]]))
    True
    """
    xp = _check_rotary_args(x, cos, sin)
    if layout not in _checks.LAYOUTS:
        _checks.layout(layout)
    return _rotate(xp, x, cos, sin, layout)


def _rotate(xp: Any, x: Any, cos: Any, sin: Any, layout: str) -> Any:
    """Checked arguments -> rotated copy: a backend kernel where one exists, else the reference.

    ``xp`` may be None (resolved here only when the reference runs). The kernels
    (:mod:`arrayrope._kernels`: NumPy, PyTorch, Dask, JAX) compute the same values
    with fewer passes over memory; CuPy, array_api_strict and others use the reference.
    """
    kernel = _kernels.select(x)
    if kernel is None:
        return _rotate_generic(xp if xp is not None else _xp.namespace(x), x, cos, sin, layout)
    return kernel(x, cos, sin, layout, xp)


def _check_rotary_args(x: Any, cos: Any, sin: Any) -> Any:
    t = type(x)
    if t is type(cos) and t is type(sin):  # plain NumPy arrays or torch tensors: no namespace lookups
        if t is np.ndarray:
            if _numpy_ok(x, cos, sin):
                return _NUMPY_NS
            return _check_plain(x, cos, sin, _NUMPY_NS)  # raises the error that applies
        if t.__module__ == "torch" and t.__name__ == "Tensor":
            if x.device != cos.device or x.device != sin.device:
                _xp.same_device(x, cos, "x", "cos")
                _xp.same_device(x, sin, "x", "sin")
            return _check_plain(x, cos, sin, _torch_namespace())
    _xp.check_array(x, "x")
    _xp.check_array(cos, "cos")
    _xp.check_array(sin, "sin")
    xp = _xp.namespace(x, cos, sin, names=("x", "cos", "sin"))
    for name, a in (("x", x), ("cos", cos), ("sin", sin)):
        if not xp.isdtype(a.dtype, "real floating"):
            raise TypeError(f"{name} must have a real floating dtype, got {a.dtype}")
    _xp.same_device(x, cos, "x", "cos")
    _xp.same_device(x, sin, "x", "sin")
    xs, cs = tuple(x.shape), tuple(cos.shape)
    if cs != tuple(sin.shape):
        raise ValueError(f"cos and sin must have one shape, got {cs} and {tuple(sin.shape)}")
    if x.ndim < 1 or cos.ndim < 1:
        raise ValueError(f"x and cos need a feature axis; got x.shape={xs}, cos.shape={cs}")
    half = cs[-1]
    if _xp.known(half) and _xp.known(xs[-1]) and (half < 1 or 2 * half > xs[-1]):
        raise ValueError(
            f"cos.shape[-1]={half} rotates {2 * half} features but x has {xs[-1]}; "
            f"expected 1 <= cos.shape[-1] <= {xs[-1] // 2} (rotary_dim // 2)"
        )
    lead = _xp.broadcast_shapes(xs[:-1], cs[:-1])
    if lead is None or len(lead) != len(xs) - 1 or any(
        _xp.known(a) and _xp.known(b) and a != b for a, b in zip(lead, xs[:-1])
    ):
        raise ValueError(
            f"cos/sin of shape {cs} do not broadcast against x of shape {xs}: "
            f"cos.shape[:-1] must broadcast to x.shape[:-1]={xs[:-1]}"
        )
    return xp


def _numpy_ok(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> bool:
    """Whether NumPy arguments pass every check (the common case, answered in a few comparisons)."""
    xs, cs = x.shape, cos.shape
    n = len(cs)
    if not (x.dtype.kind == cos.dtype.kind == sin.dtype.kind == "f" and cs == sin.shape and 0 < n <= len(xs)):
        return False
    if not 0 < 2 * cs[-1] <= xs[-1]:
        return False
    for i in range(2, n + 1):
        if cs[-i] != 1 and cs[-i] != xs[-i]:
            return False
    return True


def _torch_namespace() -> Any:
    global _TORCH_NS
    if _TORCH_NS is None:
        import array_api_compat.torch as ns

        _TORCH_NS = ns
    return _TORCH_NS


_TORCH_NS = None


def _real_floating(a: Any) -> bool:
    dt = a.dtype
    kind = getattr(dt, "kind", None)  # NumPy
    return kind == "f" if kind is not None else bool(dt.is_floating_point)  # torch


def _check_plain(x: Any, cos: Any, sin: Any, xp: Any) -> Any:
    """The checks of :func:`_check_rotary_args` for NumPy arrays or torch tensors on one device."""
    for name, a in (("x", x), ("cos", cos), ("sin", sin)):
        if not _real_floating(a):
            raise TypeError(f"{name} must have a real floating dtype, got {a.dtype}")
    xs, cs = tuple(x.shape), tuple(cos.shape)
    if cs != tuple(sin.shape):
        raise ValueError(f"cos and sin must have one shape, got {cs} and {tuple(sin.shape)}")
    if not xs or not cs:
        raise ValueError(f"x and cos need a feature axis; got x.shape={xs}, cos.shape={cs}")
    half = cs[-1]
    if half < 1 or 2 * half > xs[-1]:
        raise ValueError(
            f"cos.shape[-1]={half} rotates {2 * half} features but x has {xs[-1]}; "
            f"expected 1 <= cos.shape[-1] <= {xs[-1] // 2} (rotary_dim // 2)"
        )
    n = len(xs) - 1
    if len(cs) - 1 > n or any(c != 1 and c != s for c, s in zip(reversed(cs[:-1]), reversed(xs[:-1]))):
        raise ValueError(
            f"cos/sin of shape {cs} do not broadcast against x of shape {xs}: "
            f"cos.shape[:-1] must broadcast to x.shape[:-1]={xs[:-1]}"
        )
    return xp


def _rotate_generic(xp: Any, x: Any, cos: Any, sin: Any, layout: str) -> Any:
    """The reference implementation, pure Array API (every fast path is tested against it)."""
    dtype = x.dtype
    work = xp.result_type(dtype, cos.dtype)
    h = cos.shape[-1]
    r = 2 * h
    d = x.shape[-1]
    xr = xp.astype(x[..., :r], work)
    if layout == "half":
        x1, x2 = xr[..., :h], xr[..., h:]
        parts = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    else:
        lead = tuple(x.shape[:-1])
        pairs = xp.reshape(xr, lead + (h, 2))
        xe, xo = pairs[..., 0], pairs[..., 1]
        y = xp.stack([xe * cos - xo * sin, xo * cos + xe * sin], axis=-1)
        parts = [xp.reshape(y, lead + (r,))]
    out = parts[0] if len(parts) == 1 else xp.concat(parts, axis=-1)
    out = xp.astype(out, dtype, copy=False)
    if r < d:
        out = xp.concat([out, x[..., r:]], axis=-1)
    return out


def _rotary_width(x: Any, rotary_dim: int | None) -> int:
    d = x.shape[-1]
    if rotary_dim is None:
        if d % 2:
            raise ValueError(f"x.shape[-1]={d} is odd; pass an even rotary_dim <= {d}")
        return d
    return _checks.rotary_dim(rotary_dim, d, "rotary_dim")


def to_interleaved(x: Any, *, rotary_dim: int | None = None) -> Any:
    """Reorder features from the half-split layout to the interleaved one.

    ``out[..., 2i] = x[..., i]`` and ``out[..., 2i + 1] = x[..., i + r/2]`` for the
    first ``r = rotary_dim`` features (default: all); the rest are kept.
    ``apply_rotary(to_interleaved(x), ..., layout="interleaved") ==
    to_interleaved(apply_rotary(x, ..., layout="half"))``.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> arrayrope.to_interleaved(np.arange(6)).tolist()
    [0, 3, 1, 4, 2, 5]
    >>> arrayrope.to_interleaved(np.arange(6), rotary_dim=4).tolist()
    [0, 2, 1, 3, 4, 5]
    """
    _xp.check_array(x, "x")
    xp = _xp.namespace(x, names=("x",))
    r = _rotary_width(x, rotary_dim)
    h = r // 2
    lead = tuple(x.shape[:-1])
    out = xp.reshape(xp.stack([x[..., :h], x[..., h:r]], axis=-1), lead + (r,))
    return out if r == x.shape[-1] else xp.concat([out, x[..., r:]], axis=-1)


def to_half(x: Any, *, rotary_dim: int | None = None) -> Any:
    """Reorder features from the interleaved layout to the half-split one (inverse of :func:`to_interleaved`).

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> arrayrope.to_half(np.arange(6)).tolist()
    [0, 2, 4, 1, 3, 5]
    """
    _xp.check_array(x, "x")
    xp = _xp.namespace(x, names=("x",))
    r = _rotary_width(x, rotary_dim)
    lead = tuple(x.shape[:-1])
    pairs = xp.reshape(x[..., :r], lead + (r // 2, 2))
    out = xp.concat([pairs[..., 0], pairs[..., 1]], axis=-1)
    return out if r == x.shape[-1] else xp.concat([out, x[..., r:]], axis=-1)


def permute_rotary_rows(
    w: Any,
    *,
    num_heads: int,
    head_dim: int,
    rotary_dim: int | None = None,
    to: str = "half",
) -> Any:
    """Permute the rows of a q or k projection so a checkpoint runs with the other layout.

    ``w`` has ``num_heads * head_dim`` rows (axis 0; a weight ``(rows, in)`` or a
    bias ``(rows,)``), head after head. Within each head the first ``rotary_dim``
    rows are reordered: ``to="half"`` converts weights trained with interleaved
    RoPE (Meta's original Llama, GPT-J) for half-split application, ``to="interleaved"``
    the reverse. Attention scores are unchanged, because queries and keys are
    permuted alike. For grouped-query attention pass ``num_heads=num_kv_heads`` for k.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> w = np.arange(8).reshape(8, 1)  # 2 heads of 4 rows
    >>> arrayrope.permute_rotary_rows(w, num_heads=2, head_dim=4)[:, 0].tolist()
    [0, 2, 1, 3, 4, 6, 5, 7]
    """
    _xp.check_array(w, "w")
    xp = _xp.namespace(w, names=("w",))
    num_heads = _checks.positive_int(num_heads, "num_heads")
    head_dim = _checks.positive_int(head_dim, "head_dim")
    r = _checks.rotary_dim(rotary_dim, head_dim)
    _checks.choice(to, "to", ("half", "interleaved"))
    if w.ndim not in (1, 2) or w.shape[0] != num_heads * head_dim:
        raise ValueError(
            f"w must have num_heads * head_dim = {num_heads * head_dim} rows (axis 0) and 1 or 2 dims, "
            f"got shape {tuple(w.shape)}"
        )
    rest = tuple(w.shape[1:])
    heads = xp.reshape(w, (num_heads, head_dim) + rest)
    # Move the row axis last so the converters (which act on the last axis) can be reused.
    if rest:
        heads = xp.permute_dims(heads, (0, 2, 1))
    out = (to_half if to == "half" else to_interleaved)(heads, rotary_dim=r)
    if rest:
        out = xp.permute_dims(out, (0, 2, 1))
    return xp.reshape(out, tuple(w.shape))
