"""Type aliases: arrays of any library, and the ``Literal`` choices of the public API.

An array is typed :data:`Array` (``Any``): the Array API has no static type that
NumPy, PyTorch, CuPy, JAX, Dask and array_api_strict arrays all satisfy.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, get_args

Array: TypeAlias = Any
"""An array of any Array API library (NumPy, PyTorch, CuPy, JAX, Dask, array_api_strict)."""
Namespace: TypeAlias = Any
"""An Array API namespace (``array_api_compat.numpy``, ``array_api_strict``, ``jax.numpy``...)."""
Device: TypeAlias = Any
"""A device of a namespace (``"cpu"``, ``torch.device("cuda")``...)."""
DType: TypeAlias = Any
"""A dtype object of a namespace, or its name (``"float32"``)."""

Layout: TypeAlias = Literal["half", "interleaved"]
"""Which features pair up: ``"half"`` (i with i + r/2) or ``"interleaved"`` (2i with 2i + 1)."""
Axes: TypeAlias = Literal["bhsd", "bshd"]
"""Where batch, heads, sequence and features sit in a 4-D query or key."""
RotaryFeatures: TypeAlias = Literal["leading", "trailing"]
"""Which features of a head rotate: the first ``rotary_dim`` (most models) or the last (DeepSeek's q_pe, k_pe)."""
GridKind: TypeAlias = Literal["index", "pixel", "centered"]
"""A grid's coordinates: indices ``0..s-1``, ``s`` points across ``[-1, 1]``, or cell centres in ``[-1, 1]``."""
GridIndexing: TypeAlias = Literal["ij", "xy"]
"""Order of a grid's coordinates: row first (``"ij"``) or column first (``"xy"``)."""
BandSpacing: TypeAlias = Literal["linear", "log"]
"""How pixel frequency bands are spaced between 1 and ``max_freq / 2`` (times pi)."""
SinusoidalLayout: TypeAlias = Literal["interleaved", "concat"]
"""Sinusoidal feature order: sin/cos alternating, or all sines then all cosines."""
SinusoidalFrequencies: TypeAlias = Literal["paper", "tensor2tensor"]
"""Sinusoidal frequencies: ``base ** (-2i / d)`` (the paper) or ``base ** (-i / (d/2 - 1))`` (tensor2tensor)."""

LAYOUTS: tuple[Layout, ...] = get_args(Layout)
AXES: tuple[Axes, ...] = get_args(Axes)
ROTARY_FEATURES: tuple[RotaryFeatures, ...] = get_args(RotaryFeatures)
GRID_KINDS: tuple[GridKind, ...] = get_args(GridKind)
GRID_INDEXINGS: tuple[GridIndexing, ...] = get_args(GridIndexing)
BAND_SPACINGS: tuple[BandSpacing, ...] = get_args(BandSpacing)
SINUSOIDAL_FREQUENCIES: tuple[SinusoidalFrequencies, ...] = get_args(SinusoidalFrequencies)
