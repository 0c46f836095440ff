"""torchtune: its RoPE modules (interleaved Llama, llama3-scaled, Qwen2 and Phi-3 half-split) and its vision RoPE.

torchtune caches float32 cos/sin tables of ``max_seq_len`` positions, computed as
``float32(position) * float32(theta)``, and rotates ``(b, s, n_h, h_d)`` inputs in float32
(interleaved) or in the input dtype (half-split, tables cast first). Tolerances: ``_conformance``.

torchtune's package ``__init__`` imports its datasets, training and quantisation code
(datasets, pandas, pyarrow, torchao: about 400 MB that nothing here uses), so torchtune is
installed without its dependencies and only its four RoPE files, which need torch alone,
are loaded from the installed package, each as a module of its own.
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
from _conformance import EPS, inv_freq_rtol, rotate64, rotation_bound, table_bound

import arrayrope
from arrayrope.testing import identify_rope

torch = pytest.importorskip("torch", reason="torch is not installed")


def _load_rope_files():
    """The RoPE modules' files of the installed torchtune, without running its package ``__init__``."""
    spec = importlib.util.find_spec("torchtune")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchtune is not installed (pip install --no-deps torchtune)", allow_module_level=True)
    root = pathlib.Path(next(iter(spec.submodule_search_locations)))
    found = {}
    for relative in (
        "modules/position_embeddings.py",
        "models/llama3_1/_position_embeddings.py",
        "models/phi3/_position_embeddings.py",
        "models/qwen2/_positional_embeddings.py",
    ):
        name = "_torchtune_" + relative.removesuffix(".py").replace("/", "_")
        file_spec = importlib.util.spec_from_file_location(name, root / relative)
        assert file_spec is not None and file_spec.loader is not None, root / relative
        module = importlib.util.module_from_spec(file_spec)
        file_spec.loader.exec_module(module)
        found.update({k: v for k, v in vars(module).items() if k.endswith(("Embeddings", "RoPE"))})
    return found


_rope = _load_rope_files()
Llama3ScaledRoPE = _rope["Llama3ScaledRoPE"]
Phi3RotaryPositionalEmbeddings = _rope["Phi3RotaryPositionalEmbeddings"]
Qwen2RotaryPositionalEmbeddings = _rope["Qwen2RotaryPositionalEmbeddings"]
RotaryPositionalEmbeddings = _rope["RotaryPositionalEmbeddings"]
VisionRotaryPositionalEmbeddings = _rope["VisionRotaryPositionalEmbeddings"]

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPES = tuple(TORCH)
LLAMA31 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
MODULES = {  # name -> (module, arrayrope RotaryEmbedding keywords)
    "RotaryPositionalEmbeddings": (
        lambda: RotaryPositionalEmbeddings(64, max_seq_len=4096, base=10000),
        dict(head_dim=64, base=10000.0, layout="interleaved"),
    ),
    "Llama3ScaledRoPE": (
        lambda: Llama3ScaledRoPE(128, max_seq_len=4096, base=500000),
        dict(head_dim=128, base=500000.0, scaling=LLAMA31, layout="interleaved"),
    ),
    "Qwen2RotaryPositionalEmbeddings": (
        lambda: Qwen2RotaryPositionalEmbeddings(64, max_seq_len=4096),
        dict(head_dim=64, base=1e6, layout="half"),
    ),
    "Phi3RotaryPositionalEmbeddings": (
        lambda: Phi3RotaryPositionalEmbeddings(96, max_seq_len=4096),
        dict(head_dim=96, base=10000.0, layout="half"),
    ),
}


def _np(t):
    return t.detach().to(torch.float64).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MODULES))
def test_rope_modules(name, dtype, record):
    make, kwargs = MODULES[name]
    mod = make()
    rope = arrayrope.RotaryEmbedding(**kwargs, axes="bshd")
    d = kwargs["head_dim"]
    pos = np.concatenate([np.arange(20), [1000, 2047, 4095]])
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, pos.size, 3, d))).to(TORCH[dtype])
    input_pos = torch.from_numpy(np.stack([pos, pos]))
    lib = mod(x, input_pos=input_pos)
    ours = rope(x, positions=input_pos)
    assert lib.dtype == ours.dtype == TORCH[dtype]
    inv = rope.freqs.inv_freq
    rel_inv = float(np.max(np.abs(mod.theta.double().numpy() - inv) / inv))
    assert rel_inv <= inv_freq_rtol(kwargs["base"])
    angles = pos[:, None] * inv
    xs = _np(x).transpose(0, 2, 1, 3)  # (b, h, s, d) for the oracle
    exact = rotate64(xs, angles, kwargs["layout"])
    ours_err = np.abs(_np(ours).transpose(0, 2, 1, 3) - exact)
    ours_bound = rotation_bound(xs, np.zeros_like(angles), dtype, kwargs["layout"])
    assert np.all(ours_err <= ours_bound), float(np.max(ours_err - ours_bound))
    # half-split modules cast the float32 tables to x's dtype before rotating
    table = table_bound(angles, rel_inv) + (EPS[dtype] if kwargs["layout"] == "half" and dtype != "float32" else 0)
    bound = rotation_bound(xs, table, dtype, kwargs["layout"]) + ours_bound
    diff = np.abs(_np(lib) - _np(ours)).transpose(0, 2, 1, 3)
    assert np.all(diff <= bound), float(np.max(diff - bound))
    record(
        library="torchtune",
        family=name,
        rope_type=kwargs.get("scaling", {}).get("rope_type", "default"),  # type: ignore[attr-defined]
        layout=kwargs["layout"],
        compared="rotated x (b, s, h, d), input_pos up to 4095",
        dtype=dtype,
        max_error=float(diff.max()),
        library_error=float(np.abs(_np(lib).transpose(0, 2, 1, 3) - exact).max()),
        arrayrope_error=float(ours_err.max()),
        tolerance=float(bound.max()),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(MODULES))
def test_identify_rope_names_the_module(name, dtype, record):
    make, kwargs = MODULES[name]
    mod = make()

    def fn(x, positions):  # (1, B, S, D) probes as torchtune's (b, s, n_h, h_d)
        t = torch.from_numpy(x).to(TORCH[dtype]).permute(0, 2, 1, 3)
        return mod(t, input_pos=torch.from_numpy(positions)[None]).permute(0, 2, 1, 3)

    found = identify_rope(fn, head_dim=kwargs["head_dim"], dtype="float32", seq_len=8)
    assert found.matched, found
    assert (found.layout, found.base, found.offset) == (kwargs["layout"], kwargs["base"], 0)
    assert found.scaling == kwargs.get("scaling")
    record(
        library="torchtune",
        family=name,
        rope_type=kwargs.get("scaling", {}).get("rope_type", "default"),  # type: ignore[attr-defined]
        layout=kwargs["layout"],
        compared="identify_rope on the module (its table ends at 4096)",
        dtype=dtype,
        max_error=found.max_error,
        library_error=float("nan"),
        arrayrope_error=float("nan"),
        tolerance=float("nan"),
    )


@pytest.mark.parametrize("append_cls_token", [True, False], ids=["cls-last", "cls-first"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_vision_rope_with_class_token(append_cls_token, dtype, record):
    """Tiles of a 4x4 patch grid, coordinates (column + 1, row + 1), a class token not rotated."""
    head_dim, grid, tiles = 32, 4, 2
    mod = VisionRotaryPositionalEmbeddings(
        patch_size=10, tile_size=40, max_num_tiles=tiles, dim=head_dim // 2, append_cls_token=append_cls_token
    )
    n = grid * grid + 1
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((2, tiles * n, 2, head_dim))).to(TORCH[dtype])
    lib = mod(x)
    cls = {"num_suffix_tokens": 1} if append_cls_token else {"num_prefix_tokens": 1}
    cos, sin = arrayrope.axial_rope_tables(
        head_dim, (grid, grid), base=10000.0, indexing="xy", grid_offset=1.0, xp=torch, **cls
    )
    ours = arrayrope.apply_rotary(
        x.reshape(2, tiles, n, 2, head_dim), cos[:, None, :], sin[:, None, :], layout="interleaved"
    ).reshape(x.shape)
    assert ours.dtype == lib.dtype == TORCH[dtype]
    col, row = np.arange(grid * grid) % grid + 1.0, np.arange(grid * grid) // grid + 1.0
    coords = np.stack([col, row], -1)
    coords = np.concatenate([coords, [[0, 0]]] if append_cls_token else [[[0, 0]], coords])
    inv = arrayrope.rope_frequencies(head_dim // 2).inv_freq
    angles = np.concatenate([coords[:, :1] * inv, coords[:, 1:] * inv], -1)

    def heads_first(t):  # (b, tiles * n, h, d) -> (b, tiles, h, n, d)
        return _np(t).reshape(2, tiles, n, 2, head_dim).transpose(0, 1, 3, 2, 4)

    xs = heads_first(x)
    exact = rotate64(xs, angles, "interleaved")
    ours_err = np.abs(heads_first(ours) - exact)
    ours_bound = rotation_bound(xs, np.zeros_like(angles), dtype, "interleaved")
    assert np.all(ours_err <= ours_bound)
    bound = rotation_bound(xs, table_bound(angles, inv_freq_rtol(10000.0)), dtype, "interleaved") + ours_bound
    diff = np.abs(heads_first(lib) - heads_first(ours))
    assert np.all(diff <= bound), float(np.max(diff - bound))
    where = "last" if append_cls_token else "first"
    record(
        library="torchtune",
        family="VisionRotaryPositionalEmbeddings",
        rope_type="axial",
        layout="interleaved",
        compared=f"2 tiles of a 4x4 grid, class token {where}",
        dtype=dtype,
        max_error=float(diff.max()),
        library_error=float(np.abs(heads_first(lib) - exact).max()),
        arrayrope_error=float(ours_err.max()),
        tolerance=float(bound.max()),
    )
