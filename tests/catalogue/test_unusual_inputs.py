"""The catalogue, unusual inputs: documented results for edge values, and arrays of another library or device."""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import pytest
from catalogue_cases import COS, F8, HAS, ROPE, SIN, f32, refused

import arrayrope as ar
from arrayrope import scaling as scl
from arrayrope import testing as te


def _from_bytes(raw: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "wb") as fh:
            fh.write(raw)
        return ar.rope_frequencies_from_config(path)


def _same(a, b) -> bool:
    return bool(np.allclose(a, b, rtol=0, atol=1e-6))


Q = f32(1, 2, 3, 8)
UNUSUAL = {
    "rope_tables of 0 positions": (lambda: ar.rope_tables(F8, 0)[0].shape, (0, 4)),
    "rope_tables of an empty array": (lambda: ar.rope_tables(F8, np.zeros((2, 0), np.int64))[0].shape, (2, 0, 4)),
    "rope_tables of a numpy int": (lambda: ar.rope_tables(F8, np.int64(3))[0].shape, (3, 4)),
    "rope_tables of a 0-d array": (lambda: ar.rope_tables(F8, np.array(5))[0].shape, (4,)),
    "rope_tables of a list": (lambda: ar.rope_tables(F8, [0, 1, 2])[0].shape, (3, 4)),
    "rope_tables of negative positions": (
        lambda: _same(ar.rope_tables(F8, np.array([-7]))[1], -ar.rope_tables(F8, np.array([7]))[1]),
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
    "apply_rotary of a strided view": (
        lambda: _same(
            ar.apply_rotary(f32(3, 16)[:, ::2], COS, SIN),
            ar.apply_rotary(np.ascontiguousarray(f32(3, 16)[:, ::2]), COS, SIN),
        ),
        True,
    ),
    "RotaryEmbedding with 0 tokens": (lambda: ROPE(np.ones((1, 2, 0, 8), np.float32)).shape, (1, 2, 0, 8)),
    "RotaryEmbedding with a batch of 0": (
        lambda: ROPE(np.ones((0, 2, 3, 8), np.float32), offset=np.zeros(0, np.int64)).shape,
        (0, 2, 3, 8),
    ),
    "RotaryEmbedding at offset 2**62": (lambda: bool(np.isfinite(ROPE(Q, offset=2**62)).all()), True),
    "RotaryEmbedding with list positions": (lambda: ROPE(Q, positions=[0, 1, 2]).shape, (1, 2, 3, 8)),
    "RotaryEmbedding with a numpy int offset": (lambda: _same(ROPE(Q, offset=np.int32(5)), ROPE(Q, offset=5)), True),
    "RotaryEmbedding with uint8 offsets at 255": (
        lambda: _same(
            ROPE(f32(2, 1, 3, 8), offset=np.array([254, 1], np.uint8)),
            ROPE(f32(2, 1, 3, 8), positions=np.array([[254, 255, 256], [1, 2, 3]])),
        ),
        True,
    ),
    "RotaryEmbedding returns the frequencies used": (lambda: ROPE(Q, return_freqs=True)[1] is ROPE.freqs, True),
    "to_half_split of ints": (lambda: ar.to_half_split(np.arange(4)).tolist(), [0, 2, 1, 3]),
    "t5 buckets of int8 extremes": (lambda: ar.t5_relative_buckets(np.array([-128, 127], np.int8)).tolist(), [15, 31]),
    "alibi_bias of one query far away": (lambda: ar.alibi_bias(1, 1, 2, offset=2**40).shape, (1, 1, 2)),
    "assert_close of equal infinities": (lambda: te.assert_close(np.array([np.inf]), np.array([np.inf])), None),
    "tolerance_at an infinite scale": (lambda: te.tolerance_at("float32", math.inf), math.inf),
    "yarn_mscale below factor 1": (lambda: scl.yarn_mscale(0.5), 1.0),
    "rope_frequencies with partial rotary 1": (lambda: ar.rope_frequencies(8, partial_rotary_factor=1.0).rotary_dim, 8),
    "a config with a byte order mark": (lambda: _from_bytes(b'\xef\xbb\xbf{"head_dim": 8}').head_dim, 8),
}


@pytest.mark.parametrize("name", list(UNUSUAL))
def test_an_unusual_input_gets_its_documented_result(name):
    call, expected = UNUSUAL[name]
    assert call() == expected


def _foreign():
    q = f32(1, 2, 3, 8)
    if HAS["torch"]:
        import torch

        tq = torch.ones(1, 2, 3, 8)
        yield "torch x, numpy cos", lambda: ar.apply_rotary(torch.ones(3, 8), COS, SIN), ("cos", "x")
        yield "torch q, numpy k", lambda: ROPE(tq, q), ("k", "q")
        yield "torch q, numpy positions", lambda: ROPE(tq, positions=np.arange(3)), ("positions", "q")
        yield "torch q, numpy offsets", lambda: ROPE(tq, offset=np.array([3])), ("offset", "q")
        yield "numpy positions, xp=torch", lambda: ar.rope_tables(F8, np.arange(3), xp=torch), ("positions", "xp")
        yield (
            "rerotate torch x, numpy positions",
            lambda: ar.rerotate(torch.ones(3, 8), positions=np.arange(3), from_freqs=F8, to_freqs=F8),
            ("positions", "x"),
        )
        yield "torch, a device it lacks", lambda: ar.rope_tables(F8, 3, xp=torch, device="nope"), ("device",)
        yield (
            "mrope torch positions, xp numpy",
            lambda: ar.mrope_tables(
                ar.rope_frequencies(16), torch.zeros((3, 1, 4), dtype=torch.int64), sections=(2, 3, 3), xp=np
            ),
            ("positions", "xp"),
        )
    if HAS["array_api_strict"]:
        import array_api_strict as xs

        d1 = xs.Device("device1")
        xc, xsn = ar.rope_tables(F8, 3, xp=xs)
        yield (
            "strict x on another device than cos",
            lambda: ar.apply_rotary(xs.ones((3, 8), device=d1), xc, xsn),
            ("cos is on device",),
        )
        yield (
            "strict offsets on another device than q",
            lambda: ROPE(xs.ones((1, 2, 3, 8), device=d1), offset=xs.asarray([3])),
            ("offset is on device",),
        )
        yield (
            "float64 tables without float64",
            lambda: ar.rope_tables(F8, 3, xp=xs, device=xs.Device("no_float64"), dtype=xs.float64),
            ("float64",),
        )
        yield "a dtype the library lacks", lambda: ar.alibi_bias(2, 3, 3, xp=xs, dtype="bfloat16"), ("dtype",)
    if HAS["jax"]:
        import jax.numpy as jnp

        yield (
            "jax without x64, past int32",
            lambda: ar.RotaryEmbedding(8)(jnp.ones((1, 1, 3, 8)), offset=2**31),
            ("offset",),
        )


FOREIGN = {name: (call, names) for name, call, names in _foreign()}


@pytest.mark.parametrize("name", list(FOREIGN))
def test_arrays_of_another_library_or_device_are_refused_by_name(name):
    call, names = FOREIGN[name]
    refused(call, names)
