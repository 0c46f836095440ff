"""The catalogue: every public function, the RotaryEmbedding call and every CLI command with bad or unusual inputs.

Each case is a call and what must come of it:

* refused: a ``ValueError`` or ``TypeError`` whose message names the argument and says what is expected;
* correct: a documented result, checked against what the documentation says;
* risky (FIFOs, devices, huge sizes): run in a subprocess with a memory limit and a timeout, so that a
  hang or a runaway allocation fails the case instead of the suite. A request for an output larger
  than memory may end in the array library's ``MemoryError`` at allocation (documented), never in a
  hang or a crash.

The README's reliability section gives the catalogue's size (``python -m pytest tests/test_catalogue.py``
counts the cases).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import arrayrope as ar
from arrayrope import cli
from arrayrope import config as cfg
from arrayrope import scaling as scl
from arrayrope import testing as te

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

# -- values -------------------------------------------------------------------------------------------


def f32(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


POS_INT = [0, -3, 1.5, 4.0, "4", True, [4], math.nan, 1j, np.float64(4.0), None]
NONNEG = [-1, 1.5, "1", True, [1], math.nan, None]
EVEN = [v for v in POS_INT if v is not None] + [7]
POS_REAL = [math.nan, math.inf, -math.inf, 0, -1.0, "1", True, 1j, [1.0], None]
REAL = [math.nan, math.inf, "1", True, 1j, [1.0], None]
BOOL = ["False", "True", 1, 0, 1.0, np.int64(1), None]


def choice(first):
    return ["", first.upper(), 1, b"x", first + " ", None]


def arrays(shape):
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

F8 = ar.rope_frequencies(8)
COS, SIN = ar.rope_tables(F8, 3)
TABLE = np.zeros((32, 2), np.float32)
ROPE = ar.RotaryEmbedding(8)


def _rope_call(**kw):
    return ar.RotaryEmbedding(8)(**kw)


# name -> (function, the good call's keywords, {argument: bad values}): each bad value alone must be refused
SPECS = {
    "rope_frequencies": (
        ar.rope_frequencies,
        dict(head_dim=8),
        dict(
            head_dim=EVEN,
            base=POS_REAL[:-1],
            rotary_dim=[*EVEN, 10],
            partial_rotary_factor=[math.nan, 0, 1.5, -0.5, "0.5", True, 1j],
            scaling=["linear", 3, [1]],
            max_position_embeddings=POS_INT[:-1],
            seq_len=[-1, 1.5, "3", True],
        ),
    ),
    "RopeFrequencies": (
        ar.RopeFrequencies,
        dict(inv_freq=np.ones(2), head_dim=4, rotary_dim=4),
        dict(
            inv_freq=[np.ones(3), np.ones(2, complex), [np.nan, 1], "ab", None, np.ones((1, 2))],
            head_dim=EVEN,
            rotary_dim=[*EVEN, 8],
            attention_factor=POS_REAL,
            base=POS_REAL,
            rope_type=[3, None],
        ),
    ),
    "rope_tables": (
        ar.rope_tables,
        dict(freqs=F8, positions=3),
        dict(freqs=FREQS, positions=[*POSITIONS, -1], xp=XP, dtype=DTYPE, device=DEVICE, apply_attention_factor=BOOL),
    ),
    "apply_rotary": (
        ar.apply_rotary,
        dict(x=f32(3, 8), cos=COS, sin=SIN),
        dict(
            x=[*arrays((3, 8)), f32(3, 3), f32(8)],
            cos=[*arrays((3, 4)), COS[:, :1].repeat(5, 1), COS[:2]],
            sin=[*arrays((3, 4)), SIN[:2]],
            layout=choice("half"),
        ),
    ),
    "to_half": (ar.to_half, dict(x=f32(2, 8)), dict(x=[None, "x", 3, [1, 2], np.float32(1)], rotary_dim=[*EVEN, 10])),
    "to_interleaved": (ar.to_interleaved, dict(x=f32(2, 8)), dict(x=[None, "x", 3, f32(2, 7)], rotary_dim=[*EVEN, 10])),
    "permute_rotary_rows": (
        ar.permute_rotary_rows,
        dict(w=f32(16, 3), num_heads=2, head_dim=8),
        dict(
            w=[None, f32(15, 3), f32(16, 3, 1), "w"],
            num_heads=POS_INT,
            head_dim=[*POS_INT, 7],
            rotary_dim=[*EVEN, 10],
            to=choice("half"),
        ),
    ),
    "RotaryEmbedding": (
        ar.RotaryEmbedding,
        dict(head_dim=8),
        dict(
            head_dim=EVEN,
            base=POS_REAL,
            rotary_dim=[*EVEN, 10],
            scaling=[
                "linear",
                3,
                {"rope_type": "linear"},
                {"rope_type": "nope"},
                {"rope_type": "dynamic", "factor": 2.0},
            ],
            max_position_embeddings=POS_INT[:-1],
            layout=choice("half"),
            axes=choice("bhsd"),
        ),
    ),
    "RotaryEmbedding.__call__": (
        ROPE,
        dict(q=f32(1, 2, 3, 8)),
        dict(
            q=[*arrays((1, 2, 3, 8)), f32(2, 3, 8), f32(1, 2, 3, 6)],
            k=[
                "k",
                3,
                np.ones((1, 2, 3, 8), np.int64),
                np.ones((1, 2, 3, 8), np.complex64),
                f32(1, 2, 4, 8),
                f32(2, 2, 3, 8),
                f32(1, 2, 3, 6),
                f32(2, 3, 8),
            ],
            positions=[*[p for p in POSITIONS if p is not None], np.arange(4), np.arange(6).reshape(2, 3)],
            offset=[
                -1,
                1.5,
                "3",
                True,
                None,
                np.array([1.5]),
                np.array([1, 2]),
                np.array(-1),
                np.array([-1]),
                2**70,
                np.array([2**63 - 1]),
            ],
            seq_len=[0, -1, 1.5, "3", True],
            return_freqs=BOOL,
        ),
    ),
    "rerotate": (
        ar.rerotate,
        dict(x=f32(3, 8), positions=3, from_freqs=F8, to_freqs=ar.rope_frequencies(8, base=500.0)),
        dict(
            x=[*arrays((3, 8)), f32(3, 6)],
            positions=[*POSITIONS, 5, np.arange(4)],
            from_freqs=[*FREQS, ar.rope_frequencies(16)],
            to_freqs=[*FREQS, ar.rope_frequencies(8, rotary_dim=4)],
            layout=choice("half"),
            apply_attention_factor=BOOL,
        ),
    ),
    "sinusoidal_embedding": (
        ar.sinusoidal_embedding,
        dict(positions=3, dim=8),
        dict(
            positions=POSITIONS,
            dim=EVEN,
            base=POS_REAL,
            layout=choice("interleaved"),
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "xpos_scales": (
        ar.xpos_scales,
        dict(freqs=F8, positions=3),
        dict(
            freqs=FREQS,
            positions=POSITIONS,
            scale_base=POS_REAL,
            gamma=POS_REAL,
            center=REAL,
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "xpos_tables": (
        ar.xpos_tables,
        dict(freqs=F8, positions=3),
        dict(
            freqs=FREQS,
            positions=POSITIONS,
            scale_base=POS_REAL,
            gamma=POS_REAL,
            center=REAL,
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
            apply_attention_factor=BOOL,
        ),
    ),
    "axial_rope_tables": (
        ar.axial_rope_tables,
        dict(positions=(2, 3), head_dim=8),
        dict(
            positions=[
                (0, 3),
                (-1, 2),
                "23",
                None,
                (),
                np.array([[np.nan, 1]]),
                np.ones((2, 2), complex),
                [(1, 2), (3,)],
            ],
            head_dim=EVEN,
            base=POS_REAL,
            axis_dims=[(4, 5), (3, 3), (4,), "44", (4.0, 4.0), (0, 8)],
            rotary_dim=[*EVEN, 10],
            train_grid=[(0, 3), (2,), (2.5, 3), "23"],
            num_prefix_tokens=NONNEG,
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "mrope_tables": (
        ar.mrope_tables,
        dict(freqs=ar.rope_frequencies(16), positions=np.zeros((3, 1, 4), np.int64), sections=(2, 3, 3)),
        dict(
            freqs=FREQS,
            positions=[np.zeros((2, 1, 4)), None, "p", np.full((3, 1, 4), np.nan), np.zeros((3, 1, 4), complex)],
            sections=[(2, 3), (2, 3, 4), (0, 4, 4), (2.0, 3, 3), "233", None, (-1, 5, 4)],
            interleaved=BOOL,
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "mixed_rope_frequencies": (
        ar.mixed_rope_frequencies,
        dict(head_dim=8, num_heads=2),
        dict(head_dim=[*EVEN, 6], num_heads=POS_INT, base=POS_REAL, seed=[-1, 1.5, "s", True]),
    ),
    "mixed_rope_tables": (
        ar.mixed_rope_tables,
        dict(freqs=ar.mixed_rope_frequencies(8, 2, seed=0), positions=(2, 3)),
        dict(
            freqs=[np.ones((3, 2, 4)), np.ones((2, 2, 4), int), None, "f", np.full((2, 2, 4), np.nan), np.ones((2, 4))],
            positions=[(0, 3), (-1, 2), "23", None, np.array([[np.nan, 1]])],
            num_prefix_tokens=NONNEG,
            xp=XP,
            dtype=DTYPE,
        ),
    ),
    "alibi_slopes": (ar.alibi_slopes, dict(num_heads=4), dict(num_heads=POS_INT, xp=XP, dtype=DTYPE, device=DEVICE)),
    "alibi_bias": (
        ar.alibi_bias,
        dict(num_heads=2, q_len=3, k_len=3),
        dict(
            num_heads=POS_INT,
            q_len=POS_INT,
            k_len=POS_INT,
            causal=BOOL,
            offset=[1.5, "1", True, math.nan, 2**70],
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "t5_relative_buckets": (
        ar.t5_relative_buckets,
        dict(relative_position=np.arange(-5, 5)),
        dict(
            relative_position=[None, "r", np.arange(3.0), np.array([True]), [1, 2]],
            bidirectional=BOOL,
            num_buckets=[*POS_INT, 1, 3, 2**20],
            max_distance=[*POS_INT, 2, 2**50],
        ),
    ),
    "t5_relative_bias": (
        ar.t5_relative_bias,
        dict(table=TABLE, q_len=2, k_len=3),
        dict(
            table=[None, "t", np.zeros(32), np.zeros((32, 2, 1)), np.zeros((1, 2))],
            q_len=POS_INT,
            k_len=POS_INT,
            bidirectional=BOOL,
            max_distance=[*POS_INT, 2**50],
            offset=[1.5, "1", True, 2**70],
        ),
    ),
    "rope_frequencies_from_config": (
        ar.rope_frequencies_from_config,
        dict(config={"head_dim": 8}),
        dict(
            config=[
                None,
                3,
                [1],
                {"head_dim": 7},
                {"head_dim": "8"},
                {},
                {"hidden_size": 8},
                {"head_dim": 8, "rope_theta": math.nan},
                {"head_dim": 8, "partial_rotary_factor": []},
                {"head_dim": 8, "rope_scaling": "linear"},
                {"head_dim": 8, "max_position_embeddings": 1.5},
                "/no/such/config.json",
            ],
            seq_len=[-1, 1.5, "3", True],
            layer_type=[3, "x"],
        ),
    ),
    "rope_config": (
        cfg.rope_config,
        dict(config={"head_dim": 8}),
        dict(config=[None, 3, {"head_dim": 7}, "/no/such/config.json"], layer_type=[3, "x"]),
    ),
    "load_config": (cfg.load_config, dict(config={"head_dim": 8}), dict(config=[None, 3, [1], "/no/such/config.json"])),
    "RotaryEmbedding.from_config": (
        ar.RotaryEmbedding.from_config,
        dict(config={"head_dim": 8}),
        dict(config=[None, 3, {"head_dim": 7}], layer_type=[3, "x"], layout=choice("half"), axes=choice("bhsd")),
    ),
    "check_parity": (
        lambda fn=(lambda x: x), **kw: te.check_parity(fn, np.ones(3), **kw),
        dict(),
        dict(
            fn=[None, 3, "f"],
            backends=[3, "nope", ["nope"]],
            dtypes=[3, "float8", ["float8"], []],
            reference=[3, "float8"],
            rtol=[-1, math.nan, "1"],
            atol=[-1, math.nan, "1"],
            check_dtype=BOOL,
        ),
    ),
    "identify_rope": (
        te.identify_rope,
        dict(fn=lambda x, p: x, head_dim=8),
        dict(
            fn=[None, 3],
            head_dim=EVEN,
            seq_len=[*POS_INT, 1],
            max_offset=[-1, 1.5, "1", True],
            dtype=["float8", 3, "int32"],
        ),
    ),
    "assert_close": (
        te.assert_close,
        dict(actual=np.ones(3), desired=np.ones(3)),
        dict(
            actual=[None, "a"],
            desired=[None, "d"],
            rtol=[-1, math.nan, "1"],
            atol=[-1, math.nan, "1"],
            check_namespace=BOOL,
            check_dtype=BOOL,
            check_shape=BOOL,
            check_device=BOOL,
        ),
    ),
    "tolerance_at": (
        te.tolerance_at,
        dict(dtype="float32", scale=1.0),
        dict(
            dtype=["float8", 3, None],
            scale=[math.nan, -1, "1", None],
            rtol=[-1, math.nan, "1"],
            atol=[-1, math.nan, "1"],
        ),
    ),
    "default_tolerance": (te.default_tolerance, dict(dtype="float32"), dict(dtype=["float8", 3, None, "int32"])),
    "backends": (te.backends, dict(), dict(names=[3, "nope", ["nope"], [3]], with_reasons=BOOL)),
    "rope_type": (
        scl.rope_type,
        dict(scaling={"rope_type": "linear", "factor": 2.0}),
        dict(scaling=[None, "linear", 3, {"rope_type": 3}, {"rope_type": "nope"}]),
    ),
    "yarn_mscale": (
        scl.yarn_mscale,
        dict(factor=2.0),
        dict(factor=[math.nan, "2", None, -1, 0, math.inf, True], mscale=[math.nan, "1", None, math.inf, True]),
    ),
}

ALIASES = {"names": ("names", "backend"), "backends": ("backends", "backend"), "scaling": ("scaling", "rope_type")}


def _export_specs():
    from onnx import GraphProto, ModelProto

    from arrayrope import export as ex

    model = ex.rotary_model(8, max_positions=16)
    return {
        "rotary_model": (
            ex.rotary_model,
            dict(freqs=8),
            dict(
                freqs=[np.ones(4), None, "8", 7, 0, 8.0],
                layout=choice("half"),
                target=[*choice("auto"), "tensorrt"],
                rank=[2, 5, "4", 4.0, None],
                num_heads=POS_INT[:-1],
                num_kv_heads=POS_INT[:-1],
                max_positions=[*POS_INT, 2**40],
                position_ids=BOOL,
                tables=choice("constant"),
                dtype=["float8", "int32", 3, np.complex64],
                opset=[0, -1, 1.5, "17", 12, 10**6],
                qk=BOOL,
                runtime=choice("any"),
                base=POS_REAL,
                rotary_dim=[*EVEN, 10],
                scaling=["linear", 3, {"rope_type": "nope"}],
            ),
        ),
        "rotary_function": (
            ex.rotary_function,
            dict(freqs=8),
            dict(name=["", 3, None], domain=["", 3, None], max_positions=POS_INT),
        ),
        "add_rotary": (
            ex.add_rotary,
            dict(model=model, q="x", freqs=8, max_positions=16),
            dict(
                model=[None, 3, "/no/such.onnx", b"xx", GraphProto()],
                q=[None, 3, "nope", ""],
                k=[3, "nope"],
                position_ids=[3, "nope", "x"],
                freqs=[None, "8", 7],
                rank=[2, 5, "4"],
                max_positions=POS_INT,
            ),
        ),
        "validate": (
            ex.validate,
            dict(model=model, providers="cpu"),
            dict(
                model=[None, 3, "/no/such.onnx", ModelProto()],
                providers=["gpu", 3, [3], ["xpu"]],
                reference_evaluator=BOOL,
                seed=[-1, 1.5, "s", True],
                raise_on_failure=BOOL,
            ),
        ),
        "ExportOptions": (
            ex.ExportOptions,
            dict(),
            dict(
                layout=choice("half"),
                max_positions=POS_INT,
                num_heads=POS_INT[:-1],
                qk=BOOL,
                opset=[1.5, "17", True, 0],
                dtype=[3, object],
            ),
        ),
    }


def _refusals():
    specs = dict(SPECS)
    if HAS["onnx"] and HAS["onnxruntime"]:
        specs.update(_export_specs())
    for name, (fn, good, params) in specs.items():
        for param, values in params.items():
            for i, value in enumerate(values):
                yield pytest.param(fn, good, param, value, id=f"{name}-{param}-{i}")


def refused(call, names, exc=(TypeError, ValueError)) -> str:
    """``call()`` raises a TypeError or ValueError whose message names one of ``names`` and an expectation."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(exc) as info:
            call()
    message = str(info.value)
    assert any(n in message for n in names), message
    assert any(w in message for w in EXPECTS), message
    return message


@pytest.mark.parametrize("fn, good, param, value", list(_refusals()))
def test_a_bad_argument_is_refused_by_name(fn, good, param, value):
    refused(lambda: fn(**{**good, param: value}), ALIASES.get(param, (param,)))


def test_the_good_calls_of_the_catalogue_succeed():
    """Each bad value above replaces one argument of a call that works."""
    specs = dict(SPECS)
    if HAS["onnx"] and HAS["onnxruntime"]:
        specs.update(_export_specs())
    for fn, good, _ in specs.values():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(**good)


# -- unusual inputs with a documented result -----------------------------------------------------------


def _unusual():
    q = f32(1, 2, 3, 8)
    rel8 = np.array([-128, 127], np.int8)
    cases = {
        "rope_tables of 0 positions": (lambda: ar.rope_tables(F8, 0)[0].shape, (0, 4)),
        "rope_tables of an empty array": (lambda: ar.rope_tables(F8, np.zeros((2, 0), np.int64))[0].shape, (2, 0, 4)),
        "rope_tables of a numpy int": (lambda: ar.rope_tables(F8, np.int64(3))[0].shape, (3, 4)),
        "rope_tables of a 0-d array": (lambda: ar.rope_tables(F8, np.array(5))[0].shape, (4,)),
        "rope_tables of a list": (lambda: ar.rope_tables(F8, [0, 1, 2])[0].shape, (3, 4)),
        "rope_tables of negative positions": (
            lambda: bool(np.allclose(ar.rope_tables(F8, np.array([-7]))[1], -ar.rope_tables(F8, np.array([7]))[1])),
            True,
        ),
        "rope_tables at -2**63": (lambda: bool(np.isfinite(ar.rope_tables(F8, np.array([-(2**63)]))[0]).all()), True),
        "apply_rotary on an empty batch": (
            lambda: ar.apply_rotary(np.ones((0, 8), np.float32), COS[:0], SIN[:0]).shape,
            (0, 8),
        ),
        "apply_rotary propagates NaN": (
            lambda: bool(np.isnan(ar.apply_rotary(np.full((3, 8), np.nan, np.float32), COS, SIN)).all()),
            True,
        ),
        "apply_rotary of a non-contiguous view": (
            lambda: bool(
                np.array_equal(
                    ar.apply_rotary(f32(3, 16)[:, ::2], COS, SIN),
                    ar.apply_rotary(np.ascontiguousarray(f32(3, 16)[:, ::2]), COS, SIN),
                )
            ),
            True,
        ),
        "RotaryEmbedding with 0 tokens": (lambda: ROPE(np.ones((1, 2, 0, 8), np.float32)).shape, (1, 2, 0, 8)),
        "RotaryEmbedding with a batch of 0": (
            lambda: ROPE(np.ones((0, 2, 3, 8), np.float32), offset=np.zeros(0, np.int64)).shape,
            (0, 2, 3, 8),
        ),
        "RotaryEmbedding at offset 2**62": (lambda: bool(np.isfinite(ROPE(q, offset=2**62)).all()), True),
        "RotaryEmbedding with list positions": (lambda: ROPE(q, positions=[0, 1, 2]).shape, (1, 2, 3, 8)),
        "RotaryEmbedding with a numpy int offset": (
            lambda: bool(np.array_equal(ROPE(q, offset=np.int32(5)), ROPE(q, offset=5))),
            True,
        ),
        "RotaryEmbedding with uint8 offsets at 255": (
            lambda: bool(
                np.allclose(
                    ROPE(f32(2, 1, 3, 8), offset=np.array([254, 1], np.uint8)),
                    ROPE(f32(2, 1, 3, 8), positions=np.array([[254, 255, 256], [1, 2, 3]])),
                )
            ),
            True,
        ),
        "RotaryEmbedding returns the frequencies used": (lambda: ROPE(q, return_freqs=True)[1] is ROPE.freqs, True),
        "to_half of ints": (lambda: ar.to_half(np.arange(4)).tolist(), [0, 2, 1, 3]),
        "t5 buckets of int8 extremes": (lambda: ar.t5_relative_buckets(rel8).tolist(), [15, 31]),
        "alibi_bias of one query far away": (lambda: ar.alibi_bias(1, 1, 2, offset=2**40).shape, (1, 1, 2)),
        "assert_close of equal infinities": (lambda: te.assert_close(np.array([np.inf]), np.array([np.inf])), None),
        "tolerance_at an infinite scale": (lambda: te.tolerance_at("float32", math.inf), math.inf),
        "yarn_mscale below factor 1": (lambda: scl.yarn_mscale(0.5), 1.0),
        "rope_frequencies with partial rotary 1": (
            lambda: ar.rope_frequencies(8, partial_rotary_factor=1.0).rotary_dim,
            8,
        ),
        "a config with a BOM": (lambda: _from_bytes(b'\xef\xbb\xbf{"head_dim": 8}').head_dim, 8),
    }
    for name, (call, expected) in cases.items():
        yield pytest.param(call, expected, id=name)


def _from_bytes(raw: bytes):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "wb") as fh:
            fh.write(raw)
        return ar.rope_frequencies_from_config(path)


@pytest.mark.parametrize("call, expected", list(_unusual()))
def test_an_unusual_input_gets_its_documented_result(call, expected):
    assert call() == expected


# -- other libraries' arrays, other devices ----------------------------------------------------------------


def _foreign():
    q = f32(1, 2, 3, 8)
    if HAS["torch"]:
        import torch

        tq = torch.ones(1, 2, 3, 8)
        yield pytest.param(lambda: ar.apply_rotary(torch.ones(3, 8), COS, SIN), ("cos", "x"), id="torch x, numpy cos")
        yield pytest.param(lambda: ROPE(tq, q), ("k", "q"), id="torch q, numpy k")
        yield pytest.param(lambda: ROPE(tq, positions=np.arange(3)), ("positions", "q"), id="torch q, numpy positions")
        yield pytest.param(lambda: ROPE(tq, offset=np.array([3])), ("offset", "q"), id="torch q, numpy offsets")
        yield pytest.param(
            lambda: ar.rope_tables(F8, np.arange(3), xp=torch), ("positions", "xp"), id="numpy positions, xp=torch"
        )
        yield pytest.param(
            lambda: ar.rerotate(torch.ones(3, 8), positions=np.arange(3), from_freqs=F8, to_freqs=F8),
            ("positions", "x"),
            id="rerotate torch x, numpy positions",
        )
        yield pytest.param(lambda: ar.rope_tables(F8, 3, xp=torch, device="nope"), ("device",), id="torch bad device")
        yield pytest.param(
            lambda: ar.mrope_tables(
                ar.rope_frequencies(16), torch.zeros((3, 1, 4), dtype=torch.int64), sections=(2, 3, 3), xp=np
            ),
            ("positions", "xp"),
            id="mrope torch xp numpy",
        )
    if HAS["array_api_strict"]:
        import array_api_strict as xs

        d1 = xs.Device("device1")
        xc, xsn = ar.rope_tables(F8, 3, xp=xs)
        yield pytest.param(
            lambda: ar.apply_rotary(xs.ones((3, 8), device=d1), xc, xsn),
            ("cos is on device",),
            id="strict x on another device than cos",
        )
        yield pytest.param(
            lambda: ROPE(xs.ones((1, 2, 3, 8), device=d1), offset=xs.asarray([3])),
            ("offset is on device",),
            id="strict offsets on another device than q",
        )
        yield pytest.param(
            lambda: ar.rope_tables(F8, 3, xp=xs, device=xs.Device("no_float64"), dtype=xs.float64),
            ("float64",),
            id="float64 tables without float64",
        )
        yield pytest.param(
            lambda: ar.alibi_bias(2, 3, 3, xp=xs, dtype="bfloat16"), ("dtype",), id="a dtype the library lacks"
        )
    if HAS["jax"]:
        import jax.numpy as jnp

        yield pytest.param(
            lambda: ar.RotaryEmbedding(8)(jnp.ones((1, 1, 3, 8)), offset=2**31),
            ("offset",),
            id="jax without x64 past int32",
        )


@pytest.mark.parametrize("call, names", list(_foreign()))
def test_arrays_of_another_library_or_device_are_refused_by_name(call, names):
    refused(call, names)


# -- the command line: every error is exit status 2 and one line ------------------------------------------


def _commands():
    yield ["nonsense"], "argument command: invalid choice"
    yield ["parity", "--backends", "nmupy"], "unknown backends ['nmupy']"
    yield ["parity", "--dtypes", "float8"], "dtypes must be a non-empty selection"
    yield ["demo", "--backends", "x,y"], "unknown backends ['x', 'y']"
    if HAS["matplotlib"]:
        yield ["plot", "--types", "bogus"], "'bogus' is not one of"
        yield ["plot", "--types", "linear", "--factor", "-1"], "--factor must be a number >= 1, got -1"
        yield ["plot", "--head-dim", "7", "--types", "default"], "head_dim must be even"
        yield ["plot", "/no/such/config.json"], "does not exist"
    if HAS["onnx"] and HAS["onnxruntime"]:
        for flags, message in [
            (["--head-dim", "8", "--max-positions", "0"], "max_positions must be positive"),
            (["--head-dim", "8", "--num-heads", "-2"], "num_heads must be positive"),
            (["--head-dim", "8", "--rotary-dim", "10"], "rotary_dim must be <= head_dim=8"),
            (["--head-dim", "8", "--tables", "computed", "--target", "onnx23"], "needs target='portable'"),
            (["--head-dim", "8", "--dtype", "float64", "--target", "ort"], "cannot be carried by target='ort'"),
            (["--head-dim", "8", "--rank", "3"], "rank=3 input"),
            (["--head-dim", "8", "--num-kv-heads", "2"], "num_kv_heads applies to k and needs qk=True"),
            (["--head-dim", "8", "--opset", "100"], "newer than the installed onnx knows"),
            (["--config", "/no/such/config.json"], "does not exist"),
            (["--head-dim", "8", "--base", "inf"], "base must be a finite number > 0"),
        ]:
            yield ["export", *flags, "-o", "{tmp}/x.onnx"], message
        yield ["export", "--head-dim", "8", "-o", "{tmp}/missing/x.onnx"], "does not exist"
        yield ["check", "{tmp}/missing.onnx"], "does not exist"
        yield ["check", "{tmp}"], "is not a regular file (a folder)"
        yield ["check", "{tmp}/empty.onnx", "--provider", "tpu"], "argument --provider: invalid choice"


@pytest.mark.parametrize("argv, message", list(_commands()), ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_command_answers_an_error_with_status_2_and_one_line(argv, message, tmp_path, capsys):
    (tmp_path / "empty.onnx").write_bytes(b"")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and message in err, err


# -- risky inputs: in a subprocess, with a memory limit and a timeout ---------------------------------------

RISKY_MEMORY = 1 << 30  # bytes of address space beyond what the interpreter has mapped at start
RISKY_SECONDS = 30


LIMITED = textwrap.dedent("""
    import json, resource, sys, time, warnings
    warnings.simplefilter("ignore")
    import numpy as np, arrayrope as ar
    with open("/proc/self/statm") as fh:
        limit = int(fh.read().split()[0]) * resource.getpagesize() + int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    space = {"np": np, "ar": ar}
    t = time.perf_counter()
    try:
        exec(sys.argv[1], space)
        out = {"outcome": "ok", "result": repr(space["result"])[:200]}
    except (ValueError, TypeError, MemoryError) as exc:
        out = {"outcome": type(exc).__name__, "message": str(exc)}
    out["seconds"] = time.perf_counter() - t
    print(json.dumps(out))
""")


def run_limited(code: str, tmp_path) -> dict:
    """Run ``code`` (which sets ``result``) with RISKY_MEMORY more bytes of address space and a timeout."""
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, code, str(RISKY_MEMORY)],
        capture_output=True,
        text=True,
        timeout=RISKY_SECONDS,
        cwd=tmp_path,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])  # no crash
    return json.loads(done.stdout.strip().splitlines()[-1])


RISKY = {
    # name: (code setting ``result``, outcome, text in the message or result)
    "config: /dev/zero": ("result = ar.rope_frequencies_from_config('/dev/zero')", "ValueError", "character device"),
    "config: a FIFO": (
        "import os; os.mkfifo('fifo.json'); result = ar.rope_frequencies_from_config('fifo.json')",
        "ValueError",
        "a FIFO",
    ),
    "config: 1 GB of zeros (sparse)": (
        "open('big.json', 'wb').truncate(1 << 30); result = ar.rope_frequencies_from_config('big.json')",
        "ValueError",
        "bytes",
    ),
    "config: nested a million deep": (
        "open('deep.json', 'w').write('[' * 10**6 + ']' * 10**6); "
        "result = ar.rope_frequencies_from_config('deep.json')",
        "ValueError",
        "deeply",
    ),
    "offset 2**24 + 3 (an 8 GiB cache before)": (
        "r = ar.RotaryEmbedding(128); q = np.ones((1, 32, 1, 128), np.float32)\nresult = r(q, offset=2**24 + 3).shape",
        "ok",
        "(1, 32, 1, 128)",
    ),
    "offset 2**62": (
        "result = ar.RotaryEmbedding(128)(np.ones((1, 8, 1, 128), np.float32), offset=2**62).shape",
        "ok",
        "(1, 8, 1, 128)",
    ),
    "t5: 2**17 buckets, distance 2**40": (
        "result = ar.t5_relative_buckets(np.arange(-16, 17) * 2**36, num_buckets=2**17, max_distance=2**40).max()",
        "ok",
        "131071",
    ),
    "t5 bias: a large table and distance": (
        "result = ar.t5_relative_bias(np.zeros((16384, 1), np.float32), 64, 64, max_distance=2**40).shape",
        "ok",
        "(1, 64, 64)",
    ),
    "rope_tables of 2**40 positions (an output larger than memory)": (
        "result = ar.rope_tables(ar.rope_frequencies(8), 2**40)",
        "MemoryError",
        "",
    ),
    "alibi_bias of 2**20 x 2**20 (an output larger than memory)": (
        "result = ar.alibi_bias(4, 2**20, 2**20)",
        "MemoryError",
        "",
    ),
    "axial grid of 2**40 tokens (an output larger than memory)": (
        "result = ar.axial_rope_tables((2**20, 2**20), 8)",
        "MemoryError",
        "",
    ),
    "sinusoidal of 2**40 positions (an output larger than memory)": (
        "result = ar.sinusoidal_embedding(2**40, 8)",
        "MemoryError",
        "",
    ),
}
if HAS["onnx"]:
    RISKY.update(
        {
            "export: max_positions 2**23": (
                "from arrayrope.export import rotary_model\nresult = rotary_model(128, max_positions=2**23)",
                "ValueError",
                "2 GiB limit",
            ),
            "validate: /dev/zero": (
                "from arrayrope.export import validate\nresult = validate('/dev/zero')",
                "ValueError",
                "character device",
            ),
            "validate: a FIFO": (
                "import os; os.mkfifo('m.onnx')\nfrom arrayrope.export import validate\nresult = validate('m.onnx')",
                "ValueError",
                "a FIFO",
            ),
            "add_rotary: 1 GB model file (sparse zeros)": (
                "open('m.onnx', 'wb').truncate(1 << 30)\nfrom arrayrope.export import add_rotary\n"
                "result = add_rotary('m.onnx', q='q', freqs=8)",
                "ValueError",
                "does not load",
            ),
        }
    )


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.path.exists("/proc/self/statm")),
    reason="memory limits of a subprocess: Linux only",
)
@pytest.mark.parametrize("name", list(RISKY))
def test_a_risky_input_is_answered_within_limits(name, tmp_path):
    code, outcome, text = RISKY[name]
    got = run_limited(code, tmp_path)
    assert got["outcome"] == outcome, got
    assert text in got.get("message", got.get("result", "")), got
    assert got["seconds"] < 10, got
