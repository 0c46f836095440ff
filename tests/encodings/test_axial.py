"""Axial RoPE tables (``encodings/axial.py``) against independent float64 oracles.

Oracles: the 2-D construction of the image notes rebuilt in complex form, explicit
rotation matrices, and the per-axis frequencies written out from their definition.
"""

from __future__ import annotations

import numpy as np
import pytest
from array_api_extra.testing import lazy_xp_function
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arrayrope
from arrayrope import axial_rope_tables
from arrayrope.testing import to_numpy
from helpers import check_like, float_dtypes, inv_freq_formula, rope_by_matrix, rotation_matrix, tol, xp_assert_close

# float64 results compared with independent formulas: rerun under NumPy's other CPU dispatch in CI
pytestmark = pytest.mark.precision

# In tests taking ``xp``: no Dask compute while building, traced under jax.jit (see conftest.py).
lazy_xp_function(axial_rope_tables)


# -- the 2-D construction of the notes, rebuilt independently ---------------------------------


def notes_theta(dim: int, base: float = 100.0) -> np.ndarray:
    """The frequencies of each of two axes in the 2-D notes: ``base ** (-4i / dim)``, ``i < dim / 4``."""
    return base ** (-np.arange(0, dim, 4) / dim)


def notes_freqs_cis_2d(dim: int, width: int, height: int, theta: float = 100.0) -> np.ndarray:
    """Complex rotations e^{i angle}, (width * height, dim // 2): x = t mod W, y = t div W."""
    freqs = 1.0 / theta ** (np.arange(0, dim, 4)[: dim // 4] / dim)
    t = np.arange(width * height)
    t_x, t_y = t % width, t // width
    return np.concatenate([np.exp(1j * np.outer(t_x, freqs)), np.exp(1j * np.outer(t_y, freqs))], axis=-1)


def notes_apply(x: np.ndarray, freqs_cis: np.ndarray) -> np.ndarray:
    """Interleaved pairs as complex numbers, multiplied by the rotations, back to reals."""
    z = x[..., 0::2] + 1j * x[..., 1::2]
    z = z * freqs_cis
    return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)


@pytest.mark.parametrize("width,height,dim", [(14, 14, 128), (4, 3, 16)])
def test_2d_notes_construction_equals_axial_interleaved(xp, backend, width, height, dim):
    rng = np.random.default_rng(width * height)
    x64 = rng.standard_normal((2, width * height, dim))
    t = np.arange(width * height)
    coords = backend.asarray(np.stack([t % width, t // width], axis=-1))
    for dtype in float_dtypes(backend):
        x = backend.asarray(x64, dtype=dtype)
        cos, sin = axial_rope_tables(dim, coords, dtype=dtype)
        check_like(cos, backend, dtype, (width * height, dim // 2))
        out = arrayrope.apply_rotary(x, cos, sin, layout="interleaved")
        expected = notes_apply(to_numpy(x).astype(np.float64), notes_freqs_cis_2d(dim, width, height))
        xp_assert_close(out, expected, backend, dtype, **tol(dtype))


def test_axial_half_layout_is_the_pair_block_rotation(xp, backend):
    """Half-split: pair i = (i, i + d/2); the first d/4 pairs turn with x, the rest with y."""
    width, height, dim = 4, 3, 16
    x64 = np.random.default_rng(1).standard_normal((height * width, dim))
    t = np.arange(width * height)
    theta = notes_theta(dim)
    coords = backend.asarray(np.stack([t % width, t // width], axis=-1))
    for dtype in float_dtypes(backend):
        x = backend.asarray(x64, dtype=dtype)
        cos, sin = axial_rope_tables(dim, coords, dtype=dtype)
        out = arrayrope.apply_rotary(x, cos, sin, layout="half")
        xin = to_numpy(x).astype(np.float64)
        expected = np.stack(
            [
                rotation_matrix(np.concatenate([(s % width) * theta, (s // width) * theta]), "half", dim) @ xin[s]
                for s in t
            ]
        )
        xp_assert_close(out, expected, backend, dtype, **tol(dtype))


def test_grid_shape_is_row_major_row_then_column(xp, backend):
    h, w, dim = 3, 4, 16
    cos, sin = axial_rope_tables(dim, (h, w), xp=backend.xp, device=backend.device)
    t = np.arange(h * w)
    theta = notes_theta(dim)
    angles = np.concatenate([np.outer(t // w, theta), np.outer(t % w, theta)], axis=-1)
    xp_assert_close(cos, np.cos(angles), backend, "float32")
    xp_assert_close(sin, np.sin(angles), backend, "float32")


def test_relative_property_per_axis(xp, backend):
    """<R(p) q, R(p') k> depends only on p - p', axis by axis (fractional shifts too)."""
    dim = 16
    rng = np.random.default_rng(2)
    q64, k64 = rng.standard_normal((2, dim))
    p = np.array([[0.0, 0.0], [3.0, 7.0], [2.5, 1.0], [9.0, 4.0]])
    shift = np.array([11.0, -3.25])
    dtype = "float64" if "float64" in backend.dtypes else "float32"
    scores = []
    for coords in (p, p + shift):
        c = backend.asarray(coords, dtype=dtype)
        cos, sin = axial_rope_tables(dim, c, axis_dims=(6, 10), dtype=dtype)
        q = to_numpy(arrayrope.apply_rotary(backend.asarray(np.tile(q64, (4, 1)), dtype=dtype), cos, sin))
        k = to_numpy(arrayrope.apply_rotary(backend.asarray(np.tile(k64, (4, 1)), dtype=dtype), cos, sin))
        scores.append(q.astype(np.float64) @ k.astype(np.float64).T)
    np.testing.assert_allclose(scores[0], scores[1], rtol=0, atol=1e-5 if dtype == "float32" else 1e-12)
    # and it does depend on the relative position along each axis
    assert abs(scores[0][0, 1] - scores[0][0, 2]) > 1e-3


def test_one_axis_reduces_to_1d(xp, backend):
    dim, base = 32, 10000.0
    pos = np.array([0, 1, 5, 77, 4096])
    x64 = np.random.default_rng(3).standard_normal((len(pos), dim))
    for layout in ("half", "interleaved"):
        cos, sin = axial_rope_tables(dim, backend.asarray(pos[:, None]), base=base)
        out = arrayrope.apply_rotary(backend.asarray(x64, dtype="float32"), cos, sin, layout=layout)
        expected = rope_by_matrix(x64.astype(np.float32), pos, inv_freq_formula(dim, base), layout)
        xp_assert_close(out, expected, backend, "float32", rtol=2e-6, atol=2e-5)
    cos, _ = axial_rope_tables(dim, (6,), base=base, xp=backend.xp, device=backend.device)
    xp_assert_close(cos, np.cos(np.outer(np.arange(6), inv_freq_formula(dim, base))), backend, "float32")


def test_video_grid_axis_dims_train_grid_and_class_token(xp, backend):
    grid, dims, train, base = (2, 3, 4), (4, 6, 6), (4, 6, 6), 100.0
    cos, sin = axial_rope_tables(
        16, grid, axis_dims=dims, train_grid=train, num_prefix_tokens=2, base=base, xp=backend.xp, device=backend.device
    )
    coords = np.stack(np.unravel_index(np.arange(24), grid), axis=-1) * (np.array(train) / np.array(grid))
    angles = np.concatenate(
        [np.outer(coords[:, j], base ** (-np.arange(0, d, 2) / d)) for j, d in enumerate(dims)], axis=-1
    )
    angles = np.concatenate([np.zeros((2, 8)), angles])
    xp_assert_close(cos, np.cos(angles), backend, "float32")
    xp_assert_close(sin, np.sin(angles), backend, "float32")


def test_coordinates_with_batch_axes_and_prefix(xp, backend):
    coords = np.random.default_rng(4).uniform(-5, 20, size=(2, 3, 2))
    cos, sin = axial_rope_tables(8, backend.asarray(coords, dtype="float32"), num_prefix_tokens=1)
    c32 = coords.astype(np.float32).astype(np.float64)
    theta = notes_theta(8)
    angles = np.concatenate([c32[..., :1] * theta, c32[..., 1:] * theta], axis=-1)
    angles = np.concatenate([np.zeros((2, 1, 4)), angles], axis=1)
    xp_assert_close(cos, np.cos(angles), backend, "float32", atol=1e-6)
    xp_assert_close(sin, np.sin(angles), backend, "float32", atol=1e-6)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    grid=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    pairs=st.lists(st.integers(1, 3), min_size=3, max_size=3),
    layout=st.sampled_from(["half", "interleaved"]),
    dtype=st.sampled_from(["float32", "float64"]),
    extra=st.sampled_from([0, 2]),
)
def test_property_matches_rotation_matrices(grid, pairs, layout, dtype, extra):
    """Any grid, any split, either layout, partial rotary: one explicit block rotation per token."""
    dims = [2 * p for p in pairs[: len(grid)]]
    rotary = sum(dims)
    head_dim = rotary + extra
    cos, sin = arrayrope.axial_rope_tables(head_dim, tuple(grid), axis_dims=dims, rotary_dim=rotary, dtype=dtype)
    n = int(np.prod(grid))
    assert cos.shape == (n, rotary // 2) and cos.dtype == np.dtype(dtype)
    x = np.random.default_rng(n).standard_normal((n, head_dim)).astype(dtype)
    out = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    coords = np.stack(np.unravel_index(np.arange(n), grid), axis=-1)
    for t in range(n):
        angles = np.concatenate([coords[t, j] * 100.0 ** (-np.arange(0, d, 2) / d) for j, d in enumerate(dims)])
        expected = rotation_matrix(angles, layout, head_dim) @ x[t].astype(np.float64)
        np.testing.assert_allclose(out[t], expected, **tol(dtype))


def test_lazy_backends_neither_compute_nor_break_under_jit(xp, backend):
    """Dask builds the tables without computing anything, JAX traces them; every backend gives the formula."""
    coords = backend.asarray(np.array([[0.5, 1.0], [2.0, 3.0]]), dtype="float32")
    cos, sin = axial_rope_tables(8, coords)
    theta = notes_theta(8)
    angles = np.concatenate([np.outer([0.5, 2.0], theta), np.outer([1.0, 3.0], theta)], axis=-1)
    xp_assert_close(cos, np.cos(angles), backend, "float32", rtol=1e-7, atol=1e-6)
    xp_assert_close(sin, np.sin(angles), backend, "float32", rtol=1e-7, atol=1e-6)


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(positions=(4, 4), head_dim=16, axis_dims=(8, 4)), ValueError, "axis_dims.*sum to 12"),
        (dict(positions=(4, 4), head_dim=16, axis_dims=(7, 9)), ValueError, "axis_dims must be even"),
        (dict(positions=(4, 4), head_dim=16, axis_dims=(8, 4, 4)), ValueError, "axis_dims.*3 axes.*grid has 2"),
        (dict(positions=(2, 2, 2), head_dim=16), ValueError, "rotary_dim=16.*3 axes.*axis_dims"),
        (dict(positions=(4, 0), head_dim=16), ValueError, r"grid shape must have sizes >= 1, got \(4, 0\)"),
        (dict(positions=(4, -2), head_dim=16), ValueError, "sizes >= 1"),
        (dict(positions=np.zeros((5, 3)), head_dim=16, axis_dims=(8, 8)), ValueError, "trailing size of 3"),
        (dict(positions=(4, 4), head_dim=15), ValueError, "head_dim must be even"),
        (dict(positions=np.zeros(3), head_dim=8, num_prefix_tokens=1), ValueError, "num_prefix_tokens needs"),
        (dict(positions=np.zeros((3, 2)), head_dim=8, train_grid=(2, 2)), ValueError, "train_grid"),
        (dict(positions=(3, 3), head_dim=8, train_grid=(2,)), ValueError, "train_grid"),
        (dict(positions=np.array([[np.nan, 1.0]]), head_dim=8), ValueError, "finite"),
        (dict(positions=2.5, head_dim=8), TypeError, "positions must be"),
        (dict(positions=np.zeros((4, 0)), head_dim=8), ValueError, r"n_axes >= 1, got shape \(4, 0\)"),
        (dict(positions=(), head_dim=8), ValueError, "n_axes >= 1"),
    ],
)
def test_axial_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        arrayrope.axial_rope_tables(**kwargs)


# Vision transformers' grids: coordinates in [-1, 1], column first, offsets, explicit bands, tokens after the grid.


def _grid_oracle(shape, kind, indexing="ij", train=None, offset=0.0):
    """Coordinates (N, 2) written out per token: row-major order, then the channel order."""
    out = []
    for i in range(shape[0]):
        for j in range(shape[1]):
            c = []
            for k, s in zip((i, j), shape, strict=True):
                if kind == "pixel":
                    v = -1.0 + 2.0 * k / (s - 1) if s > 1 else -1.0
                elif kind == "centered":
                    v = (k + 0.5 + offset) / s
                else:
                    v = k + offset
                c.append(v)
            if train is not None:
                c = [v * t / s for v, t, s in zip(c, train, shape, strict=True)]
            if kind == "centered":
                c = [2 * v - 1 for v in c]
            out.append(c[::-1] if indexing == "xy" else c)
    return np.array(out)


@pytest.mark.parametrize("kind", ["index", "pixel", "centered"])
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_vision_grids(backend, kind, indexing):
    shape, d, train = (3, 5), 16, (6, 4)
    bands = arrayrope.pixel_frequencies(4, 32.0, spacing="log")
    coords = _grid_oracle(shape, kind, indexing, train, offset=0.25 if kind != "pixel" else 0.0)
    cos, sin = arrayrope.axial_rope_tables(
        d,
        shape,
        grid=kind,
        indexing=indexing,
        train_grid=train,
        grid_offset=0.25 if kind != "pixel" else 0.0,
        frequencies=bands,
        num_prefix_tokens=1,
        num_suffix_tokens=2,
        xp=backend.xp,
        device=backend.device,
        dtype="float32",
    )
    angles = np.concatenate([coords[:, :1] * bands, coords[:, 1:] * bands], -1)
    angles = np.concatenate([np.zeros((1, 8)), angles, np.zeros((2, 8))])
    # without float64 the fractional coordinates themselves are float32: their rounding times the angle
    atol = 2e-7 if "float64" in backend.dtypes else 2e-7 + 2 * np.finfo(np.float32).eps * np.abs(angles).max()
    xp_assert_close(cos, np.cos(angles), backend, "float32", atol=atol, rtol=0)
    xp_assert_close(sin, np.sin(angles), backend, "float32", atol=atol, rtol=0)


def test_pixel_frequencies_and_suffix_tokens_of_coordinate_arrays():
    np.testing.assert_allclose(
        arrayrope.pixel_frequencies(5, 10.0), np.pi * np.array([1.0, 2.0, 3.0, 4.0, 5.0]), rtol=1e-15
    )
    np.testing.assert_allclose(
        arrayrope.pixel_frequencies(3, 224.0, spacing="log"), np.pi * np.array([1.0, np.sqrt(112.0), 112.0]), rtol=1e-15
    )
    coords = np.array([[[1.0, 2.0], [3.0, 4.0]]])
    cos, sin = arrayrope.axial_rope_tables(4, coords, num_suffix_tokens=1, num_prefix_tokens=1, dtype="float64")
    assert cos.shape == (1, 4, 2)
    np.testing.assert_array_equal(cos[0, [0, 3]], 1.0)
    np.testing.assert_array_equal(sin[0, [0, 3]], 0.0)
    np.testing.assert_allclose(sin[0, 1], np.sin([1.0, 2.0]), rtol=1e-15)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(positions=(3, 3), head_dim=8, grid="linspace"), ValueError, "grid must be one of"),
        (dict(positions=(3, 3), head_dim=8, indexing="yx"), ValueError, "indexing must be one of"),
        (dict(positions=np.zeros((3, 2)), head_dim=8, grid="pixel"), ValueError, "grid applies to a grid shape"),
        (dict(positions=np.zeros((3, 2)), head_dim=8, grid_offset=1.0), ValueError, "grid_offset applies"),
        (dict(positions=(3, 3), head_dim=8, frequencies=[]), ValueError, "non-empty 1-D"),
        (dict(positions=(3, 3), head_dim=8, frequencies=["a"]), TypeError, "sequence of numbers"),
        (
            dict(positions=(3, 3), head_dim=12, frequencies=[1.0, 2.0], axis_dims=(8, 4)),
            ValueError,
            r"axis_dims\[0\]=8 must be 2 \* len\(frequencies\) = 4",
        ),
        (dict(positions=np.zeros(3), head_dim=8, num_suffix_tokens=1), ValueError, "num_suffix_tokens needs"),
    ],
)
def test_vision_grid_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        arrayrope.axial_rope_tables(**kwargs)
    with pytest.raises(ValueError, match="spacing must be one of"):
        arrayrope.pixel_frequencies(4, 10.0, spacing="geometric")
