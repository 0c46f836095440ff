"""ONNX export: every target x layout x full/partial x rank x position ids x dtype against rotation matrices.

The oracle is tests.helpers (explicit block-diagonal rotation matrices and the
published inverse-frequency formula), never the export layer or the core's
application code.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx.reference import ReferenceEvaluator  # noqa: E402

import arrayrope  # noqa: E402
from arrayrope.export import add_rotary, rotary_function, rotary_model  # noqa: E402
from helpers import inv_freq_formula, rotation_matrix  # noqa: E402

HEAD_DIM, HEADS, P = 16, 3, 64
TARGETS = ("onnx23", "ort", "portable")


def oracle(x, positions, inv_freq, layout, rank, heads, factor=1.0):
    """RoPE by explicit rotation matrices, float64, per batch row (positions (B, S))."""
    x = np.asarray(x, dtype=np.float64)
    if rank == 3:
        b, s, _ = x.shape
        x4 = x.reshape(b, s, heads, -1).transpose(0, 2, 1, 3)
    else:
        x4 = x
    out = np.empty_like(x4)
    for bi in range(x4.shape[0]):
        for si, p in enumerate(np.asarray(positions)[bi]):
            R = factor * rotation_matrix(float(p) * inv_freq, layout, x4.shape[-1])
            if factor != 1.0:  # pass-through features are not scaled
                r = 2 * len(inv_freq)
                R[r:, r:] = np.eye(x4.shape[-1] - r)
            out[bi, :, si] = x4[bi, :, si] @ R.T
    return out.transpose(0, 2, 1, 3).reshape(x.shape) if rank == 3 else out


def session(model):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def tolerance(expected, x, dtype, fused, roundings=1.5):
    if dtype == "float32":
        return 1e-6
    rounding = np.max(np.abs(expected.astype(np.float16).astype(np.float64) - expected))
    # fused ops take caches of x's dtype: |cos/sin rounding| <= 2**-12 each
    caches = 2 * 2.0**-12 * np.max(np.abs(x)) if fused else 0.0
    return roundings * rounding + caches


def inputs(rng, rank, batch, seq, heads=HEADS, dtype="float32", head_dim=HEAD_DIM):
    shape = (batch, heads, seq, head_dim) if rank == 4 else (batch, seq, heads * head_dim)
    return rng.standard_normal(shape).astype(dtype)


MATRIX = list(
    itertools.product(TARGETS, ("half", "interleaved"), (HEAD_DIM, 8), (4, 3), (True, False), ("float32", "float16"))
)


@pytest.mark.parametrize("target,layout,rot,rank,with_pos,dtype", MATRIX)
def test_matrix_against_rotation_matrices(target, layout, rot, rank, with_pos, dtype):
    num_heads = HEADS if (rank == 3 or target == "ort") else None
    model = rotary_model(
        HEAD_DIM,
        rotary_dim=rot,
        layout=layout,
        target=target,
        rank=rank,
        num_heads=num_heads,
        max_positions=P,
        position_ids=with_pos,
        dtype=dtype,
    )
    rng = np.random.default_rng(zlib.crc32(repr((target, layout, rot, rank, with_pos)).encode()))
    batch, seq = 2, 6 if dtype == "float32" else 40
    x = inputs(rng, rank, batch, seq, dtype=dtype)
    if with_pos:
        pos = rng.integers(0, P, (batch, seq))
        pos[0, -1], pos[1, 0] = P - 1, 0  # the table's ends
        feed = {"x": x, "position_ids": pos}
        seq_pos = pos
    else:
        seq = min(seq, P)
        x = x[:, :, :seq] if rank == 4 else x[:, :seq]
        feed = {"x": x}
        seq_pos = np.broadcast_to(np.arange(seq), (batch, seq))
    expected = oracle(x, seq_pos, inv_freq_formula(rot, 10000.0), layout, rank, HEADS)
    (y,) = session(model).run(None, feed)
    assert y.dtype == x.dtype and y.shape == x.shape
    err = np.max(np.abs(y.astype(np.float64) - expected))
    assert err <= tolerance(expected, x, dtype, target != "portable"), err
    if target != "ort":  # the reference evaluator knows only standard ops
        (y_ref,) = ReferenceEvaluator(model).run(None, feed)
        err = np.max(np.abs(y_ref.astype(np.float64) - expected))  # type: ignore[union-attr]
        assert err <= tolerance(expected, x, dtype, target != "portable", 3.0 if target == "onnx23" else 1.5), err


def _all_types(model):
    """Every element type a model mentions (values, initializers, attributes' tensors)."""
    g = model.graph
    types = {v.type.tensor_type.elem_type for v in list(g.input) + list(g.output) + list(g.value_info)}
    types |= {t.data_type for t in g.initializer}
    for node in g.node:
        for a in node.attribute:
            if a.HasField("t"):
                types.add(a.t.data_type)
            if a.name == "to":
                types.add(a.i)
    return types


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_node_counts_no_complex_and_save_load(target, layout, tmp_path):
    model = rotary_model(128, layout=layout, target=target, max_positions=64)
    # fused: Clip and Mod send ids outside the table to its NaN row, then the one fused node
    limit = {"onnx23": 3, "ort": 3, "portable": 10 if layout == "half" else 11}[target]
    assert len(model.graph.node) <= limit
    if target != "portable":
        assert [n.op_type for n in model.graph.node] == ["Clip", "Mod", "RotaryEmbedding"]
    if target == "portable":
        assert {n.domain for n in model.graph.node} <= {""}
        assert model.opset_import[0].version == 17
    inferred = onnx.shape_inference.infer_shapes(model)
    assert not _all_types(inferred) & {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}
    path = tmp_path / "rope.onnx"
    onnx.save(model, path)
    loaded = onnx.load(path)
    onnx.checker.check_model(loaded, full_check=True)
    rng = np.random.default_rng(1)
    x = inputs(rng, 4, 2, 3, heads=2, head_dim=128)
    feed = {"x": x, "position_ids": np.array([[0, 5, 63], [63, 1, 2]])}
    np.testing.assert_array_equal(session(model).run(None, feed)[0], session(loaded).run(None, feed)[0])


def test_ir_version_is_the_oldest_that_holds_the_opsets():
    for target, ir in (("portable", 8), ("ort", 8), ("onnx23", 11)):  # onnx's table: opset 17 -> IR 8, 23 -> 11
        assert rotary_model(8, target=target, max_positions=4).ir_version == ir


@pytest.mark.parametrize("target", TARGETS)
def test_positions_outside_the_table_are_nan_on_every_runtime(target):
    """The documented behaviour for every target: ids outside [0, max_positions) give NaN in the rotated
    features, on ONNX Runtime and on the reference evaluator, and the ids around them rotate as always."""
    model = rotary_model(8, rotary_dim=4, target=target, max_positions=16, num_heads=2)
    pos = np.array([[0, 15, -1, 16, 17, -16, -(2**40), 2**62, 3]])
    x = np.random.default_rng(5).standard_normal((1, 2, pos.shape[1], 8)).astype(np.float32)
    outside = (pos[0] < 0) | (pos[0] >= 16)
    runs = [session(model).run] + ([ReferenceEvaluator(model).run] if target != "ort" else [])
    for run in runs:
        (y,) = run(None, {"x": x, "position_ids": pos})
        assert np.isnan(y[0, :, outside, :4]).all() and not np.isnan(y[0, :, ~outside]).any()
        np.testing.assert_array_equal(y[..., 4:], x[..., 4:])  # pass-through features untouched
        expected = oracle(x[:, :, ~outside], pos[:, ~outside], inv_freq_formula(4, 10000.0), "half", 4, 2)
        assert np.max(np.abs(y[:, :, ~outside] - expected)) <= 1e-6


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_computed_tables_are_not_bounded_and_stay_exact(layout):
    model = rotary_model(64, target="portable", layout=layout, tables="computed")
    rng = np.random.default_rng(2)
    limit = 1 << 30
    pos = np.array([[0, 1023, 1024, 4096, 123_456, 1 << 20, limit - 1, -1, -5000, -(limit - 1)]])
    x = inputs(rng, 4, 1, pos.shape[1], heads=2, head_dim=64)
    for run in (session(model).run, ReferenceEvaluator(model).run):
        (y,) = run(None, {"x": x, "position_ids": pos})
        expected = oracle(x, pos, inv_freq_formula(64, 10000.0), layout, 4, 2)
        assert np.max(np.abs(y - expected)) <= 1e-6  # negative ids rotate backwards
        far = np.array([[limit, -limit, 2**40, -(2**63), 2**63 - 1]])
        (y,) = run(None, {"x": x[:, :, :5], "position_ids": far})
        assert np.isnan(y).all()


@pytest.mark.parametrize("target,tables", [(t, "stored") for t in TARGETS] + [("portable", "computed")])
def test_scaled_frequencies_and_attention_factor(target, tables):
    """Tables carry any scaling: a custom inv_freq (linear x4) and an attention factor of 1.25."""
    inv = inv_freq_formula(16, 500000.0) / 4
    freqs = arrayrope.RopeFrequencies(
        inv_freq=inv, head_dim=32, rotary_dim=16, attention_factor=1.25, base=500000.0, rope_type="linear"
    )
    model = rotary_model(
        freqs, target=target, num_heads=2, max_positions=64 if tables == "stored" else None, tables=tables
    )
    rng = np.random.default_rng(3)
    x = inputs(rng, 4, 2, 5, heads=2, head_dim=32)
    pos = rng.integers(0, 64, (2, 5))
    (y,) = session(model).run(None, {"x": x, "position_ids": pos})
    expected = oracle(x, pos, inv, "half", 4, 2, factor=1.25)
    assert np.max(np.abs(y - expected)) <= 1.25e-6


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rank", [4, 3])
def test_qk_share_tables_with_grouped_query_heads(target, rank):
    model = rotary_model(
        16, target=target, rank=rank, qk=True, num_heads=4, num_kv_heads=2, max_positions=32, layout="interleaved"
    )
    assert [i.name for i in model.graph.input] == ["q", "k", "position_ids"]
    assert [o.name for o in model.graph.output] == ["q_rot", "k_rot"]
    big = [t for t in model.graph.initializer if len(t.dims) >= 2 and t.dims[0] == 33]  # (max_positions + 1, ...)
    assert len(big) == 2  # one cos and one sin table for both (and one row of NaN past the end)
    rng = np.random.default_rng(4)
    q, k = inputs(rng, rank, 2, 5, heads=4), inputs(rng, rank, 2, 5, heads=2)
    pos = rng.integers(0, 32, (2, 5))
    q_rot, k_rot = session(model).run(None, {"q": q, "k": k, "position_ids": pos})
    inv = inv_freq_formula(16, 10000.0)
    assert np.max(np.abs(q_rot - oracle(q, pos, inv, "interleaved", rank, 4))) <= 1e-6
    assert np.max(np.abs(k_rot - oracle(k, pos, inv, "interleaved", rank, 2))) <= 1e-6


@pytest.mark.parametrize("target", TARGETS)
def test_function_composes_into_a_model(target):
    from onnx import TensorProto, helper

    f = rotary_function(16, target=target, num_heads=2, max_positions=32)
    t = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", 2, "S", 16])
    pos_in = helper.make_tensor_value_info("pos", TensorProto.INT64, ["B", "S"])
    nodes = [
        helper.make_node("Neg", ["a"], ["n"]),
        helper.make_node("RotaryEmbedding", ["n", "pos"], ["r"], domain="arrayrope"),
    ]
    ops = [helper.make_opsetid("", 23 if target == "onnx23" else 17), helper.make_opsetid("arrayrope", 1)]
    if target == "ort":
        ops.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(
        helper.make_graph(nodes, "g", [t("a"), pos_in], [t("r")]),
        functions=[f],
        opset_imports=ops,
        ir_version=11 if target == "onnx23" else 8,
    )
    onnx.checker.check_model(m)
    rng = np.random.default_rng(5)
    a = inputs(rng, 4, 1, 4, heads=2)
    pos = np.array([[3, 31, 0, 7]])
    (r,) = session(m).run(None, {"a": a, "pos": pos})
    assert np.max(np.abs(r - oracle(-a, pos, inv_freq_formula(16, 10000.0), "half", 4, 2))) <= 1e-6


def _attention_stub(opset=17):
    """x (B, S, 32) -> q = x @ Wq, k = x @ Wk -> score = q * k (elementwise), with q also an output."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(6)
    wq, wk = rng.standard_normal((32, 32)).astype(np.float32), rng.standard_normal((32, 32)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Mul", ["q", "k"], ["score"]),
    ]
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
    g = helper.make_graph(
        nodes,
        "attn",
        [vi("x", ["B", "S", 32]), helper.make_tensor_value_info("pos", TensorProto.INT64, ["B", "S"])],
        [vi("score", ["B", "S", 32]), vi("q", ["B", "S", 32])],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(wk, "wk")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), wq, wk


@pytest.mark.parametrize("target", ["ort", "portable"])
def test_add_rotary_rewires_consumers_and_leaves_the_input_alone(target):
    model, wq, wk = _attention_stub()
    before = model.SerializeToString()
    out = add_rotary(model, q="q", k="k", position_ids="pos", freqs=8, num_heads=4, target=target, max_positions=64)
    assert model.SerializeToString() == before
    onnx.checker.check_model(out, full_check=target == "portable")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 32)).astype(np.float32)
    pos = rng.integers(0, 64, (2, 5))
    score, q_out = session(out).run(None, {"x": x, "pos": pos})
    inv = inv_freq_formula(8, 10000.0)
    q = oracle(x.astype(np.float64) @ wq, pos, inv, "half", 3, 4)
    k = oracle(x.astype(np.float64) @ wk, pos, inv, "half", 3, 4)
    assert np.max(np.abs(score - q * k)) <= 1e-4 * max(1.0, np.max(np.abs(q * k)))
    np.testing.assert_allclose(q_out, x.astype(np.float64) @ wq, rtol=1e-5, atol=1e-5)  # outputs keep their values


def test_add_rotary_without_position_ids_and_rank_from_shapes():
    model, wq, _ = _attention_stub()
    out = add_rotary(model, q="q", freqs=8, num_heads=4, target="portable", max_positions=16)
    x = np.random.default_rng(8).standard_normal((1, 6, 32)).astype(np.float32)
    score, _ = session(out).run(None, {"x": x, "pos": np.zeros((1, 6), np.int64)})
    q = oracle(x.astype(np.float64) @ wq, np.arange(6)[None], inv_freq_formula(8, 10000.0), "half", 3, 4)
    k = x.astype(np.float64) @ _attention_stub()[2]
    assert np.max(np.abs(score - q * k)) <= 1e-4 * max(1.0, np.max(np.abs(q * k)))


def test_add_rotary_bad_input():
    model, _, _ = _attention_stub()
    with pytest.raises(ValueError, match=r"q='nope'"):
        add_rotary(model, q="nope", freqs=8, num_heads=4)
    with pytest.raises(ValueError, match=r"position_ids='p'"):
        add_rotary(model, q="q", position_ids="p", freqs=8, num_heads=4)
    with pytest.raises(ValueError, match=r"opset=17.*'ort'"):
        add_rotary(model, q="q", freqs=8, num_heads=4, target="onnx23")
    with pytest.raises(ValueError, match=r"rank=3.*num_heads"):
        add_rotary(model, q="q", freqs=8)
    with pytest.raises(ValueError, match=r"last dimension 32 but num_heads \* head_dim = 2 \* 8 = 16"):
        add_rotary(model, q="q", freqs=8, num_heads=2)
    with pytest.raises(ValueError, match=r"'q' has rank 3 but rank=4"):
        add_rotary(model, q="q", freqs=8, rank=4)
    with pytest.raises(ValueError, match=r"model='/nonexistent.onnx'"):
        add_rotary("/nonexistent.onnx", q="q", freqs=8)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match=r"opset=17 is too old for target='onnx23'.*'ort'.*'portable'"):
        rotary_model(8, target="onnx23", opset=17)
    with pytest.raises(ValueError, match=r"opset=11.*opset >= 13"):
        rotary_model(8, target="portable", opset=11)
    with pytest.raises(ValueError, match=r"dtype='float64' cannot be carried by target='onnx23'.*portable"):
        rotary_model(8, target="onnx23", dtype="float64")
    with pytest.raises(ValueError, match=r"dtype must be one of"):
        rotary_model(8, dtype="int8")
    with pytest.raises(ValueError, match=r"rank=3.*num_heads"):
        rotary_model(8, rank=3)
    with pytest.raises(ValueError, match=r"max_positions=64 bounds stored tables, and tables='computed' stores none"):
        rotary_model(8, target="ort", tables="computed", max_positions=64)
    with pytest.raises(ValueError, match=r"tables='stored' stores max_positions rows: pass max_positions"):
        rotary_model(8, tables="stored")
    with pytest.raises(ValueError, match=r"target must be one of"):
        rotary_model(8, target="tensorrt")
    with pytest.raises(ValueError, match=r"freqs \(an int head_dim\) must be even"):
        rotary_model(7)
    with pytest.raises(ValueError, match=r"num_heads"):
        rotary_model(16, target="ort", rotary_dim=8)
    with pytest.raises(TypeError, match=r"freqs must be"):
        rotary_model("128")
    assert rotary_model(8, opset=17).graph.node[-1].domain == "com.microsoft"  # auto below 23 on ONNX Runtime
    assert {n.domain for n in rotary_model(8, opset=17, runtime="any").graph.node} == {""}  # auto: portable
    assert rotary_model(8).graph.node[-1].op_type == "RotaryEmbedding"  # auto: the standard op
    assert len(rotary_model(8, dtype="float64").graph.node) > 1  # auto: portable carries float64


_SESSIONS: dict = {}


@given(
    batch=st.integers(1, 3),
    seq=st.integers(1, 9),
    target=st.sampled_from(TARGETS),
    layout=st.sampled_from(["half", "interleaved"]),
    seed=st.integers(0, 2**16),
)
def test_dynamic_batch_and_sequence(batch, seq, target, layout, seed):
    key = (target, layout)
    if key not in _SESSIONS:
        _SESSIONS[key] = session(
            rotary_model(16, target=target, layout=layout, rotary_dim=12, num_heads=2, max_positions=40)
        )
    rng = np.random.default_rng(seed)
    x = inputs(rng, 4, batch, seq, heads=2)
    pos = rng.integers(0, 40, (batch, seq))
    (y,) = _SESSIONS[key].run(None, {"x": x, "position_ids": pos})
    assert np.max(np.abs(y - oracle(x, pos, inv_freq_formula(12, 10000.0), layout, 4, 2))) <= 1e-6


_PARITY: dict = {}


@pytest.mark.parametrize("target", TARGETS)
def test_graph_matches_the_core_on_every_backend(backend, target):
    """The exported graph and arrayrope on each array backend rotate alike (float32, positions near the end)."""
    if target not in _PARITY:
        _PARITY[target] = session(
            rotary_model(32, target=target, layout="interleaved", rotary_dim=24, num_heads=2, max_positions=2048)
        )
    rng = np.random.default_rng(9)
    x = inputs(rng, 4, 2, 5, heads=2, head_dim=32)
    pos = np.array([[2047, 2046, 1500, 3, 0], [1024, 1023, 2047, 7, 2040]])
    (y,) = _PARITY[target].run(None, {"x": x, "position_ids": pos})
    freqs = arrayrope.rope_frequencies(32, rotary_dim=24)
    cos, sin = arrayrope.rope_tables(freqs, backend.asarray(pos))
    xb = backend.asarray(x)
    out = arrayrope.apply_rotary(xb, cos[:, None, ...], sin[:, None, ...], layout="interleaved")
    from helpers import to_numpy

    assert np.max(np.abs(to_numpy(out) - y)) <= 1e-6


def test_add_rotary_rewires_reads_inside_control_flow():
    from onnx import TensorProto, helper

    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, "S", 8])
    then_g = helper.make_graph([helper.make_node("Identity", ["q"], ["t"])], "then", [], [vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["q"], ["e"])], "else", [], [vi("e")])
    nodes = [
        helper.make_node("Relu", ["x"], ["q"]),  # the If reads q only inside its branches
        helper.make_node("If", ["flag"], ["out"], then_branch=then_g, else_branch=else_g),
    ]
    g = helper.make_graph(
        nodes, "g", [vi("x"), helper.make_tensor_value_info("flag", TensorProto.BOOL, [])], [vi("out")]
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    out = add_rotary(model, q="q", freqs=8, target="portable", max_positions=16)
    onnx.checker.check_model(out)
    x = np.random.default_rng(10).standard_normal((1, 2, 3, 8)).astype(np.float32)
    expected = oracle(np.maximum(x, 0), np.arange(3)[None], inv_freq_formula(8, 10000.0), "half", 4, 2)
    sess = session(out)
    assert np.max(np.abs(sess.run(None, {"x": x, "flag": np.array(True)})[0] - expected)) <= 1e-6
    assert np.max(np.abs(sess.run(None, {"x": x, "flag": np.array(False)})[0] + expected)) <= 1e-6


def _bare(op: str, table_rows: int, head_dim: int = 8):
    """One node reading tables of ``table_rows`` rows by position id, without arrayrope's guard."""
    from onnx import TensorProto, helper, numpy_helper

    angles = np.arange(table_rows)[:, None] * np.ones(head_dim // 2)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "S", head_dim])
    p = helper.make_tensor_value_info("p", TensorProto.INT64, [1, "S"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(cos, "c"), numpy_helper.from_array(sin, "s")]
    ops, ir = [helper.make_opsetid("", 23)], 11
    if op == "onnx23":
        node = helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"])
    elif op == "ort":
        node = helper.make_node("RotaryEmbedding", ["x", "p", "c", "s"], ["y"], domain="com.microsoft", num_heads=1)
        ops, ir = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], 8
    else:  # the portable graph's lookup
        node = helper.make_node("Gather", ["c", "p"], ["y"], axis=0)
    return helper.make_model(helper.make_graph([node], "g", [x, p], [y], inits), opset_imports=ops, ir_version=ir)


@pytest.mark.parametrize("op", ["onnx23", "ort", "gather"])
def test_what_the_bare_ops_do_with_ids_outside_a_table(op):
    """Why every graph guards its ids (docs/guide/onnx.md, Positions): ONNX Runtime's fused kernels reject them, ONNX's
    reference evaluator reads -1 from the table end in the standard op and raises past it, Gather reads
    negative ids from the end on both."""
    model = _bare(op, 16)
    x = np.ones((1, 1, 1, 8), np.float32)

    def feed(pid):
        return {"x": x, "p": np.array([[pid]])}

    sess = session(model)
    if op == "gather":
        np.testing.assert_array_equal(sess.run(None, feed(-1))[0], sess.run(None, feed(15))[0])
        np.testing.assert_array_equal(
            ReferenceEvaluator(model).run(None, feed(-1))[0],  # type: ignore[index]
            ReferenceEvaluator(model).run(None, feed(15))[0],  # type: ignore[index]
        )
        return
    for pid in (-1, 16):
        with pytest.raises(Exception, match=rf"position_ids value {pid} at index 0 is out of range \[0, 16\)"):
            sess.run(None, feed(pid))
    if op == "onnx23":
        ref = ReferenceEvaluator(model)
        np.testing.assert_array_equal(ref.run(None, feed(-1))[0], ref.run(None, feed(15))[0])  # type: ignore[index]
        with pytest.raises(IndexError):
            ref.run(None, feed(16))
