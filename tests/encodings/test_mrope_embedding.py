"""``RotaryEmbedding`` with multimodal RoPE (``mrope_sections=``): positions ``(axes, B, S)`` against explicit
rotation matrices whose pair angles come from each pair's own axis; text positions (``(S,)``, ``(B, S)``, or
the same on every axis) against plain 1-D ``RotaryEmbedding``; the checks of the arguments and positions; the
refusal while ``torch.onnx.export`` traces. (Against transformers' own M-RoPE families:
``tests/conformance/test_mrope_transformers.py``.)"""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest

import arrayrope as ar
from arrayrope.testing import to_numpy
from helpers import check_like, inv_freq_formula, rotation_matrix

LAYOUTS = ("half", "interleaved")


def _axis_of_pair(sections: tuple[int, ...], interleaved: bool) -> np.ndarray:
    """The axis driving each pair, from the rules as Qwen2-VL (consecutive sections) and Qwen3-VL (axis ``a``
    at pairs ``k = a mod n`` below ``n * sections[a]``, axis 0 elsewhere) state them."""
    n, half = len(sections), sum(sections)
    if not interleaved:
        return np.concatenate([np.full(s, a) for a, s in enumerate(sections)])
    out = np.zeros(half, dtype=int)
    for k in range(half):
        for a in range(1, n):
            if k % n == a and k < n * sections[a]:
                out[k] = a
    return out


def _oracle(x, ids, inv_freq, sections, interleaved, layout):
    """x (B, H, S, D) rotated at ids (axes, B, S) by explicit matrices, float64."""
    axis = _axis_of_pair(sections, interleaved)
    out = np.empty_like(x, dtype=np.float64)
    for b in range(x.shape[0]):
        for s in range(x.shape[2]):
            angles = ids[axis, min(b, ids.shape[1] - 1), s] * inv_freq
            out[b, :, s] = x[b, :, s].astype(np.float64) @ rotation_matrix(angles, layout, x.shape[-1]).T
    return out


def _ids(axes: int, batch: int, seq: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4000, size=(axes, batch, seq))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "sections, interleaved",
    [((2, 3, 3), False), ((3, 3, 2), True), ((2, 2, 2, 2), False), ((3, 2, 2, 1), True), ((5, 3), False)],
)
def test_each_pair_turns_by_its_axis(sections, interleaved, layout):
    """Any number of axes (a 4-axis family's too), both layouts, partial rotary, float64 and float32."""
    rotary = 2 * sum(sections)
    rope = ar.RotaryEmbedding(
        rotary + 4, base=1e4, rotary_dim=rotary, layout=layout, mrope_sections=sections, mrope_interleaved=interleaved
    )
    assert rope.mrope_sections == sections and rope.mrope_interleaved is interleaved
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 3, 6, rotary + 4)), rng.standard_normal((2, 1, 6, rotary + 4))
    ids = _ids(len(sections), 2, 6)
    inv = inv_freq_formula(rotary, 1e4)
    q64, k64 = rope(q, k, positions=ids)
    np.testing.assert_allclose(q64, _oracle(q, ids, inv, sections, interleaved, layout), rtol=0, atol=1e-12)
    np.testing.assert_allclose(k64, _oracle(k, ids, inv, sections, interleaved, layout), rtol=0, atol=1e-12)
    q32 = rope(q.astype(np.float32), positions=ids)
    assert q32.dtype == np.float32
    exact = _oracle(q.astype(np.float32), ids, inv, sections, interleaved, layout)
    np.testing.assert_allclose(q32, exact, rtol=0, atol=8 * 2.0**-23 * np.abs(q).max())
    one = rope(q, positions=ids[:, :1])  # (axes, 1, S): the same positions for every row
    np.testing.assert_allclose(one, _oracle(q, ids[:, :1].repeat(2, 1), inv, sections, interleaved, layout), atol=1e-12)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_text_positions_are_1d_rope(layout, interleaved):
    """(S,), (B, S) and (axes, B, S) equal on every axis rotate as plain RotaryEmbedding does."""
    kw = dict(base=1e6, rotary_dim=24, layout=layout)
    rope = ar.RotaryEmbedding(32, **kw, mrope_sections=(4, 4, 4), mrope_interleaved=interleaved)
    plain = ar.RotaryEmbedding(32, **kw)
    rng = np.random.default_rng(2)
    for dtype in (np.float64, np.float32):
        q, k = rng.standard_normal((2, 4, 7, 32)).astype(dtype), rng.standard_normal((2, 2, 7, 32)).astype(dtype)
        pos = np.array([[0, 1, 2, 3, 4, 5, 6], [9, 10, 11, 12, 500, 501, 70000]])
        expected = plain(q, k, positions=pos)
        for given in (pos, np.stack([pos] * 3)):
            got = rope(q, k, positions=given)
            for a, e in zip(got, expected, strict=True):
                assert a.dtype == dtype
                np.testing.assert_allclose(a, e, rtol=0, atol=4 * np.finfo(dtype).eps * np.abs(q).max())
        for a, e in zip(rope(q, k, positions=pos[1]), plain(q, k, positions=pos[1]), strict=True):
            np.testing.assert_array_equal(a, e)
        for a, e in zip(rope(q, k, offset=3), plain(q, k, offset=3), strict=True):  # a decode step: text
            np.testing.assert_array_equal(a, e)


def test_torch_tensors_and_bshd():
    torch = pytest.importorskip("torch")
    rope = ar.RotaryEmbedding(16, axes="bshd", mrope_sections=(2, 3, 3), mrope_interleaved=True)
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 5, 3, 16))
    ids = _ids(3, 2, 5)
    got = rope(torch.from_numpy(q).float(), positions=torch.from_numpy(ids))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and got.shape == (2, 5, 3, 16)
    oracle = _oracle(q.transpose(0, 2, 1, 3), ids, inv_freq_formula(16, 1e4), (2, 3, 3), True, "half")
    np.testing.assert_allclose(got.numpy(), oracle.transpose(0, 2, 1, 3), rtol=0, atol=1e-5)


def test_from_config_and_copies_keep_the_sections():
    cfg = {"model_type": "qwen2_vl_text", "hidden_size": 256, "num_attention_heads": 2, "rope_theta": 1e6}
    rope = ar.RotaryEmbedding.from_config({**cfg, "rope_parameters": {"mrope_section": [32, 16, 16]}})
    assert (rope.mrope_sections, rope.mrope_interleaved) == ((32, 16, 16), False)
    assert "mrope_sections=(32, 16, 16)" in repr(rope)
    assert ar.RotaryEmbedding.from_config(cfg).mrope_sections == (16, 24, 24)  # the family's default
    for other in (copy.copy(rope), copy.deepcopy(rope), pickle.loads(pickle.dumps(rope))):
        assert other.mrope_sections == (32, 16, 16)
    plain = ar.RotaryEmbedding.from_config({"model_type": "llama", "head_dim": 64, "rope_theta": 1e4})
    assert (plain.mrope_sections, plain.mrope_interleaved) == (None, False)
    assert "mrope" not in repr(plain)


def test_arguments_are_checked_by_name():
    with pytest.raises(ValueError, match=r"mrope_sections=\[8, 8, 8\] sum to 24, but rotary_dim // 2 = 32"):
        ar.RotaryEmbedding(64, mrope_sections=(8, 8, 8))
    with pytest.raises(ValueError, match="mrope_sections must contain positive ints"):
        ar.RotaryEmbedding(64, mrope_sections=(16, 0, 16))
    with pytest.raises(TypeError, match="mrope_sections must be a non-empty sequence of ints"):
        ar.RotaryEmbedding(64, mrope_sections=32)
    with pytest.raises(ValueError, match=r"mrope_interleaved=True needs mrope_sections="):
        ar.RotaryEmbedding(64, mrope_interleaved=True)
    with pytest.raises(TypeError, match="mrope_interleaved"):
        ar.RotaryEmbedding(64, mrope_sections=(16, 8, 8), mrope_interleaved="yes")
    cfg = {"model_type": "qwen2_vl_text", "head_dim": 128, "rope_parameters": {"mrope_section": [16, 16, 16]}}
    with pytest.raises(ValueError, match=r"mrope_section=\[16, 16, 16\] sum to 48, but rotary_dim // 2 = 64"):
        ar.RotaryEmbedding.from_config(cfg)


def test_positions_are_checked_before_anything_changes():
    rope = ar.RotaryEmbedding(16, mrope_sections=(2, 3, 3))
    q = np.ones((2, 4, 5, 16), np.float32)
    out = np.zeros_like(q)
    cases = [
        (np.zeros((4, 2, 5), int), r"positions of shape \(4, 2, 5\) give 4 position axes, but mrope_sections="),
        (np.zeros((2, 2, 5), int), r"give 2 position axes.*pass positions of shape \(3, B, S\)"),
        (np.zeros((3, 3, 5), int), r"must have shape \(3, B, S\) = \(3, 2, 5\) or \(3, 1, 5\).*got \(3, 3, 5\)"),
        (np.zeros((3, 2, 6), int), r"got \(3, 2, 6\)"),
        (np.zeros((3, 2, 5, 1), int), r"positions must have shape \(S,\) or \(B, S\)"),
    ]
    for positions, message in cases:
        with pytest.raises(ValueError, match=message):
            rope(q, positions=positions, q_out=out)
        assert not out.any()
    with pytest.raises(ValueError, match=r"positions \(axes, B, S\) are multimodal RoPE's.*pass mrope_sections="):
        ar.RotaryEmbedding(16)(q, positions=np.zeros((3, 2, 5), int))
    with pytest.raises(ValueError, match="pass positions or offset, not both"):
        rope(q, positions=np.zeros((3, 2, 5), int), offset=2)


class _MRopeAttention:
    """A torch module (built in the tests that import torch) rotating q, k at position ids (3, B, S)."""

    @staticmethod
    def make(torch):
        class Attention(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rope = ar.RotaryEmbedding(16, mrope_sections=(2, 3, 3), mrope_interleaved=True)

            def forward(self, q, k, position_ids):
                return self.rope(q, k, positions=position_ids)

        args = (torch.randn(2, 2, 5, 16), torch.randn(2, 1, 5, 16), torch.randint(0, 3000, (3, 2, 5)))
        return Attention(), args


def test_onnx_export_writes_mrope_positions():
    """torch.onnx.export writes the M-RoPE rotation (tests/export/test_from_torch_mrope.py checks its graphs
    and values): the exported model runs at M-RoPE ids as the module does."""
    import io

    torch = pytest.importorskip("torch")
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    module, args = _MRopeAttention.make(torch)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, f, dynamo=False, opset_version=17, input_names=["q", "k", "ids"])
    model = onnx.load_from_string(f.getvalue())
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"q": args[0].numpy(), "k": args[1].numpy(), "ids": args[2].numpy()})
    for y, e in zip(got, module(*args), strict=True):
        np.testing.assert_allclose(y, e.numpy(), rtol=0, atol=1e-5 * float(args[0].abs().max()))


def test_torch_compile_and_torch_export_compute_mrope():
    """Graph compilers trace the call whole, as eager PyTorch computes it (no ONNX node is written there)."""
    torch = pytest.importorskip("torch")
    module, args = _MRopeAttention.make(torch)
    eager = module(*args)
    program = torch.export.export(module, args)
    compiled = torch.compile(module, fullgraph=True, backend="eager")(*args)
    for got in (program.module()(*args), compiled):
        for a, e in zip(got, eager, strict=True):
            assert a.dtype == torch.float32
            torch.testing.assert_close(a, e, rtol=0, atol=4e-7 * float(args[0].abs().max()))


# ---- HunYuan-VL's full-width sections: a pair's two features turn by different axes ----


def _full_width_oracle(x, ids, inv_freq, sections, features):
    """x (B, H, S, D) float64 times the explicit matrix of ``x * cos + rotate_half(x) * sin`` over its rotary
    features, each feature's angle from the axis its section of the whole rotary width (``2 * sections[a]``
    features for axis ``a``) gives it."""
    r = 2 * sum(sections)
    h, d = r // 2, x.shape[-1]
    lo = 0 if features == "leading" else d - r
    axis = np.repeat(np.arange(len(sections)), 2 * np.asarray(sections))
    out = np.array(x, dtype=np.float64)
    for b in range(x.shape[0]):
        for s in range(x.shape[2]):
            angle = ids[axis, b, s] * np.concatenate([inv_freq, inv_freq])
            m = np.diag(np.cos(angle))
            m[np.arange(h), np.arange(h) + h] = -np.sin(angle[:h])
            m[np.arange(h) + h, np.arange(h)] = np.sin(angle[h:])
            out[b, :, s, lo : lo + r] = x[b, :, s, lo : lo + r].astype(np.float64) @ m.T
    return out


@pytest.mark.parametrize("features", ["leading", "trailing"])
def test_full_width_sections_turn_each_feature_by_its_axis(xp, backend, features):
    """Every backend, q and k (fewer heads), partial rotary (leading or trailing features), float32 against the
    float64 matrix; text positions, the same on every axis, are 1-D RoPE."""
    sections, rotary, d = (2, 1, 3, 2), 16, 20
    rope = ar.RotaryEmbedding(
        d, rotary_dim=rotary, rotary_features=features, mrope_sections=sections, mrope_interleaved="full_width"
    )
    assert (rope.mrope_sections, rope.mrope_interleaved) == (sections, "full_width")
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, 3, 6, d)), rng.standard_normal((2, 1, 6, d))
    ids = _ids(4, 2, 6, seed=6)
    inv = inv_freq_formula(rotary, 1e4)
    qa, ka = rope(
        backend.asarray(q.astype(np.float32)), backend.asarray(k.astype(np.float32)), positions=backend.asarray(ids)
    )
    for got, x in ((qa, q), (ka, k)):
        check_like(got, backend, "float32", x.shape)
        want = _full_width_oracle(x.astype(np.float32), ids, inv, sections, features)
        np.testing.assert_allclose(to_numpy(got), want, rtol=0, atol=8 * 2.0**-23 * np.abs(x).max())
    assert np.abs(to_numpy(qa) - _oracle_text(q, ids, rope)).max() > 0.1  # the axes matter
    text = np.broadcast_to(ids[:1], ids.shape).copy()
    plain = ar.RotaryEmbedding(d, rotary_dim=rotary, rotary_features=features)
    x = backend.asarray(q.astype(np.float32))
    np.testing.assert_array_equal(
        to_numpy(rope(x, positions=backend.asarray(text))), to_numpy(plain(x, positions=backend.asarray(text[0])))
    )


def _oracle_text(q, ids, rope):
    """q rotated as 1-D RoPE by the first axis's positions alone (what ignoring the other axes would give)."""
    plain = ar.RotaryEmbedding(rope.head_dim, rotary_dim=rope.rotary_dim, rotary_features=rope.rotary_features)
    return plain(q.astype(np.float32), positions=ids[0]).astype(np.float64)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_full_width_sections_into_the_callers_arrays(lib):
    """q rotated in place and k into a cache slice: the values of a fresh call."""
    rope = ar.RotaryEmbedding(16, mrope_sections=(1, 3, 2, 2), mrope_interleaved="full_width")
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((1, 2, 3, 16)).astype(np.float32), rng.standard_normal((1, 1, 3, 16)).astype(np.float32)
    ids = _ids(4, 1, 3, seed=8)
    if lib == "torch":
        torch = pytest.importorskip("torch")
        q, k, ids = torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(ids)
        cache = torch.zeros((1, 1, 8, 16))
    else:
        cache = np.zeros((1, 1, 8, 16), dtype=np.float32)
    fresh = [to_numpy(a) for a in rope(q, k, positions=ids)]
    q_rot, _ = rope(q, k, positions=ids, q_out=q, k_out=cache[:, :, 2:5])
    assert q_rot is q
    np.testing.assert_array_equal(to_numpy(q), fresh[0])
    np.testing.assert_array_equal(to_numpy(cache[:, :, 2:5]), fresh[1])


def test_full_width_sections_are_checked_by_name():
    with pytest.raises(ValueError, match=r"mrope_sections=\[16, 16, 16\]: full-width sections .* these sum to 48"):
        ar.RotaryEmbedding(128, mrope_sections=(16, 16, 16), mrope_interleaved="full_width")
    with pytest.raises(ValueError, match=r"'full_width' .* with layout='interleaved' pass consecutive sections"):
        ar.RotaryEmbedding(128, layout="interleaved", mrope_sections=(16,) * 4, mrope_interleaved="full_width")
    cfg = {"model_type": "hunyuan_vl_text", "head_dim": 128, "num_attention_heads": 2, "hidden_size": 256}
    with pytest.raises(ValueError, match=r"needs rope_parameters\['mrope_section'\]"):
        ar.RotaryEmbedding.from_config({**cfg, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}})
    rope = ar.RotaryEmbedding.from_config(
        {**cfg, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [8, 24, 16, 16]}}
    )
    assert (rope.mrope_sections, rope.mrope_interleaved) == ((8, 24, 16, 16), "full_width")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_full_width_sections_in_low_precision_eager_and_compiled(dtype):
    """float16 and bfloat16 q: the float64 rotation of the same values rounded once (within one ulp of the
    result's scale), eagerly and under torch.compile, in q's dtype."""
    torch = pytest.importorskip("torch")
    dt = getattr(torch, dtype)
    rope = ar.RotaryEmbedding(16, mrope_sections=(1, 3, 2, 2), mrope_interleaved="full_width")
    ids = _ids(4, 2, 5, seed=9)
    x = torch.from_numpy(np.random.default_rng(10).standard_normal((2, 3, 5, 16))).to(dt)
    want = _full_width_oracle(x.double().numpy(), ids, inv_freq_formula(16, 1e4), (1, 3, 2, 2), "leading")
    tol = float(torch.finfo(dt).eps) * np.abs(want).max()
    compiled = torch.compile(lambda a, p: rope(a, positions=p), fullgraph=True, backend="aot_eager")
    for got in (rope(x, positions=torch.from_numpy(ids)), compiled(x, torch.from_numpy(ids))):
        assert got.dtype == dt
        assert np.abs(got.double().numpy() - want).max() <= tol
