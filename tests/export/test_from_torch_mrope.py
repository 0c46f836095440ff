"""torch.onnx.export of modules whose RotaryEmbedding rotates at M-RoPE positions ``(axes, B, S)``, run on ONNX
Runtime CPU.

Oracles: the core's :func:`arrayrope.mrope_tables` and :func:`arrayrope.apply_rotary` in float64 (not the export
layer, not the bridge), the module's own eager output, and, for modules built from Qwen2-VL and Qwen3-VL configs,
transformers' rotary modules of those families run for real. The graphs are read node by node for their ops and
any float64. Each export has dynamic batch and sequence and runs at a batch and length other than the export's.
"""

from __future__ import annotations

import collections
import importlib
import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")

import arrayrope  # noqa: E402
from arrayrope.export import torch_options  # noqa: E402
from arrayrope.testing import tolerance_at  # noqa: E402
from helpers import double_uses, dynamo_cannot_write  # noqa: E402

HEAD_DIM, HQ, HK, ROWS = 16, 4, 2, 64
#: name -> (sections of the 8 pairs, interleaved): consecutive sections (Qwen2-VL), axes taking turns (Qwen3-VL)
ASSIGNMENTS = {"qwen2vl": ((2, 3, 3), False), "qwen3vl": ((4, 2, 2), True)}
#: (torch_options target, opset of the export, the nodes written)
TARGETS = [
    ("auto", 23, "onnx23"),
    ("auto", 18, "portable"),
    ("onnx23", 23, "onnx23"),
    ("ort", 17, "ort"),
    ("portable", 23, "portable"),
]
KINDS = ("text", "image", "random")


class Attention(torch.nn.Module):
    """q, k and M-RoPE position ids (axes, B, S) -> rotated q, k, as a vision-language model's attention calls it."""

    def __init__(self, rope):
        super().__init__()
        self.rope = rope

    def forward(self, q, k, position_ids):
        return self.rope(q, k, positions=position_ids)


def module(assignment, *, bounded=True, **rope):
    sections, interleaved = ASSIGNMENTS[assignment]
    rope.setdefault("mrope_sections", sections)
    rope.setdefault("mrope_interleaved", interleaved)
    rows = ROWS if bounded else None
    return Attention(arrayrope.RotaryEmbedding(HEAD_DIM, max_position_embeddings=rows, **rope))


def shapes(axes, batch, seq, head_dim=HEAD_DIM):
    if axes == "bhsd":
        return (batch, HQ, seq, head_dim), (batch, HK, seq, head_dim)
    return (batch, seq, HQ, head_dim), (batch, seq, HK, head_dim)


def image_ids(n_axes, batch, seq, *, rng):
    """Qwen-VL's ``get_rope_index`` layout: two text tokens (every axis equal), an image of 2 x 3 patches (temporal
    axis fixed, height and width by row and column), text after it from the largest id + 1; rows start apart."""
    rows = []
    for b in range(batch):
        start = int(rng.integers(0, 8)) + 3 * b
        ids = [np.full(n_axes, start + i) for i in range(2)]
        base = start + 2
        ids += [np.array([base, base + r, base + c, base + r + c][:n_axes]) for r in range(2) for c in range(3)]
        top = int(np.max(ids)) + 1
        ids += [np.full(n_axes, top + i) for i in range(seq - len(ids))]
        rows.append(np.stack(ids[:seq], axis=1))
    return np.stack(rows, axis=1).astype(np.int64)


def ids_of(kind, n_axes, batch, seq, *, rng, high=ROWS):
    if kind == "text":  # the same position on every axis: 1-D RoPE
        start = rng.integers(0, high - seq, (batch, 1))
        return np.broadcast_to(start + np.arange(seq), (n_axes, batch, seq)).copy()
    if kind == "image":
        return image_ids(n_axes, batch, seq, rng=rng)
    return rng.integers(0, high, (n_axes, batch, seq))


def export(mod, *, dynamo, opset, axes="bhsd", head_dim=HEAD_DIM, dtype=torch.float32):
    """The ONNX model of ``mod`` with dynamic batch and sequence, exported at image-like ids (3, 2, 5)."""
    if dynamo and dynamo_cannot_write(opset):
        pytest.skip(dynamo_cannot_write(opset))
    n_axes = len(mod.rope.mrope_sections)
    sq, sk = shapes(axes, 2, 5, head_dim)
    ids = torch.from_numpy(image_ids(n_axes, 2, 5, rng=np.random.default_rng(0)))
    args = (torch.randn(sq, dtype=dtype), torch.randn(sk, dtype=dtype), ids)
    seq = 2 if axes == "bhsd" else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not dynamo:
            f = io.BytesIO()
            qk = {0: "B", seq: "S"}
            dynamic = {"q": qk, "k": qk, "position_ids": {1: "B", 2: "S"}}
            torch.onnx.export(
                mod, args, f, dynamo=False, opset_version=opset, input_names=list(dynamic), dynamic_axes=dynamic
            )
            return onnx.load_from_string(f.getvalue())
        b, s = torch.export.Dim("B"), torch.export.Dim("S")
        dims = {"q": {0: b, seq: s}, "k": {0: b, seq: s}, "position_ids": {1: b, 2: s}}
        program = torch.onnx.export(mod, args, dynamo=True, opset_version=opset, dynamic_shapes=dims, verbose=False)
    return program.model_proto


def run(model, q, k, ids):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, (q, k, ids), strict=True)))


def oracle(rope, x, ids):
    """The core's M-RoPE tables and rotation in float64; HunYuan-VL's full-width sections written out (the angle of
    each feature, by the axis its section of the rotary width gives it, in ``x * cos + rotate_half(x) * sin``)."""
    if rope.mrope_interleaved == "full_width":
        inv, d = np.asarray(rope.freqs.inv_freq), rope.freqs.rotary_dim
        axis = np.repeat(np.arange(len(rope.mrope_sections)), 2 * np.asarray(rope.mrope_sections))
        angles = np.moveaxis(ids[axis], 0, -1) * np.concatenate([inv, inv])  # (B, S, d)
        angles = np.expand_dims(angles, 1 if rope.axes == "bhsd" else 2)
        x = np.asarray(x, np.float64)
        half = np.concatenate([-x[..., d // 2 : d], x[..., : d // 2]], axis=-1)
        return np.concatenate([x[..., :d] * np.cos(angles) + half * np.sin(angles), x[..., d:]], axis=-1)
    cos, sin = arrayrope.mrope_tables(
        rope.freqs, ids, sections=rope.mrope_sections, interleaved=rope.mrope_interleaved, dtype=np.float64
    )
    cos, sin = np.asarray(cos), np.asarray(sin)
    head = 1 if rope.axes == "bhsd" else 2
    cos, sin = np.expand_dims(cos, head), np.expand_dims(sin, head)
    return np.asarray(arrayrope.apply_rotary(np.asarray(x, np.float64), cos, sin, layout=rope.layout))


def check_runs(model, mod, *, axes="bhsd", head_dim=HEAD_DIM, high=ROWS, seed=0, dtype="float32"):
    """ONNX Runtime at batch 3 and length 9 (the export's: 2 and 5) at text, image-like and random ids, against
    the float64 oracle (within 4 ulps of ``dtype`` at the scale of the result) and the eager module (within
    twice)."""
    rng = np.random.default_rng(seed)
    n_axes = len(mod.rope.mrope_sections)
    errors = []
    for kind in KINDS:
        ids = ids_of(kind, n_axes, 3, 9, rng=rng, high=high)
        q, k = (rng.standard_normal(s).astype(dtype) for s in shapes(axes, 3, 9, head_dim))
        got = run(model, q, k, ids)
        eager = mod(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(ids))
        for x, y, e in zip((q, k), got, eager, strict=True):
            assert y.dtype == x.dtype and e.dtype == torch.from_numpy(x).dtype
            expected = oracle(mod.rope, x, ids)
            tol = tolerance_at(dtype, float(np.max(np.abs(expected))))
            err = float(np.max(np.abs(y.astype(np.float64) - expected)))
            assert err <= tol, (kind, err, tol)
            assert float(np.max(np.abs(y.astype(np.float64) - e.double().numpy()))) <= 2 * tol, kind
            errors.append(err)
    return max(errors)


def tensors(model):
    """The model's initializers and Constant nodes' values (where the TorchScript exporter keeps its tables)."""
    found = list(model.graph.initializer)
    for node in model.graph.node:
        found += [a.t for a in node.attribute if node.op_type == "Constant" and a.name == "value"]
    return found


def ops(model):
    return collections.Counter(n.op_type for n in model.graph.node)


def check_nodes(model, written):
    """One fused node per rotated tensor (q and k) for the fused targets, none for the portable graph; never Cos,
    Sin or a float64."""
    found = ops(model)
    assert not {"Cos", "Sin"} & set(found) and double_uses(model) == [], found
    fused = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    if written == "portable":
        assert fused == [], found
    else:
        assert len(fused) == 2, found
        assert {n.domain for n in fused} == {"" if written == "onnx23" else "com.microsoft"}
    return found


#: every target with both exporters on the interleaved assignment; the consecutive one on a target of each kind
#: of graph (fused standard, portable, contrib), which share the selection of pairs with the interleaved ones
COVER = [(*t, "qwen3vl", dynamo) for t in TARGETS for dynamo in (True, False)] + [
    (*TARGETS[0], "qwen2vl", True),
    (*TARGETS[1], "qwen2vl", True),
    (*TARGETS[3], "qwen2vl", False),
]


@pytest.mark.parametrize("target,opset,written,assignment,dynamo", COVER)
def test_every_target_and_exporter_writes_the_mrope_rotation(target, opset, written, assignment, dynamo):
    """Consecutive and interleaved sections, each target, both exporters, caches of max_position_embeddings rows
    (one row more, of NaN, for ids outside them)."""
    mod = module(assignment)
    with torch_options(target=target):
        model = export(mod, dynamo=dynamo, opset=opset)
    check_nodes(model, written)
    caches = [t for t in tensors(model) if t.dims[:1] == [ROWS + 1]]
    assert caches and {t.data_type for t in caches} == {onnx.TensorProto.FLOAT}
    check_runs(model, mod, seed=opset)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("target,opset,written", [TARGETS[0], TARGETS[1], TARGETS[3]])
def test_without_a_bound_cos_sin_are_computed_from_the_ids(target, opset, written, dynamo):
    """No max_position_embeddings: nothing is stored in rows, cos/sin come from each axis's ids with the exact
    float32 method, right far beyond any cache (random ids up to 2**20 on every axis)."""
    mod = module("qwen3vl", bounded=False)
    with torch_options(target=target):
        model = export(mod, dynamo=dynamo, opset=opset)
    check_nodes(model, written)
    assert not [t for t in tensors(model) if t.dims and t.dims[0] in (ROWS + 1, 4097)]
    assert check_runs(model, mod, high=1 << 20) > 0


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("opset,written", [(23, "onnx23"), (18, "portable")])
def test_heads_after_the_sequence_interleaved_pairs_and_partial_rotary(opset, written, dynamo):
    """axes="bshd" (rotated through the (B, S, N * D) view), pairs (2i, 2i + 1), 8 of 16 features rotating."""
    mod = module("qwen3vl", axes="bshd", layout="interleaved", rotary_dim=8, mrope_sections=(2, 1, 1))
    model = export(mod, dynamo=dynamo, opset=opset, axes="bshd")
    check_nodes(model, written)
    check_runs(model, mod, axes="bshd")


@pytest.mark.parametrize("target,opset,written", [TARGETS[0], TARGETS[1], TARGETS[3]])
def test_float16_modules_keep_their_dtype(target, opset, written):
    """A float16 module: the fused nodes read float16 caches; the portable graph computes in float32 and rounds
    once; no float64 anywhere."""
    mod = module("qwen3vl").half()
    with torch_options(target=target):
        model = export(mod, dynamo=True, opset=opset, dtype=torch.float16)
    check_nodes(model, written)
    caches = {t.data_type for t in tensors(model) if t.dims[:1] == [ROWS + 1]}
    float16, float32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    assert caches == ({float32} if written == "portable" else {float16})
    check_runs(model, mod, dtype="float16")


def test_torch_options_max_positions_bounds_the_caches():
    mod = module("qwen2vl", bounded=False)
    with torch_options(max_positions=300):
        model = export(mod, dynamo=True, opset=23)
    assert [t for t in tensors(model) if t.dims[:1] == [301]]
    check_runs(model, mod, high=300)


def test_exported_program_runs_the_op_as_rotary_embedding_computes():
    """ExportedProgram.module() runs the recorded op eagerly: the module's values, float64 ones in float64."""
    for dtype, tol in ((torch.float32, 1e-6), (torch.float64, 1e-13)):
        mod = module("qwen3vl").to(dtype)
        q, k = (torch.randn(s, dtype=dtype) for s in shapes("bhsd", 2, 5))
        ids = torch.from_numpy(image_ids(3, 2, 5, rng=np.random.default_rng(7)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(mod, (q, k, ids), dynamo=True, opset_version=23, verbose=False)
        targets = [str(n.target) for n in program.exported_program.graph.nodes if n.op == "call_function"]
        assert targets.count("arrayrope.rotary_embedding.default") == 2, targets
        other = torch.from_numpy(ids_of("random", 3, 2, 5, rng=np.random.default_rng(8)))
        for positions in (ids, other):
            got = program.exported_program.module()(q, k, positions)
            for x, y, e in zip((q, k), got, mod(q, k, positions), strict=True):
                assert y.dtype == dtype
                assert float((y - e).abs().max()) <= tol
                assert float(np.max(np.abs(y.numpy() - oracle(mod.rope, x.numpy(), positions.numpy())))) <= 4 * tol


def test_the_op_recorded_without_mrope_keeps_its_meaning():
    """Calls of the op as it was before its mrope argument (position ids (B, S)), eagerly and through the
    dynamo exporter."""

    class Old(torch.nn.Module):
        def forward(self, x, position_ids):
            freqs = '{"inv_freq": [1.0, 0.1, 0.01, 0.001], "attention_factor": 1.0}'
            return torch.ops.arrayrope.rotary_embedding(x, position_ids, freqs, "half", "bhsd", 0, "auto")

    x, pos = torch.randn(2, 3, 5, 8), torch.tensor([[0, 1, 2, 3, 4], [9, 7, 5, 3, 1]])
    inv = np.array([1.0, 0.1, 0.01, 0.001])
    angles = pos.numpy()[:, None, :, None] * inv
    x64 = x.numpy().astype(np.float64)
    half = np.concatenate([-x64[..., 4:], x64[..., :4]], axis=-1)
    expected = x64 * np.tile(np.cos(angles), 2) + half * np.tile(np.sin(angles), 2)  # rotate_half, written out
    assert float(np.max(np.abs(Old()(x, pos).numpy() - expected))) <= 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.onnx.export(Old(), (x, pos), dynamo=True, opset_version=23, verbose=False).model_proto
    assert ops(model)["RotaryEmbedding"] == 1
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], (x.numpy(), pos.numpy()), strict=True)))
    assert float(np.max(np.abs(y - expected))) <= 1e-6


REFUSED = {  # the instance, the number of position axes passed, what the ValueError says
    "other axes": ("qwen2vl", 2, "give 2 position axes, but mrope_sections=(2, 3, 3) drive 3"),
    "no sections": (None, 3, "multimodal RoPE's, which this instance does not compute (pass mrope_sections="),
}


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("case", list(REFUSED))
def test_positions_that_do_not_fit_the_instance_are_refused(case, dynamo):
    """Checked before the op is recorded, as an eager call checks them, with what to pass."""
    assignment, n_axes, message = REFUSED[case]
    mod = module(assignment) if assignment else Attention(arrayrope.RotaryEmbedding(HEAD_DIM))
    args = (*(torch.randn(s) for s in shapes("bhsd", 2, 5)), torch.zeros(n_axes, 2, 5, dtype=torch.int64))
    chain = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(mod, args, io.BytesIO() if not dynamo else None, dynamo=dynamo, opset_version=23)
        except Exception as exc:
            error: BaseException | None = exc
            while error is not None:  # the exporter may wrap it
                chain.append(error)
                error = error.__cause__ or error.__context__
    assert any(isinstance(e, ValueError) and message in str(e) for e in chain), chain


#: forms the op does not carry: ERNIE 4.5 VL's spatial turns (its interleaved pairs) and HunYuan-VL's full-width
#: sections over four axes (a pair's two features turning by different axes)
TRACED = {
    "spatial": {"mrope_sections": (2, 3, 3), "mrope_interleaved": "spatial", "layout": "interleaved"},
    "full_width": {"mrope_sections": (2, 2, 2, 2), "mrope_interleaved": "full_width"},
}


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("form", list(TRACED))
def test_forms_the_op_does_not_carry_export_their_computation(form, dynamo):
    """The exporter traces the RotaryEmbedding's own computation: standard ops, no Cos, Sin or float64 (the exact
    float32 method), right at ids far beyond any cache."""
    mod = Attention(arrayrope.RotaryEmbedding(HEAD_DIM, **TRACED[form]))
    model = export(mod, dynamo=dynamo, opset=18)
    check_nodes(model, "portable")
    check_runs(model, mod, high=1 << 20)


@pytest.mark.parametrize("form", list(TRACED))
def test_forms_the_op_does_not_carry_refuse_out_while_exporting(form):
    """q_out= and k_out= are refused while torch.onnx.export traces, as for the forms the op carries: an ONNX
    graph's outputs are fresh tensors."""
    rope = arrayrope.RotaryEmbedding(HEAD_DIM, **TRACED[form])

    class Into(torch.nn.Module):
        def forward(self, q, k, position_ids):
            return rope(q, k, positions=position_ids, q_out=q)

    n_axes = len(rope.mrope_sections)
    args = (*(torch.randn(s) for s in shapes("bhsd", 2, 5)), torch.zeros(n_axes, 2, 5, dtype=torch.int64))
    chain = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(Into(), args, dynamo=True, opset_version=18)
        except Exception as exc:
            error: BaseException | None = exc
            while error is not None:
                chain.append(error)
                error = error.__cause__ or error.__context__
    assert any(isinstance(e, ValueError) and "q_out= and k_out= are not exported" in str(e) for e in chain), chain


# --- modules built from the configs of transformers' families -----------------------------------------------------


#: model type -> (config class, rotary module of its text model, head dim, rope parameters besides the defaults)
FAMILIES: dict[str, tuple[str, str, int, dict[str, object]]] = {
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLRotaryEmbedding", 128, {"rope_theta": 1e6}),  # sections: the default
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLTextRotaryEmbedding", 32, {"rope_theta": 5e6, "mrope_section": [8, 4, 4]}),
}


def _family(name):
    """A small config of Qwen2-VL (consecutive sections: the family's default, of heads of 128 features) or
    Qwen3-VL (interleaved, sections stated for heads of 32), transformers' rotary module of its text model, its apply
    function, and the head dim."""
    transformers = pytest.importorskip("transformers")
    config_class, rotary_class, head_dim, params = FAMILIES[name]
    family = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    text = {
        "hidden_size": 4 * head_dim,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": head_dim,
        "max_position_embeddings": ROWS,
        "rope_parameters": {"rope_type": "default", **params},
    }
    config = getattr(transformers, config_class)(text_config=text)
    rotary = getattr(family, rotary_class)(config.text_config)
    return config.to_dict(), rotary, family.apply_rotary_pos_emb, head_dim


@pytest.mark.parametrize("dynamo,opset", [(True, 23), (False, 17)], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("name", ["qwen2_vl", "qwen3_vl"])
def test_from_config_of_qwen_vl_families(name, dynamo, opset):
    """RotaryEmbedding.from_config of a saved Qwen2-VL / Qwen3-VL config: the family's sections (its default for
    Qwen2-VL) and interleaving, exported and run against transformers' own rotary module and apply function
    (float32: its float32 angles, positions below 64, within 2e-5 of the float64 oracle, whose own tolerance holds
    arrayrope's graph)."""
    config, rotary, apply, head_dim = _family(name)
    mod = Attention(arrayrope.RotaryEmbedding.from_config(config))
    sections = (16, 24, 24) if name == "qwen2_vl" else (8, 4, 4)
    assert (mod.rope.mrope_sections, mod.rope.mrope_interleaved) == (sections, name == "qwen3_vl")
    assert mod.rope.max_position_embeddings == ROWS
    model = export(mod, dynamo=dynamo, opset=opset, head_dim=head_dim)
    check_nodes(model, "onnx23" if opset == 23 else "portable")
    check_runs(model, mod, head_dim=head_dim)
    rng = np.random.default_rng(11)
    for kind in KINDS:
        ids = ids_of(kind, 3, 3, 9, rng=rng)
        q, k = (rng.standard_normal(s).astype(np.float32) for s in shapes("bhsd", 3, 9, head_dim))
        got = run(model, q, k, ids)
        with torch.no_grad():
            cos, sin = rotary(torch.from_numpy(q), torch.from_numpy(ids))
            theirs = apply(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
        for y, t in zip(got, theirs, strict=True):
            assert float(np.max(np.abs(y - t.numpy()))) <= 2e-5, kind
