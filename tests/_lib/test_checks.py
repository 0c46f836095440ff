"""Argument checks (``_lib/checks.py``): what passes, what is refused, and messages that name the argument,
its value and what is expected. Expected values and messages are written out here."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from arrayrope._lib import checks
from arrayrope._lib.types import LAYOUTS


@pytest.mark.parametrize("value, expected", [(1, 1), (64, 64), (np.int64(8), 8), (np.uint8(3), 3)])
def test_positive_int_accepts_integers(value, expected):
    out = checks.positive_int(value, "head_dim")
    assert out == expected and type(out) is int


@pytest.mark.parametrize(
    "value, exc, message",
    [
        (0, ValueError, "head_dim must be positive, got 0"),
        (-4, ValueError, "head_dim must be positive, got -4"),
        (8.0, TypeError, "head_dim must be an int, got 8.0 (float)"),
        (True, TypeError, "head_dim must be an int, got True (bool)"),
        ("8", TypeError, "head_dim must be an int, got '8' (str)"),
        (None, TypeError, "head_dim must be an int, got None (NoneType)"),
    ],
)
def test_positive_int_refuses(value, exc, message):
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        checks.positive_int(value, "head_dim")


def test_positive_int_even():
    assert checks.positive_int(6, "dim", even=True) == 6
    with pytest.raises(ValueError, match=r"^dim must be even \(features rotate in pairs\), got 7$"):
        checks.positive_int(7, "dim", even=True)


def test_non_negative_int():
    assert checks.non_negative_int(0, "offset") == 0 and checks.non_negative_int(np.int32(5), "offset") == 5
    with pytest.raises(ValueError, match=r"^offset must be >= 0, got -1$"):
        checks.non_negative_int(-1, "offset")
    with pytest.raises(TypeError, match=r"^offset must be an int, got 1.5 \(float\)$"):
        checks.non_negative_int(1.5, "offset")
    with pytest.raises(TypeError, match=r"^offset must be an int, got False \(bool\)$"):
        checks.non_negative_int(False, "offset")


@pytest.mark.parametrize("value", [1, 0.5, 1e4, np.float32(2.5), np.int64(3)])
def test_positive_real_accepts(value):
    out = checks.positive_real(value, "base")
    assert out == float(value) and type(out) is float


@pytest.mark.parametrize(
    "value, exc, message",
    [
        (0.0, ValueError, "base must be a finite number > 0, got 0.0"),
        (-1, ValueError, "base must be a finite number > 0, got -1.0"),
        (math.inf, ValueError, "base must be a finite number > 0, got inf"),
        (math.nan, ValueError, "base must be a finite number > 0, got nan"),
        (True, TypeError, "base must be a real number, got True (bool)"),
        ("1e4", TypeError, "base must be a real number, got '1e4' (str)"),
        (1j, TypeError, "base must be a real number, got 1j (complex)"),
    ],
)
def test_positive_real_refuses(value, exc, message):
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        checks.positive_real(value, "base")


def test_finite_real():
    assert checks.finite_real(-2, "center") == -2.0 and type(checks.finite_real(-2, "center")) is float
    assert checks.finite_real(np.float64(0.5), "center") == 0.5
    for bad in (math.inf, -math.inf, math.nan):  # a number, but not a finite one
        with pytest.raises(ValueError, match=f"^center must be a finite number, got {re.escape(repr(bad))}$"):
            checks.finite_real(bad, "center")
    for word in ("middle", True, None):  # not a number
        with pytest.raises(TypeError, match=f"^center must be a finite number, got {re.escape(repr(word))} "):
            checks.finite_real(word, "center")


def test_boolean():
    assert checks.boolean(True, "causal") is True and checks.boolean(False, "causal") is False
    assert checks.boolean(np.True_, "causal") is True and checks.boolean(np.False_, "causal") is False
    for bad, kind in ((1, "int"), (0, "int"), ("yes", "str"), (None, "NoneType"), (np.array([True]), "ndarray")):
        with pytest.raises(TypeError, match=rf"^causal must be True or False, got .* \({kind}\)$"):
            checks.boolean(bad, "causal")


def test_rotary_dim():
    assert checks.rotary_dim(None, 64) == 64
    assert checks.rotary_dim(32, 64) == 32 and checks.rotary_dim(64, 64) == 64 and checks.rotary_dim(2, 64) == 2
    with pytest.raises(ValueError, match=r"^rotary_dim must be <= head_dim=64, got 66$"):
        checks.rotary_dim(66, 64)
    with pytest.raises(ValueError, match=r"^rotary_dim must be even \(features rotate in pairs\), got 5$"):
        checks.rotary_dim(5, 64)
    with pytest.raises(ValueError, match=r"^rotary_dim must be positive, got 0$"):
        checks.rotary_dim(0, 64)
    with pytest.raises(ValueError, match=r"^rotary_embedding_dim must be <= head_dim=8, got 16$"):
        checks.rotary_dim(16, 8, "rotary_embedding_dim")


def test_layout():
    assert LAYOUTS == ("half", "interleaved")
    for option in LAYOUTS:
        assert checks.layout(option) == option
    assert checks.layout(np.str_("half")) == "half"
    for bad in ("neox", "HALF", 0, None, ["half"]):
        message = rf"^layout must be one of \('half', 'interleaved'\), got {re.escape(repr(bad))}$"
        with pytest.raises(ValueError, match=message):
            checks.layout(bad)


def test_choice_compares_value_and_type():
    assert checks.choice("concat", "layout", ("interleaved", "concat")) == "concat"
    assert checks.choice(2, "n", (1, 2)) == 2
    for bad in ("Concat", 1, None):
        with pytest.raises(ValueError, match=r"^layout must be one of \('interleaved', 'concat'\), got "):
            checks.choice(bad, "layout", ("interleaved", "concat"))
    with pytest.raises(ValueError, match=r"^flag must be one of \(1, 0\), got True$"):
        checks.choice(True, "flag", (1, 0))  # True == 1, but not an int option
    with pytest.raises(ValueError, match=r"^n must be one of \(1, 2\), got 2.0$"):
        checks.choice(2.0, "n", (1, 2))


def test_int_sequence():
    assert checks.int_sequence([16, 24, 24], "sections", positive=True) == (16, 24, 24)
    assert checks.int_sequence((np.int64(2), 3), "sections", positive=True) == (2, 3)
    assert checks.int_sequence([0, -3], "offsets", positive=False) == (0, -3)
    assert all(type(v) is int for v in checks.int_sequence((np.int64(2),), "s", positive=True))
    with pytest.raises(ValueError, match=r"^sections must contain positive ints, got \[2, 0\]$"):
        checks.int_sequence((2, 0), "sections", positive=True)
    bad: object
    for bad in ([], (), "16", b"ab", 16, None, np.array([1, 2]), {1, 2}):
        with pytest.raises(TypeError, match=r"^sections must be a non-empty sequence of ints, got "):
            checks.int_sequence(bad, "sections", positive=True)
    for bad in ([1, True], [1, 2.0], [1, "2"]):
        with pytest.raises(TypeError, match=r"^sections must contain ints, got "):
            checks.int_sequence(bad, "sections", positive=True)
