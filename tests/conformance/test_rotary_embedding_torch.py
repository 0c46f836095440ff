"""rotary-embedding-torch (lucidrains): language RoPE with its scalings and xPos, pixel and language axial grids.

The library pairs features (2i, 2i + 1) (interleaved) and rotates the leading ``dim``
features of a head. Its language frequencies are a float32 ``pow``; the tests run its module
in float64 (``.double()``: angles, cos and sin in float64 from those float32 frequencies),
float32, float16 and bfloat16. Its pixel bands follow torch's default dtype, so under
float64 they are exact. Tolerances: ``_conformance``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _conformance import EPS, inv_freq_rtol, rotate64, rotation_bound, table_bound

import arrayrope
from arrayrope.testing import identify_rope

torch = pytest.importorskip("torch", reason="torch is not installed")
ret = pytest.importorskip("rotary_embedding_torch", reason="rotary-embedding-torch is not installed")
TORCH = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPES = tuple(TORCH)


def _np(t):
    return t.detach().to(torch.float64).numpy()


def _check(
    record, compared, family, dtype, x, lib, ours, exact, lib_table, layout="interleaved", lib_exact=None, **what
):
    """arrayrope against the float64 oracle; the library against arrayrope within its own error, or, where it
    rounds the positions themselves (``lib_exact``: the oracle at its rounded positions), against that."""
    x = np.asarray(x, dtype=np.float64)
    # the oracle's own float64 angles p * theta round by |angle| 2**-53 (arrayrope's are exact): that much leeway
    ours_bound = rotation_bound(x, exact[1] * EPS["float64"] / 2, dtype, layout)
    ours_err = np.abs(_np(ours) - exact[0])
    assert np.all(ours_err <= ours_bound), float(np.max(ours_err - ours_bound))
    bound = rotation_bound(x, lib_table, dtype, layout) + ours_bound
    diff = np.abs(_np(lib) - _np(ours))
    if lib_exact is None:
        assert np.all(diff <= bound), float(np.max(diff - bound))
    else:
        own = np.abs(_np(lib) - lib_exact)
        assert np.all(own <= bound), float(np.max(own - bound))
    record(
        library="rotary-embedding-torch",
        family=family,
        layout=layout,
        compared=compared,
        dtype=dtype,
        max_error=float(diff.max()),
        library_error=float(np.abs(_np(lib) - exact[0]).max()),
        arrayrope_error=float(ours_err.max()),
        tolerance=float(bound.max()),
        **what,
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "kwargs, rope_type",
    [
        (dict(dim=32, theta=10000), "default"),
        (dict(dim=64, theta=500000), "default"),
        (dict(dim=32, theta=10000, interpolate_factor=4.0), "linear"),
        (dict(dim=32, theta=10000, theta_rescale_factor=2.0), "default"),  # NTK-aware: a larger base
    ],
    ids=["partial-1e4", "full-5e5", "interpolate", "theta-rescale"],
)
def test_language_rope(kwargs, rope_type, dtype, record):
    rope_l = ret.RotaryEmbedding(**kwargs).to(TORCH[dtype] if dtype == "float64" else torch.float32)
    d, r = 64, kwargs["dim"]
    base = kwargs["theta"] * kwargs.get("theta_rescale_factor", 1.0) ** (r / (r - 2))
    scaling = None
    if "interpolate_factor" in kwargs:
        scaling = {"rope_type": "linear", "factor": kwargs["interpolate_factor"]}
    rope = arrayrope.RotaryEmbedding(d, base=base, rotary_dim=r, scaling=scaling, layout="interleaved")
    offset, s = 3000, 40
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 4, s, d))).to(TORCH[dtype])
    lib = rope_l.rotate_queries_or_keys(x, offset=offset)
    ours = rope(x, offset=offset)
    assert lib.dtype == ours.dtype == TORCH[dtype]
    inv_l = rope_l.freqs.detach().double().numpy() / kwargs.get("interpolate_factor", 1.0)
    inv = rope.freqs.inv_freq
    rel_inv = float(np.max(np.abs(inv_l - inv) / inv))
    assert rel_inv <= inv_freq_rtol(base)
    pos = np.arange(offset, offset + s)
    angles = pos[:, None] * inv
    lib_table = table_bound(angles, rel_inv) + (0.0 if dtype in ("float64", "float32") else EPS[dtype])
    if dtype == "float64":  # float64 angles from float32 frequencies
        lib_table = np.abs(angles) * (rel_inv + EPS["float64"]) + 4 * EPS["float64"]
    lib_exact, note = None, ""
    if dtype in ("float16", "bfloat16"):  # the library computes the positions in x's dtype: they are rounded
        factor = kwargs.get("interpolate_factor", 1.0)
        rounded = ((torch.arange(s, dtype=TORCH[dtype]) + offset) / factor).double().numpy() * factor
        lib_exact = rotate64(_np(x), rounded[:, None] * inv, "interleaved")
        note = (
            f"computes positions in x's dtype: {offset}..{offset + s - 1} become "
            f"{len(set(rounded.tolist()))} distinct {dtype} values from {int(rounded.min())} to {int(rounded.max())}"
        )
    family = "RotaryEmbedding(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")"
    _check(
        record,
        f"rotated x, positions {offset}..{offset + s - 1}",
        family,
        dtype,
        x.to(torch.float64),
        lib,
        ours,
        (rotate64(_np(x), angles, "interleaved"), np.abs(angles)),
        lib_table,
        rope_type=rope_type,
        lib_exact=lib_exact,
        note=note,
    )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_xpos(dtype, record):
    d, s = 32, 24
    rope_l = ret.RotaryEmbedding(dim=d, use_xpos=True, xpos_scale_base=64).to(TORCH[dtype])
    g = np.random.default_rng(1)
    q = torch.from_numpy(g.standard_normal((1, 2, s, d))).to(TORCH[dtype])
    k = torch.from_numpy(g.standard_normal((1, 2, s, d))).to(TORCH[dtype])
    q_l, k_l = rope_l.rotate_queries_and_keys(q, k)
    f = arrayrope.rope_frequencies(d)
    qc, qs, kc, ks = arrayrope.xpos_tables(
        f, torch.arange(s), scale_base=64.0, center=float(s // 2), dtype=TORCH[dtype]
    )
    q_a = arrayrope.apply_rotary(q, qc, qs, layout="interleaved")
    k_a = arrayrope.apply_rotary(k, kc, ks, layout="interleaved")
    zeta = (np.arange(0, d, 2) / d + 0.4) / 1.4
    power = (np.arange(s) - s // 2)[:, None] / 64.0
    angles = np.arange(s)[:, None] * f.inv_freq
    rel = 4 * EPS["float32"] * (2 + math.log(10000))
    for x, lib, ours, sign in ((q, q_l, q_a, 1), (k, k_l, k_a, -1)):
        exact = rotate64(_np(x), angles, "interleaved", att=1.0) * np.repeat(zeta ** (sign * power), 2, -1)
        scale = np.repeat(zeta ** (sign * power), 2, -1)
        table = table_bound(angles, rel) * zeta ** (sign * power) + 8 * EPS["float32"] * zeta ** (sign * power)
        _check(
            record,
            "xPos q and k",
            "RotaryEmbedding(use_xpos=True)",
            dtype,
            _np(x) * scale,
            lib,
            ours,
            (exact, np.abs(angles)),
            table,
            rope_type="xpos",
        )


@pytest.mark.parametrize("freqs_for", ["pixel", "lang"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_axial_grid(freqs_for, dtype, record):
    """get_axial_freqs(H, W): each axis a block of ``dim`` features, pixel coordinates in [-1, 1]."""
    dim, h, w = 16, 5, 7
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if dtype == "float64" else torch.float32)
    try:
        rope_l = ret.RotaryEmbedding(dim=dim, freqs_for=freqs_for, max_freq=10, theta=100)
        angles_l = rope_l.get_axial_freqs(h, w)  # (h, w, 2 * dim): angles, interleaved pairs, axis after axis
    finally:
        torch.set_default_dtype(default)
    if freqs_for == "pixel":
        bands = arrayrope.pixel_frequencies(dim // 2, 10.0)
        cos, sin = arrayrope.axial_rope_tables(2 * dim, (h, w), grid="pixel", frequencies=bands, dtype=np.float64)
        coords = np.stack(np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij"), -1).reshape(-1, 2)
        inv = bands
    else:
        cos, sin = arrayrope.axial_rope_tables(2 * dim, (h, w), base=100.0, dtype=np.float64)
        coords = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij"), -1).reshape(-1, 2)  # type: ignore[assignment]
        inv = arrayrope.rope_frequencies(dim, base=100.0).inv_freq
    angles = np.concatenate([coords[:, :1] * inv, coords[:, 1:] * inv], -1)  # (h*w, dim): axis 0, then axis 1
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((2, h, w, 2 * dim + 4))).to(TORCH[dtype])
    lib = ret.apply_rotary_emb(angles_l.to(TORCH[dtype] if dtype == "float64" else torch.float32), x)
    ours = arrayrope.apply_rotary(
        x.reshape(2, h * w, -1),
        torch.from_numpy(cos).to(torch.float32 if dtype != "float64" else torch.float64),
        torch.from_numpy(sin).to(torch.float32 if dtype != "float64" else torch.float64),
        layout="interleaved",
    ).reshape(x.shape)
    assert ours.dtype == lib.dtype == TORCH[dtype]
    tol = 8 * (EPS["float32"] if dtype != "float64" or freqs_for == "lang" else EPS["float64"])
    np.testing.assert_allclose(
        _np(angles_l).reshape(h * w, -1)[:, ::2], angles, rtol=tol, atol=tol * np.abs(angles).max()
    )
    eps_t = EPS["float64"] if dtype == "float64" and freqs_for == "pixel" else EPS["float32"]
    lib_table = 4 * eps_t * (1 + np.abs(angles)) + (EPS[dtype] if dtype == "bfloat16" else 0.0)
    xf = _np(x).reshape(2, h * w, -1)
    _check(
        record,
        f"axial grid {h}x{w} ({freqs_for} bands), rotated x",
        f"get_axial_freqs, freqs_for={freqs_for!r}",
        dtype,
        xf,
        lib.reshape(2, h * w, -1),
        ours.reshape(2, h * w, -1),
        (rotate64(xf, angles, "interleaved"), np.abs(angles)),
        lib_table,
        rope_type=f"axial-{freqs_for}",
    )


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_identify_rope_names_the_module(dtype, record):
    rope_l = ret.RotaryEmbedding(dim=32, theta=500000)

    def fn(x, positions):  # the module rotates a contiguous run of positions from an offset
        t = torch.from_numpy(x).to(TORCH[dtype])
        return rope_l.rotate_queries_or_keys(t, offset=int(positions[0]))

    note = ""
    if dtype != "float32":  # it computes positions in x's dtype: exact integers end at 2048 (float16), 256 (bfloat16)
        exact_to = 2048 if dtype == "float16" else 256
        far = identify_rope(fn, head_dim=64, dtype="float32", seq_len=8)
        assert not far.matched and "do not grow linearly" in far.reason, far
        note = f"{dtype}: positions past {exact_to} are rounded, identify_rope probed up to {exact_to}"
    found = identify_rope(fn, head_dim=64, dtype="float32", seq_len=8, max_position=1 << 24 if not note else exact_to)
    assert found.matched, found
    assert (found.layout, found.rotary_dim, found.base, found.offset, found.scaling) == (
        "interleaved",
        32,
        500000.0,
        0,
        None,
    )
    record(
        library="rotary-embedding-torch",
        family="RotaryEmbedding(dim=32, theta=500000)",
        rope_type="default",
        layout="interleaved",
        compared="identify_rope on rotate_queries_or_keys",
        dtype=dtype,
        max_error=found.max_error,
        library_error=float("nan"),
        arrayrope_error=float("nan"),
        tolerance=float("nan"),
        note=note,
    )
