"""Rotary frequencies: the first stage, computed once on the host in float64."""

from __future__ import annotations

import copy
import dataclasses
import functools
import numbers
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import scaling as _scaling
from ._lib import checks

__all__ = ["RopeFrequencies", "rope_frequencies"]


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class RopeFrequencies:
    """Inverse frequencies of a rotary encoding and what they were made from.

    Every field is checked when the object is made (a ``TypeError`` or
    ``ValueError`` names the field): ``head_dim`` a positive even int, ``rotary_dim``
    an even int in ``[2, head_dim]``, ``inv_freq`` finite reals of shape
    ``(rotary_dim // 2,)``, ``attention_factor`` and ``base`` finite reals > 0.

    Parameters
    ----------
    inv_freq : array_like
        Real numbers, shape ``(rotary_dim // 2,)``; kept as a read-only float64 NumPy
        array: pair ``i`` rotates by ``position * inv_freq[i]`` radians.
    head_dim : int
        Features per head.
    rotary_dim : int
        Leading features of each head that rotate; the rest pass through.
    attention_factor : float
        Factor the rope type applies to cos and sin (1.0 without scaling).
    base : float
        The base (``rope_theta``) the frequencies were computed from.
    rope_type : str
        ``"default"`` or the scaling's rope type.
    made_from : dict, optional
        The keyword arguments of :func:`rope_frequencies` that made them (set by it; None for
        frequencies given directly). An export stores them, so that a check can compute the
        frequencies and attention factor again and compare them with those the model states.

    See Also
    --------
    rope_frequencies : The usual way to make them, from a head dim, base and scaling.

    Examples
    --------
    Frequencies from elsewhere (a checkpoint's stored ``inv_freq``), keyword arguments only:

    >>> import numpy as np, arrayrope
    >>> f = arrayrope.RopeFrequencies(inv_freq=[1.0, 0.01], head_dim=8, rotary_dim=4)
    >>> f.inv_freq.dtype, f.rotary_dim, f.attention_factor
    (dtype('float64'), 4, 1.0)
    >>> cos, sin = arrayrope.rope_tables(f, np.array([2]))
    >>> bool(np.isclose(cos[0, 1], np.cos(0.02)))
    True
    """

    inv_freq: np.ndarray
    head_dim: int
    rotary_dim: int
    attention_factor: float = 1.0
    base: float = 10000.0
    rope_type: str = "default"
    made_from: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)
    #: ``inv_freq``'s float64 bytes: the key of the tables made from them on the host, and a value that graph
    #: tracers (``torch.compile``) take as a constant, where they refuse NumPy arrays
    _inv_freq_bytes: bytes = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        head_dim = checks.positive_int(self.head_dim, "head_dim", even=True)
        rotary = checks.rotary_dim(self.rotary_dim, head_dim)
        raw = np.asarray(self.inv_freq)
        if raw.dtype.kind not in "iuf":
            raise TypeError(f"inv_freq must hold real numbers, got dtype {raw.dtype}")
        inv = np.array(raw, dtype=np.float64)
        if inv.shape != (rotary // 2,):
            raise ValueError(f"inv_freq must have shape ({rotary // 2},) for rotary_dim={rotary}, got {inv.shape}")
        if not np.all(np.isfinite(inv)):
            raise ValueError("inv_freq must be finite")
        inv.flags.writeable = False
        object.__setattr__(self, "_inv_freq_bytes", inv.tobytes())
        if not isinstance(self.rope_type, str):
            raise TypeError(f"rope_type must be a string, got {self.rope_type!r}")
        if self.made_from is not None:
            if not isinstance(self.made_from, Mapping):
                raise TypeError(
                    f"made_from must be a dict of rope_frequencies' arguments or None, got {self.made_from!r}"
                )
            object.__setattr__(self, "made_from", types.MappingProxyType(copy.deepcopy(dict(self.made_from))))
        values = {
            "inv_freq": inv,
            "head_dim": head_dim,
            "rotary_dim": rotary,
            "attention_factor": checks.positive_real(self.attention_factor, "attention_factor"),
            "base": checks.positive_real(self.base, "base"),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RopeFrequencies):
            return NotImplemented
        return (self.head_dim, self.rotary_dim, self.attention_factor, self.base, self.rope_type) == (
            other.head_dim,
            other.rotary_dim,
            other.attention_factor,
            other.base,
            other.rope_type,
        ) and np.array_equal(self.inv_freq, other.inv_freq)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[functools.partial[RopeFrequencies], tuple[()]]:
        # copies and unpickled sets go through the checks again, which also makes their inv_freq read-only
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        fields["made_from"] = None if self.made_from is None else dict(self.made_from)
        return functools.partial(type(self), **fields), ()


def rope_frequencies(
    head_dim: int,
    *,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    partial_rotary_factor: float | None = None,
    scaling: Mapping[str, Any] | None = None,
    max_position_embeddings: int | None = None,
    seq_len: int | None = None,
) -> RopeFrequencies:
    """Inverse frequencies ``base ** (-2i / rotary_dim)``, ``i < rotary_dim / 2``, in float64.

    Parameters
    ----------
    head_dim : int
        Features per attention head (even, positive).
    base : float
        The rotary base (``rope_theta``), > 0.
    rotary_dim : int, optional
        Leading features of each head that rotate (even, <= head_dim). Default: all.
    partial_rotary_factor : float, optional
        Alternative to ``rotary_dim``: ``rotary_dim = int(head_dim * partial_rotary_factor)``,
        as Hugging Face configs give it.
    scaling : dict, optional
        A Hugging Face ``rope_scaling`` / ``rope_parameters`` dict (see :mod:`arrayrope.scaling`).
    max_position_embeddings, seq_len : int, optional
        Context lengths the sequence-dependent rope types need.

    Returns
    -------
    RopeFrequencies
        The inverse frequencies (float64) and what they were made from.

    Examples
    --------
    >>> import arrayrope
    >>> f = arrayrope.rope_frequencies(8, base=10000.0)
    >>> [round(v, 15) for v in f.inv_freq.tolist()]  # math libraries differ in the last bit of pow
    [1.0, 0.1, 0.01, 0.001]
    >>> arrayrope.rope_frequencies(64, partial_rotary_factor=0.5).rotary_dim
    32
    """
    head_dim = checks.positive_int(head_dim, "head_dim", even=True)
    base = checks.positive_real(base, "base")
    if max_position_embeddings is not None:
        max_position_embeddings = checks.positive_int(max_position_embeddings, "max_position_embeddings")
    if seq_len is not None:
        seq_len = checks.non_negative_int(seq_len, "seq_len")
    if partial_rotary_factor is not None:
        if rotary_dim is not None:
            raise ValueError("pass rotary_dim or partial_rotary_factor, not both")
        if isinstance(partial_rotary_factor, bool) or not isinstance(partial_rotary_factor, numbers.Real):
            raise TypeError(f"partial_rotary_factor must be a number in (0, 1], got {partial_rotary_factor!r}")
        if not 0 < partial_rotary_factor <= 1:  # NaN too
            raise ValueError(f"partial_rotary_factor must be in (0, 1], got {partial_rotary_factor}")
        rotary_dim = int(head_dim * partial_rotary_factor)
        if rotary_dim < 2 or rotary_dim % 2:
            raise ValueError(
                f"partial_rotary_factor={partial_rotary_factor} gives rotary_dim={rotary_dim} for "
                f"head_dim={head_dim}; it must be even and >= 2"
            )
    rotary = checks.rotary_dim(rotary_dim, head_dim)
    inv_freq = base ** (-np.arange(0, rotary, 2, dtype=np.float64) / rotary)
    made_from: dict[str, Any] = {"head_dim": head_dim, "base": base, "rotary_dim": rotary}
    if scaling is None:
        return RopeFrequencies(inv_freq=inv_freq, head_dim=head_dim, rotary_dim=rotary, base=base, made_from=made_from)
    rope_type, inv_freq, attention_factor = _scaling.scale(
        scaling,
        inv_freq=inv_freq,
        base=base,
        head_dim=head_dim,
        rotary_dim=rotary,
        max_position_embeddings=max_position_embeddings,
        seq_len=seq_len,
    )
    lengths = {"max_position_embeddings": max_position_embeddings, "seq_len": seq_len}  # the scaling is checked
    made_from |= {"scaling": dict(scaling), **{k: v for k, v in lengths.items() if v is not None}}
    # a rope type may widen the rotary part (proportional: the whole head, frequency 0 past rotary_dim)
    return RopeFrequencies(
        inv_freq=inv_freq,
        head_dim=head_dim,
        rotary_dim=2 * inv_freq.shape[0],
        attention_factor=float(attention_factor),
        base=base,
        rope_type=rope_type,
        made_from=made_from,
    )


def turned_back(freqs: RopeFrequencies) -> RopeFrequencies:
    """``freqs`` negated: those of a family whose pairs turn the other way (nanochat's ``rotate_half`` is
    ``(x2, -x1)``), so that pair ``i`` turns by ``-position * inv_freq[i]`` in every arrayrope function."""
    return dataclasses.replace(freqs, inv_freq=-freqs.inv_freq, made_from=None)
