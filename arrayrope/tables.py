"""Cos/sin tables: the second stage, exact at any position on every device.

``rope_tables`` turns :class:`~arrayrope.RopeFrequencies` and positions of any
backend into ``(cos, sin)`` on the positions' namespace and device.

Precision (:mod:`arrayrope._lib.digits`). Where the namespace and device have
float64, positions are split into 20-bit digits whose turns, reduced exactly on the
host, are summed on the device, so no large angle is ever rounded (float32 tables
take float64 angles ``position * inv_freq`` below ``2**20``, where their rounding is
invisible). float32 tables are then within 3e-8 of the exact values at every
position in ``[-2**63, 2**63)``, float64 tables within 5e-15. Where float64 is missing (JAX without x64, Apple
MPS, array_api_strict's ``no_float64`` device) the positions are split into 10-bit
digits, ``p = sum(d_k * 1024**k)``; the rotation of each digit comes from a small
table computed exactly on the host, and the digit rotations are composed with the
angle-addition formula in float32: within 1.5e-7 at every position (float32
angles reach 6e-2 at 2**20). Graphs being traced (``torch.compile``, ``torch.export``,
``torch.onnx.export``) take the float32 method too unless the tables are float64: they carry no
float64, which GPU, TensorRT and NPU execution providers run slowly or not at all, and what the
method needs from the host enters them as constants (:func:`arrayrope.backends.constant`).
"""

from __future__ import annotations

from . import backends
from ._lib import checks
from ._lib.digits import WIDE_BITS, cos_sin
from ._lib.dtypes import index_dtype, table_dtype
from ._lib.positions import as_positions
from ._lib.types import Array, Device, DType, Namespace
from .frequencies import RopeFrequencies

__all__ = ["rope_tables"]


def rope_tables(
    freqs: RopeFrequencies,
    positions: Array | int,
    *,
    xp: Namespace | None = None,
    dtype: DType | None = None,
    device: Device = None,
    apply_attention_factor: bool = True,
) -> tuple[Array, Array]:
    """Compute cos and sin of ``positions * inv_freq``, each ``positions.shape + (rotary_dim // 2,)``.

    Parameters
    ----------
    freqs : RopeFrequencies
        From :func:`rope_frequencies`.
    positions : int or array
        An int ``n`` (positions ``0 .. n-1``) or an array of any shape and backend:
        integers (negative ones rotate backwards) or real numbers (fractional
        positions for interpolation or image grids).
    xp : namespace, optional
        Array namespace for an int ``positions`` (default NumPy); inferred from an array.
    dtype : dtype or str, optional
        Real floating dtype of the tables (default float32).
    device : device, optional
        Device of the tables (default: the positions' device).
    apply_attention_factor : bool
        Multiply cos and sin by ``freqs.attention_factor`` as Hugging Face does
        (YaRN, LongRoPE). Pass False when the factor goes into the softmax scale instead.

    Returns
    -------
    cos : array
        On the positions' namespace and device.
    sin : array
        The same shape, namespace and device.

    Notes
    -----
    Positions must lie in ``[-2**63, 2**63)`` and real ones must be finite:
    checked where the values exist (eager NumPy, PyTorch, CuPy, JAX and
    array_api_strict arrays); traced arrays and Dask graphs are not inspected, so
    that tracing and graph building compute nothing (there, the number of digits
    follows from the dtype).

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f = arrayrope.rope_frequencies(4)
    >>> cos, sin = arrayrope.rope_tables(f, 3)
    >>> cos.shape, cos.dtype
    ((3, 2), dtype('float32'))
    >>> np.allclose(sin[:, 0], np.sin([0.0, 1.0, 2.0]))
    True
    """
    if not isinstance(freqs, RopeFrequencies):
        raise TypeError(f"freqs must be a RopeFrequencies from rope_frequencies(), got {type(freqs).__name__}")
    xp, pos, device = as_positions(positions, xp=xp, device=device)
    dtype = table_dtype(xp, dtype, device)
    factor = freqs.attention_factor if checks.boolean(apply_attention_factor, "apply_attention_factor") else 1.0
    bits = None
    if isinstance(pos, int):
        if pos <= 1 << WIDE_BITS:
            fast = backends.arange_tables(xp, freqs.inv_freq, pos, dtype, factor)
            if fast is not None:
                return fast
        bits = max(pos - 1, 0).bit_length()
        pos = xp.arange(pos, dtype=index_dtype(xp, device), device=device)
    # traced graphs (torch.compile, torch.export, ONNX exporters) carry no float64 unless the tables are float64:
    # the exact float32 method; the frequencies go as bytes, which tracers take as a constant
    wide = dtype == xp.float64
    cos, sin = cos_sin(
        xp, freqs._inv_freq_bytes, pos, device, exact=wide, bits=bits, float64=wide or not backends.tracing(xp)
    )
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return xp.astype(cos, dtype, copy=False), xp.astype(sin, dtype, copy=False)
