"""One call of :class:`~arrayrope.RotaryEmbedding`: its arguments checked before anything changes, and the
tables of its positions (the instance's cache, or computed for these positions only)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import backends
from .._lib import checks
from .._lib.dtypes import index_dtype, table_dtype_for
from .._lib.positions import add_steps, position_array, scalar_int
from .._lib.types import Array, Axes, Layout, Namespace
from ..frequencies import RopeFrequencies
from ..tables import rope_tables
from ._cache import MAX_CACHE, TableCache
from ._mrope_call import MRope, check_positions
from .mrope import half_tables

if TYPE_CHECKING:
    from .embedding import RotaryEmbedding

__all__ = ["Where", "check_inputs", "check_outs", "exported", "positions_of", "tables", "to_axes"]


def check_inputs(
    xp: Namespace, q: Array, k: Array | None, head_dim: int, axes: Axes, *, plain: bool = False
) -> tuple[Any, Any]:
    """Check ``q`` and ``k`` (dtypes, shapes, device, shared batch and sequence); the dtypes of their tables.
    ``plain``: :func:`arrayrope.backends.plain_floating` found them of one real floating dtype and device."""
    qs = q.shape  # each shape read once (a decode step is microseconds)
    if plain:
        if len(qs) != 4 or qs[-1] != head_dim:
            _check_shape(q, "q", head_dim, axes)
        q_dtype = table_dtype_for(xp, q.dtype)
    else:
        q_dtype = _check_input(xp, q, "q", head_dim, axes)
    k_dtype = q_dtype
    if k is not None:
        ks = k.shape
        if k.dtype == q.dtype:  # the dtype is checked already
            if len(ks) != 4 or ks[-1] != head_dim:
                _check_shape(k, "k", head_dim, axes)
        else:
            k_dtype = _check_input(xp, k, "k", head_dim, axes)
        if not plain:
            backends.same_device(q, k, "q", "k")
        s_ax, other = (2, 1) if axes == "bhsd" else (1, 2)
        if qs[0] != ks[0] or qs[s_ax] != ks[s_ax]:
            flip = "bshd" if axes == "bhsd" else "bhsd"
            hint = (
                f"; these shapes fit axes={flip!r} (sequence on axis {other}), pass that"
                if q.shape[0] == k.shape[0] and q.shape[other] == k.shape[other]
                else ""
            )
            raise ValueError(
                f"q and k must share batch and sequence sizes; with axes={axes!r} the sequence is axis "
                f"{s_ax}, got q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}{hint}"
            )
    return q_dtype, k_dtype


def check_outs(q: Array, k: Array | None, q_out: Array | None, k_out: Array | None) -> None:
    """Each destination fits its input and shares memory with no other array of the call (q is rotated
    into q_out before k is read, and k_out is written after q_out)."""
    if q_out is not None:
        backends.check_out(q_out, q, name="q_out", x_name="q", others={} if k is None else {"k": k})
    if k_out is not None:
        if k is None:
            raise ValueError("k_out= was given without k; pass k (the keys to rotate into it)")
        others = {"q": q} if q_out is None else {"q": q, "q_out": q_out}
        backends.check_out(k_out, k, name="k_out", x_name="k", others=others)


def _check_input(xp: Namespace, x: Array, name: str, head_dim: int, axes: Axes) -> Any:
    """Check one input; the dtype of its tables."""
    if not backends.is_real_floating(xp, x.dtype):
        raise TypeError(f"{name} must have a real floating dtype (float16, bfloat16, float32, float64), got {x.dtype}")
    _check_shape(x, name, head_dim, axes)
    return table_dtype_for(xp, x.dtype)


def _check_shape(x: Array, name: str, head_dim: int, axes: Axes) -> None:
    if x.ndim != 4:
        raise ValueError(f"{name} must be 4-D as axes={axes!r} says, got shape {tuple(x.shape)}")
    if x.shape[-1] != head_dim:
        raise ValueError(
            f"{name}.shape[-1] must be head_dim={head_dim} (axes={axes!r} puts features last), "
            f"got shape {tuple(x.shape)}"
        )


def exported(
    graph: Callable[..., Any],
    rope: RotaryEmbedding,
    q: Array,
    k: Array | None,
    positions: Any,
    offset: Any,
    seq_len: Any,
    outs: tuple[Array | None, Array | None],
) -> Any:
    """The call of ``rope`` as ``graph``, the rotation registered for the graph of q's library being traced (ONNX
    export), builds it; None where ``graph`` leaves the call to the eager path. The graph keeps the frequencies of
    ``seq_len`` (length-dependent types) or the starting ones. M-RoPE positions ``(axes, B, S)``, checked here,
    reach ``graph`` with ``mrope=(sections, interleaved)``, a keyword given to no other call."""

    def fixed_freqs() -> RopeFrequencies:
        if rope._resize is None:
            return rope._start_freqs
        if seq_len is None:
            raise ValueError(
                f"rope_type {rope.freqs.rope_type!r} picks its frequencies by sequence length, which a traced "
                "graph does not know; pass seq_len= (the length whose frequencies the graph keeps)"
            )
        length = checks.positive_int(seq_len, "seq_len")
        with rope._lock:
            rope.freqs = rope._resize(length)
            return rope.freqs

    m = rope._mrope
    extra: dict[str, Any] = {}
    seq = q.shape[2 if rope.axes == "bhsd" else 1]
    # positions (axes, B, S): M-RoPE's, checked (an instance without sections refuses them, saying what to do)
    refused = getattr(rope, "_mrope_refused", "")
    if getattr(positions, "ndim", 0) == 3 and check_positions(positions, m, q.shape[0], seq, rope.axes, refused) and m:
        if m.interleaved == "spatial" or m.interleaved == "full_width":
            _no_outs(outs)  # the export layer's op takes consecutive or turning sections: the computation is traced
            return None
        extra["mrope"] = (m.sections, m.interleaved)
    fused = graph(
        q,
        k,
        freqs=fixed_freqs,
        positions=positions,
        offset=offset,
        layout=rope.layout,
        axes=rope.axes,
        max_positions=rope.max_position_embeddings,
        **extra,
    )
    if fused is not None:
        _no_outs(outs)
    return fused


def _no_outs(outs: tuple[Array | None, Array | None]) -> None:
    if outs[0] is not None or outs[1] is not None:
        raise ValueError(
            "q_out= and k_out= are not exported (an ONNX graph's outputs are fresh tensors): pass "
            "none while torch.onnx.export traces the model, and write the returned keys into the cache"
        )


def positions_of(
    xp: Namespace,
    q: Array,
    positions: Any,
    offset: Any,
    seq_len: Any,
    axes: Axes,
    follows: str | None,
    tracing: bool,
    mrope: MRope | None = None,
    mrope_refused: str = "",
) -> Where:
    """Check the positions of a call (nothing is computed or changed yet); ``follows``: the rope type when
    its frequencies follow the sequence length (the call's length is then found), else None; ``tracing``:
    ``backends.tracing(xp)``, as the caller found it; ``mrope``: the instance's multimodal RoPE, whose
    positions may also be ``(axes, B, S)``; ``mrope_refused``: why an instance of a family whose multimodal RoPE
    arrayrope does not compute refuses them."""
    qs = q.shape
    batch = qs[0]
    seq = qs[2] if axes == "bhsd" else qs[1]
    device = backends.device_of(q)
    if seq_len is not None:
        seq_len = checks.positive_int(seq_len, "seq_len")
    offset = scalar_int(offset)  # a 0-d array with a value is an int; a traced one stays an array
    if positions is not None:
        if not (type(offset) is int and offset == 0):
            raise ValueError("pass positions or offset, not both (positions already include any offset)")
        _, pos, _ = position_array(positions, "positions", like=q)
        per_axis = check_positions(pos, mrope, batch, seq, axes, mrope_refused)  # (axes, B, S): checked there
        if not per_axis and (
            pos.ndim not in (1, 2)
            or pos.shape[-1] != seq
            or (pos.ndim == 2 and not (pos.shape[0] == batch or pos.shape[0] == 1))  # batch first: no guard
        ):
            raise ValueError(_positions_mismatch(tuple(q.shape), tuple(pos.shape), axes))
        length = _length(pos, 0, seq_len, follows)
        return Where(device, seq, array=pos, length=length, mrope=mrope if per_axis else None)
    if type(offset) is int:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        # a trace keeps its own tables (nothing created while tracing may outlive it, and no cache keeps
        # lazy arrays), and a graph compiler's sequence length may be symbolic: no comparison of it may run
        # (dynamo turns one into a bound on the dimension, which torch.export refuses for a dynamic one)
        traced = not backends.concrete(q)
        if (
            not tracing
            and isinstance(seq, int)
            and offset + seq > 2**31
            and offset + seq - 1 > (limit := int(xp.iinfo(index_dtype(xp, device)).max))
        ):
            raise ValueError(
                f"offset + seq - 1 must be at most {limit} (the largest position this device holds), "
                f"got offset={offset} with seq={seq}"
            )
        return Where(device, seq, start=offset, length=offset + seq, traced=traced)
    if isinstance(offset, bool) or not backends.is_array(offset):
        raise TypeError(f"offset must be an int or an integer array of shape () or (B,), got {offset!r}")
    _, off, _ = position_array(offset, "offset", like=q)
    if not backends.is_integral(xp, off.dtype):
        raise TypeError(f"offset must be an int or an integer array of shape () or (B,), got dtype {off.dtype}")
    if off.ndim > 1 or (off.ndim == 1 and off.shape[0] != batch):
        raise ValueError(
            f"offset must be an int or an array of shape () or (B,) = ({batch},) (axis 0 of q, "
            f"axes={axes!r}), got {tuple(off.shape)}"
        )
    if backends.concrete(off) and batch and int(xp.min(off)) < 0:
        raise ValueError(f"offset must be >= 0, got {int(xp.min(off))}")
    # a traced 0-d offset has no value: its tables are computed from its positions, as per-row offsets' are
    pos = add_steps(xp, off, seq, device)
    return Where(device, seq, array=pos, length=_length(off, seq - 1, seq_len, follows))


def _length(src: Array, extra: int, seq_len: int | None, follows: str | None) -> int | None:
    """The length ``L`` of a call with positions or offsets ``src`` (for the rope types that follow it)."""
    if follows is None:
        return None
    if seq_len is not None:
        return seq_len
    if not backends.concrete(src):
        raise ValueError(
            f"rope_type {follows!r} picks its frequencies by sequence length; with traced or "
            "lazy positions (jax.jit, torch.compile, Dask) pass seq_len= (max position + 1)"
        )
    return int(backends.namespace(src).max(src)) + 1 + extra


def tables(
    xp: Namespace,
    x: Array,
    freqs: RopeFrequencies,
    where: Where,
    dtype: Any,
    *,
    cache: TableCache | None,
    layout: Layout,
    axes: Axes,
) -> tuple[Array, Array, Any]:
    """cos/sin for the positions ``where`` describes, shaped to broadcast against q and k, and their
    prepared form for arrays like ``x`` where the cache keeps one (else None). ``cache``: the instance's,
    where ``freqs`` are the ones it holds tables of (its starting frequencies), else None."""
    if where.array is not None and where.mrope is not None:  # M-RoPE positions (axes, B, S)
        m = where.mrope
        (cos, sin), second = half_tables(
            freqs, where.array, sections=m.sections, interleaved=m.interleaved, dtype=dtype
        )
        if second is not None:  # the pairs' second features turn by other axes (HunYuan-VL): both, on axis -2
            (c1, s1), (c2, s2) = to_axes(cos, sin, axes), to_axes(*second, axes)
            return xp.stack([c1, c2], axis=-2), xp.stack([s1, s2], axis=-2), None
    elif where.array is not None:
        cos, sin = rope_tables(freqs, where.array, dtype=dtype)
    elif not where.traced and cache is not None and where.length <= MAX_CACHE:
        return cache.rows(xp, x, where.device, dtype, where.start, where.seq, layout, _TO_AXES[axes])
    else:  # other frequencies, or positions beyond the cache: the tables of these positions only
        # start + arange(seq): the stop of arange(start, start + seq) is one past the last position, which
        # overflows (PyTorch raises) when the last position is the largest integer of the index dtype
        steps = xp.arange(where.seq, dtype=index_dtype(xp, where.device), device=where.device) + where.start
        cos, sin = rope_tables(freqs, steps, dtype=dtype)
    return (*to_axes(cos, sin, axes), None)


def to_axes(cos: Array, sin: Array, axes: Axes) -> tuple[Array, Array]:
    """Tables (S, h) or (B, S, h) with the axes that broadcast them against q and k."""
    if cos.ndim == 2:
        return (cos, sin) if axes == "bhsd" else (cos[:, None, :], sin[:, None, :])
    if axes == "bhsd":
        return cos[:, None, :, :], sin[:, None, :, :]
    return cos[:, :, None, :], sin[:, :, None, :]


#: to_axes for each value of ``axes``, made once (a decode step's rows are shaped through it).
_TO_AXES: dict[str, Callable[[Array, Array], tuple[Array, Array]]] = {
    "bhsd": functools.partial(to_axes, axes="bhsd"),
    "bshd": functools.partial(to_axes, axes="bshd"),
}


def _positions_mismatch(q_shape: tuple[int, ...], pos_shape: tuple[int, ...], axes: str) -> str:
    """Why ``positions`` do not fit q, naming ``axes=`` and the other order when they would fit it."""
    s_ax, other = (2, 1) if axes == "bhsd" else (1, 2)
    seq, batch = q_shape[s_ax], q_shape[0]
    msg = (
        f"positions must have shape (S,) or (B, S) = ({seq},) or ({batch}, {seq}): with axes={axes!r} the "
        f"sequence of q {q_shape} is axis {s_ax}; got {pos_shape}"
    )
    if pos_shape and pos_shape[-1] == q_shape[other] != seq:
        msg += f". They fit axis {other}: for q laid out as {'bshd' if axes == 'bhsd' else 'bhsd'}, pass that as axes="
    return msg


@dataclasses.dataclass(slots=True)
class Where:
    """The checked positions of a call: ``start .. start + seq - 1``, or an array; and the call's length."""

    device: Any
    seq: int
    start: int = 0
    array: Array | None = None
    length: Any = None
    traced: bool = False
    mrope: MRope | None = None  # the sections of positions (axes, B, S); None for (S,) or (B, S)
