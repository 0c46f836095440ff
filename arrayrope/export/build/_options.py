"""The export options, defined once: name, type, default, check and documentation.

:class:`ExportOptions` holds them; :class:`ExportKeywords` and :class:`SpliceKeywords`
type the ``**options`` of the public builders, which construct an
:class:`ExportOptions` from them. mypy checks that every keyword has a field of
the same type; ``tests/export`` checks that every field has a keyword.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from types import UnionType
from typing import Annotated, Any, Literal, TypeAlias, TypedDict, Union, get_args, get_origin, get_type_hints

import numpy as np

from arrayrope._lib import checks
from arrayrope._lib.types import Layout

__all__ = [
    "DTYPES",
    "RANKS",
    "RUNTIMES",
    "TABLES",
    "TARGETS",
    "DTypeName",
    "ExportKeywords",
    "ExportOptions",
    "Rank",
    "Runtime",
    "SpliceKeywords",
    "Tables",
    "Target",
]

Target: TypeAlias = Literal["auto", "onnx23", "ort", "portable"]
"""Which nodes carry the rotation (see :class:`ExportOptions`)."""
Tables: TypeAlias = Literal["stored", "computed"]
"""Where cos/sin come from: stored tables, or computed in the graph from the position ids."""
Runtime: TypeAlias = Literal["onnxruntime", "any"]
"""The runtime a model is for: ``"onnxruntime"`` allows its contrib ops."""
DTypeName: TypeAlias = Literal["float32", "float16", "bfloat16", "float64"]
"""Element type of the rotated tensors, by its NumPy name."""
Rank: TypeAlias = Literal[3, 4]
"""4: ``(batch, heads, seq, head_dim)``; 3: ``(batch, seq, heads * head_dim)``."""

TARGETS: tuple[Target, ...] = get_args(Target)
TABLES: tuple[Tables, ...] = get_args(Tables)
RUNTIMES: tuple[Runtime, ...] = get_args(Runtime)
DTYPES: tuple[DTypeName, ...] = get_args(DTypeName)
RANKS: tuple[Rank, ...] = get_args(Rank)

Check: TypeAlias = Callable[[object, str], object]
"""A field's check: ``(value, name) -> value`` normalised, or an error that names the option."""


def _optional(check: Check) -> Check:
    def optional(value: object, name: str) -> object:
        return None if value is None else check(value, name)

    return optional


def _flag(meaning: str) -> Check:
    def flag(value: object, name: str) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be {meaning}, got {value!r}")
        return value

    return flag


def _sections(value: object, name: str) -> tuple[int, ...]:
    """M-RoPE sections as a tuple of positive ints (their sum is checked against the frequencies when built)."""
    return checks.int_sequence(value, name, positive=True)


def _dtype_name(value: object, name: str) -> object:
    """NumPy dtypes (``np.float16``, ``ml_dtypes.bfloat16``) by their names; names as they are."""
    if isinstance(value, str):
        return value
    try:
        return str(np.dtype(value))  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{name} must be one of {DTYPES} (or the NumPy dtype), got {value!r}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportOptions:
    """What to export, with every option's default and check.

    The builders :func:`~arrayrope.export.rotary_model`,
    :func:`~arrayrope.export.rotary_function` and :func:`~arrayrope.export.add_rotary`
    take these as keyword arguments. Each value is checked when the options are made:
    a ``Literal`` option must be one of its choices, counts must be positive ints,
    flags must be bools. Checks that need the frequencies or ONNX (a target that
    cannot carry a dtype, an opset too old for a target) run when a graph is built.

    Parameters
    ----------
    layout : {"half", "interleaved"}
        Which features pair up (see :func:`arrayrope.apply_rotary`).
    target : {"auto", "onnx23", "ort", "portable"}
        ``"onnx23"``: one standard ``RotaryEmbedding`` node (opset 23).
        ``"ort"``: ONNX Runtime's fused ``com.microsoft.RotaryEmbedding``.
        ``"portable"``: standard ops only (opset 13+), for any runtime.
        ``"auto"``: the fastest that ``opset``, ``runtime``, ``dtype`` and ``tables`` allow:
        ``"onnx23"`` at opset 23+ (or no opset), else ``"ort"`` for ONNX Runtime, else
        ``"portable"`` (also for float64 and computed tables).
    rank : {4, 3}
        Input layout: 4 is ``(batch, heads, seq, head_dim)``, 3 is ``(batch, seq, heads * head_dim)``.
    num_heads : int, optional
        Heads of ``x``/``q``; required for ``rank=3``, fixes the head axis for ``rank=4``.
    num_kv_heads : int, optional
        Heads of ``k`` with ``qk=True`` (grouped-query attention); default ``num_heads``.
    max_positions : int, optional
        A bound on the positions: cos/sin tables of ``max_positions`` rows are stored,
        position ids in ``[0, max_positions)`` are rotated and others give NaN. Tables
        must fit in an ONNX model (protobuf's 2 GiB), checked when a graph is built.
        Default: no bound; cos/sin are computed in the graph from the position ids
        (``tables="computed"``), right at every position in ``(-2**30, 2**30)``.
    position_ids : bool
        True: an int64 input ``position_ids`` of shape ``(batch, seq)`` (``(axes, batch, seq)`` with
        ``mrope_sections``). False: positions ``0..seq-1``.
    mrope_sections : sequence of int, optional
        Multimodal RoPE (Qwen2-VL's ``mrope_section``): one position per axis and token,
        ``position_ids`` of shape ``(len(mrope_sections), batch, seq)``, rotary pair ``k``
        turned by the position of the axis :func:`arrayrope.mrope_tables` assigns it
        (consecutive sections sum to ``rotary_dim // 2``). Each axis's tables hold its own pairs,
        read at its ids and concatenated (interleaved pairs put back in order by one
        ``GatherElements``): no arithmetic on the values. The fused targets take the
        result as per-token caches. Needs ``position_ids=True``.
    mrope_interleaved : bool
        Qwen3-VL's interleaved assignment of pairs to axes instead of consecutive sections.
    tables : {"stored", "computed"}, optional
        Where cos/sin come from, in the one vocabulary of every export function:
        ``"stored"``: tables of ``max_positions`` rows stored in the graph (which it needs).
        ``"computed"``: cos/sin built in the graph from the position ids with the
        exact float32 method (base-1024 digits of each position, digit rotations from
        the core), on every target, so positions are bounded by ``2**30`` instead of a
        table size. Default: ``"stored"`` when ``max_positions`` is given, else
        ``"computed"``.
    dtype : {"float32", "float16", "bfloat16", "float64"}
        Element type of the rotated tensors and the tables (float64: portable only).
    opset : int, optional
        Default-domain opset; default 23 for ``"onnx23"``, 17 otherwise.
    qk : bool
        Rotate queries and keys in one graph: inputs ``q``, ``k``, outputs ``q_rot``,
        ``k_rot``, sharing one pair of tables.
    runtime : {"onnxruntime", "any"}
        Whether ONNX Runtime's contrib ops may be used by ``target="auto"``.
    base : float
        The rotary base (``rope_theta``).
    rotary_dim : int, optional
        Leading features of each head that rotate; default all.
    scaling : dict, optional
        A Hugging Face ``rope_scaling`` dict. ``base``, ``rotary_dim`` and ``scaling``
        are passed to :func:`arrayrope.rope_frequencies` (which checks them) when
        ``freqs`` is a ``head_dim``, and must keep their defaults otherwise.

    Examples
    --------
    >>> from arrayrope.export import ExportOptions
    >>> ExportOptions(target="portable", max_positions=8192).max_positions
    8192
    >>> ExportOptions(layout="halves")
    Traceback (most recent call last):
    ...
    ValueError: layout must be one of ('half', 'interleaved'), got 'halves'
    >>> ExportOptions.choices("tables"), ExportOptions().tables, ExportOptions(max_positions=4096).tables
    (('stored', 'computed'), 'computed', 'stored')
    """

    layout: Layout = "half"
    target: Target = "auto"
    rank: Rank = 4
    num_heads: Annotated[int | None, _optional(checks.positive_int)] = None
    num_kv_heads: Annotated[int | None, _optional(checks.positive_int)] = None
    max_positions: Annotated[int | None, _optional(checks.positive_int)] = None
    position_ids: Annotated[bool, _flag("True (an input) or False (positions 0..seq-1)")] = True
    mrope_sections: Annotated[tuple[int, ...] | None, _optional(_sections)] = None
    mrope_interleaved: Annotated[bool, _flag("a bool")] = False
    tables: Tables | None = None
    dtype: Annotated[DTypeName, _dtype_name] = "float32"
    opset: Annotated[int | None, _optional(checks.positive_int)] = None  # and against the target when built
    qk: Annotated[bool, _flag("a bool")] = False
    runtime: Runtime = "onnxruntime"
    base: float = 10000.0
    rotary_dim: int | None = None
    scaling: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name, (check, choices) in _field_checks().items():
            value = getattr(self, name)
            if check is not None:
                value = check(value, name)
            if choices and not (value is None and _DEFAULTS[name] is None):
                value = checks.choice(value, name, choices)
            object.__setattr__(self, name, value)
        if self.num_kv_heads is not None and not self.qk:
            raise ValueError("num_kv_heads applies to k and needs qk=True")
        if self.rank == 3 and self.num_heads is None:
            raise ValueError("rank=3 input (batch, seq, num_heads * head_dim) needs num_heads")
        if self.mrope_interleaved and self.mrope_sections is None:
            raise ValueError("mrope_interleaved=True assigns the pairs of mrope_sections to axes: pass mrope_sections")
        if self.mrope_sections is not None and not self.position_ids:
            raise ValueError(
                f"mrope_sections={list(self.mrope_sections)} rotates by position ids of shape "
                f"({len(self.mrope_sections)}, batch, seq): they need position_ids=True (an input)"
            )
        if self.tables is None:
            object.__setattr__(self, "tables", "computed" if self.max_positions is None else "stored")
        elif self.tables == "stored" and self.max_positions is None:
            raise ValueError(
                "tables='stored' stores max_positions rows: pass max_positions (the bound of the "
                "position ids), or leave tables to its default to compute cos/sin in the graph"
            )
        if self.tables == "computed" and self.max_positions is not None:
            raise ValueError(
                f"max_positions={self.max_positions} bounds stored tables, and tables='computed' stores "
                "none (it rotates every position below 2**30): pass one of them"
            )

    @property
    def rows(self) -> int:
        """``max_positions`` of stored tables (an error for computed tables, which have no rows)."""
        if self.max_positions is None:
            raise AssertionError("computed tables have no rows")
        return self.max_positions

    @classmethod
    def choices(cls, name: str) -> tuple[object, ...]:
        """The values option ``name`` can take (empty when it is not a choice)."""
        return _field_checks()[name][1]

    @classmethod
    def default(cls, name: str) -> object:
        """The default of option ``name``."""
        return _DEFAULTS[name]


_DEFAULTS: dict[str, object] = {f.name: f.default for f in dataclasses.fields(ExportOptions)}


@functools.cache
def _field_checks() -> dict[str, tuple[Check | None, tuple[object, ...]]]:
    """Per field: the check in its ``Annotated`` type, and the choices of its ``Literal`` type."""
    out: dict[str, tuple[Check | None, tuple[object, ...]]] = {}
    for name, hint in get_type_hints(ExportOptions, include_extras=True).items():
        check = None
        if get_origin(hint) is Annotated:
            hint, check = get_args(hint)[:2]
        if get_origin(hint) in (Union, UnionType):  # an optional choice: Literal[...] | None
            hint = next((a for a in get_args(hint) if get_origin(a) is Literal), hint)
        choices = get_args(hint) if get_origin(hint) is Literal else ()
        out[name] = (check, choices)
    return out


class SpliceKeywords(TypedDict, total=False):
    """The options :func:`~arrayrope.export.add_rotary` takes as keywords (see :class:`ExportOptions`).

    The others come from the model and the tensors named: ``rank`` (an argument of
    its own, default from the model), ``position_ids``, ``dtype``, ``opset`` and ``qk``.

    Examples
    --------
    >>> from arrayrope.export import SpliceKeywords
    >>> options: SpliceKeywords = {"layout": "interleaved", "max_positions": 4096}
    >>> sorted(options)
    ['layout', 'max_positions']
    """

    layout: Layout
    target: Target
    num_heads: int | None
    num_kv_heads: int | None
    max_positions: int | None
    mrope_sections: tuple[int, ...] | None
    mrope_interleaved: bool
    tables: Tables | None
    runtime: Runtime
    base: float
    rotary_dim: int | None
    scaling: Mapping[str, Any] | None


class ExportKeywords(SpliceKeywords, total=False):
    """Every option as a keyword of the builders :func:`~arrayrope.export.rotary_model` and ``rotary_function``.

    The keywords are the fields of :class:`ExportOptions`, typed for checkers.

    Examples
    --------
    >>> from arrayrope.export import ExportKeywords, rotary_model
    >>> options: ExportKeywords = {"target": "portable", "num_heads": 2, "max_positions": 64}
    >>> rotary_model(16, **options).graph.input[0].name
    'x'
    """

    rank: Rank
    position_ids: bool
    dtype: DTypeName
    opset: int | None
    qk: bool


def check_keywords(keywords: Mapping[str, object], accepted: frozenset[str], caller: str) -> None:
    """Raise the TypeError Python gives for a keyword that ``caller`` does not take."""
    for name in keywords:
        if name not in accepted:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
