"""Rotary application: the third stage, and the converters between the two pair layouts.

Layouts of the rotary features ``x[..., :r]`` (``r = 2 * cos.shape[-1]``):

* ``"half"`` (GPT-NeoX, Llama, Mistral): feature ``i`` pairs with ``i + r/2``;
  ``y = x * [cos, cos] + [-x2, x1] * [sin, sin]``.
* ``"interleaved"`` (RoFormer paper, GPT-J, GLM, complex ``freqs_cis``): feature
  ``2i`` pairs with ``2i + 1``.

Pair ``i`` rotates by the angle whose cos/sin are ``cos[..., i]``/``sin[..., i]``.
With ``rotary_features="trailing"`` the rotary features are the last ``r`` of the axis
instead (DeepSeek's MLA: ``q_pe`` after ``q_nope`` in each head), in either layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import backends
from ._lib import checks
from ._lib.types import LAYOUTS, ROTARY_FEATURES, Array, Layout, Namespace, RotaryFeatures

if TYPE_CHECKING:
    from .backends import Library

__all__ = ["apply_rotary", "permute_rotary_rows", "to_half_split", "to_interleaved"]


def apply_rotary(
    x: Array,
    cos: Array,
    sin: Array,
    *,
    layout: Layout = "half",
    rotary_features: RotaryFeatures = "leading",
    out: Array | None = None,
) -> Array:
    """Rotate the leading (or trailing) ``2 * cos.shape[-1]`` features of ``x``'s last axis.

    Parameters
    ----------
    x : array
        Real floating array ``(..., head_dim)``; modified only when it is ``out``.
    cos, sin : array
        Tables of one shape ``(..., rotary_dim // 2)`` from :func:`rope_tables`, same
        namespace and device as ``x``; their leading axes broadcast against
        ``x.shape[:-1]``. Features past ``rotary_dim`` pass through unchanged.
    layout : {"half", "interleaved"}
        Which features pair up (see the module docstring).
    rotary_features : {"leading", "trailing"}
        Whether the rotary part is the first ``rotary_dim`` features (the rest pass
        through after it) or the last ones (the rest pass through before it).
    out : array, optional
        Where to write the result (NumPy, CuPy and PyTorch): ``x`` itself (in place)
        or an array of ``x``'s shape, dtype and device, such as a slice of a larger
        buffer (``cache[:, :, t:t + s]``), contiguous or not. It must not share memory
        with ``x`` (other than being ``x``), ``cos`` or ``sin``. JAX, Dask and
        array_api_strict arrays cannot be written and refuse it. Under autograd,
        PyTorch's rules for in-place writes hold (it raises where they would make a
        gradient wrong); under ``torch.compile`` the graph writes into ``out`` too
        (its memory is compared in eager calls only; a traced call computes the
        result whole before writing it).

    Returns
    -------
    array
        Rotated copy of ``x`` (or ``out``, written): same namespace, device, dtype
        and shape. The arithmetic runs in float64 when ``x`` or the tables are float64,
        else in float32, whatever the tables' dtype: a float16 or bfloat16 result is
        rounded once, at the end (on every backend, compiled and traced as well).

    Notes
    -----
    Shapes, dtypes, namespaces and devices are checked on every backend, also
    while JAX traces; values are never inspected, so Dask builds the result
    lazily and ``jax.jit`` traces it. NumPy, PyTorch, CuPy, Dask and JAX arrays take a
    fast path of their library (:mod:`arrayrope.backends`) that computes the values
    of the reference (:func:`arrayrope._lib.rotation.rotate_reference`) with fewer
    passes over memory.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.rope_frequencies(4)
    >>> cos, sin = arrayrope.rope_tables(f, np.array([1]))
    >>> x = np.array([[1.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    >>> y = arrayrope.apply_rotary(x, cos, sin)
    >>> bool(np.allclose(y, [[np.cos(1.0), 0.0, np.sin(1.0), 0.0]]))
    True

    DeepSeek's layout: 6 features pass through, the last 4 rotate.

    >>> x = np.zeros((1, 10), dtype=np.float32); x[0, 6] = 1.0
    >>> y = arrayrope.apply_rotary(x, cos, sin, rotary_features="trailing")
    >>> bool(np.allclose(y[0, 6:], [np.cos(1.0), 0.0, np.sin(1.0), 0.0]))
    True

    In place, and into a slice of a buffer (a KV cache at positions 3..4):

    >>> x = np.ones((2, 4), dtype=np.float32)
    >>> cos, sin = arrayrope.rope_tables(f, np.array([1, 2]))
    >>> y = arrayrope.apply_rotary(x, cos, sin, out=x)
    >>> y is x
    True
    >>> cache = np.zeros((8, 4), dtype=np.float32)
    >>> _ = arrayrope.apply_rotary(np.ones((2, 4), dtype=np.float32), cos, sin, out=cache[3:5])
    >>> bool(np.array_equal(cache[3:5], x))
    True
    """
    xp = check_rotary_args(x, cos, sin)
    if layout not in LAYOUTS:
        checks.layout(layout)
    if rotary_features != "leading":
        checks.choice(rotary_features, "rotary_features", ROTARY_FEATURES)
    if out is not None:
        backends.check_out(out, x, name="out", x_name="x", others={"cos": cos, "sin": sin})
    return rotate_features(backends.module_of(x), xp, x, cos, sin, layout, rotary_features, out=out)


def rotate_features(
    module: Library | None,
    xp: Namespace,
    x: Array,
    cos: Array,
    sin: Array,
    layout: str,
    features: str,
    prepared: object = None,
    out: Array | None = None,
) -> Array:
    """Checked arguments -> the leading rotary features rotated by ``module`` (``backends.module_of(x)``: the
    fast path of ``x``'s library, None: the reference), or a view of the trailing ones joined after the rest
    (into ``out``: the rest copied, the rotary features rotated into their view of it).

    ``prepared``: ``backends.prepare(x, cos, sin, layout)`` for tables applied more than once.
    """
    if features == "leading" or (start := x.shape[-1] - 2 * cos.shape[-1]) == 0:
        return backends.rotate(module, xp, x, cos, sin, layout, prepared, out)
    rotary = x[..., start:]
    if out is None:
        return xp.concat([x[..., :start], backends.rotate(module, xp, rotary, cos, sin, layout, prepared)], axis=-1)
    out[..., :start] = x[..., :start]
    backends.rotate(module, xp, rotary, cos, sin, layout, prepared, out[..., start:])
    return out


def check_rotary_args(x: Array, cos: Array, sin: Array) -> Namespace:
    """The namespace of ``x``, ``cos`` and ``sin`` after checking that they can be applied together."""
    xp = backends.plain_floating((x, cos, sin))  # NumPy arrays or tensors of one float dtype and device
    plain = xp is not None  # then their shapes hold ints (or a tracer's symbolic ints), each known
    if xp is None:
        xp = backends.namespace(x, cos, sin, names=("x", "cos", "sin"))
        xd, cd, sd = x.dtype, cos.dtype, sin.dtype
        for name, dt in (("x", xd), ("cos", cd), ("sin", sd)) if not (xd == cd == sd) else (("x", xd),):
            if not backends.is_real_floating(xp, dt):
                raise TypeError(f"{name} must have a real floating dtype, got {dt}")
        backends.same_device(x, cos, "x", "cos")
        backends.same_device(x, sin, "x", "sin")
    xs, cs, ss = x.shape, cos.shape, sin.shape
    if cs != ss and tuple(cs) != tuple(ss):
        raise ValueError(f"cos and sin must have one shape, got {tuple(cs)} and {tuple(ss)}")
    if not xs or not cs:
        raise ValueError(f"x and cos need a feature axis; got x.shape={tuple(xs)}, cos.shape={tuple(cs)}")
    half, d, known = cs[-1], xs[-1], backends.known
    if (plain or (known(half) and known(d))) and (half < 1 or 2 * half > d):
        raise ValueError(
            f"cos.shape[-1]={half} rotates {2 * half} features but x has {d}; "
            f"expected 1 <= cos.shape[-1] <= {d // 2} (x.shape[-1] // 2: one column per pair it rotates)"
        )
    bad = len(cs) > len(xs)
    for i in range(2, len(cs) + 1 if not bad else 2):
        c, s = cs[-i], xs[-i]
        if c != 1 and c != s and (plain or (known(c) and known(s))):
            bad = True
    if bad:
        raise ValueError(
            f"cos/sin of shape {tuple(cs)} do not broadcast against x of shape {tuple(xs)}: "
            f"cos.shape[:-1] must broadcast to x.shape[:-1]={tuple(xs[:-1])}"
        )
    return xp


def _rotary_width(x: Array, rotary_dim: int | None) -> int:
    if x.ndim < 1:
        raise ValueError("x must have a feature axis (at least 1-D), got a 0-d array")
    d = int(x.shape[-1])
    if rotary_dim is None:
        if d % 2:
            raise ValueError(f"x.shape[-1]={d} is odd; pass an even rotary_dim <= {d}")
        return d
    return checks.rotary_dim(rotary_dim, d, "rotary_dim")


def to_interleaved(x: Array, *, rotary_dim: int | None = None) -> Array:
    """Reorder features from the half-split layout to the interleaved one.

    ``out[..., 2i] = x[..., i]`` and ``out[..., 2i + 1] = x[..., i + r/2]`` for the
    first ``r = rotary_dim`` features (default: all); the rest are kept.
    ``apply_rotary(to_interleaved(x), ..., layout="interleaved") ==
    to_interleaved(apply_rotary(x, ..., layout="half"))``.

    Parameters
    ----------
    x : array
        Features on the last axis, half-split; never modified.
    rotary_dim : int, optional
        Leading features that rotate (even, at most ``x.shape[-1]``); default: all.

    Returns
    -------
    array
        A reordered copy of ``x``: same namespace, device, dtype and shape.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> arrayrope.to_interleaved(np.arange(6)).tolist()
    [0, 3, 1, 4, 2, 5]
    >>> arrayrope.to_interleaved(np.arange(6), rotary_dim=4).tolist()
    [0, 2, 1, 3, 4, 5]
    """
    xp = backends.namespace(x, names=("x",))
    r = _rotary_width(x, rotary_dim)
    h = r // 2
    lead = tuple(x.shape[:-1])
    out = xp.reshape(xp.stack([x[..., :h], x[..., h:r]], axis=-1), (*lead, r))
    return out if r == x.shape[-1] else xp.concat([out, x[..., r:]], axis=-1)


def to_half_split(x: Array, *, rotary_dim: int | None = None) -> Array:
    """Reorder features from the interleaved layout to the half-split one (inverse of :func:`to_interleaved`).

    ``out[..., i] = x[..., 2i]`` and ``out[..., i + r/2] = x[..., 2i + 1]`` for the
    first ``r = rotary_dim`` features (default: all); the rest are kept.

    Parameters
    ----------
    x : array
        Features on the last axis, interleaved; never modified.
    rotary_dim : int, optional
        Leading features that rotate (even, at most ``x.shape[-1]``); default: all.

    Returns
    -------
    array
        A reordered copy of ``x``: same namespace, device, dtype and shape.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> arrayrope.to_half_split(np.arange(6)).tolist()
    [0, 2, 4, 1, 3, 5]
    """
    xp = backends.namespace(x, names=("x",))
    r = _rotary_width(x, rotary_dim)
    lead = tuple(x.shape[:-1])
    pairs = xp.reshape(x[..., :r], (*lead, r // 2, 2))
    out = xp.concat([pairs[..., 0], pairs[..., 1]], axis=-1)
    return out if r == x.shape[-1] else xp.concat([out, x[..., r:]], axis=-1)


def permute_rotary_rows(
    w: Array,
    *,
    num_heads: int,
    head_dim: int,
    rotary_dim: int | None = None,
    to: Layout = "half",
    rotary_features: RotaryFeatures = "leading",
) -> Array:
    """Permute the rows of a q or k projection so a checkpoint runs with the other layout.

    ``w`` has ``num_heads * head_dim`` rows (axis 0; a weight ``(rows, in)`` or a
    bias ``(rows,)``), head after head. Within each head the first ``rotary_dim``
    rows are reordered: ``to="half"`` converts weights trained with interleaved
    RoPE (Meta's original Llama, GPT-J) for half-split application, ``to="interleaved"``
    the reverse. Attention scores are unchanged, because queries and keys are
    permuted alike. For grouped-query attention pass ``num_heads=num_kv_heads`` for k.

    ``rotary_features="trailing"`` reorders the last ``rotary_dim`` rows of each head
    instead: DeepSeek-V2/V3 checkpoints (``rope_interleave``) store ``q_pe`` and ``k_pe``
    interleaved after the unrotated rows. Converted with ``to="half"`` they run with the
    half-split layout on the trailing features and give exactly what transformers computes
    (its interleaved kernel writes its output in half-split order): ``q_b_proj`` with
    ``num_heads=H, head_dim=qk_nope_head_dim + qk_rope_head_dim``, ``kv_a_proj_with_mqa``
    with ``num_heads=1, head_dim=kv_lora_rank + qk_rope_head_dim``, both with
    ``rotary_dim=qk_rope_head_dim``.

    Parameters
    ----------
    w : array
        A weight ``(num_heads * head_dim, in)`` or a bias ``(num_heads * head_dim,)``.
    num_heads : int
        Heads whose rows ``w`` holds (``num_kv_heads`` for a grouped-query key projection).
    head_dim : int
        Rows per head.
    rotary_dim : int, optional
        Rows of each head that rotate (even); default ``head_dim``.
    to : {"half", "interleaved"}
        The layout the permuted rows are for.
    rotary_features : {"leading", "trailing"}
        Whether the rotary rows are the first ``rotary_dim`` of each head or the last.

    Returns
    -------
    array
        ``w`` with the rows of each head permuted: same namespace, device, dtype and shape.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> w = np.arange(8).reshape(8, 1)  # 2 heads of 4 rows
    >>> arrayrope.permute_rotary_rows(w, num_heads=2, head_dim=4)[:, 0].tolist()
    [0, 2, 1, 3, 4, 6, 5, 7]
    >>> w = np.arange(6)  # one head: 2 rows pass through, 4 rotate after them
    >>> arrayrope.permute_rotary_rows(w, num_heads=1, head_dim=6, rotary_dim=4, rotary_features="trailing").tolist()
    [0, 1, 2, 4, 3, 5]
    """
    xp = backends.namespace(w, names=("w",))
    num_heads = checks.positive_int(num_heads, "num_heads")
    head_dim = checks.positive_int(head_dim, "head_dim")
    r = checks.rotary_dim(rotary_dim, head_dim)
    checks.choice(to, "to", LAYOUTS)
    trailing = checks.choice(rotary_features, "rotary_features", ROTARY_FEATURES) == "trailing"
    if w.ndim not in (1, 2) or w.shape[0] != num_heads * head_dim:
        raise ValueError(
            f"w must have num_heads * head_dim = {num_heads * head_dim} rows (axis 0) and 1 or 2 dims, "
            f"got shape {tuple(w.shape)}"
        )
    rest = tuple(w.shape[1:])
    heads = xp.reshape(w, (num_heads, head_dim, *rest))
    # Move the row axis last so the converters (which act on the last axis) can be reused.
    if rest:
        heads = xp.permute_dims(heads, (0, 2, 1))
    convert = to_half_split if to == "half" else to_interleaved
    if trailing and r < head_dim:
        out = xp.concat([heads[..., : head_dim - r], convert(heads[..., head_dim - r :])], axis=-1)
    else:
        out = convert(heads, rotary_dim=r)
    if rest:
        out = xp.permute_dims(out, (0, 2, 1))
    return xp.reshape(out, tuple(w.shape))
