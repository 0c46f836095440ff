"""``RotaryEmbedding``: frequencies, cached tables and application in one callable."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

from .. import backends
from .._lib import checks
from .._lib.types import AXES, ROTARY_FEATURES, Array, Axes, Layout, Namespace, RotaryFeatures
from ..config import settings
from ..frequencies import RopeFrequencies, rope_frequencies
from ..scaling import rope_type
from ._cache import TableCache
from ._call import check_inputs, check_outs, exported, positions_of, tables
from ._mrope_call import Interleaving, MRope, mrope_of, rotation
from ._resize import Resizer

__all__ = ["RotaryEmbedding"]


class RotaryEmbedding:
    """Rotary position embedding for queries and keys, with cached tables.

    Parameters
    ----------
    head_dim : int
        Features per head.
    base : float
        Rotary base (``rope_theta``).
    rotary_dim : int, optional
        Leading features that rotate (partial rotary); default all.
    scaling : dict, optional
        Hugging Face scaling dict, as for :func:`rope_frequencies`.
    max_position_embeddings : int, optional
        The model's context length, which some rope types need (see Notes); also the rows of the cos/sin
        caches when ``torch.onnx.export`` traces the call; without it (and without
        ``arrayrope.export.torch_options(max_positions=...)``) the exported graph computes cos/sin from the
        position ids, right at every position below ``2**30``.
    layout : {"half", "interleaved"}
        Pair layout (see :func:`apply_rotary`).
    axes : {"bhsd", "bshd"}
        Where batch, heads, sequence and features sit in ``q`` and ``k``.
    rotary_features : {"leading", "trailing"}
        Whether the first ``rotary_dim`` features of each head rotate or the last ones
        (DeepSeek-V2/V3, whose ``q_pe`` follows ``q_nope``).
    mrope_sections : sequence of int, optional
        Multimodal RoPE (M-RoPE, the ``mrope_section`` of Qwen2-VL, Qwen3-VL, GLM-4V): the
        rotary pairs each position axis drives (consecutive: summing to ``rotary_dim // 2``); calls
        also take positions of shape ``(len(mrope_sections), B, S)`` (see :func:`mrope_tables`).
        Kept as the attribute ``mrope_sections`` (a tuple; None for 1-D RoPE).
    mrope_interleaved : bool or {"spatial", "full_width"}
        Axes taking turns pair by pair (Qwen3-VL), consecutive sections (False: Qwen2-VL, GLM-4V),
        ``"spatial"`` (ERNIE 4.5 VL; :func:`mrope_tables`) or ``"full_width"`` (HunYuan-VL, half-split:
        axis ``a`` turns ``2 * mrope_sections[a]`` consecutive features of the rotary width, so a pair's
        two features may turn by different axes). The attribute ``mrope_interleaved``.

    Notes
    -----
    Tables for positions ``0..N-1`` are computed on the host in float64 and kept per (namespace, device,
    dtype); ``N`` doubles when a call needs more, up to ``2**17`` positions. A call beyond that computes the
    tables of its own positions only (a decode step at position ``2**31`` costs what one at position 10 does,
    and is as exact). The cache is guarded by a lock, so one instance serves several threads. Explicit
    ``positions``, per-batch ``offset`` arrays and traced 0-d offsets compute their tables directly from the
    positions (no cache lookup, exact at every position), which also holds under ``jax.jit``; offsets plus
    steps are added in int64 (int32 where the device has no int64), never in the offsets' own dtype. Tables
    are float32, or float64 for float64 inputs; float16 and bfloat16 inputs are rotated in float32 and
    rounded once. ``q`` and ``k`` of different dtypes each get the tables of their own.

    Rope types that depend on the sequence length change ``freqs`` during calls,
    as Hugging Face transformers does. The length ``L`` of a call is
    ``offset + S`` for an int ``offset``, else ``seq_len=`` if given, else
    ``max(positions) + 1`` (read from the array where its values exist; traced
    positions and Dask graphs need ``seq_len=``).

    * ``dynamic``: when ``L`` exceeds the longest length seen so far (at first
      ``max_position_embeddings``) the NTK frequencies for ``L`` are computed and
      kept; when ``L < max_position_embeddings`` after that, the original
      frequencies return. Lengths in between keep the frequencies of the longest.
    * ``longrope``: the long factors while ``L > original_max_position_embeddings``,
      the short ones otherwise (at the switch length exactly: short).

    Keys in a KV cache that were rotated before such a change no longer match the
    new frequencies; :func:`arrayrope.rerotate` moves them over. ``self.freqs`` is
    the set of the latest call of any thread; ``return_freqs=True`` returns the set
    a call used, which is what ``rerotate`` needs when threads share an instance.

    Under ``torch.compile`` (``fullgraph=True`` holds) and ``torch.export`` a call traces whole: its tables are
    computed from its positions inside the graph (int offsets too, which dynamo makes dynamic at their second
    value: a decode loop compiles twice), by the exact float32 method unless the inputs are float64, so the graph
    of a float32 model holds no float64 and is right at every position; the cache is neither read nor filled. A
    graph keeps the frequencies of its length, from the starting state (nothing changes while tracing): dynamic
    NTK compiles a graph per length beyond ``max_position_embeddings``.

    An instance holds no parameters or buffers. Copies (``copy.copy``, ``copy.deepcopy``,
    ``pickle``, ``torch.save`` of a model that holds it) keep the configuration, the
    frequencies and the sequence-length state; each gets a lock and an empty cache of
    its own, and computes what the original does.

    Examples
    --------
    >>> import numpy as np, arrayrope
    >>> rope = arrayrope.RotaryEmbedding(64)
    >>> q = np.ones((1, 8, 16, 64), dtype=np.float32)   # (batch, heads, seq, head_dim)
    >>> k = np.ones((1, 2, 16, 64), dtype=np.float32)
    >>> q_rot, k_rot = rope(q, k, offset=100)           # positions 100..115
    >>> q_rot.shape, q_rot.dtype
    ((1, 8, 16, 64), dtype('float32'))
    """

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        rotary_dim: int | None = None,
        scaling: Mapping[str, Any] | None = None,
        max_position_embeddings: int | None = None,
        layout: Layout = "half",
        axes: Axes = "bhsd",
        rotary_features: RotaryFeatures = "leading",
        mrope_sections: Sequence[int] | None = None,
        mrope_interleaved: Interleaving = False,
    ) -> None:
        freqs = rope_frequencies(
            head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling, max_position_embeddings=max_position_embeddings
        )
        mrope = mrope_of(mrope_sections, mrope_interleaved, freqs.rotary_dim, "mrope_sections", layout)
        self._start(freqs, scaling, max_position_embeddings, layout, axes, rotary_features, mrope)

    def _start(
        self,
        freqs: RopeFrequencies,
        scaling: Mapping[str, Any] | None,
        max_position_embeddings: int | None,
        layout: Layout,
        axes: Axes,
        rotary_features: RotaryFeatures,
        mrope: MRope | None = None,
    ) -> None:
        """Set up an instance from its starting frequencies and M-RoPE sections, checked by the caller."""
        self.freqs: RopeFrequencies = freqs
        self.layout: Layout = checks.layout(layout)
        self.axes: Axes = checks.choice(axes, "axes", AXES)
        self.rotary_features: RotaryFeatures = checks.choice(rotary_features, "rotary_features", ROTARY_FEATURES)
        self.max_position_embeddings = max_position_embeddings
        self._lock = threading.Lock()
        # sequence-length-dependent types: the cache holds the starting frequencies only
        self._start_freqs = self.freqs
        self._cache = TableCache(self.freqs)
        self._resize = None
        if scaling is not None and rope_type(scaling).length is not None:
            self._resize = Resizer(self.freqs, scaling, max_position_embeddings)
        # a model is built before it is traced: what plugs into the tracers of the libraries already
        # imported (PyTorch's ONNX exporter) is in place before any export of it starts
        backends.load_imported()
        self._mrope = mrope
        self._mrope_refused = ""  # why positions (axes, B, S) are refused: the family's M-RoPE is not computed

    @classmethod
    def from_config(
        cls,
        config: Any,
        *,
        layer_type: str | None = None,
        layer_idx: int | None = None,
        layout: Layout | None = None,
        axes: Axes = "bhsd",
    ) -> RotaryEmbedding:
        """A rotary embedding from a Hugging Face config (dict, transformers config object or ``config.json`` path).

        See :func:`arrayrope.rope_frequencies_from_config` for the fields read. The rotary
        features, the pair layout and the direction are those transformers' attention of the
        config's ``model_type`` applies (:mod:`arrayrope.families`): MLA families (DeepSeek)
        rotate the trailing features, GLM, GPT-J, Cohere, Llama 4, DeepSeek-V2 pair features
        ``(2i, 2i + 1)``, nanochat's pairs turn the other way (negative frequencies), and a
        family's switches count (DeepSeek-V3's ``rope_interleave``, default true). A config of
        a model type transformers lacks (or of none) needs ``layout=`` unless it states
        ``rope_interleave``. An explicit ``layout=`` wins over the family's (q/k rows permuted
        to the other layout, :func:`arrayrope.permute_rotary_rows`). ``layer_idx`` picks one layer: a layer without
        RoPE gets the identity. Multimodal RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V...) takes
        ``mrope_section`` from the config, or the family's default, and the family's interleaving
        (``mrope_sections``, ``mrope_interleaved``); calls then take positions ``(axes, B, S)``.

        Raises
        ------
        ValueError
            Everything :func:`~arrayrope.rope_frequencies_from_config` refuses, and a config
            whose layout arrayrope does not know without ``layout=`` (the message says what to
            pass: a model type transformers lacks, or none).

        Examples
        --------
        >>> import arrayrope
        >>> cfg = {"model_type": "llama", "head_dim": 64, "max_position_embeddings": 2048,
        ...        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
        >>> arrayrope.RotaryEmbedding.from_config(cfg).freqs.rope_type
        'dynamic'
        >>> ds = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
        ...       "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rope_theta": 10000}
        >>> arrayrope.RotaryEmbedding.from_config(ds)
        RotaryEmbedding(head_dim=192, base=10000.0, rotary_dim=64, rope_type='default', layout='interleaved', \
axes='bhsd', rotary_features='trailing')
        >>> arrayrope.RotaryEmbedding.from_config({"head_dim": 64, "rope_theta": 1e4}, layout="half").layout
        'half'
        >>> qwen3_vl = {"model_type": "qwen3_vl", "text_config": {"head_dim": 128, "rope_theta": 5e6}}
        >>> rope = arrayrope.RotaryEmbedding.from_config(qwen3_vl)
        >>> rope.mrope_sections, rope.mrope_interleaved  # the family's sections, its axes taking turns
        ((24, 20, 20), True)
        """
        if layout is not None:
            layout = checks.layout(layout)
        s = settings(config, layer_type=layer_type, layer_idx=layer_idx)
        if s.layout is None and layout is None:
            raise ValueError(
                f"the pair layout of this config is not known: {s.why_no_layout}; pass layout='half' (feature i "
                "pairs with i + rotary_dim/2, rotate_half) or layout='interleaved' (2i with 2i + 1)"
            )
        chosen: Layout = layout if layout is not None else checks.layout(s.layout)
        features = checks.choice(s.rotary_features, "rotary_features", ROTARY_FEATURES)
        rope = cls.__new__(cls)
        if s.nope:  # a layer without RoPE: every pair turns by 0 (s.freqs), at any length
            rope._start(s.freqs, None, None, chosen, axes, features)
        else:  # the frequencies the config was read with: computed once, each warning given once
            mrope = None if s.mrope is None else mrope_of(*s.mrope, s.freqs.rotary_dim, "mrope_section", chosen)
            rope._start(s.freqs, s.scaling, s.max_position_embeddings, chosen, axes, features, mrope)
            rope._mrope_refused = s.mrope_refused  # positions (axes, B, S) of such a family are refused with why
        return rope

    @property
    def head_dim(self) -> int:
        return self.freqs.head_dim

    @property
    def rotary_dim(self) -> int:
        return self.freqs.rotary_dim

    @property
    def mrope_sections(self) -> tuple[int, ...] | None:
        """The rotary pairs each position axis drives (multimodal RoPE), None for 1-D RoPE."""
        return None if self._mrope is None else self._mrope.sections

    @property
    def mrope_interleaved(self) -> Interleaving:
        """Whether the M-RoPE axes take turns (Qwen3-VL), or ``"spatial"`` (ERNIE 4.5 VL); False for 1-D RoPE."""
        return False if self._mrope is None else self._mrope.interleaved

    def __repr__(self) -> str:
        f = self.freqs
        return (
            f"RotaryEmbedding(head_dim={f.head_dim}, base={f.base}, rotary_dim={f.rotary_dim}, "
            f"rope_type={f.rope_type!r}, layout={self.layout!r}, axes={self.axes!r}"
            + ("" if self.rotary_features == "leading" else f", rotary_features={self.rotary_features!r}")
            + ("" if self._mrope is None else f", mrope_sections={self._mrope.sections}")
            + (f", mrope_interleaved={self.mrope_interleaved!r})" if self.mrope_interleaved else ")")
        )

    def __getstate__(self) -> dict[str, Any]:
        """What a copy, a pickle or ``torch.save`` keeps: the configuration, the frequencies and the
        sequence-length state, as one snapshot; not the lock, nor the tables (a cache pickles empty)."""
        with self._lock:
            state = {name: value for name, value in self.__dict__.items() if name != "_lock"}
            state["_resize"] = copy.copy(self._resize)  # its fields are replaced, never changed: a snapshot
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __copy__(self) -> RotaryEmbedding:
        # a shallow copy would share the cache and the sequence-length state with the original
        return copy.deepcopy(self)

    @overload
    def __call__(
        self,
        q: Array,
        k: None = None,
        *,
        positions: Array | None = None,
        offset: int | Array = 0,
        seq_len: int | None = None,
        q_out: Array | None = None,
        k_out: Array | None = None,
        return_freqs: Literal[False] = False,
    ) -> Array: ...

    @overload
    def __call__(
        self,
        q: Array,
        k: Array,
        *,
        positions: Array | None = None,
        offset: int | Array = 0,
        seq_len: int | None = None,
        q_out: Array | None = None,
        k_out: Array | None = None,
        return_freqs: Literal[False] = False,
    ) -> tuple[Array, Array]: ...

    @overload
    def __call__(
        self,
        q: Array,
        k: None = None,
        *,
        positions: Array | None = None,
        offset: int | Array = 0,
        seq_len: int | None = None,
        q_out: Array | None = None,
        k_out: Array | None = None,
        return_freqs: Literal[True],
    ) -> tuple[Array, RopeFrequencies]: ...

    @overload
    def __call__(
        self,
        q: Array,
        k: Array,
        *,
        positions: Array | None = None,
        offset: int | Array = 0,
        seq_len: int | None = None,
        q_out: Array | None = None,
        k_out: Array | None = None,
        return_freqs: Literal[True],
    ) -> tuple[Array, Array, RopeFrequencies]: ...

    def __call__(
        self,
        q: Array,
        k: Array | None = None,
        *,
        positions: Array | None = None,
        offset: int | Array = 0,
        seq_len: int | None = None,
        q_out: Array | None = None,
        k_out: Array | None = None,
        return_freqs: bool = False,
    ) -> Any:
        """Rotate ``q`` (and ``k``) by their positions.

        Parameters
        ----------
        q, k : array
            4-D real floating arrays, laid out as ``axes`` says; ``k`` may have fewer
            heads (GQA) but the same batch and sequence length. Each is rotated in its
            own dtype (float64 tables for a float64 input, float32 for the others).
        positions : array, optional
            Integer (or real) positions of shape ``(S,)`` or ``(B, S)``; with M-RoPE
            (``mrope_sections``) also ``(axes, B, S)``, one position per axis, as Qwen-VL's
            ``get_rope_index`` makes them (a text token has the same on every axis, and
            ``(S,)`` or ``(B, S)`` is such text). Default: ``offset .. offset + S - 1``.
        offset : int or array
            Start position, one int or one per batch row (an integer array of shape
            ``(B,)``), for decoding with a KV cache. Not combined with ``positions``.
            A 0-d integer array is one int: read as one where it has a value, kept in
            the graph under ``jax.jit`` (a decode loop compiles once).
        seq_len : int, optional
            Sequence length that selects the frequencies of the ``dynamic`` and
            ``longrope`` types (see Notes); ignored by the others.
        q_out, k_out : array, optional
            Where to write rotated ``q`` and ``k``, as :func:`apply_rotary`'s ``out=``
            (NumPy, CuPy, PyTorch): the input itself (in place) or an array of its
            shape, dtype and device, such as the slice of a KV cache for this call's
            positions, ``k_out=cache_k[:, :, t:t + s]`` (``axes="bhsd"``) or
            ``cache_k[:, t:t + s]`` (``"bshd"``), for a prefill and a decode step
            alike. Each may share memory only with its own input, being it.
        return_freqs : bool
            Also return the :class:`RopeFrequencies` this call used (last), the ones to
            hand to :func:`arrayrope.rerotate`; unlike ``self.freqs``, no other
            thread's call can change them.

        Returns
        -------
        array or tuple
            Rotated ``q``, or ``(q, k)`` when ``k`` is given (``q_out`` and ``k_out``,
            written, where given); with ``return_freqs``, the frequencies are appended.

        Notes
        -----
        Every argument is checked before anything changes: a rejected call leaves
        the instance (its frequencies, its cache) and the ``q_out``/``k_out`` arrays
        as they were.

        Examples
        --------
        A decode loop that rotates each step's keys straight into a preallocated cache:

        >>> import numpy as np, arrayrope
        >>> rope = arrayrope.RotaryEmbedding(64)
        >>> cache_k = np.zeros((1, 2, 32, 64), dtype=np.float32)  # (batch, kv heads, max positions, head_dim)
        >>> q, k = np.ones((1, 8, 4, 64), np.float32), np.ones((1, 2, 4, 64), np.float32)
        >>> q_rot, _ = rope(q, k, k_out=cache_k[:, :, 0:4])                # prefill: positions 0..3
        >>> for t in range(4, 8):                                          # decode: one position per step
        ...     q, k = np.ones((1, 8, 1, 64), np.float32), np.ones((1, 2, 1, 64), np.float32)
        ...     _ = rope(q, k, offset=t, q_out=q, k_out=cache_k[:, :, t : t + 1])  # q in place
        >>> bool(np.array_equal(cache_k[:, :, :8], rope(np.ones((1, 2, 8, 64), np.float32))))
        True

        >>> vl = arrayrope.RotaryEmbedding(64, mrope_sections=(8, 12, 12))  # M-RoPE: ids (axes, B, S)
        >>> x, ids = np.ones((1, 8, 3, 64), np.float32), np.array([[[0, 1, 2]]] * 3)  # text: equal on all axes
        >>> bool(np.array_equal(vl(x, positions=ids), rope(x)))  # is 1-D RoPE
        True
        """
        xp = backends.plain_floating((q,) if k is None else (q, k))  # one float dtype and device: checked
        plain = xp is not None
        if xp is None:
            xp = backends.namespace(q, names=("q",)) if k is None else backends.namespace(q, k, names=("q", "k"))
        q_dtype, k_dtype = check_inputs(xp, q, k, self.freqs.head_dim, self.axes, plain=plain)
        if return_freqs is not False and return_freqs is not True:
            checks.boolean(return_freqs, "return_freqs")
        if q_out is not None or k_out is not None:
            check_outs(q, k, q_out, k_out)
        module = backends.module_of(q)  # k's library too (one namespace)
        tracing = module.tracing() if module is not None else backends.tracing(xp)  # asked once per call
        graph = backends.graph_rotary(q) if tracing else None  # registered for graphs of q's library (ONNX export)
        fused = None if graph is None else exported(graph, self, q, k, positions, offset, seq_len, (q_out, k_out))
        if fused is not None:
            return fused
        follows = self.freqs.rope_type if self._resize is not None else None
        where = positions_of(
            xp, q, positions, offset, seq_len, self.axes, follows, tracing, self._mrope, self._mrope_refused
        )
        freqs = self._select(xp, where.length) if self._resize is not None else self._start_freqs
        # The tables are built here to broadcast against q and k: no need to check them again.
        cache = self._cache if freqs is self._start_freqs else None  # it holds the starting frequencies' tables
        cos, sin, prepared = tables(xp, q, freqs, where, q_dtype, cache=cache, layout=self.layout, axes=self.axes)
        rotate = rotation(where.mrope)  # rotate_features, or M-RoPE's of full-width sections
        q_rot = rotate(module, xp, q, cos, sin, self.layout, self.rotary_features, prepared, q_out)
        if k is None:
            return (q_rot, freqs) if return_freqs else q_rot
        if k_dtype != q_dtype:  # each input is rotated by tables of its own dtype
            cos, sin, prepared = tables(xp, k, freqs, where, k_dtype, cache=cache, layout=self.layout, axes=self.axes)
        k_rot = rotate(module, xp, k, cos, sin, self.layout, self.rotary_features, prepared, k_out)
        return (q_rot, k_rot, freqs) if return_freqs else (q_rot, k_rot)

    def _select(self, xp: Namespace, length: int | None) -> RopeFrequencies:
        """The frequencies for a call of length ``length`` (dynamic, longrope); updates ``freqs``, except in a
        graph being traced (``torch.compile``, ``torch.export``), which keeps the frequencies of its length."""
        assert self._resize is not None and length is not None
        if backends.tracing(xp):
            return self._resize.traced(xp, length)
        with self._lock:
            self.freqs = self._resize(length)
            return self.freqs
