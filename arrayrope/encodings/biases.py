"""Additive attention biases: ALiBi (linear in distance) and T5 relative position buckets.

Both are added to the attention scores ``q @ k.T / sqrt(d)`` before the softmax
and are returned as ``(num_heads, q_len, k_len)``, which broadcasts against
scores ``(batch, num_heads, q_len, k_len)``. Query ``i`` sits at position
``offset + i`` and key ``j`` at position ``j``; the default offset
``k_len - q_len`` aligns the last query with the last key, as when decoding
with a cache of earlier keys.

Constants (slopes, bucket boundaries) are computed on the host, exactly; the
arrays are built on the requested namespace and device, and values are never
inspected, so Dask builds them lazily and ``jax.jit`` traces them.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.dtypes import dtype_name, index_dtype, table_dtype, work_dtype
from .._lib.positions import position_array, scalar_int
from .._lib.types import Array, Device, DType, Namespace

__all__ = ["alibi_bias", "alibi_slopes", "t5_relative_bias", "t5_relative_buckets"]


def alibi_slopes(
    num_heads: int, *, xp: Namespace | None = None, dtype: DType | None = None, device: Device = None
) -> Array:
    """The ALiBi head slopes, shape ``(num_heads,)``.

    For ``n`` a power of two, head ``h = 1..n`` has slope ``2 ** (-8h / n)``.
    Otherwise, with ``p`` the largest power of two below ``n``, the ``p`` slopes of
    ``p`` heads come first, followed by every other slope of ``2p`` heads,
    ``2 ** (-8k / (2p))`` for ``k = 1, 3, 5, ...``, as many as needed (the rule of
    the ALiBi authors' code, used by BLOOM, MPT and Falcon).

    Parameters
    ----------
    num_heads : int
        Number of attention heads, >= 1.
    xp : namespace, optional
        Array namespace of the result (default NumPy's).
    dtype : dtype or str, optional
        Real floating dtype of the result (default float32).
    device : device, optional
        Where the result is created (default: the namespace's default device).

    Returns
    -------
    array
        The slopes, float64 values rounded once to ``dtype``.

    Examples
    --------
    >>> import arrayrope
    >>> arrayrope.alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    >>> arrayrope.alibi_slopes(6).tolist()[4:]  # after the 4 slopes of 4 heads: 2**-1, 2**-3
    [0.5, 0.125]
    """
    num_heads = checks.positive_int(num_heads, "num_heads")
    ns = backends.namespace(xp=xp)
    return _from_host(ns, _slopes(num_heads), table_dtype(ns, dtype, device), device)


def _slopes(n: int) -> np.ndarray:
    """ALiBi slopes in float64 (exact powers of two where the exponent is an integer)."""
    p = 1 << (n.bit_length() - 1)
    first = 2.0 ** (-8.0 * np.arange(1, p + 1) / p)
    extra = 2.0 ** (-8.0 * np.arange(1, 2 * (n - p), 2) / (2 * p))
    return np.concatenate([first, extra])


def alibi_bias(
    num_heads: int,
    q_len: int,
    k_len: int,
    *,
    causal: bool = True,
    offset: int | Array | None = None,
    xp: Namespace | None = None,
    dtype: DType | None = None,
    device: Device = None,
) -> Array:
    """The ALiBi bias ``-slope_h * distance``, shape ``(num_heads, q_len, k_len)``.

    Parameters
    ----------
    num_heads : int
        Heads, >= 1; slopes as :func:`alibi_slopes` gives them.
    q_len, k_len : int
        Query and key counts, >= 1.
    causal : bool
        True (decoders): ``-slope * (i - j)`` for keys at or before the query and
        ``-inf`` for later keys, so the bias is also the causal mask. False
        (encoders): ``-slope * |i - j|`` everywhere.
    offset : int, optional
        Position of the first query (default ``k_len - q_len``). A 0-d integer array
        is one int, kept in the graph under ``jax.jit`` (where it sets the namespace
        and device).
    xp : namespace, optional
        Array namespace of the result (default NumPy's).
    dtype : dtype or str, optional
        Real floating dtype of the result (default float32).
    device : device, optional
        Where the result is created (default: the namespace's default device).

    Returns
    -------
    array
        The bias; ``-inf`` above the diagonal when ``causal``.

    Notes
    -----
    Implementations that add ``slope * j`` (the key position alone, as BLOOM does)
    differ from this by a constant per query row, which the softmax ignores.

    Examples
    --------
    >>> import arrayrope
    >>> b = arrayrope.alibi_bias(2, 3, 3)
    >>> b.shape
    (2, 3, 3)
    >>> b[1].tolist()  # the second of two heads: slope 2**-8
    [[0.0, -inf, -inf], [-0.00390625, 0.0, -inf], [-0.0078125, -0.00390625, 0.0]]
    """
    num_heads = checks.positive_int(num_heads, "num_heads")
    causal = checks.boolean(causal, "causal")
    offset = scalar_int(offset)
    if backends.is_array(offset):  # a traced 0-d offset: the bias is built where it lives
        ns, offset, device = position_array(offset, "offset", xp=xp, device=device)
    else:
        ns = backends.namespace(xp=xp)
    out_dtype = table_dtype(ns, dtype, device)
    work = work_dtype(ns, device)
    rel = _relative(ns, q_len, k_len, offset, device)  # key - query: <= 0 for earlier keys
    slopes = _from_host(ns, _slopes(num_heads), work, device)[:, None, None]
    if causal:
        bias = slopes * ns.astype(rel, work)
        bias = ns.where(rel > 0, ns.asarray(-math.inf, dtype=work, device=device), bias)
    else:
        bias = slopes * ns.astype(-ns.abs(rel), work)
    return ns.astype(bias, out_dtype)


def t5_relative_buckets(
    relative_position: Array,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Array:
    """Bucket each relative position ``key - query`` as T5 does; same shape and dtype.

    With ``B = num_buckets`` (halved when bidirectional: ``B/2`` buckets per
    direction, positive offsets in the upper half) and distance ``n`` (``|rel|``
    when bidirectional, ``max(-rel, 0)`` when causal), the first ``E = B/2`` buckets
    hold ``n < E`` exactly and the rest are logarithmic up to ``max_distance``:
    ``min(E + floor(ln(n / E) / ln(max_distance / E) * (B - E)), B - 1)``.

    Parameters
    ----------
    relative_position : array
        Integers, ``key_position - query_position``, of any shape and backend.
    bidirectional : bool
        Encoder (True) or decoder (False) buckets.
    num_buckets : int
        Bucket count, from 2 (4 when bidirectional) to ``2**17``; the buckets must fit
        in the dtype of ``relative_position``.
    max_distance : int
        Distance from which every position shares the last bucket; must exceed ``E``
        and be at most ``2**40`` (where float64 logarithms still tell neighbouring
        distances apart, so that the exact boundaries stay cheap to find).

    Returns
    -------
    array
        The bucket of each position, in ``relative_position``'s namespace, device and dtype.

    Notes
    -----
    The floor is evaluated exactly: the distance where each logarithmic bucket
    starts is found on the host (float logarithms, and integer arithmetic where they
    are too close to call), and each distance is placed among these boundaries on
    the device. The cost is that of the output plus ``num_buckets``, whatever
    ``max_distance``. A float formula can land one bucket low or high where
    ``ln(n / E) / ln(max_distance / E) * (B - E)`` is (nearly) an integer; for T5's
    settings (32 buckets, distance 128, either direction) the buckets equal those
    of Hugging Face and Mesh TensorFlow at every distance.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> rel = np.array([-200, -20, -3, 0, 3, 20, 200])
    >>> arrayrope.t5_relative_buckets(rel).tolist()
    [15, 10, 3, 0, 19, 26, 31]
    >>> arrayrope.t5_relative_buckets(rel, bidirectional=False).tolist()
    [31, 17, 3, 0, 0, 0, 0]
    """
    ns = backends.namespace(relative_position, names=("relative_position",))
    rel = relative_position
    if not backends.is_integral(ns, rel.dtype):
        raise TypeError(f"relative_position must have an integer dtype, got {rel.dtype}")
    bidirectional = checks.boolean(bidirectional, "bidirectional")
    num_buckets = checks.positive_int(num_buckets, "num_buckets")
    max_distance = checks.positive_int(max_distance, "max_distance")
    if num_buckets < 2:
        raise ValueError(f"num_buckets must be >= 2, got {num_buckets}")
    if num_buckets > _MAX_BUCKETS:
        raise ValueError(f"num_buckets must be at most 2**17 = {_MAX_BUCKETS}, got {num_buckets}")
    if max_distance > _MAX_DISTANCE:
        raise ValueError(f"max_distance must be at most 2**40 = {_MAX_DISTANCE}, got {max_distance}")
    per_side = num_buckets // 2 if bidirectional else num_buckets
    exact = per_side // 2
    if exact < 1:
        need = 4 if bidirectional else 2
        raise ValueError(
            f"num_buckets must be >= {need} for {'bidirectional' if bidirectional else 'causal'} buckets, "
            f"got {num_buckets}"
        )
    if max_distance <= exact:
        raise ValueError(
            f"max_distance must exceed the {exact} exact buckets (num_buckets={num_buckets}, "
            f"bidirectional={bidirectional}), got {max_distance}"
        )
    if num_buckets - 1 > int(ns.iinfo(rel.dtype).max):
        raise ValueError(
            f"num_buckets={num_buckets} does not fit the dtype of relative_position ({dtype_name(rel.dtype)}, "
            f"at most {ns.iinfo(rel.dtype).max}); pass a wider integer dtype"
        )
    device = backends.device_of(rel)
    wide = index_dtype(ns, device)
    bound = min(max_distance, int(ns.iinfo(wide).max))  # distances past max_distance share the last bucket
    r = ns.clip(ns.astype(rel, wide), -bound, bound)  # widened first: nothing wraps, |r| fits
    zero = ns.zeros((), dtype=wide, device=device)
    n = ns.abs(r) if bidirectional else -ns.minimum(r, zero)
    # [E, t_1, ..., t_{K-1}]; a copy of the cached read-only starts (PyTorch warns on read-only memory)
    starts = ns.asarray(_bucket_starts(per_side, max_distance).copy(), device=device)
    counted = ns.astype(ns.searchsorted(starts, ns.reshape(n, (-1,)), side="right"), wide)
    large = ns.reshape(counted, tuple(n.shape)) + (exact - 1)
    buckets = ns.where(n < exact, n, large)
    if bidirectional:
        buckets = buckets + ns.where(r > zero, ns.asarray(per_side, dtype=wide, device=device), zero)
    return ns.astype(buckets, rel.dtype)


_MAX_BUCKETS = 1 << 17
_MAX_DISTANCE = 1 << 40


@functools.lru_cache(maxsize=64)
def _bucket_starts(num_buckets: int, max_distance: int) -> np.ndarray:
    """The distance where each logarithmic bucket starts: ``E`` for bucket ``E``, then for ``E + j``
    (``j = 1 .. K-1``, ``K = B - E``) the smallest ``n`` with ``floor(ln(n/E) / ln(D/E) * K) >= j``.

    Float logarithms place each start; where ``K ln(n/E) - j ln(D/E)`` is too close
    to zero to tell its sign, 60-digit logarithms decide, and where even these agree
    (a tie such as ``n = 16`` for T5's bucket 10), ``n**K * E**j >= D**j * E**K`` in integers.
    """
    exact = num_buckets // 2
    k = num_buckets - exact
    j = np.arange(1, k)
    ratio = math.log(max_distance / exact)
    guess = np.ceil(exact * np.exp(j * ratio / k)).astype(np.int64)

    def reaches(n: np.ndarray, jj: np.ndarray) -> np.ndarray:
        size = k * np.log(n / exact)
        margin = size - jj * ratio
        sure = np.abs(margin) > 2.0**-50 * (size + jj * ratio)  # 4 times the rounding of either term
        out = margin >= 0
        import decimal  # exact boundaries only: not at start-up

        with decimal.localcontext(decimal.Context(prec=60)):
            log_ratio = (decimal.Decimal(max_distance) / exact).ln()
            for i in np.flatnonzero(~sure):  # too close to call in float64: 60 digits, then integers
                fine = k * (decimal.Decimal(int(n[i])) / exact).ln() - int(jj[i]) * log_ratio
                if abs(fine) > decimal.Decimal(10) ** -45:
                    out[i] = fine > 0
                else:  # equal to 45 digits: equal, unless the integers say otherwise
                    g = math.gcd(k, int(jj[i]))
                    a, b = k // g, int(jj[i]) // g
                    out[i] = int(n[i]) ** a * exact**b >= max_distance**b * exact**a
        return out

    starts = np.clip(guess, exact, max_distance)
    for _ in range(4):  # each start moves by at most a step or two from its guess
        up = ~reaches(starts, j)
        down = (starts > exact) & reaches(np.maximum(starts - 1, exact), j)
        if not (up.any() or down.any()):
            break
        starts = starts + up - down
    else:
        raise AssertionError("T5 bucket boundaries did not settle")
    out = np.concatenate([[exact], starts]).astype(np.int64)
    out.flags.writeable = False
    return out


def t5_relative_bias(
    table: Array,
    q_len: int,
    k_len: int,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    offset: int | Array | None = None,
) -> Array:
    """The bias of a learned T5 table, shape ``(num_heads, q_len, k_len)``.

    Parameters
    ----------
    table : array
        ``(num_buckets, num_heads)``, a T5 ``relative_attention_bias`` weight, of any
        backend; gathering keeps autograd, so the table trains through the bias.
    q_len, k_len : int
        Query and key counts, >= 1.
    bidirectional : bool
        Encoder (True) or decoder (False) buckets, as for :func:`t5_relative_buckets`.
    max_distance : int
        As for :func:`t5_relative_buckets` (whose ``num_buckets`` is ``table.shape[0]``).
    offset : int, optional
        Position of the first query (default ``k_len - q_len``). A 0-d integer array
        is one int, kept in the graph under ``jax.jit``.

    Returns
    -------
    array
        ``table[bucket(j - (offset + i)), h]`` at ``[h, i, j]``, in ``table``'s
        namespace, device and dtype.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> table = np.arange(64.0).reshape(32, 2)   # 32 buckets, 2 heads
    >>> b = arrayrope.t5_relative_bias(table, 2, 3)
    >>> b.shape
    (2, 2, 3)
    >>> b[0].tolist()  # head 0: rows are queries at positions 1 and 2
    [[2.0, 0.0, 34.0], [4.0, 2.0, 0.0]]
    """
    ns = backends.namespace(table, names=("table",))
    if table.ndim != 2:
        raise ValueError(f"table must have shape (num_buckets, num_heads), got shape {tuple(table.shape)}")
    device = backends.device_of(table)
    offset = scalar_int(offset)
    if backends.is_array(offset):
        _, offset, _ = position_array(offset, "offset", like=table, like_name="table")
    rel = _relative(ns, q_len, k_len, offset, device)
    try:
        buckets = t5_relative_buckets(
            rel, bidirectional=bidirectional, num_buckets=table.shape[0], max_distance=max_distance
        )
    except ValueError as exc:  # num_buckets is table.shape[0] here
        raise ValueError(str(exc).replace("num_buckets", "table.shape[0] (num_buckets)", 1)) from None
    q, k = tuple(rel.shape)
    values = ns.take(table, ns.reshape(buckets, (-1,)), axis=0)  # (q * k, heads)
    return ns.permute_dims(ns.reshape(values, (q, k, table.shape[1])), (2, 0, 1))


def _relative(xp: Namespace, q_len: int, k_len: int, offset: int | Array | None, device: Device) -> Array:
    """``key - query`` positions, shape ``(q_len, k_len)``, default integer dtype. ``offset`` is an int, None
    or a 0-d array that :func:`scalar_int` left as it is (traced), already in ``xp`` and on ``device``."""
    q_len = checks.positive_int(q_len, "q_len")
    k_len = checks.positive_int(k_len, "k_len")
    keys = xp.arange(k_len, device=device)
    if offset is None:
        offset = k_len - q_len
    expected = "offset must be an int or a 0-d integer array (position of the first query)"
    if isinstance(offset, bool):
        raise TypeError(f"{expected}, got {offset!r}")
    if isinstance(offset, int):
        if abs(offset) + q_len + k_len > 2**62:
            raise ValueError(f"offset must keep every position within +-2**62, got offset={offset}")
        queries = xp.arange(offset, offset + q_len, device=device)
        return keys[None, :] - queries[:, None]
    if not backends.is_array(offset) or not backends.is_integral(xp, offset.dtype):
        raise TypeError(f"{expected}, got {offset!r}")
    if offset.ndim != 0:
        raise ValueError(f"{expected}, got shape {tuple(offset.shape)}")
    # a traced offset: no value to check, and none is read
    queries = xp.astype(offset, keys.dtype) + xp.arange(q_len, dtype=keys.dtype, device=device)
    return keys[None, :] - queries[:, None]


def _from_host(xp: Namespace, values: np.ndarray, dtype: DType, device: Device) -> Array:
    """A float64 host array on ``device`` in ``dtype`` (through float32 where float64 is missing)."""
    if dtype == xp.float64:
        return xp.asarray(values, dtype=xp.float64, device=device)
    return xp.astype(xp.asarray(values.astype(np.float32), device=device), dtype)
