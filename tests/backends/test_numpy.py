"""The NumPy fast paths (``backends/numpy.py``): the blocked kernel against explicit rotation matrices and
ONNX's reference RotaryEmbedding, strided views, fresh outputs, and the angle-addition table kernel against
float64 cos/sin."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import arrayrope
from arrayrope._lib.rotation import rotate_reference
from arrayrope.backends import numpy as _np_kernels
from arrayrope.testing import assert_close
from helpers import rope_by_matrix

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_blocks_against_rotation_matrix(layout):
    """The blocked NumPy kernel in float64 against explicit rotation matrices (independent oracle)."""
    f = arrayrope.rope_frequencies(64, rotary_dim=48)
    positions = np.arange(3000, 3000 + 1100)
    cos, sin = arrayrope.rope_tables(f, positions, dtype="float64")
    x = RNG.standard_normal((2, 1100, 64))
    assert x.nbytes > _np_kernels._SMALL
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    expected = rope_by_matrix(x, positions, f.inv_freq, layout)
    assert_close(out, expected, rtol=1e-12, atol=1e-12, check_namespace=False, check_dtype=False)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_strided_inputs(layout):
    """Views the kernels must not flatten: transposed, reversed, a slice of a wider last axis."""
    base = RNG.standard_normal((3, 700, 4, 160)).astype(np.float32)
    cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(128), 700)
    for x in (
        np.swapaxes(base, 1, 2)[..., :128],  # (3, 4, 700, 128), rows not contiguous
        base[:, ::-1].swapaxes(1, 2)[..., 32:],  # negative strides
        np.asfortranarray(base).swapaxes(1, 2)[..., :128],  # last axis not contiguous
    ):
        before = x.copy()
        out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
        assert_close(out, rotate_reference(arrayrope.backends.namespace(x), x, cos, sin, layout))
        np.testing.assert_array_equal(x, before)


def test_output_is_fresh():
    x = RNG.standard_normal((1, 2, 3000, 64)).astype(np.float32)
    cos, sin = arrayrope.rope_tables(arrayrope.rope_frequencies(64), 3000)
    for layout in ("half", "interleaved"):
        out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
        assert not np.shares_memory(out, x) and not np.shares_memory(out, cos)


@pytest.mark.parametrize("n", [1, 5, 1023, 1024, 1025, 5000])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tables_kernel_against_float64(n, dtype):
    """Positions 0..n-1 by angle addition: within float rounding of float64 cos/sin."""
    f = arrayrope.rope_frequencies(128, base=500000.0)
    cos, sin = arrayrope.rope_tables(f, n, dtype=dtype)
    angles = np.arange(n, dtype=np.float64)[:, None] * f.inv_freq
    assert cos.shape == sin.shape == (n, 64) and cos.dtype == np.dtype(dtype)
    tol = 2.0**-24 * 1.01 if dtype == "float32" else 2.0**-11 * 1.01  # half an ulp at 1
    assert np.abs(cos - np.cos(angles)).max() <= tol
    assert np.abs(sin - np.sin(angles)).max() <= tol


def test_tables_kernel_attention_factor_and_empty():
    f = dataclasses.replace(arrayrope.rope_frequencies(32), attention_factor=1.25)
    cos, sin = arrayrope.rope_tables(f, 2000)
    angles = np.arange(2000.0)[:, None] * f.inv_freq
    assert np.abs(cos - 1.25 * np.cos(angles)).max() <= 1.25 * 2.0**-24 * 1.01
    assert np.abs(sin - 1.25 * np.sin(angles)).max() <= 1.25 * 2.0**-24 * 1.01
    cos, sin = arrayrope.rope_tables(f, 2000, apply_attention_factor=False)
    assert np.abs(cos - np.cos(angles)).max() <= 2.0**-24 * 1.01
    empty = arrayrope.rope_tables(f, 0)
    assert empty[0].shape == (0, 16) and empty[1].shape == (0, 16)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [64, 32])
def test_kernels_against_onnx_reference(layout, rotary_dim):
    """NumPy kernels above the block threshold against ONNX's reference RotaryEmbedding (opset 23)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    b, n, s, d, h = 2, 4, 520, 64, rotary_dim // 2
    x = RNG.standard_normal((b, n, s, d)).astype(np.float32)
    f = arrayrope.rope_frequencies(d, rotary_dim=rotary_dim)
    cos, sin = arrayrope.rope_tables(f, np.arange(7, 7 + s))
    assert x.nbytes > _np_kernels._SMALL
    tensors = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
        for name, shape in (("X", [b, n, s, d]), ("cos", [b, s, h]), ("sin", [b, s, h]))
    ]
    node = helper.make_node(
        "RotaryEmbedding",
        ["X", "cos", "sin"],
        ["Y"],
        interleaved=int(layout == "interleaved"),
        rotary_embedding_dim=rotary_dim,
    )
    graph = helper.make_graph(
        [node], "rotary", tensors, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [b, n, s, d])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    feeds = {"X": x, "cos": np.broadcast_to(cos, (b, s, h)).copy(), "sin": np.broadcast_to(sin, (b, s, h)).copy()}
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    assert_close(out, expected, rtol=1e-6, atol=1e-6, check_namespace=False, check_dtype=False)
