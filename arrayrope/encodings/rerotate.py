"""Move rotated keys from one frequency set to another without the unrotated keys."""

from __future__ import annotations

import numpy as np

from .. import backends
from .._lib import checks
from .._lib.dtypes import table_dtype_for
from .._lib.positions import as_positions
from .._lib.types import Array, Layout
from ..apply import apply_rotary
from ..frequencies import RopeFrequencies
from ..tables import rope_tables

__all__ = ["rerotate"]


def rerotate(
    x: Array,
    *,
    positions: Array | int,
    from_freqs: RopeFrequencies,
    to_freqs: RopeFrequencies,
    layout: Layout = "half",
    apply_attention_factor: bool = True,
) -> Array:
    """Re-express keys rotated with ``from_freqs`` as if they had been rotated with ``to_freqs``.

    Rotations about one plane compose by adding angles, ``R(θ' p) = R((θ' - θ) p) R(θ p)``,
    so keys already in a KV cache are moved to new frequencies (after a dynamic-NTK
    growth or a LongRoPE switch) by one rotation through the angle difference,
    without a new prefill. The difference ``θ' - θ`` is formed on the host in
    float64 and the angles ``(θ' - θ) p`` in float64 where the device has it, so
    the result carries one rounding of ``x``'s dtype more than rotating from scratch.

    Parameters
    ----------
    x : array
        Rotated keys ``(..., head_dim)``; never modified.
    positions : int or array
        The positions the keys were rotated at; ``positions.shape + (rotary_dim // 2,)``
        must broadcast against ``x.shape[:-1] + (rotary_dim // 2,)`` as in
        :func:`apply_rotary` (for ``(B, H, S, D)`` keys: shape ``(S,)`` or ``(B, 1, S)``).
    from_freqs, to_freqs : RopeFrequencies
        The frequencies the keys were rotated with and those wanted; one ``head_dim``
        and ``rotary_dim``.
    layout : {"half", "interleaved"}
        The pair layout of ``x``.
    apply_attention_factor : bool
        Whether the keys carry ``from_freqs.attention_factor`` (tables made with
        ``rope_tables(..., apply_attention_factor=True)``, the default); they are then
        rescaled to ``to_freqs.attention_factor``.

    Returns
    -------
    array
        Same namespace, device, dtype and shape as ``x``.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> f1 = arrayrope.rope_frequencies(8)
    >>> f2 = arrayrope.rope_frequencies(8, scaling={"rope_type": "linear", "factor": 4.0})
    >>> k = np.random.default_rng(0).standard_normal((5, 8))
    >>> pos = np.arange(100, 105)
    >>> k1 = arrayrope.apply_rotary(k, *arrayrope.rope_tables(f1, pos, dtype="float64"))
    >>> k2 = arrayrope.apply_rotary(k, *arrayrope.rope_tables(f2, pos, dtype="float64"))
    >>> bool(np.allclose(arrayrope.rerotate(k1, positions=pos, from_freqs=f1, to_freqs=f2), k2))
    True
    """
    for name, f in (("from_freqs", from_freqs), ("to_freqs", to_freqs)):
        if not isinstance(f, RopeFrequencies):
            raise TypeError(f"{name} must be a RopeFrequencies from rope_frequencies(), got {type(f).__name__}")
    if (from_freqs.head_dim, from_freqs.rotary_dim) != (to_freqs.head_dim, to_freqs.rotary_dim):
        raise ValueError(
            "from_freqs and to_freqs must share head_dim and rotary_dim, got "
            f"({from_freqs.head_dim}, {from_freqs.rotary_dim}) and ({to_freqs.head_dim}, {to_freqs.rotary_dim})"
        )
    checks.layout(layout)
    xp = backends.namespace(x, names=("x",))
    if not backends.is_real_floating(xp, x.dtype):
        raise TypeError(f"x must have a real floating dtype, got {x.dtype}")
    if x.ndim < 1 or x.shape[-1] != from_freqs.head_dim:
        got = x.shape[-1] if x.ndim else "a 0-d array"
        raise ValueError(f"x.shape[-1] must be head_dim={from_freqs.head_dim}, got {got}")
    rescale = checks.boolean(apply_attention_factor, "apply_attention_factor")
    factor = to_freqs.attention_factor / from_freqs.attention_factor if rescale else 1.0
    delta = RopeFrequencies(
        inv_freq=np.asarray(to_freqs.inv_freq) - np.asarray(from_freqs.inv_freq),
        head_dim=from_freqs.head_dim,
        rotary_dim=from_freqs.rotary_dim,
        attention_factor=factor,
        base=from_freqs.base,
        rope_type="difference",
    )
    device = backends.device_of(x)
    _, positions, _ = as_positions(positions, like=x, like_name="x")
    cos, sin = rope_tables(delta, positions, xp=xp, dtype=table_dtype_for(xp, x.dtype), device=device)
    lead, at = tuple(x.shape[:-1]), tuple(cos.shape[:-1])
    if len(at) > len(lead) or any(a not in (1, b) for a, b in zip(reversed(at), reversed(lead), strict=False)):
        raise ValueError(f"positions of shape {at} do not broadcast against x.shape[:-1]={lead}")
    # like the attention factor of rope_tables, the rescaling touches the rotary features only
    return apply_rotary(x, cos, sin, layout=layout)
