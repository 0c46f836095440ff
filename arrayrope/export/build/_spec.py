"""What an exported rotary graph computes: frequencies and options with every choice made.

Every builder (model, function, splice) starts from a :class:`Spec`; the spec is
also written into exported models as metadata, so that :func:`validate` can
rebuild the core's float64 reference from a model file alone.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import onnx.defs
from onnx import TensorProto

import arrayrope
from arrayrope._lib import checks
from arrayrope._lib.digits import DIGIT_BITS
from arrayrope.encodings.mrope import pair_axes
from arrayrope.frequencies import RopeFrequencies

from ._options import DTYPES, DTypeName, ExportOptions

Emitted: TypeAlias = Literal["onnx23", "ort", "portable"]
"""A target after ``"auto"`` is resolved: the nodes a graph is made of."""
Frequencies: TypeAlias = RopeFrequencies | int
"""What the builders take as ``freqs``: frequencies, or a ``head_dim`` to make them from."""

MS_DOMAIN = "com.microsoft"
META_KEY = "arrayrope.rotary"

#: Element types each target can carry.
TARGET_DTYPES: dict[Emitted, tuple[DTypeName, ...]] = {
    "onnx23": ("float32", "float16", "bfloat16"),
    "ort": ("float32", "float16", "bfloat16"),
    "portable": DTYPES,
}
MIN_OPSET: dict[Emitted, int] = {"onnx23": 23, "ort": 13, "portable": 13}
DEFAULT_OPSET: dict[Emitted, int] = {"onnx23": 23, "ort": 17, "portable": 17}

#: "computed" tables split positions into the core's base-1024 digits: positions < 1024**3.
DIGIT_LEVELS = 3
COMPUTED_LIMIT = 1 << (DIGIT_BITS * DIGIT_LEVELS)

#: Options that choose how a spec is made (the frequencies, the target for "auto") and are not part of it.
MAKING_ONLY = frozenset({"runtime", "base", "rotary_dim", "scaling"})
#: Options a spec keeps, in the order the metadata lists them.
STORED = tuple(f.name for f in dataclasses.fields(ExportOptions) if f.name not in MAKING_ONLY)

_ONNX_TYPES: dict[DTypeName, int] = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "float64": TensorProto.DOUBLE,
}
#: ONNX element types by their NumPy names, and back.
DTYPE_NAMES: dict[int, DTypeName] = {code: name for name, code in _ONNX_TYPES.items()}


def np_dtype(name: DTypeName) -> np.dtype[Any]:
    """The NumPy dtype of an element type (bfloat16 from ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes

        bfloat16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bfloat16
    return np.dtype(name)


def onnx_dtype(name: DTypeName) -> int:
    """The ONNX element type (``TensorProto.FLOAT``...) of an element type."""
    return _ONNX_TYPES[name]


@dataclasses.dataclass(frozen=True, eq=False)
class Spec:
    """Frequencies and resolved options: ``target`` and ``opset`` are chosen, ``num_kv_heads``
    is filled in for ``qk``, and the options that only make a spec keep their defaults."""

    freqs: RopeFrequencies
    options: ExportOptions

    @property
    def target(self) -> Emitted:
        target = self.options.target
        if target == "auto":
            raise AssertionError("a spec's target is resolved")
        return target

    @property
    def opset(self) -> int:
        if self.options.opset is None:
            raise AssertionError("a spec's opset is resolved")
        return self.options.opset

    @property
    def head_dim(self) -> int:
        return self.freqs.head_dim

    @property
    def rotary_dim(self) -> int:
        return self.freqs.rotary_dim

    @property
    def mrope_axes(self) -> int | None:
        """Position axes of M-RoPE (``len(mrope_sections)``); None for plain RoPE."""
        sections = self.options.mrope_sections
        return None if sections is None else len(sections)

    def mrope_axis_of(self) -> npt.NDArray[np.int64]:
        """The axis whose position turns each rotary pair, as :func:`arrayrope.mrope_tables` assigns them."""
        sections = self.options.mrope_sections
        if sections is None:
            raise AssertionError("plain RoPE has no axes")
        return pair_axes(sections, self.options.mrope_interleaved, self.rotary_dim // 2, "mrope_sections")

    @property
    def position_limit(self) -> int:
        """Positions must be below this (the table size, or the digit range when computed)."""
        return COMPUTED_LIMIT if self.options.tables == "computed" else self.options.rows

    def flat_heads(self, heads: int | None) -> int:
        """``heads`` of a rank-3 tensor (``num_heads`` or ``num_kv_heads``, which rank-3 specs have)."""
        if heads is None:
            raise ValueError("rank=3 input (batch, seq, num_heads * head_dim) needs num_heads")
        return heads

    @property
    def compute_dtype(self) -> type[np.floating[Any]]:
        """Portable graphs compute float16/bfloat16 in float32 and round once at the end."""
        return np.float64 if self.options.dtype == "float64" else np.float32

    def to_json(self) -> str:
        f = self.freqs
        made = {} if f.made_from is None else {"made_from": dict(f.made_from)}
        return json.dumps(
            {
                "format": 2 if made else 1,  # 2: with the arguments the frequencies were made from
                "head_dim": f.head_dim,
                "rotary_dim": f.rotary_dim,
                "inv_freq": [float(v) for v in f.inv_freq],
                "attention_factor": f.attention_factor,
                "base": f.base,
                "rope_type": f.rope_type,
                **made,
                **{name: getattr(self.options, name) for name in STORED},
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Spec:
        d = json.loads(text)
        freqs = RopeFrequencies(
            inv_freq=np.array(d["inv_freq"], dtype=np.float64),
            head_dim=int(d["head_dim"]),
            rotary_dim=int(d["rotary_dim"]),
            attention_factor=float(d["attention_factor"]),
            base=float(d["base"]),
            rope_type=str(d["rope_type"]),
            made_from=d.get("made_from"),
        )
        stored = {name: d[name] for name in STORED if name in d}
        if stored.get("tables") == "computed":  # models of earlier versions stored the unused default bound too
            stored["max_positions"] = None
        elif stored.get("tables") == "constant":  # the earlier name of stored tables
            stored["tables"] = "stored"
        return cls(freqs, ExportOptions(**stored))


def make_freqs(freqs: object, options: ExportOptions) -> RopeFrequencies:
    """``freqs`` itself, or frequencies made from a head_dim with the options ``base``, ``rotary_dim``, ``scaling``."""
    if isinstance(freqs, RopeFrequencies):
        making = {name: getattr(options, name) for name in ("base", "rotary_dim", "scaling")}
        if any(value != ExportOptions.default(name) for name, value in making.items()):
            raise ValueError(
                "freqs is a RopeFrequencies already; "
                "base, rotary_dim and scaling apply only when freqs is a head_dim int"
            )
        return freqs
    if isinstance(freqs, bool) or not isinstance(freqs, numbers.Integral):
        raise TypeError(
            f"freqs must be a RopeFrequencies from arrayrope.rope_frequencies() or an int head_dim, got {freqs!r}"
        )
    o = options
    head_dim = checks.positive_int(freqs, "freqs (an int head_dim)", even=True)
    return arrayrope.rope_frequencies(head_dim, base=o.base, rotary_dim=o.rotary_dim, scaling=o.scaling)


def resolve_target(options: ExportOptions) -> Emitted:
    """The target ``options`` ask for, with ``"auto"`` replaced by the fastest one they allow."""
    if options.target != "auto":
        return options.target
    if options.dtype not in TARGET_DTYPES["onnx23"]:
        return "portable"
    if options.opset is None or options.opset >= MIN_OPSET["onnx23"]:
        return "onnx23"
    return "ort" if options.runtime == "onnxruntime" else "portable"


def check_opset(opset: object, target: Emitted, *, argument: str = "opset") -> int:
    """``opset`` as an int that ``target`` can use and the installed onnx knows (its default when None)."""
    if opset is None:
        return DEFAULT_OPSET[target]
    if isinstance(opset, bool) or not isinstance(opset, numbers.Integral):
        raise TypeError(f"{argument} must be an int, got {opset!r}")
    version = int(opset)
    newest = onnx.defs.onnx_opset_version()
    if version > newest:
        raise ValueError(f"{argument}={version} is newer than the installed onnx knows; use {argument} <= {newest}")
    need = MIN_OPSET[target]
    if version < need:
        alt = "target='ort' (ONNX Runtime) or target='portable'" if target == "onnx23" else "opset >= 13"
        raise ValueError(
            f"{argument}={version} is too old for target={target!r}, which needs opset >= {need}; use {alt}"
        )
    return version


def make_spec(freqs: object, options: ExportOptions, *, opset_argument: str = "opset") -> Spec:
    """Check what ``options`` ask of these frequencies and ONNX, and make every choice."""
    rope = make_freqs(freqs, options)
    target = resolve_target(options)
    if options.dtype not in TARGET_DTYPES[target]:
        raise ValueError(
            f"dtype={options.dtype!r} cannot be carried by target={target!r} (it takes {TARGET_DTYPES[target]}); "
            "use target='portable'"
        )
    if target == "ort" and rope.rotary_dim < rope.head_dim and options.num_heads is None:
        raise ValueError(
            "target='ort' with partial rotary (rotary_dim < head_dim) needs num_heads: ONNX Runtime's "
            "contrib op requires it; pass num_heads or use target='onnx23' or 'portable'"
        )
    sections = options.mrope_sections
    if sections is not None:
        pair_axes(sections, options.mrope_interleaved, rope.rotary_dim // 2, "mrope_sections")
    opset = check_opset(options.opset, target, argument=opset_argument)
    kv_heads = options.num_heads if options.qk and options.num_kv_heads is None else options.num_kv_heads
    kept = {name: getattr(options, name) for name in STORED}
    resolved = ExportOptions(**{**kept, "target": target, "opset": opset, "num_kv_heads": kv_heads})
    return Spec(rope, resolved)
