"""torch.onnx.export of modules that use arrayrope.RotaryEmbedding, run on ONNX Runtime CPU.

Oracles: explicit rotation matrices and the published inverse-frequency formula
(tests.helpers), and eager PyTorch; graphs are read node by node for their ops,
their caches and any float64.
"""

from __future__ import annotations

import collections
import io
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")

from onnx import numpy_helper  # noqa: E402

import arrayrope  # noqa: E402
from arrayrope.export import torch_options  # noqa: E402
from arrayrope.export.torch import _after_import, _bridge  # noqa: E402
from helpers import double_uses, dynamo_cannot_write, inv_freq_formula, rope_by_matrix  # noqa: E402

HEAD_DIM, HQ, HK = 16, 4, 2  # grouped-query: 4 query heads, 2 key heads
ROWS = 64


class Attention(torch.nn.Module):
    """q, k -> rotated q, k, as a model's attention block calls arrayrope."""

    def __init__(self, **rope):
        super().__init__()
        self.rope = arrayrope.RotaryEmbedding(HEAD_DIM, max_position_embeddings=ROWS, **rope)

    def forward(self, q, k, position_ids=None):
        if position_ids is None:
            return self.rope(q, k)
        return self.rope(q, k, positions=position_ids)


def shapes(axes, batch, seq):
    if axes == "bhsd":
        return (batch, HQ, seq, HEAD_DIM), (batch, HK, seq, HEAD_DIM)
    return (batch, seq, HQ, HEAD_DIM), (batch, seq, HK, HEAD_DIM)


def export(module, axes="bhsd", with_positions=True, opset=23, dynamo=True):
    """The ONNX model of ``module`` with dynamic batch and sequence (skipped where the exporter cannot write it)."""
    if dynamo and dynamo_cannot_write(opset):
        pytest.skip(dynamo_cannot_write(opset))
    sq, sk = shapes(axes, 2, 5)
    args = (torch.randn(sq), torch.randn(sk))
    seq = 2 if axes == "bhsd" else 1
    if with_positions:
        args += (torch.arange(5).expand(2, 5).contiguous(),)  # type: ignore[assignment]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not dynamo:
            f = io.BytesIO()
            names = ["q", "k", "position_ids"][: len(args)]
            axes_of = {"q": {0: "B", seq: "S"}, "k": {0: "B", seq: "S"}, "position_ids": {0: "B", 1: "S"}}
            torch.onnx.export(
                module,
                args,
                f,
                dynamo=False,
                opset_version=opset,
                input_names=names,
                dynamic_axes={n: axes_of[n] for n in names},
            )
            return onnx.load_from_string(f.getvalue())
        b, s = torch.export.Dim("B"), torch.export.Dim("S")
        dims = {"q": {0: b, seq: s}, "k": {0: b, seq: s}}
        if with_positions:
            dims["position_ids"] = {0: b, 1: s}
        program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, dynamic_shapes=dims, verbose=False)
    return program.model_proto


def run(model, feed):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    inputs = ("x", "position_ids") if names[0] == "x" else ("q", "k", "position_ids")
    return sess.run(None, {n: v for n, v in zip(inputs, feed, strict=False) if n in names})


def oracle(x, positions, inv_freq, layout, axes):
    """Rotation matrices per batch row, float64."""
    x4 = np.asarray(x, np.float64) if axes == "bhsd" else np.swapaxes(np.asarray(x, np.float64), 1, 2)
    out = np.stack([rope_by_matrix(x4[b], positions[b], inv_freq, layout) for b in range(x4.shape[0])])
    return out if axes == "bhsd" else np.swapaxes(out, 1, 2)


def check_runs(model, module, axes, layout, rotary_dim, positions, tol=1e-5):
    """ORT at a batch and length other than the export's against the oracle and eager PyTorch."""
    rng = np.random.default_rng(3)
    batch, seq = positions.shape
    q, k = (rng.standard_normal(s).astype(np.float32) for s in shapes(axes, batch, seq))
    got = run(model, (q, k, positions))
    eager = module(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(positions))
    inv = inv_freq_formula(rotary_dim, 10000.0)
    for x, y, e in zip((q, k), got, eager, strict=True):
        assert np.max(np.abs(y - oracle(x, positions, inv, layout, axes))) <= tol
        assert np.max(np.abs(y - e.numpy())) <= tol


def ops(model):
    return collections.Counter(n.op_type for n in model.graph.node)


#: Ops that send position ids outside the caches to their NaN row (shared by q and k): Clip and Mod for the
#: fused ops, Clip for the gathers of the standard-op graph.
FUSED_GUARD = {"Clip": 1, "Mod": 1}


def rotations(model):
    """The fused nodes, without the id guard the graph shares between them (checked to be exactly it)."""
    found = ops(model)
    assert {k: found[k] for k in FUSED_GUARD} == FUSED_GUARD, found
    return found - collections.Counter(FUSED_GUARD)


CASES = [  # layout, axes, rotary_dim, position ids as an input
    ("half", "bhsd", HEAD_DIM, True),
    ("interleaved", "bshd", 8, True),  # GPT-J: interleaved partial rotary, heads after the sequence
    ("half", "bhsd", 12, False),  # GPT-NeoX partial rotary; positions 0..S-1 from the sequence
]


@pytest.mark.parametrize("layout,axes,rotary_dim,with_positions", CASES)
def test_opset23_one_node_per_rotation(layout, axes, rotary_dim, with_positions):
    module = Attention(layout=layout, axes=axes, rotary_dim=rotary_dim)
    model = export(module, axes, with_positions)
    found = rotations(model)
    assert found["RotaryEmbedding"] == 2  # q and k
    assert not {"Cos", "Sin", "Cast"} & set(found) and double_uses(model) == []
    # only views of bshd input and the positions 0..S-1 besides the two nodes
    assert sum(found.values()) <= 2 + (4 if axes == "bshd" else 0) + (0 if with_positions else 8)
    caches = [numpy_helper.to_array(t) for t in model.graph.initializer if t.dims[:1] == [ROWS + 1]]
    angles = np.arange(ROWS)[:, None] * inv_freq_formula(rotary_dim, 10000.0)
    assert len(caches) == 2 and all(c.dtype == np.float32 for c in caches)  # q and k share one pair
    assert all(np.isnan(c[ROWS]).all() for c in caches)  # the row that ids outside the caches read
    assert np.max(np.abs(caches[0][:ROWS] - np.cos(angles))) <= 2**-24
    assert np.max(np.abs(caches[1][:ROWS] - np.sin(angles))) <= 2**-24
    positions = np.random.default_rng(0).integers(0, ROWS, (3, 9)) if with_positions else np.tile(np.arange(9), (3, 1))
    check_runs(model, module, axes, layout, rotary_dim, positions)


@pytest.mark.parametrize("opset", [18, 17])
def test_below_opset23_a_compact_graph_of_standard_ops(opset):
    module = Attention(layout="half", rotary_dim=12)
    model = export(module, opset=opset)
    found = ops(model)
    assert "RotaryEmbedding" not in found and not {"Cos", "Sin"} & set(found)
    assert double_uses(model) == [] and model.opset_import[0].version == opset
    # cos and sin gathered once for q and k (Clip guarding the ids, Gather, Gather, Unsqueeze); per tensor at
    # most 9 ops (partial rotary: Slice, Slice; swap: Reshape, Slice, Reshape; Mul, Mul, Add; Concat)
    assert found["Gather"] == 2 and found["Clip"] == 1 and sum(found.values()) <= 4 + 2 * 9
    check_runs(model, module, "bhsd", "half", 12, np.random.default_rng(1).integers(0, ROWS, (2, 7)))


def test_ort_contrib_op_at_any_opset():
    module = Attention(layout="interleaved")
    with torch_options(target="ort"):
        model = export(module, opset=17)
    assert rotations(model) == {"RotaryEmbedding": 2}
    assert {n.domain for n in model.graph.node if n.op_type == "RotaryEmbedding"} == {"com.microsoft"}
    assert double_uses(model) == []
    check_runs(model, module, "bhsd", "interleaved", HEAD_DIM, np.random.default_rng(2).integers(0, ROWS, (2, 6)))


def test_opset23_node_is_never_written_below_opset23():
    with torch_options(target="onnx23"), pytest.raises(Exception, match="too old for target='onnx23'"):
        export(Attention(), opset=18)


def test_positions_up_to_2_20_with_a_dynamic_sequence():
    module = Attention(rotary_dim=4)  # 2 pairs: a cache of 2**20 rows stays small
    with torch_options(max_positions=(1 << 20) + 8):
        model = export(module)
    start = (1 << 20) - 3
    check_runs(model, module, "bhsd", "half", 4, np.tile(np.arange(start, start + 11), (2, 1)))


def test_caches_take_the_model_dtype():
    module = Attention().half()
    q, k = (torch.randn(s).half() for s in shapes("bhsd", 2, 5))
    pos = torch.arange(5).expand(2, 5).contiguous()
    b, s = torch.export.Dim("B"), torch.export.Dim("S")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.onnx.export(
            module,
            (q, k, pos),
            dynamo=True,
            opset_version=23,
            verbose=False,
            dynamic_shapes={"q": {0: b, 2: s}, "k": {0: b, 2: s}, "position_ids": {0: b, 1: s}},
        )
    model = model.model_proto
    assert rotations(model) == {"RotaryEmbedding": 2}
    floats = {t.data_type for t in model.graph.initializer if t.data_type != onnx.TensorProto.INT64}  # not the id guard
    assert floats == {onnx.TensorProto.FLOAT16}
    positions = np.random.default_rng(4).integers(0, ROWS, (2, 5))
    got = run(model, (q.numpy(), k.numpy(), positions))
    inv = inv_freq_formula(HEAD_DIM, 10000.0)
    for x, y in zip((q, k), got, strict=True):
        expected = oracle(x.float().numpy(), positions, inv, "half", "bhsd")
        assert np.max(np.abs(y.astype(np.float64) - expected)) <= 4e-3  # float16: caches and x in float16


def test_torchscript_exporter_writes_the_same_graphs():
    module = Attention(layout="half")
    model = export(module, opset=17, dynamo=False)
    found = ops(model)
    assert not {"Cos", "Sin", "RotaryEmbedding"} & set(found) and double_uses(model) == []
    check_runs(model, module, "bhsd", "half", HEAD_DIM, np.random.default_rng(5).integers(0, ROWS, (3, 4)))


def test_unregistered_exporter_traces_the_exact_float32_tables(monkeypatch):
    monkeypatch.setitem(_bridge._state, "registered", False)
    module = Attention(layout="half")
    model = export(module, opset=18)
    found = ops(model)
    assert not {"Cos", "Sin", "RotaryEmbedding"} & set(found) and double_uses(model) == []
    positions = np.random.default_rng(6).integers(0, 1 << 20, (2, 5))  # the digit tables hold any position
    check_runs(model, module, "bhsd", "half", HEAD_DIM, positions)


def test_exported_program_runs_the_op_eagerly():
    module = Attention(layout="interleaved", rotary_dim=8)
    q, k = (torch.randn(s) for s in shapes("bhsd", 2, 5))
    pos = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, (q, k, pos), dynamo=True, opset_version=23, verbose=False)
    got = program.exported_program.module()(q, k, pos)
    inv = inv_freq_formula(8, 10000.0)
    for x, y in zip((q, k), got, strict=True):
        assert np.max(np.abs(y.numpy() - oracle(x.numpy(), pos.numpy(), inv, "interleaved", "bhsd"))) <= 1e-5


def test_eager_calls_stay_eager_after_exports():
    """Nothing made while tracing survives it: eager tensors after two exports, autograd and compile unchanged."""
    module = Attention()
    q, k = (torch.randn(s) for s in shapes("bhsd", 2, 5))
    before = module(q, k)
    for opset in (23, 18):
        export(module, with_positions=False, opset=opset)
    after = module(q, k)
    assert all(type(t) is torch.Tensor for t in after)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    leaf = q.clone().requires_grad_()
    module(leaf, k)[0].square().sum().backward()
    assert leaf.grad is not None and torch.allclose(leaf.grad.square().sum(), 4 * q.square().sum(), rtol=1e-5)
    compiled = torch.compile(module, backend="eager")(q, k)  # dynamo's trace, without code generation
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(before, compiled, strict=True))


def test_torch_export_with_dynamic_batch_and_sequence_without_positions():
    module = Attention()
    sq, sk = shapes("bhsd", 2, 5)
    b, s = torch.export.Dim("B"), torch.export.Dim("S")
    program = torch.export.export(
        module, (torch.randn(sq), torch.randn(sk)), dynamic_shapes={"q": {0: b, 2: s}, "k": {0: b, 2: s}}
    )
    q, k = (torch.randn(s) for s in shapes("bhsd", 3, 11))
    got, eager = program.module()(q, k), module(q, k)
    assert all(type(t) is torch.Tensor for t in eager)
    assert all(torch.allclose(a, e, atol=1e-6) for a, e in zip(got, eager, strict=True))


def test_length_dependent_rope_type_needs_seq_len():
    module = Attention(scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(Exception, match="pass seq_len="):
        export(module)


def test_after_import_runs_once_after_the_module_and_never_breaks_it(tmp_path, monkeypatch):
    (tmp_path / "arrayrope_watched.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    _after_import.after_import("arrayrope_watched", lambda: seen.append(sys.modules["arrayrope_watched"].VALUE))
    _after_import.after_import("arrayrope_watched", lambda: 1 / 0)  # a second hook for the name is not added
    import arrayrope_watched

    assert seen == [1] and arrayrope_watched.VALUE == 1
    _after_import.after_import("arrayrope_watched", lambda: 1 / 0)  # already imported: runs now, errors swallowed
    _after_import.after_import("arrayrope_watched", lambda: seen.append("now"))
    assert seen == [1, "now"]
    monkeypatch.delitem(sys.modules, "arrayrope_watched")


def test_registration_happened_before_the_first_export():
    assert _bridge.registered() == (True, "")


class Unbounded(Attention):
    """A module whose RotaryEmbedding has no max_position_embeddings: no bound on the positions."""

    def __init__(self, **rope):
        torch.nn.Module.__init__(self)
        self.rope = arrayrope.RotaryEmbedding(HEAD_DIM, **rope)


#: Far beyond the 4096 rows a default cache had (whose ids from 4096 on gave NaN), up to 2**29.
FAR = np.array(
    [
        [0, 1, 4095, 4096, 4097, 70_000, 1 << 20, (1 << 20) + 5, 123_456_789, 1 << 29],
        [7, 5000, 65_536, 999_999, (1 << 21) + 3, 1 << 24, 3 << 25, 1 << 28, 5, 2**30 - 1],
    ]
)


@pytest.mark.parametrize(
    "opset,target,dynamo", [(23, "auto", True), (18, "auto", True), (17, "ort", True), (17, "auto", False)]
)
def test_without_a_bound_the_graph_computes_cos_sin_right_at_every_position(opset, target, dynamo):
    """Nothing bounds the positions, so nothing may be stored in rows: cos/sin come from the position ids in the
    graph with the exact float32 method. Oracle: rotation matrices on float64 angles, whose own error at 2**30 is
    below 2**30 * 2**-53 = 1.2e-7, a tenth of the tolerance."""
    module = Unbounded(layout="interleaved", rotary_dim=12)
    with torch_options(target=target):
        model = export(module, opset=opset, dynamo=dynamo)
    found = ops(model)
    assert not {"Cos", "Sin"} & set(found) and double_uses(model) == []
    assert not [t for t in model.graph.initializer if t.dims and t.dims[0] in (4096, 4097)]  # no cache of rows
    assert found["RotaryEmbedding"] == (0 if opset < 23 and target == "auto" else 2)
    check_runs(model, module, "bhsd", "interleaved", 12, FAR, tol=2e-6)


def test_rope_model_default_is_unbounded_too():
    from arrayrope.export import rotary_model

    model = rotary_model(HEAD_DIM, num_heads=HQ)
    (y,) = run(model, (np.ones((2, HQ, FAR.shape[1], HEAD_DIM), np.float32), FAR))
    want = oracle(np.ones((2, HQ, FAR.shape[1], HEAD_DIM)), FAR, inv_freq_formula(HEAD_DIM, 10000.0), "half", "bhsd")
    assert np.max(np.abs(y - want)) <= 2e-6


class Decode(Attention):
    """A decode step: q, k and the offset of the step (0-d, one for the batch) or of each row ((B,))."""

    def forward(self, q, k, offset):  # type: ignore[override]
        return self.rope(q, k, offset=offset)


@pytest.mark.parametrize("offset", [np.array(7), np.array([7, 60])], ids=["0-d", "per row"])
def test_offsets_as_inputs_of_the_graph(offset):
    """An offset tensor is an input of the exported graph, its position ids ``offset + 0..S-1`` shaped (B, S) for
    the fused node: run at other offsets than the export's against rotation matrices and eager PyTorch."""
    module = Decode()
    q, k = (torch.randn(s) for s in shapes("bhsd", 2, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.onnx.export(module, (q, k, torch.from_numpy(offset)), dynamo=True, opset_version=23).model_proto
    assert rotations(model)["RotaryEmbedding"] == 2  # and the few ops of offset + steps
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    for other in (np.asarray(offset + 3), np.full_like(offset, ROWS - 1)):
        got = sess.run(None, dict(zip(names, (q.numpy(), k.numpy(), other), strict=True)))
        eager = module(q, k, torch.from_numpy(other))
        positions = np.broadcast_to(other, (2,))[:, None]
        for x, y, e in zip((q, k), got, eager, strict=True):
            assert (
                np.max(np.abs(y - oracle(x.numpy(), positions, inv_freq_formula(HEAD_DIM, 10000.0), "half", "bhsd")))
                <= 1e-5
            )
            assert np.max(np.abs(y - e.numpy())) <= 1e-5


def test_the_public_translation_table_writes_the_fused_nodes_without_registration(monkeypatch):
    """custom_translation_table (PyTorch's public API) with torch_translations: fused nodes even where arrayrope's
    translations did not join the exporter's registry."""
    from arrayrope.export import torch_translations

    monkeypatch.setitem(_bridge._state, "registered", False)
    monkeypatch.setitem(_bridge._state, "table", False)
    module = Attention(layout="half")
    q, k = (torch.randn(s) for s in shapes("bhsd", 2, 5))
    pos = torch.arange(5).expand(2, 5).contiguous()
    for fused in (False, True):
        table = torch_translations(23) if fused else None  # asking for the table is what lets exports record the op
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                module, (q, k, pos), dynamo=True, opset_version=23, verbose=False, custom_translation_table=table
            )
        found = ops(program.model_proto)
        assert ("RotaryEmbedding" in found) == fused, found
        assert "Cos" not in found and double_uses(program.model_proto) == []
        positions = np.random.default_rng(9).integers(0, ROWS, (2, 5))
        check_runs(program.model_proto, module, "bhsd", "half", HEAD_DIM, positions)


BRIDGE_CHECK = """
import sys, warnings
import torch
{version}
import arrayrope
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    rope = arrayrope.RotaryEmbedding(16)
    rope(torch.randn(1, 2, 3, 16))
watching = any(type(f).__name__ == "_Watch" for f in sys.meta_path)
print(watching, "onnx" in sys.modules, [str(w.message) for w in caught if "arrayrope" in str(w.message)])
"""


@pytest.mark.parametrize("version, watches", [(None, True), ("2.5.1", False), ("3.0.0", False)])
def test_the_bridge_installs_when_the_torch_backend_loads_on_tested_versions_only(version, watches):
    """The first RotaryEmbedding in a process with torch installs the bridge (an entry point of the core's
    integrations): a watch for the exporter's registry on the tested PyTorch versions, a warning naming the version
    on others, and no import of onnx either way."""
    import subprocess

    code = BRIDGE_CHECK.format(version="" if version is None else f"torch.__version__ = {version!r}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    watching, onnx_loaded, messages = out.stdout.strip().split(" ", 2)
    assert watching == str(watches) and onnx_loaded == "False", out.stdout
    if watches:
        assert messages == "[]", messages
    else:
        assert f"PyTorch {version}" in messages and "custom_translation_table" in messages, messages
