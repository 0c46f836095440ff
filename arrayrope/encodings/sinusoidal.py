"""Sinusoidal absolute position embeddings (Vaswani et al.), built on the rotary tables."""

from __future__ import annotations

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.types import (
    SINUSOIDAL_FREQUENCIES,
    Array,
    Device,
    DType,
    Namespace,
    SinusoidalFrequencies,
    SinusoidalLayout,
)
from ..frequencies import RopeFrequencies, rope_frequencies
from ..tables import rope_tables

__all__ = ["sinusoidal_embedding"]


def sinusoidal_embedding(
    dim: int,
    positions: Array | int,
    *,
    base: float = 10000.0,
    layout: SinusoidalLayout = "interleaved",
    frequencies: SinusoidalFrequencies = "paper",
    xp: Namespace | None = None,
    dtype: DType | None = None,
    device: Device = None,
) -> Array:
    """Sinusoidal embedding ``sin/cos(pos / base ** (2i / dim))``, shape ``positions.shape + (dim,)``.

    Parameters
    ----------
    dim : int
        Embedding width (even).
    positions : int or array
        A count ``n`` (positions ``0..n-1``) or an array of integer or real positions.
    base : float
        Wavelength base, 10000 in the Transformer paper.
    layout : {"interleaved", "concat"}
        ``"interleaved"``: sin on even features, cos on odd ones (the paper);
        ``"concat"``: all sines, then all cosines (the order of tensor2tensor's timing
        signal and of many vision models).
    frequencies : {"paper", "tensor2tensor"}
        ``"paper"``: ``base ** (-2i / dim)`` for ``i < dim / 2`` (Vaswani et al.);
        ``"tensor2tensor"``: ``base ** (-i / (dim / 2 - 1))``, timescales log-spaced from 1
        to ``base`` with both ends included (tensor2tensor's ``get_timing_signal_1d`` with
        ``min_timescale=1, max_timescale=base``; use it with ``layout="concat"``).
    xp : namespace, optional
        Array namespace for int or tuple positions (default NumPy); inferred from an array.
    dtype : dtype or str, optional
        Real floating dtype of the tables (default float32).
    device : device, optional
        Device of the tables (default: the positions' device).

    Returns
    -------
    array
        Shape ``positions.shape + (dim,)`` (``(n, dim)`` for a count), angles computed in
        float64 where the device has it.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> pe = arrayrope.sinusoidal_embedding(4, 2)
    >>> bool(np.allclose(pe[1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)]))
    True
    >>> t2t = arrayrope.sinusoidal_embedding(4, 2, layout="concat", frequencies="tensor2tensor")
    >>> bool(np.allclose(t2t[1], [np.sin(1), np.sin(1e-4), np.cos(1), np.cos(1e-4)]))
    True
    """
    dim = checks.positive_int(dim, "dim")
    if dim % 2:
        raise ValueError(f"dim must be even (sin and cos come in pairs), got {dim}")
    checks.choice(layout, "layout", ("interleaved", "concat"))
    if checks.choice(frequencies, "frequencies", SINUSOIDAL_FREQUENCIES) == "paper":
        freqs = rope_frequencies(dim, base=base)
    else:
        base = checks.positive_real(base, "base")
        h = dim // 2
        inv = base ** (-np.arange(h, dtype=np.float64) / max(h - 1, 1))
        freqs = RopeFrequencies(inv_freq=inv, head_dim=dim, rotary_dim=dim, base=base, rope_type="tensor2tensor")
    cos, sin = rope_tables(freqs, positions, xp=xp, dtype=dtype, device=device)
    ns = backends.namespace(cos)
    if layout == "concat":
        return ns.concat([sin, cos], axis=-1)
    lead = tuple(cos.shape[:-1])
    return ns.reshape(ns.stack([sin, cos], axis=-1), (*lead, dim))
