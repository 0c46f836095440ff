"""timm's RoPE for vision transformers: EVA-style grids (reference feature shapes, ij/xy indexing, class tokens
first), pixel bands, DINOv3's centred coordinates, in both layouts.

timm's package ``__init__`` imports torchvision, whose wheels need another torch than the one
pinned here, so only ``timm/layers/pos_embed_sincos.py`` (which needs torch and three small
timm modules) is loaded, from the installed package, under stand-in ``timm`` and
``timm.layers`` package modules. timm computes bands, grids and angles in float32 and casts
its tables once. Tolerances: ``_conformance``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import math
import sys
import types

import numpy as np
import pytest
from _conformance import EPS32, rotate64, rotation_bound

import arrayrope
from arrayrope.testing import identify_rope

torch = pytest.importorskip("torch", reason="torch is not installed")
TIMM_TESTED = (1, 0, 31)
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _load_pos_embed_sincos():
    spec = importlib.util.find_spec("timm")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("timm is not installed (pip install --no-deps timm)", allow_module_level=True)
    version = importlib.metadata.version("timm")
    if tuple(int(p) for p in version.split(".")[:3] if p.isdigit()) < TIMM_TESTED:
        # older releases cast outputs to float32 and lack rotate_half=: not the behaviour compared here
        pytest.skip(
            f"timm {version} is older than the {'.'.join(map(str, TIMM_TESTED))} these cases follow",
            allow_module_level=True,
        )
    root = next(iter(spec.submodule_search_locations))
    added = []
    for name, path in (("timm", root), ("timm.layers", f"{root}/layers")):
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__path__ = [path]
            sys.modules[name] = stub
            added.append(name)
    try:
        return importlib.import_module("timm.layers.pos_embed_sincos")
    finally:
        for name in added:  # the stand-ins go; the loaded module keeps what it imported
            del sys.modules[name]
        for name in [n for n in sys.modules if n.startswith("timm.")]:
            if name != "timm.layers.pos_embed_sincos":
                sys.modules.pop(name, None)


pes = _load_pos_embed_sincos()


def _np(t):
    return t.detach().to(torch.float64).numpy()


def _coords(shape, kind, indexing="ij", ref=None):
    """Independent float64 grid coordinates (N, 2), tokens row-major over ``shape``."""
    axes = []
    for j, s in enumerate(shape):
        c = {
            "index": np.arange(s, dtype=np.float64),
            "pixel": np.linspace(-1.0, 1.0, s),
            "centered": (np.arange(s) + 0.5) / s,
        }[kind]
        if ref is not None:
            c = c * ref[j] / s
        axes.append(2 * c - 1 if kind == "centered" else c)
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(shape))
    return grid[:, ::-1] if indexing == "xy" else grid


CASES = {  # name -> (timm module, arrayrope axial_rope_tables keywords, coordinate kind, band frequencies)
    "EVA-02 (index grid, ref 16x16, ij)": (
        lambda d: pes.RotaryEmbeddingCat(d, in_pixels=False, temperature=10000, ref_feat_shape=[16, 16]),
        dict(base=10000.0, train_grid=(16, 16)),
        "index",
        None,
    ),
    "EVA (index grid, xy)": (
        lambda d: pes.RotaryEmbeddingCat(d, in_pixels=False, temperature=100, grid_indexing="xy"),
        dict(base=100.0, indexing="xy"),
        "index",
        None,
    ),
    "pixel bands (log), [-1, 1] grid": (
        lambda d: pes.RotaryEmbeddingCat(d, in_pixels=True, max_res=224),
        dict(grid="pixel"),
        "pixel",
        ("log", 224.0),
    ),
    "pixel bands (linear), [-1, 1] grid": (
        lambda d: pes.RotaryEmbeddingCat(d, in_pixels=True, max_res=64, linear_bands=True),
        dict(grid="pixel"),
        "pixel",
        ("linear", 64.0),
    ),
    "DINOv3 (centred grid, periods)": (
        lambda d: pes.RotaryEmbeddingDinoV3(d, temperature=100.0, rotate_half=False),
        dict(grid="centered"),
        "centered",
        ("dinov3", 100.0),
    ),
}


def _bands(spec, d):
    if spec is None:
        return None
    kind, value = spec
    if kind == "dinov3":  # angle = 2 pi * coordinate / period, period = temperature ** (2k / (d / 2))
        return 2 * math.pi * arrayrope.rope_frequencies(d // 2, base=value).inv_freq
    return arrayrope.pixel_frequencies(d // 4, value, spacing=kind)


@pytest.mark.parametrize("dtype", list(TORCH))
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("name", list(CASES))
def test_vit_rope_with_class_token(name, layout, dtype, record):
    make, kwargs, kind, band_spec = CASES[name]
    d, shape, npt = 32, (6, 10), 1
    mod = make(d)
    mod.rotate_half = layout == "half"
    emb = mod.get_embed(shape=list(shape))  # (H * W, 2 d): sin, then cos, in the layout
    bands = _bands(band_spec, d)
    extra = {} if bands is None else {"frequencies": bands}
    cos, sin = arrayrope.axial_rope_tables(d, shape, num_prefix_tokens=npt, xp=torch, **kwargs, **extra)
    # the class token first and not rotated, as timm's EVA attention does it
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.standard_normal((2, 3, npt + math.prod(shape), d))).to(TORCH[dtype])
    lib = torch.cat([x[:, :, :npt], pes.apply_rot_embed_cat(x[:, :, npt:], emb, half=layout == "half")], dim=2)
    ours = arrayrope.apply_rotary(x, cos, sin, layout=layout)
    assert ours.dtype == lib.dtype == TORCH[dtype]

    ref = kwargs.get("train_grid")  # type: ignore[attr-defined]
    coords = _coords(shape, kind, kwargs.get("indexing", "ij"), ref)  # type: ignore[attr-defined]
    inv = bands if bands is not None else arrayrope.rope_frequencies(d // 2, base=kwargs["base"]).inv_freq  # type: ignore[index]
    angles = np.concatenate([np.zeros((npt, d // 2)), np.concatenate([coords[:, :1] * inv, coords[:, 1:] * inv], -1)])
    xs = _np(x)
    exact = rotate64(xs, angles, layout)
    ours_err = np.abs(_np(ours) - exact)
    ours_bound = rotation_bound(xs, np.zeros_like(angles), dtype, layout)
    assert np.all(ours_err <= ours_bound), float(np.max(ours_err - ours_bound))
    # timm: float32 bands (a pow or linspace), grid and angle: a few float32 roundings of the angle
    table = EPS32 * (4 + 8 * np.abs(angles))
    bound = rotation_bound(xs, table, dtype, layout) + ours_bound
    diff = np.abs(_np(lib) - _np(ours))
    assert np.all(diff <= bound), float(np.max(diff - bound))
    record(
        library="timm",
        family=name,
        rope_type="axial",
        layout=layout,
        compared=f"{shape[0]}x{shape[1]} grid + class token first, rotated x",
        dtype=dtype,
        max_error=float(diff.max()),
        library_error=float(np.abs(_np(lib) - exact).max()),
        arrayrope_error=float(ours_err.max()),
        tolerance=float(bound.max()),
    )


@pytest.mark.parametrize("dtype", list(TORCH))
def test_identify_rope_on_a_one_axis_grid(dtype, record):
    """timm's RotaryEmbeddingCat over a 1-D grid of positions 0..N-1 is 1-D RoPE on half the features."""
    d = 64
    mod = pes.RotaryEmbeddingCat(d, in_pixels=False, temperature=10000, rotate_half=True)

    def fn(x, positions):  # one axis of dim // 4 bands: the leading dim // 2 features rotate, as in a ViT block
        emb = mod.get_embed(shape=[int(positions[-1]) + 1])[torch.from_numpy(positions)]
        t = torch.from_numpy(x).to(TORCH[dtype])
        return torch.cat([pes.apply_rot_embed_cat(t[..., : d // 2], emb, half=True), t[..., d // 2 :]], -1)

    found = identify_rope(fn, head_dim=d, dtype="float32", seq_len=8, max_position=1 << 14)
    assert found.matched, found
    assert (found.layout, found.rotary_dim, found.base, found.offset) == ("half", d // 2, 10000.0, 0)
    record(
        library="timm",
        family="RotaryEmbeddingCat, 1-D grid",
        rope_type="axial",
        layout="half",
        compared="identify_rope on get_embed + apply_rot_embed_cat (positions up to 16384)",
        dtype=dtype,
        max_error=found.max_error,
        library_error=float("nan"),
        arrayrope_error=float("nan"),
        tolerance=float("nan"),
    )
