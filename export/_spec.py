"""What an exported rotary graph computes: arguments checked once, then frozen.

Every builder (model, function, splice) starts from a :class:`Spec`; the spec is
also written into exported models as metadata, so that :func:`validate` can
rebuild the core's float64 reference from a model file alone.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
from typing import Any, Mapping

import numpy as np

import arrayrope
from arrayrope._lib import checks as _checks
from arrayrope._lib.digits import DIGIT_BITS
from arrayrope.frequencies import RopeFrequencies

TARGETS = ("auto", "onnx23", "ort", "portable")
TABLES = ("constant", "computed")
RUNTIMES = ("onnxruntime", "any")
MS_DOMAIN = "com.microsoft"
META_KEY = "arrayrope.rotary"

# Element types each target can carry (ONNX type names).
TARGET_DTYPES = {
    "onnx23": ("float32", "float16", "bfloat16"),
    "ort": ("float32", "float16", "bfloat16"),
    "portable": ("float32", "float16", "bfloat16", "float64"),
}
MIN_OPSET = {"onnx23": 23, "ort": 13, "portable": 13}
DEFAULT_OPSET = {"onnx23": 23, "ort": 17, "portable": 17}

# "computed" tables split positions into the core's base-1024 digits: positions < 1024**3.
DIGIT_LEVELS = 3
COMPUTED_LIMIT = 1 << (DIGIT_BITS * DIGIT_LEVELS)


def np_dtype(name: str) -> Any:
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def onnx_dtype(name: str) -> int:
    from onnx import TensorProto

    return {
        "float32": TensorProto.FLOAT,
        "float16": TensorProto.FLOAT16,
        "bfloat16": TensorProto.BFLOAT16,
        "float64": TensorProto.DOUBLE,
    }[name]


@dataclasses.dataclass(frozen=True, eq=False)
class Spec:
    freqs: RopeFrequencies
    layout: str
    target: str
    rank: int
    num_heads: int | None
    num_kv_heads: int | None
    max_positions: int
    position_ids: bool
    tables: str
    dtype: str
    opset: int
    qk: bool

    @property
    def head_dim(self) -> int:
        return self.freqs.head_dim

    @property
    def rotary_dim(self) -> int:
        return self.freqs.rotary_dim

    @property
    def position_limit(self) -> int:
        """Positions must be below this (the table size, or the digit range when computed)."""
        return COMPUTED_LIMIT if self.tables == "computed" else self.max_positions

    def to_json(self) -> str:
        f = self.freqs
        return json.dumps(
            {
                "format": 1,
                "head_dim": f.head_dim,
                "rotary_dim": f.rotary_dim,
                "inv_freq": [float(v) for v in f.inv_freq],
                "attention_factor": f.attention_factor,
                "base": f.base,
                "rope_type": f.rope_type,
                "layout": self.layout,
                "target": self.target,
                "rank": self.rank,
                "num_heads": self.num_heads,
                "num_kv_heads": self.num_kv_heads,
                "max_positions": self.max_positions,
                "position_ids": self.position_ids,
                "tables": self.tables,
                "dtype": self.dtype,
                "opset": self.opset,
                "qk": self.qk,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> "Spec":
        d = json.loads(text)
        freqs = RopeFrequencies(
            np.array(d["inv_freq"], dtype=np.float64),
            int(d["head_dim"]),
            int(d["rotary_dim"]),
            float(d["attention_factor"]),
            float(d["base"]),
            str(d["rope_type"]),
        )
        keys = [f.name for f in dataclasses.fields(cls) if f.name != "freqs"]
        return cls(freqs=freqs, **{k: d[k] for k in keys})


def make_freqs(
    freqs: Any, *, base: float, rotary_dim: int | None, scaling: Mapping[str, Any] | None
) -> RopeFrequencies:
    if isinstance(freqs, RopeFrequencies):
        if rotary_dim is not None or scaling is not None or base != 10000.0:
            raise ValueError(
                "freqs is a RopeFrequencies already; base, rotary_dim and scaling apply only when freqs is a head_dim int"
            )
        return freqs
    if isinstance(freqs, numbers.Integral) and not isinstance(freqs, bool):
        return arrayrope.rope_frequencies(int(freqs), base=base, rotary_dim=rotary_dim, scaling=scaling)
    raise TypeError(
        f"freqs must be a RopeFrequencies from arrayrope.rope_frequencies() or an int head_dim, got {freqs!r}"
    )


def resolve_target(target: Any, *, opset: int | None, tables: str, runtime: str, dtype: str) -> str:
    _checks.choice(target, "target", TARGETS)
    if target != "auto":
        return target
    if tables == "computed" or dtype not in TARGET_DTYPES["onnx23"]:
        return "portable"
    if opset is None or opset >= MIN_OPSET["onnx23"]:
        return "onnx23"
    return "ort" if runtime == "onnxruntime" else "portable"


def check_opset(opset: Any, target: str, *, argument: str = "opset") -> int:
    import onnx.defs

    if opset is None:
        return DEFAULT_OPSET[target]
    if isinstance(opset, bool) or not isinstance(opset, numbers.Integral):
        raise TypeError(f"{argument} must be an int, got {opset!r}")
    opset = int(opset)
    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        raise ValueError(f"{argument}={opset} is newer than the installed onnx knows (up to {newest})")
    need = MIN_OPSET[target]
    if opset < need:
        alt = "target='ort' (ONNX Runtime) or target='portable'" if target == "onnx23" else "opset >= 13"
        raise ValueError(
            f"{argument}={opset} is too old for target={target!r}, which needs opset >= {need}; use {alt}"
        )
    return opset


def make_spec(
    freqs: Any,
    *,
    layout: str,
    target: str,
    rank: int,
    num_heads: int | None,
    num_kv_heads: int | None,
    max_positions: int,
    position_ids: bool,
    tables: str,
    dtype: str,
    opset: int | None,
    qk: bool,
    runtime: str,
    base: float,
    rotary_dim: int | None,
    scaling: Mapping[str, Any] | None,
    opset_argument: str = "opset",
) -> Spec:
    freqs = make_freqs(freqs, base=base, rotary_dim=rotary_dim, scaling=scaling)
    _checks.layout(layout)
    _checks.choice(tables, "tables", TABLES)
    _checks.choice(runtime, "runtime", RUNTIMES)
    _checks.choice(rank, "rank", (3, 4))
    if not isinstance(position_ids, bool):
        raise TypeError(f"position_ids must be True (an input) or False (positions 0..seq-1), got {position_ids!r}")
    if not isinstance(qk, bool):
        raise TypeError(f"qk must be a bool, got {qk!r}")
    max_positions = _checks.positive_int(max_positions, "max_positions")
    if num_heads is not None:
        num_heads = _checks.positive_int(num_heads, "num_heads")
    if num_kv_heads is not None:
        num_kv_heads = _checks.positive_int(num_kv_heads, "num_kv_heads")
        if not qk:
            raise ValueError("num_kv_heads applies to k and needs qk=True")
    if rank == 3 and num_heads is None:
        raise ValueError("rank=3 input (batch, seq, num_heads * head_dim) needs num_heads")
    if qk and num_kv_heads is None:
        num_kv_heads = num_heads
    dtype = str(np.dtype(dtype)) if dtype != "bfloat16" and not isinstance(dtype, str) else dtype
    target = resolve_target(target, opset=opset, tables=tables, runtime=runtime, dtype=dtype)
    if tables == "computed" and target != "portable":
        raise ValueError(
            f"tables='computed' (cos/sin computed in the graph) needs target='portable', got target={target!r}; "
            "the fused targets read constant tables"
        )
    if dtype not in TARGET_DTYPES["portable"]:
        raise ValueError(f"dtype must be one of {TARGET_DTYPES['portable']}, got {dtype!r}")
    if dtype not in TARGET_DTYPES[target]:
        raise ValueError(
            f"dtype={dtype!r} cannot be carried by target={target!r} (it takes {TARGET_DTYPES[target]}); "
            "use target='portable'"
        )
    if target == "ort" and freqs.rotary_dim < freqs.head_dim and num_heads is None:
        raise ValueError(
            "target='ort' with partial rotary (rotary_dim < head_dim) needs num_heads: ONNX Runtime's "
            "contrib op requires it; pass num_heads or use target='onnx23' or 'portable'"
        )
    opset = check_opset(opset, target, argument=opset_argument)
    return Spec(
        freqs=freqs,
        layout=layout,
        target=target,
        rank=rank,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        max_positions=max_positions,
        position_ids=position_ids,
        tables=tables,
        dtype=dtype,
        opset=opset,
        qk=qk,
    )
