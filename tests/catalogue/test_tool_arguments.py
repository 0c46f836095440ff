"""The catalogue, tools: configs, scaling, the testing harness and the export layer, with bad values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from catalogue_cases import (
    BOOL,
    EVEN,
    HAS,
    POS_INT,
    POS_REAL,
    Specs,
    check_good_calls,
    check_refusal,
    choice,
    refusal_params,
)

import arrayrope as ar
from arrayrope import config as cfg
from arrayrope import scaling as scl
from arrayrope import testing as te

MISSING = "/no/such/config.json"

SPECS: Specs = {
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
                MISSING,
            ],
            seq_len=[-1, 1.5, "3", True],
            layer_type=[3, "x"],
        ),
    ),
    "rope_config": (
        cfg.rope_config,
        dict(config={"head_dim": 8}),
        dict(config=[None, 3, {"head_dim": 7}, MISSING], layer_type=[3, "x"]),
    ),
    "load_config": (cfg.load_config, dict(config={"head_dim": 8}), dict(config=[None, 3, [1], MISSING])),
    "RotaryEmbedding.from_config": (
        ar.RotaryEmbedding.from_config,
        dict(config={"model_type": "llama", "head_dim": 8}),
        dict(
            config=[None, 3, {"head_dim": 7}],
            layer_type=[3, "x"],
            layout=[v for v in choice("half") if v is not None],  # None: the layout the config names
            axes=choice("bhsd"),
        ),
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
    "available_backends": (te.available_backends, dict(), dict(names=[3, "nope", ["nope"], [3]], with_reasons=BOOL)),
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


def export_specs() -> Specs:
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
                max_positions=[*POS_INT[:-1], 2**40],
                position_ids=BOOL,
                tables=choice("stored")[:-1],
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
            dict(name=["", 3, None], domain=["", 3, None], max_positions=POS_INT[:-1]),
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
                max_positions=POS_INT[:-1],
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
                max_positions=POS_INT[:-1],
                num_heads=POS_INT[:-1],
                qk=BOOL,
                opset=[1.5, "17", True, 0],
                dtype=[3, object],
            ),
        ),
    }


if HAS["onnx"] and HAS["onnxruntime"]:
    SPECS.update(export_specs())


@pytest.mark.parametrize("fn, good, param, value", list(refusal_params(SPECS)))
def test_a_bad_argument_is_refused_by_name(fn, good, param, value):
    check_refusal(fn, good, param, value)


def test_the_good_calls_succeed():
    check_good_calls(SPECS)
