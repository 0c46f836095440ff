"""xPos: RoPE with per-pair exponential scales on queries and keys (length extrapolation).

xPos (Sun et al., "A Length-Extrapolatable Transformer", 2022) multiplies rotary pair
``i`` of a query at position ``n`` by ``zeta_i ** ((n - c) / scale_base)`` and of a key
by ``zeta_i ** (-(n - c) / scale_base)``, with ``zeta_i = (2i / d + gamma) / (1 + gamma)``,
``gamma = 0.4``, ``d = rotary_dim``. A query at ``m`` and a key at ``n`` then meet with
the factor ``zeta_i ** ((m - n) / scale_base) <= 1`` on each pair: scores decay with
distance, faster for the high-frequency pairs, and depend on relative positions only.

The scales are folded into the cos/sin tables, so the rotation and the scaling are one
:func:`~arrayrope.apply_rotary` call each for queries and keys.
"""

from __future__ import annotations

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.dtypes import dtype_name, table_dtype, work_dtype
from .._lib.positions import as_positions
from .._lib.types import Array, Device, DType, Namespace
from ..frequencies import RopeFrequencies
from ..tables import rope_tables

__all__ = ["xpos_scales", "xpos_tables"]


def _zeta(rotary_dim: int, gamma: float) -> np.ndarray:
    return (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim + gamma) / (1 + gamma)


def _log_zeta(rotary_dim: int, gamma: float, dtype: str) -> np.ndarray:
    """``log(zeta)`` on the host in float64, then in ``dtype``."""
    found: np.ndarray = np.log(_zeta(rotary_dim, gamma)).astype(dtype)
    return found


def xpos_scales(
    freqs: RopeFrequencies,
    positions: Array | int,
    *,
    scale_base: float = 512.0,
    gamma: float = 0.4,
    center: float = 0.0,
    xp: Namespace | None = None,
    dtype: DType | None = None,
    device: Device = None,
) -> tuple[Array, Array]:
    """Query and key scales of xPos, each ``positions.shape + (rotary_dim // 2,)``.

    Parameters
    ----------
    freqs : RopeFrequencies
        Gives ``rotary_dim`` (the number of pairs).
    positions : int or array
        As for :func:`rope_tables`.
    scale_base : float
        Positions per factor ``zeta`` of decay (512 in the paper), > 0.
    gamma : float
        ``zeta_i = (2i/d + gamma) / (1 + gamma)`` (0.4 in the paper), > 0.
    center : float
        Position subtracted before exponentiation. Scores do not depend on it, but
        the scales do: ``zeta_0 ** (-|n - c| / scale_base)`` exceeds float32's range
        once ``|n - c| > 70 * scale_base``; choose ``c`` near the middle of the
        positions in use (torchscale uses the middle of the sequence).
    xp : namespace, optional
        Array namespace for int or tuple positions (default NumPy); inferred from an array.
    dtype : dtype or str, optional
        Real floating dtype of the tables (default float32).
    device : device, optional
        Device of the tables (default: the positions' device).

    Returns
    -------
    q_scale : array
        The scale of queries, computed in float64 where the device has it.
    k_scale : array
        The scale of keys, ``1 / q_scale``.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.rope_frequencies(4)
    >>> qs, ks = arrayrope.xpos_scales(f, np.array([512]))
    >>> np.allclose(qs, [[0.4 / 1.4, 0.9 / 1.4]]), np.allclose(qs * ks, 1.0)
    (True, True)
    """
    if not isinstance(freqs, RopeFrequencies):
        raise TypeError(f"freqs must be a RopeFrequencies from rope_frequencies(), got {type(freqs).__name__}")
    scale_base = checks.positive_real(scale_base, "scale_base")
    gamma = checks.positive_real(gamma, "gamma")
    center = checks.finite_real(center, "center")
    xp, pos, device = as_positions(positions, xp=xp, device=device)
    dtype = table_dtype(xp, dtype, device)
    work = work_dtype(xp, device, dtype)
    pos = xp.arange(pos, dtype=work, device=device) if isinstance(pos, int) else xp.astype(pos, work)
    log_zeta = backends.constant(xp, _log_zeta, (freqs.rotary_dim, gamma, dtype_name(work)), device)
    power = ((pos - center) / scale_base)[..., None] * log_zeta
    return xp.astype(xp.exp(power), dtype), xp.astype(xp.exp(-power), dtype)


def xpos_tables(
    freqs: RopeFrequencies,
    positions: Array | int,
    *,
    scale_base: float = 512.0,
    gamma: float = 0.4,
    center: float = 0.0,
    xp: Namespace | None = None,
    dtype: DType | None = None,
    device: Device = None,
    apply_attention_factor: bool = True,
) -> tuple[Array, Array, Array, Array]:
    """Cos/sin tables with the xPos scales folded in: ``(q_cos, q_sin, k_cos, k_sin)``.

    Rotate queries with ``apply_rotary(q, q_cos, q_sin)`` and keys with
    ``apply_rotary(k, k_cos, k_sin)``.

    Parameters
    ----------
    freqs : RopeFrequencies
        From :func:`rope_frequencies`.
    positions : int or array
        As for :func:`rope_tables`.
    scale_base : float
        As for :func:`xpos_scales`.
    gamma : float
        As for :func:`xpos_scales`.
    center : float
        As for :func:`xpos_scales`.
    xp : namespace, optional
        Array namespace for int positions (default NumPy); inferred from an array.
    dtype : dtype or str, optional
        Real floating dtype of the tables (default float32).
    device : device, optional
        Device of the tables (default: the positions' device).
    apply_attention_factor : bool
        As for :func:`rope_tables`.

    Returns
    -------
    q_cos : array
        Cos of the rotation, times the query scale: ``positions.shape + (rotary_dim // 2,)``.
    q_sin : array
        Sin, times the query scale.
    k_cos : array
        Cos, times the key scale.
    k_sin : array
        Sin, times the key scale.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.rope_frequencies(8)
    >>> qc, qsn, kc, ksn = arrayrope.xpos_tables(f, 16)
    >>> q = arrayrope.apply_rotary(np.ones((16, 8), np.float32), qc, qsn)
    >>> k = arrayrope.apply_rotary(np.ones((16, 8), np.float32), kc, ksn)
    >>> q.shape, k.dtype
    ((16, 8), dtype('float32'))
    """
    q_scale, k_scale = xpos_scales(
        freqs, positions, scale_base=scale_base, gamma=gamma, center=center, xp=xp, dtype=dtype, device=device
    )
    cos, sin = rope_tables(
        freqs, positions, xp=xp, dtype=dtype, device=device, apply_attention_factor=apply_attention_factor
    )
    return cos * q_scale, sin * q_scale, cos * k_scale, sin * k_scale
