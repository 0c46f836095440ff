"""The export options: one definition that the keywords, the defaults, the checks and the command line agree with.

Oracles: the documented defaults written out here, the rotation formula (cos of
``p * base ** (-2i / d)``) for what a default model stores, and ONNX Runtime
against explicit rotation matrices for models built from the options object.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from arrayrope.cli import export as export_command  # noqa: E402
from arrayrope.export import (  # noqa: E402
    ExportKeywords,
    ExportOptions,
    SpliceKeywords,
    add_rotary,
    rotary_function,
    rotary_model,
    validate,
)
from helpers import inv_freq_formula, rope_by_matrix  # noqa: E402

TARGETS = ExportOptions.choices("target")

#: The defaults as the ExportOptions docstring and the README give them.
DOCUMENTED = {
    "layout": "half",
    "target": "auto",
    "rank": 4,
    "num_heads": None,
    "num_kv_heads": None,
    "max_positions": None,
    "position_ids": True,
    "mrope_sections": None,
    "mrope_interleaved": False,
    "tables": None,
    "dtype": "float32",
    "opset": None,
    "qk": False,
    "runtime": "onnxruntime",
    "base": 10000.0,
    "rotary_dim": None,
    "scaling": None,
}
#: What add_rotary takes from the model and its other arguments instead of keywords.
FROM_THE_MODEL = {"rank", "position_ids", "dtype", "opset", "qk"}


def _plain(hint: object) -> object:
    """A field's type without its ``Annotated`` check."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint


def test_keywords_are_the_fields_with_their_types():
    fields = typing.get_type_hints(ExportOptions)
    keywords = typing.get_type_hints(ExportKeywords)
    assert list(fields) == list(DOCUMENTED)
    assert set(keywords) == set(fields) and ExportKeywords.__required_keys__ == frozenset()
    for name, hint in keywords.items():
        assert hint == _plain(fields[name]), name
    assert set(typing.get_type_hints(SpliceKeywords)) == set(fields) - FROM_THE_MODEL


def test_defaults_are_the_documented_ones():
    options = ExportOptions()
    resolved = {**DOCUMENTED, "tables": "computed"}  # no bound on the positions: cos/sin computed in the graph
    assert {f.name: getattr(options, f.name) for f in dataclasses.fields(options)} == resolved
    assert ExportOptions(max_positions=64).tables == "stored"
    assert all(ExportOptions.default(name) == value for name, value in DOCUMENTED.items())
    assert rotary_model(16).SerializeToString() == rotary_model(16, **DOCUMENTED).SerializeToString()


def test_a_default_model_is_what_the_defaults_say():
    """No bound: cos/sin computed from the position ids, right far beyond any table (float64 oracle with exact
    angles); x of rank 4 in float32, position ids, opset 23's op reading per-token cos/sin."""
    import onnxruntime as ort

    from arrayrope.testing import exact_angles

    model = rotary_model(16)
    node = model.graph.node[-1]
    assert (node.op_type, node.domain, len(node.input)) == ("RotaryEmbedding", "", 3)
    assert not any(n.op_type in ("Cos", "Sin") for n in model.graph.node)
    assert [o.version for o in model.opset_import if o.domain == ""] == [23]
    x, pos = model.graph.input
    assert (x.name, pos.name) == ("x", "position_ids")
    rng = np.random.default_rng(0)
    ids = np.array([[0, 1, 4095, 4096, 5000, 123_457, 2**20, 2**20 + 1, 2**29 + 12_345, 2**30 - 1]])
    xs = rng.standard_normal((1, 2, ids.shape[1], 16)).astype(np.float32)
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": xs, "position_ids": ids}
    )
    ang = exact_angles(ids[0], inv_freq_formula(16, 10000.0))
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)
    x64 = xs.astype(np.float64)
    want = x64 * cos + np.concatenate([-x64[..., 8:], x64[..., :8]], -1) * sin
    assert np.max(np.abs(y - want)) <= 2e-6  # float32 rounding, not an angle error growing with the position
    assert validate(model, providers="cpu").ok


def test_a_bounded_model_stores_its_tables():
    """max_positions rows of cos(p * 10000**(-2i/16)) and a row of NaN for the ids outside them."""
    model = rotary_model(16, max_positions=4096)
    clip, mod, node = model.graph.node  # ids outside the table go to its last row, of NaN
    assert (clip.op_type, mod.op_type, node.op_type, node.domain) == ("Clip", "Mod", "RotaryEmbedding", "")
    assert {a.name: a.i for a in node.attribute}["interleaved"] == 0
    assert [o.version for o in model.opset_import if o.domain == ""] == [23]
    x, pos = model.graph.input
    assert (x.name, pos.name) == ("x", "position_ids")
    cos = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == node.input[1]))
    expected = np.cos(np.arange(4096)[:, None] * inv_freq_formula(16, 10000.0))
    assert cos.shape == (4097, 8) and np.isnan(cos[4096]).all()
    np.testing.assert_allclose(cos[:4096], expected, rtol=0, atol=2**-24)


@pytest.mark.parametrize(
    "options,error,message",
    [
        ({"layout": "halves"}, ValueError, "layout must be one of ('half', 'interleaved'), got 'halves'"),
        ({"target": "tensorrt"}, ValueError, "target must be one of ('auto', 'onnx23', 'ort', 'portable')"),
        ({"rank": 2}, ValueError, "rank must be one of (3, 4), got 2"),
        ({"num_heads": 0}, ValueError, "num_heads must be positive, got 0"),
        ({"num_kv_heads": 2.0, "qk": True}, TypeError, "num_kv_heads must be an int, got 2.0"),
        ({"max_positions": "4096"}, TypeError, "max_positions must be an int, got '4096'"),
        ({"position_ids": 1}, TypeError, "position_ids must be True (an input) or False (positions 0..seq-1), got 1"),
        ({"tables": "cached"}, ValueError, "tables must be one of ('stored', 'computed'), got 'cached'"),
        ({"dtype": "int8"}, ValueError, "dtype must be one of ('float32', 'float16', 'bfloat16', 'float64')"),
        ({"qk": "yes"}, TypeError, "qk must be a bool, got 'yes'"),
        ({"runtime": "tensorrt"}, ValueError, "runtime must be one of ('onnxruntime', 'any'), got 'tensorrt'"),
        ({"num_kv_heads": 2}, ValueError, "num_kv_heads applies to k and needs qk=True"),
        ({"rank": 3}, ValueError, "rank=3 input (batch, seq, num_heads * head_dim) needs num_heads"),
        ({"mrope_sections": (2, 0, 2)}, ValueError, "mrope_sections must contain positive ints, got [2, 0, 2]"),
        ({"mrope_sections": 4}, TypeError, "mrope_sections must be a non-empty sequence of ints, got 4"),
        ({"mrope_interleaved": 1}, TypeError, "mrope_interleaved must be a bool, got 1"),
        ({"mrope_interleaved": True}, ValueError, "mrope_interleaved=True assigns the pairs of mrope_sections"),
        (
            {"mrope_sections": (1, 2, 1), "position_ids": False},
            ValueError,
            "mrope_sections=[1, 2, 1] rotates by position ids of shape (3, batch, seq): they need position_ids=True",
        ),
    ],
)
def test_each_option_is_checked_by_name(options, error, message):
    with pytest.raises(error) as made:
        ExportOptions(**options)
    assert message in str(made.value)
    with pytest.raises(error) as built:
        rotary_model(8, **options)
    assert str(built.value) == str(made.value)


def test_options_are_frozen_and_dtypes_go_by_name():
    options = ExportOptions(dtype=np.float16, max_positions=np.int64(64))
    assert options.dtype == "float16" and type(options.max_positions) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_positions = 8  # type: ignore[misc]


def test_unknown_keywords_are_refused_as_python_refuses_them():
    with pytest.raises(TypeError, match=r"^rotary_model\(\) got an unexpected keyword argument 'max_position'$"):
        rotary_model(8, max_position=64)
    with pytest.raises(TypeError, match=r"^rotary_function\(\) got an unexpected keyword argument 'heads'$"):
        rotary_function(8, heads=2)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["q"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 2, "S", 8])],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["B", 2, "S", 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    for name in sorted(FROM_THE_MODEL - {"rank", "position_ids"}):  # those two are arguments of add_rotary
        with pytest.raises(TypeError, match=rf"^add_rotary\(\) got an unexpected keyword argument '{name}'$"):
            add_rotary(model, q="q", freqs=8, **{name: DOCUMENTED[name]})


@pytest.mark.parametrize("target", TARGETS)
def test_keywords_from_a_typed_dict_build_a_correct_model(target):
    options: ExportKeywords = {
        "target": target,
        "layout": "interleaved",
        "num_heads": 2,
        "max_positions": 32,
        "rotary_dim": 12,
    }
    sess = ort.InferenceSession(rotary_model(16, **options).SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 2, 5, 16)).astype(np.float32)
    pos = np.array([[0, 31, 7, 16, 3]])
    (y,) = sess.run(None, {"x": x, "position_ids": pos})
    expected = rope_by_matrix(x, pos[0], inv_freq_formula(12, 10000.0), "interleaved")
    assert np.max(np.abs(y - expected)) <= 1e-6


def _export_flags() -> dict[str, argparse.Action]:
    parser = argparse.ArgumentParser()
    export_command.add_arguments(parser)
    return {action.dest: action for action in parser._actions if action.dest in DOCUMENTED}


def test_command_line_flags_agree_with_the_options():
    """``arrayrope export`` spells its flags out (its parser is built without arrayrope.export): same choices
    and defaults. Not flags: ``--no-position-ids`` inverts position_ids, ``--config`` gives the scaling; M-RoPE
    models (``mrope_sections``, ``mrope_interleaved``) are built from Python only."""
    flags = _export_flags()
    assert set(flags) == set(DOCUMENTED) - {"position_ids", "runtime", "scaling", "mrope_sections", "mrope_interleaved"}
    for name, action in flags.items():
        assert action.default == ExportOptions.default(name), name
        assert tuple(action.choices or ()) == ExportOptions.choices(name), name


@pytest.mark.parametrize(
    "target,dtype,tables",
    [
        ("onnx23", "float32", "stored"),
        ("ort", "float16", "stored"),
        ("portable", "float32", "stored"),
        ("portable", "float64", "stored"),
    ],
)
def test_max_positions_is_checked_against_protobufs_limit_with_the_figures(target, dtype, tables):
    """Refused before any table is computed; the largest max_positions the message offers fits, one more not."""
    import re

    from arrayrope.export.build._spec import make_spec
    from arrayrope.export.build._tables import check_size

    options = dict(target=target, dtype=dtype, tables=tables, num_heads=2)
    pattern = (
        r"max_positions=8388608 needs [\d.]+ GB of cos/sin tables \(\d+ bytes per position .*, but an ONNX "
        r"model is at most 2.15 GB \(protobuf's 2 GiB limit\); use max_positions <= (\d+), or no max_positions"
    )
    with pytest.raises(ValueError, match=pattern) as info:
        rotary_model(128, max_positions=2**23, **options)
    largest = int(re.search(r"max_positions <= (\d+)", str(info.value)).group(1))  # type: ignore[union-attr]
    check_size(make_spec(128, ExportOptions(max_positions=largest, **options)))
    with pytest.raises(ValueError, match="protobuf's 2 GiB limit"):
        check_size(make_spec(128, ExportOptions(max_positions=largest + 1, **options)))
    assert rotary_model(128, target="portable").ByteSize() < 4 << 20
