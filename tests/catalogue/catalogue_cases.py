"""The catalogue's values and its rule: what a bad value is, and what refusing it means.

The catalogue (the ``test_*.py`` modules of this folder) walks every public function, the
RotaryEmbedding call and every CLI command with bad or unusual inputs. Each case is a call and
what must come of it:

* refused: a ``ValueError`` or ``TypeError`` whose message names the argument and says what is expected;
* correct: a documented result, checked against what the documentation says;
* risky (FIFOs, devices, huge sizes): run in a subprocess with a memory limit and a timeout, so that a
  hang or a runaway allocation fails the case instead of the suite. A request for an output larger
  than memory may end in the array library's ``MemoryError`` at allocation (documented), never in a
  hang or a crash.

``python -m pytest tests/catalogue --co -q`` counts the cases (docs/guide/precision.md).
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import arrayrope as ar

HAS = {
    name: importlib.util.find_spec(name) is not None
    for name in ("onnx", "onnxruntime", "torch", "jax", "array_api_strict", "matplotlib")
}

#: Words by which a message says what is expected.
EXPECTS = (
    "must",
    "expect",
    "known",
    "need",
    "not ",
    "cannot",
    "only",
    "pass ",
    "missing",
    "give",
    "use ",
    "leave ",
    "move ",
)
#: Names an argument goes by in messages, where it is not its own.
ALIASES = {"names": ("names", "backend"), "backends": ("backends", "backend"), "scaling": ("scaling", "rope_type")}


def f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


POS_INT = [0, -3, 1.5, 4.0, "4", True, [4], math.nan, 1j, np.float64(4.0), None]
NONNEG = [-1, 1.5, "1", True, [1], math.nan, None]
EVEN = [v for v in POS_INT if v is not None] + [7]
POS_REAL = [math.nan, math.inf, -math.inf, 0, -1.0, "1", True, 1j, [1.0], None]
REAL = [math.nan, math.inf, "1", True, 1j, [1.0], None]
BOOL = ["False", "True", 1, 0, 1.0, np.int64(1), None]
DTYPE = ["float8", "int32", np.int32, 3, object, np.complex64]
XP = ["numpy", 3, object()]
DEVICE = ["gpu", 3]
FREQS = [np.ones(4), None, 8, {"inv_freq": [1.0]}]
POSITIONS = [
    1.5,
    True,
    None,
    "3",
    np.array([np.nan]),
    np.array([np.inf]),
    np.array([1j]),
    np.array([True]),
    np.array(["a"]),
    np.array([1e300]),
    np.array([2**64 - 1], np.uint64),
    [1, "a"],
    [[1], [1, 2]],
    np.array([2.0**63]),
]


def choice(first: str) -> list[Any]:
    """Bad values of a string choice whose first option is ``first``."""
    return ["", first.upper(), 1, b"x", first + " ", None]


def arrays(shape: tuple[int, ...]) -> list[Any]:
    """Bad values of a real floating array argument of ``shape``."""
    return [
        None,
        "x",
        3,
        [[1.0]],
        np.ones(shape, np.int32),
        np.ones(shape, bool),
        np.ones(shape, np.complex64),
        np.float32(1.0),
    ]


F8 = ar.rope_frequencies(8)
COS, SIN = ar.rope_tables(F8, 3)
TABLE = np.zeros((32, 2), np.float32)
ROPE = ar.RotaryEmbedding(8)

#: name -> (function, the keywords of a call that works, {argument: bad values}); each bad value alone is refused
Specs = dict[str, tuple[Callable[..., Any], dict[str, Any], dict[str, list[Any]]]]


def refusal_params(specs: Specs) -> Iterator[Any]:
    for name, (fn, good, params) in specs.items():
        for param, values in params.items():
            for i, value in enumerate(values):
                yield pytest.param(fn, good, param, value, id=f"{name}-{param}-{i}")


def refused(call: Callable[[], Any], names: tuple[str, ...]) -> str:
    """``call()`` raises a TypeError or ValueError whose message names one of ``names`` and an expectation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((TypeError, ValueError)) as info:
            call()
    message = str(info.value)
    assert any(n in message for n in names), message
    assert any(w in message for w in EXPECTS), message
    return message


def check_refusal(fn: Callable[..., Any], good: dict[str, Any], param: str, value: Any) -> None:
    refused(lambda: fn(**{**good, param: value}), ALIASES.get(param, (param,)))


def check_good_calls(specs: Specs) -> None:
    """Each bad value replaces one argument of a call that works."""
    for fn, good, _ in specs.values():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(**good)
