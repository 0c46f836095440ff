"""Cos/sin tables: the second stage, angles in float64 (or an exact float32 method).

``rope_tables`` turns :class:`~arrayrope.RopeFrequencies` and positions of any
backend into ``(cos, sin)`` on the positions' namespace and device.

Precision. Where the namespace and device have float64, the angles
``position * inv_freq`` and their cos/sin are computed in float64 and cast at
the end: float32 tables are then correctly rounded to within 3e-8 at any
position. Where float64 is missing (JAX without x64, Apple MPS, array_api_strict's
``no_float64`` device; also graphs that ``torch.onnx.export`` traces, which carry no
float64 because GPU, TensorRT and NPU execution providers run it slowly or not at
all) the positions are split into 10-bit digits, ``p = sum(d_k * 1024**k)``; the
rotation of each digit is looked up in a small table computed on the host in
float64, and the digit rotations are composed with the angle-addition formula
in float32. The error then stays below 1.5e-7 at any position instead of growing
with it (float32 angles reach 6e-2 at 2^20).
"""

from __future__ import annotations

import numpy as np

from . import backends
from ._lib import checks
from ._lib.digits import float32_tables
from ._lib.dtypes import table_dtype
from ._lib.positions import as_positions
from ._lib.types import Array, Device, DType, Namespace
from .frequencies import RopeFrequencies

__all__ = ["rope_tables"]


def rope_tables(
    freqs: RopeFrequencies,
    positions: Array | int,
    *,
    xp: Namespace | None = None, dtype: DType | None = None, device: Device = None,
    apply_attention_factor: bool = True,
) -> tuple[Array, Array]:
    """Cos and sin of ``positions * inv_freq``, each ``positions.shape + (rotary_dim // 2,)``.

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
    device : optional
        Device of the tables (default: the positions' device).
    apply_attention_factor : bool
        Multiply cos and sin by ``freqs.attention_factor`` as Hugging Face does
        (YaRN, LongRoPE). Pass False when the factor goes into the softmax scale instead.

    Returns
    -------
    cos, sin : arrays
        On the positions' namespace and device.

    Notes
    -----
    Float positions must be finite: checked on eager backends (NumPy, PyTorch,
    CuPy, array_api_strict); JAX and Dask arrays are not inspected, so that
    tracing and graph building compute nothing. Without float64 the float32
    method handles integer positions of magnitude below ``2**31`` (int32) or
    ``2**63`` (int64) and float positions below ``2**31``.

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
    if isinstance(pos, int):
        fast = backends.arange_tables(xp, freqs.inv_freq, pos, dtype, factor)
        if fast is not None:
            return fast
    if backends.has_float64(xp, device) and not backends.onnx_exporting(xp):  # exported graphs: no float64
        pos = xp.arange(pos, dtype=xp.float64, device=device) if isinstance(pos, int) else xp.astype(pos, xp.float64)
        angles = pos[..., None] * xp.asarray(np.array(freqs.inv_freq), device=device)
        cos, sin = xp.cos(angles), xp.sin(angles)
    else:
        cos, sin = float32_tables(xp, freqs.inv_freq, pos, device)
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    return xp.astype(cos, dtype), xp.astype(sin, dtype)
