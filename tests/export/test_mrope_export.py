"""ONNX export of multimodal RoPE (M-RoPE): position ids ``(axes, batch, seq)``, each rotary pair turned by one axis.

Oracles: the core's :func:`arrayrope.mrope_tables` and :func:`arrayrope.apply_rotary` in float64 NumPy (never the
export layer), a hand-written complex-number rotation with Qwen's assignment of pairs to axes written out here,
and the plain 1-D export, which text tokens (every axis equal) must reproduce. The models run on ONNX Runtime's CPU
provider and, for standard ops, on ONNX's reference evaluator.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import arrayrope  # noqa: E402
from arrayrope.export import add_rotary, rotary_function, rotary_model  # noqa: E402
from arrayrope.export.build._spec import np_dtype, onnx_dtype  # noqa: E402
from arrayrope.testing import tolerance_at  # noqa: E402
from helpers import double_uses  # noqa: E402

HEAD_DIM, HEADS, P = 32, 2, 64
TARGETS = ("onnx23", "ort", "portable")
#: name -> (sections for 16 pairs, sections for 8 pairs (rotary_dim 16), interleaved)
ASSIGNMENTS = {
    "qwen2vl": ((4, 6, 6), (2, 3, 3), False),
    "qwen3vl": ((6, 5, 5), (4, 2, 2), True),
    "four-axes": ((4, 4, 4, 4), (2, 2, 2, 2), False),
    "four-axes-interleaved": ((4, 4, 4, 4), (2, 2, 2, 2), True),
}


def session(model, optimize=True):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def runs(model, target):
    """ONNX Runtime with its graph optimisations on and off, and the reference evaluator where it knows the ops
    (not the contrib op)."""
    out = [session(model).run, session(model, optimize=False).run]
    if target != "ort":
        out.append(ReferenceEvaluator(model).run)
    return out


def axis_of_pairs(freqs, sections, interleaved):
    """The axis turning each pair, as the core's tables show it: at the ids 'one on axis a, zero elsewhere', the
    pairs with sin != 0 are axis a's."""
    n = len(sections)
    probe = np.eye(n, dtype=np.int64)[:, :, None]  # (axes, a, 1): id 1 on axis a of batch row a
    _, sin = arrayrope.mrope_tables(freqs, probe, sections=sections, interleaved=interleaved, dtype=np.float64)
    turned = np.asarray(sin)[:, 0] != 0  # (a, pairs)
    assert (turned.sum(axis=0) == 1).all()
    return np.argmax(turned, axis=0)


def oracle(freqs, x, ids, sections, interleaved, layout, rank, heads, limit):
    """The core in float64 NumPy; NaN in the pairs of an axis whose id has no table row (``limit``: the table size,
    or ``-limit`` for computed tables, which rotate ``|id| < limit``)."""
    cos, sin = (
        np.array(t, dtype=np.float64)
        for t in arrayrope.mrope_tables(freqs, ids, sections=sections, interleaved=interleaved, dtype=np.float64)
    )
    outside = (np.abs(ids) >= -limit) if limit < 0 else ((ids < 0) | (ids >= limit))  # (axes, B, S)
    bad = outside[axis_of_pairs(freqs, sections, interleaved)].transpose(1, 2, 0)  # (B, S, pairs)
    cos[bad], sin[bad] = np.nan, np.nan
    x64 = np.asarray(x, dtype=np.float64)
    if rank == 4:
        return np.asarray(arrayrope.apply_rotary(x64, cos[:, None], sin[:, None], layout=layout))
    b, s, _ = x64.shape
    y = arrayrope.apply_rotary(x64.reshape(b, s, heads, -1), cos[:, :, None], sin[:, :, None], layout=layout)
    return np.asarray(y).reshape(b, s, -1)


def image_ids(axes, batch, text=3, grid=(2, 3), after=2, *, rng):
    """Qwen-VL's ``get_rope_index`` layout: text (every axis equal), an image of ``grid`` patches (temporal axis
    fixed, height and width axes by row and column; a fourth axis by patch index), text after the image from the
    largest id + 1; the next batch rows start further on."""
    h, w = grid
    rows = []
    for bi in range(batch):
        start = int(rng.integers(0, 8)) + bi
        ids = [np.full(axes, start + i) for i in range(text)]
        base = start + text
        for r, c in itertools.product(range(h), range(w)):
            ids.append(np.array([base, base + r, base + c, base + r * w + c][:axes] + [base] * max(0, axes - 4)))
        top = max(int(np.max(ids)) + 1, base)
        ids += [np.full(axes, top + i) for i in range(after)]
        rows.append(np.stack(ids, axis=1))
    return np.stack(rows, axis=1).astype(np.int64)  # (axes, batch, seq)


def inputs(rng, rank, batch, seq, dtype="float32", heads=HEADS):
    shape = (batch, heads, seq, HEAD_DIM) if rank == 4 else (batch, seq, heads * HEAD_DIM)
    return rng.standard_normal(shape).astype(np_dtype(dtype))


def check(y, expected, dtype):
    """Within 4 units in the last place of ``dtype`` at the scale of the result (the project's rule: rounding of
    the inputs, the tables and the output, half an ulp each), NaN exactly where expected."""
    y64 = np.asarray(y).astype(np.float64)
    nan = np.isnan(expected)
    assert (np.isnan(y64) == nan).all()
    err = float(np.max(np.abs(y64[~nan] - expected[~nan]), initial=0.0))
    tol = tolerance_at(dtype, float(np.max(np.abs(expected[~nan]), initial=0.0)))
    assert err <= tol, (err, tol)
    return err


MATRIX = list(itertools.product(TARGETS, ASSIGNMENTS, ("half", "interleaved"), (HEAD_DIM, 16), (4, 3)))


@pytest.mark.parametrize("tables", ["stored", "computed"])
@pytest.mark.parametrize("target,assignment,layout,rot,rank", MATRIX)
def test_matrix_against_the_core(target, assignment, layout, rot, rank, tables):
    """Every target x assignment (consecutive, interleaved, 3 and 4 axes) x layout x full/partial rotary x axis
    order ((B, H, S, D) and (B, S, H * D)) x stored/computed tables, at image-like and random ids, float32."""
    full, partial, interleaved = ASSIGNMENTS[assignment]
    sections = full if rot == HEAD_DIM else partial
    freqs = arrayrope.rope_frequencies(HEAD_DIM, base=10000.0, rotary_dim=rot)
    bounded = {"max_positions": P} if tables == "stored" else {}
    model = rotary_model(
        freqs,
        target=target,
        layout=layout,
        rank=rank,
        num_heads=HEADS,
        mrope_sections=sections,
        mrope_interleaved=interleaved,
        **bounded,
    )
    assert double_uses(model) == []
    rng = np.random.default_rng(zlib.crc32(repr((target, assignment, layout, rot, rank, tables)).encode()))
    ids = image_ids(len(sections), 2, rng=rng)
    ids[:, 1, -4:] = rng.integers(0, P, (len(sections), 4))  # unrelated ids on every axis
    if tables == "computed":
        ids[:, 0, -1] = [1_000_003 * (a + 1) for a in range(len(sections))]  # far beyond any table
        ids[:, 1, 0] = [-3 - 1000 * a for a in range(len(sections))]  # negative ids turn backwards
    x = inputs(rng, rank, 2, ids.shape[-1])
    expected = oracle(freqs, x, ids, sections, interleaved, layout, rank, HEADS, P if bounded else -(1 << 30))
    for run in runs(model, target):
        (y,) = run(None, {"x": x, "position_ids": ids})
        assert y.dtype == x.dtype and y.shape == x.shape
        check(y, expected, "float32")


def complex_rotation(x, ids, inv_freq, sections, interleaved, layout):
    """M-RoPE by hand: pair k of each token is the complex number (first + i second partner), multiplied by
    exp(i * id * theta_k) with the id of the axis Qwen assigns it (consecutive sections; Qwen3-VL: pair k takes
    axis a >= 1 when k mod n == a and k < n * sections[a])."""
    n, pairs = len(sections), len(inv_freq)
    if interleaved:
        axis = np.zeros(pairs, dtype=int)
        for a in range(1, n):
            axis[a : n * sections[a] : n] = a
    else:
        axis = np.concatenate([np.full(s, a) for a, s in enumerate(sections)])
    angles = ids[axis, :, :].transpose(1, 2, 0) * inv_freq  # (B, S, pairs)
    x = np.asarray(x, dtype=np.float64)
    first = np.arange(pairs) * 2 if layout == "interleaved" else np.arange(pairs)
    second = first + 1 if layout == "interleaved" else first + pairs
    z = (x[..., first] + 1j * x[..., second]) * np.exp(1j * angles)[:, None]
    out = x.copy()
    out[..., first], out[..., second] = z.real, z.imag
    return out


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_a_hand_written_complex_rotation_agrees(interleaved, layout):
    """Qwen2-VL's (16, 24, 24) and Qwen3-VL's (24, 20, 20) sections of 64 pairs, head_dim 128."""
    sections = (24, 20, 20) if interleaved else (16, 24, 24)
    model = rotary_model(
        128,
        target="portable",
        layout=layout,
        max_positions=4096,
        mrope_sections=sections,
        mrope_interleaved=interleaved,
    )
    rng = np.random.default_rng(8)
    ids = rng.integers(0, 4096, (3, 2, 9))
    x = rng.standard_normal((2, 2, 9, 128)).astype(np.float32)
    inv_freq = 10000.0 ** (-np.arange(0, 128, 2) / 128)
    expected = complex_rotation(x, ids, inv_freq, sections, interleaved, layout)
    (y,) = session(model).run(None, {"x": x, "position_ids": ids})
    check(y, expected, "float32")


@pytest.mark.parametrize("tables", ["stored", "computed"])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_text_ids_are_the_plain_export(target, tables, dtype):
    """Every axis equal: the plain 1-D model's output, bit for bit (the selection does no arithmetic)."""
    bounded = {"max_positions": P} if tables == "stored" else {}
    common = dict(target=target, num_heads=HEADS, dtype=dtype, layout="interleaved", rotary_dim=24, **bounded)
    mrope = rotary_model(HEAD_DIM, mrope_sections=(4, 4, 4), mrope_interleaved=True, **common)
    plain = rotary_model(HEAD_DIM, **common)
    rng = np.random.default_rng(3)
    pos = rng.integers(0, P, (2, 7))
    x = inputs(rng, 4, 2, 7, dtype)
    for run_m, run_p in zip(runs(mrope, target), runs(plain, target), strict=True):
        (y,) = run_m(None, {"x": x, "position_ids": np.stack([pos] * 3)})
        (want,) = run_p(None, {"x": x, "position_ids": pos})
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("tables", ["stored", "computed"])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_other_dtypes(target, tables, dtype):
    """float16 and bfloat16 within 4 ulps of the float64 core (bfloat16: ONNX Runtime's CPU provider runs the
    portable graph, and has no bfloat16 kernel for either rotary node; the reference evaluator runs the standard
    ones), float64 on the portable target; no float64
    in a narrower graph, and no arithmetic op in the narrow dtype but the fused rotary node."""
    if dtype == "float64" and target != "portable":
        with pytest.raises(ValueError, match="dtype='float64' cannot be carried by target"):
            rotary_model(HEAD_DIM, target=target, dtype=dtype, mrope_sections=(8, 4, 4))
        return
    bounded = {"max_positions": P} if tables == "stored" else {}
    model = rotary_model(HEAD_DIM, target=target, dtype=dtype, num_heads=HEADS, mrope_sections=(8, 4, 4), **bounded)
    freqs = arrayrope.rope_frequencies(HEAD_DIM)
    rng = np.random.default_rng(zlib.crc32(repr((target, tables, dtype)).encode()))
    ids = image_ids(3, 4, text=10, grid=(4, 6), after=6, rng=rng)
    x = inputs(rng, 4, 4, ids.shape[-1], dtype)
    expected = oracle(freqs, x, ids, (8, 4, 4), False, "half", 4, HEADS, P if bounded else -(1 << 30))
    if dtype != "float64":
        assert double_uses(model) == []
    if target != "ort":  # onnx infers no types past the contrib op
        inferred = onnx.shape_inference.infer_shapes(model).graph
        typed = {v.name: v.type.tensor_type.elem_type for v in [*inferred.value_info, *inferred.output]}
        narrow = {n.op_type for n in model.graph.node if any(typed.get(o) == onnx_dtype(dtype) for o in n.output)}
        if dtype != "float64":
            moves = {"Cast", "Reshape", "Gather", "GatherElements", "Concat", "Squeeze", "RotaryEmbedding"}
            assert narrow <= moves, narrow
    if dtype == "bfloat16":
        from arrayrope.export._validate import _run_bound

        feed = {"x": x, "position_ids": ids}
        if target == "portable":
            check(_run_bound(session(model), feed)[0], expected, dtype)
        else:  # no CPU kernel: the session is refused, never a wrong result
            with pytest.raises(Exception, match=r"NOT_IMPLEMENTED|Could not find an implementation"):
                session(model)
        if target != "ort":  # the reference evaluator runs bfloat16 (not the contrib op)
            (y,) = ReferenceEvaluator(model).run(None, feed)
            check(y, expected, dtype)
        return
    for run in runs(model, target):
        (y,) = run(None, {"x": x, "position_ids": ids})
        assert y.dtype == x.dtype
        check(y, expected, dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tables", ["stored", "computed"])
def test_an_id_outside_the_table_on_one_axis_is_nan_in_that_axis_pairs(target, tables):
    """The guard works per axis: the pairs the outside axis turns are NaN, the others rotate as always."""
    bounded = {"max_positions": P} if tables == "stored" else {}
    limit = P if bounded else -(1 << 30)
    far = [P, -1, 2**40] if bounded else [1 << 30, -(1 << 30), 2**40]
    sections = (2, 3, 3)
    model = rotary_model(HEAD_DIM, target=target, rotary_dim=16, num_heads=HEADS, mrope_sections=sections, **bounded)
    freqs = arrayrope.rope_frequencies(HEAD_DIM, rotary_dim=16)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, P, (3, 1, 6))
    ids[1, 0, :3] = far  # height axis outside the table at tokens 0..2
    x = inputs(rng, 4, 1, 6)
    expected = oracle(freqs, x, ids, sections, False, "half", 4, HEADS, limit)
    nan_pairs = np.isnan(expected[0, 0, 0, :8])
    assert nan_pairs.tolist() == [False, False, True, True, True, False, False, False]
    for run in runs(model, target):
        (y,) = run(None, {"x": x, "position_ids": ids})
        check(y, expected, "float32")
        np.testing.assert_array_equal(y[..., 16:], x[..., 16:])  # pass-through features untouched


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("target", TARGETS)
def test_batch_and_sequence_are_dynamic_and_qk_share_the_selection(target, interleaved):
    """One model at several (batch, seq), queries and grouped keys selecting cos/sin once: consecutive sections
    by concatenating per-axis rows, interleaved ones by one GatherElements each."""
    sections = (6, 5, 5) if interleaved else (4, 6, 6)
    model = rotary_model(
        HEAD_DIM,
        target=target,
        qk=True,
        num_heads=4,
        num_kv_heads=2,
        max_positions=P,
        mrope_sections=sections,
        mrope_interleaved=interleaved,
    )
    pos_input = model.graph.input[2]
    dims = [d.dim_value or d.dim_param for d in pos_input.type.tensor_type.shape.dim]
    assert (pos_input.name, pos_input.type.tensor_type.elem_type, dims) == (
        "position_ids",
        TensorProto.INT64,
        [3, "batch", "seq"],
    )
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("GatherElements" if interleaved else "Concat") == 2  # cos and sin, once for q and k
    freqs = arrayrope.rope_frequencies(HEAD_DIM)
    rng = np.random.default_rng(5)
    sess = session(model)
    for batch, seq in ((1, 1), (3, 11), (2, 4)):
        ids = rng.integers(0, P, (3, batch, seq))
        q, k = inputs(rng, 4, batch, seq, heads=4), inputs(rng, 4, batch, seq, heads=2)
        q_rot, k_rot = sess.run(None, {"q": q, "k": k, "position_ids": ids})
        check(q_rot, oracle(freqs, q, ids, sections, interleaved, "half", 4, 4, P), "float32")
        check(k_rot, oracle(freqs, k, ids, sections, interleaved, "half", 4, 2, P), "float32")


def test_spliced_and_as_a_function():
    """add_rotary reads a (3, B, S) position tensor of the graph; rotary_function takes one as its input."""
    freqs = arrayrope.rope_frequencies(HEAD_DIM, base=1e6)
    sections = (4, 6, 6)
    t = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["q"]), helper.make_node("Identity", ["q"], ["out"])],
        "g",
        [t("x", TensorProto.FLOAT, ["B", "S", HEADS * HEAD_DIM]), t("ids", TensorProto.INT64, [3, "B", "S"])],
        [t("out", TensorProto.FLOAT, ["B", "S", HEADS * HEAD_DIM])],
    )
    base = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    spliced = add_rotary(base, q="q", position_ids="ids", freqs=freqs, num_heads=HEADS, mrope_sections=sections)
    rng = np.random.default_rng(6)
    ids = image_ids(3, 2, rng=rng)
    x = inputs(rng, 3, 2, ids.shape[-1])
    (y,) = session(spliced).run(None, {"x": x, "ids": ids})
    check(y, oracle(freqs, np.maximum(x, 0), ids, sections, False, "half", 3, HEADS, -(1 << 30)), "float32")
    with pytest.raises(ValueError, match=r"need position_ids=True"):
        add_rotary(base, q="q", freqs=freqs, num_heads=HEADS, mrope_sections=sections)

    f = rotary_function(freqs, target="portable", max_positions=P, mrope_sections=sections)
    node = helper.make_node("RotaryEmbedding", ["a", "p"], ["b"], domain="arrayrope")
    heads = t("a", TensorProto.FLOAT, ["B", HEADS, "S", HEAD_DIM])
    g = helper.make_graph(
        [node], "g", [heads, t("p", TensorProto.INT64, [3, "B", "S"])], [t("b", TensorProto.FLOAT, None)]
    )
    m = helper.make_model(
        g, functions=[f], ir_version=8, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("arrayrope", 1)]
    )
    x4 = inputs(rng, 4, 2, ids.shape[-1])
    (y,) = session(m).run(None, {"a": x4, "p": ids})
    check(y, oracle(freqs, x4, ids, sections, False, "half", 4, HEADS, P), "float32")


@pytest.mark.parametrize(
    "options,message",
    [
        ({"mrope_sections": (4, 6, 5)}, r"mrope_sections=\[4, 6, 5\] sum to 15, but rotary_dim // 2 = 16 pairs"),
        ({"mrope_sections": (4, 4), "rotary_dim": 24}, r"sum to 8, but rotary_dim // 2 = 12 pairs rotate; consecutive"),
        ({"mrope_sections": (4, 6, 6), "position_ids": False}, r"shape \(3, batch, seq\): they need position_ids"),
    ],
)
def test_sections_are_checked_against_the_frequencies(options, message):
    with pytest.raises(ValueError, match=message):
        rotary_model(HEAD_DIM, **options)


@pytest.mark.parametrize("target", TARGETS)
def test_interleaved_sections_may_cover_fewer_pairs(target):
    """Interleaved sections bound each axis's pairs (Qwen3-VL's slices): the pairs past them turn by axis 0."""
    sections = (3, 4, 4)  # 11 of 16 pairs named; pairs 12..15 (and 0, 3, 6, 9) by axis 0
    model = rotary_model(
        HEAD_DIM, target=target, num_heads=HEADS, max_positions=P, mrope_sections=sections, mrope_interleaved=True
    )
    rng = np.random.default_rng(5)
    ids, x = rng.integers(0, P, (3, 2, 5)), inputs(rng, 4, 2, 5)
    (y,) = session(model).run(None, {"x": x, "position_ids": ids})
    freqs = arrayrope.rope_frequencies(HEAD_DIM)
    check(y, oracle(freqs, x, ids, sections, True, "half", 4, HEADS, P), "float32")
    axis_of = np.zeros(16, int)  # Qwen3-VL's rule written out: h takes k = 1 mod 3 below 12, w k = 2 mod 3 below 12
    axis_of[[1, 4, 7, 10]], axis_of[[2, 5, 8, 11]] = 1, 2
    angles = np.stack([ids[a] for a in axis_of], axis=-1) * freqs.inv_freq  # (B, S, pairs)
    cos, _ = arrayrope.mrope_tables(freqs, ids, sections=sections, interleaved=True, dtype=np.float64)
    np.testing.assert_allclose(cos, np.cos(angles), rtol=0, atol=1e-12)


def test_the_metadata_keeps_the_sections():
    """What validate and arrayrope check read back from a model file: the sections and their assignment."""
    from arrayrope.export.build._spec import META_KEY, Spec

    model = rotary_model(HEAD_DIM, max_positions=P, mrope_sections=[6, 5, 5], mrope_interleaved=True)
    spec = Spec.from_json({p.key: p.value for p in model.metadata_props}[META_KEY])
    assert (spec.options.mrope_sections, spec.options.mrope_interleaved) == ((6, 5, 5), True)
    assert "mrope_sections=[6, 5, 5] (interleaved=True)" in model.graph.doc_string


@pytest.mark.parametrize("target", TARGETS)
def test_one_axis_is_plain_rope(target):
    """A single section of every pair: ids (1, batch, seq) rotate as the plain model's (batch, seq)."""
    common = dict(target=target, num_heads=HEADS, max_positions=P)
    rng = np.random.default_rng(9)
    pos, x = rng.integers(0, P, (2, 5)), inputs(rng, 4, 2, 5)
    (y,) = session(rotary_model(HEAD_DIM, mrope_sections=[16], **common)).run(None, {"x": x, "position_ids": pos[None]})
    (want,) = session(rotary_model(HEAD_DIM, **common)).run(None, {"x": x, "position_ids": pos})
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tables", ["stored", "computed"])
def test_validate_verifies_mrope_models(target, tables):
    """validate's own reference (the core's mrope_tables) agrees with every target's graph."""
    from arrayrope.export import validate

    kw = {"max_positions": P} if tables == "stored" else {}
    model = rotary_model(HEAD_DIM, target=target, mrope_sections=[6, 5, 5], mrope_interleaved=True, **kw)
    assert validate(model, providers="cpu").status == "verified"


def test_validate_fails_a_model_whose_sections_are_not_the_ones_it_states():
    """A graph of consecutive sections stated as interleaved: validate's reference differs, and it says so."""
    from arrayrope.export import ValidationError, validate
    from arrayrope.export.build._spec import META_KEY

    model = rotary_model(HEAD_DIM, target="portable", max_positions=P, mrope_sections=[6, 5, 5])
    for prop in model.metadata_props:
        if prop.key == META_KEY:
            prop.value = prop.value.replace('"mrope_interleaved": false', '"mrope_interleaved": true')
    assert '"mrope_interleaved": true' in {p.key: p.value for p in model.metadata_props}[META_KEY]
    with pytest.raises(ValidationError, match="FAIL"):
        validate(model, providers="cpu")


def test_arrayrope_check_verifies_an_mrope_model_file(tmp_path, capsys):
    import onnx

    from arrayrope import cli

    path = tmp_path / "mrope.onnx"
    onnx.save(rotary_model(HEAD_DIM, max_positions=P, mrope_sections=[6, 5, 5]), path)
    assert cli.main(["check", str(path), "--provider", "cpu"]) == 0
    assert "verdict: verified" in capsys.readouterr().out
