"""fuse_rotary on graphs written here in the forms exporters use, and on graphs that only look like RoPE.

Oracles: explicit rotation matrices (tests.helpers) for what a fused model
computes, and the untouched input model for what must not change.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from arrayrope.cli import main  # noqa: E402
from arrayrope.export import fuse_rotary, rotary_model  # noqa: E402
from arrayrope.export.fuse import _probe as _fuse_probe  # noqa: E402
from arrayrope.export.fuse import _rewrite as _fuse  # noqa: E402
from helpers import double_uses, inv_freq_formula, rope_by_matrix  # noqa: E402

D, N = 16, 2  # head_dim, heads


class Graph:
    """A small graph under construction: nodes and int64/float32 constants."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, value):
        self.count += 1
        a = np.asarray(value)
        name = f"c{self.count}"
        self.inits.append(
            helper.make_tensor(
                name, TensorProto.FLOAT if a.dtype.kind == "f" else TensorProto.INT64, a.shape, a.ravel().tolist()
            )
        )
        return name

    def op(self, op_type, *inputs, **attrs):
        self.count += 1
        out = f"t{self.count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def model(self, output, axes="bhsd", opset=18):
        dims = ["B", N, "S", D] if axes == "bhsd" else ["B", "S", N, D]
        self.nodes.append(helper.make_node("Identity", [output], ["y"]))
        g = helper.make_graph(
            self.nodes,
            "g",
            [
                helper.make_tensor_value_info("x", TensorProto.FLOAT, dims),
                helper.make_tensor_value_info("pos", TensorProto.INT64, ["B", "S"]),
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
            self.inits,
        )
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def rope_graph(
    layout="half",
    rotate="slice",
    partial=False,
    axes="bhsd",
    x_first=True,
    cos_first=True,
    tables=("Cos", "Sin"),
    sign=1.0,
    rotary=None,
):
    """``x * cos + R(x) * sin`` as exporters write it, with the variants they produce."""
    g = Graph()
    r = rotary or (D // 2 if partial else D)
    h = r // 2
    last = g.const([-1])
    f = g.op(
        "Mul",
        g.op("Cast", g.op("Unsqueeze", "pos", g.const([2])), to=1),
        g.const(inv_freq_formula(r, 10000.0).astype(np.float32)),
    )
    if layout == "half":
        angles = g.op("Concat", f, f, axis=-1)
    else:  # repeat_interleave: each angle twice, side by side
        angles = g.op(
            "Reshape",
            g.op("Concat", g.op("Unsqueeze", f, last), g.op("Unsqueeze", f, last), axis=-1),
            g.const([0, 0, -1]),
        )
    head_axis = g.const([1 if axes == "bhsd" else 2])
    cos, sin = (g.op("Unsqueeze", g.op(op, angles), head_axis) for op in tables)
    x = g.op("Slice", "x", g.const([0]), g.const([r]), last) if partial else "x"
    neg = (lambda t: g.op("Neg", t)) if sign > 0 else (lambda t: t)
    pos_ = (lambda t: t) if sign > 0 else (lambda t: g.op("Neg", t))
    if layout == "half" and rotate == "slice":
        x1 = g.op("Slice", x, g.const([0]), g.const([h]), last)
        x2 = g.op("Slice", x, g.const([h]), g.const([2**62]), last)
        rot = g.op("Concat", neg(x2), pos_(x1), axis=-1)
    elif layout == "half":
        split = helper.make_node("Split", [x, g.const([h, h])], ["a_half", "b_half"], axis=-1)
        g.nodes.append(split)
        rot = g.op("Concat", neg("b_half"), pos_("a_half"), axis=-1)
    else:
        even = g.op("Slice", x, g.const([0]), g.const([r]), last, g.const([2]))
        odd = g.op("Slice", x, g.const([1]), g.const([r]), last, g.const([2]))
        pairs = g.op("Concat", g.op("Unsqueeze", neg(odd), last), g.op("Unsqueeze", pos_(even), last), axis=-1)
        rot = g.op("Reshape", pairs, g.const([0, 0, 0, -1]))
    xc = g.op("Mul", x, cos) if x_first else g.op("Mul", cos, x)
    rs = g.op("Mul", rot, sin) if x_first else g.op("Mul", sin, rot)
    y = g.op("Add", xc, rs) if cos_first else g.op("Add", rs, xc)
    if partial:
        y = g.op("Concat", y, g.op("Slice", "x", g.const([r]), g.const([D]), last), axis=-1)
    return g.model(y, axes)


def run(model, x, pos):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "pos": pos}
    )[0]


def oracle(x, pos, layout, rotary, axes):
    x4 = x if axes == "bhsd" else np.swapaxes(x, 1, 2)
    inv = inv_freq_formula(rotary, 10000.0)
    y = np.stack([rope_by_matrix(x4[b], pos[b], inv, layout) for b in range(x.shape[0])])
    return y if axes == "bhsd" else np.swapaxes(y, 1, 2)


def sample(axes, batch=2, seq=6, top=64, seed=0):
    rng = np.random.default_rng(seed)
    shape = (batch, N, seq, D) if axes == "bhsd" else (batch, seq, N, D)
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, top, (batch, seq))


VARIANTS = [  # layout, R written with, partial rotary, axes, Mul operand order, Add operand order
    ("half", "slice", False, "bhsd", True, True),  # Llama as torch.onnx.export writes it
    ("half", "split", True, "bhsd", False, True),  # GPT-NeoX partial rotary, Split
    ("half", "slice", False, "bshd", True, False),  # heads after the sequence, Add operands swapped
    ("interleaved", "slice", True, "bshd", False, False),  # GPT-J: interleaved partial rotary
]


@pytest.mark.parametrize("layout,rotate,partial,axes,x_first,cos_first", VARIANTS)
@pytest.mark.parametrize("target", ["onnx23", "ort"])
def test_variants_fuse_to_one_node(layout, rotate, partial, axes, x_first, cos_first, target):
    model = rope_graph(layout, rotate, partial, axes, x_first, cos_first)
    before = model.SerializeToString()
    fused, report = fuse_rotary(model, target=target, max_positions=64, providers="cpu")
    assert model.SerializeToString() == before  # the input is untouched
    ops = collections.Counter(n.op_type for n in fused.graph.node)
    assert ops["RotaryEmbedding"] == 1 and not {"Cos", "Sin", "Neg"} & set(ops) and double_uses(fused) == []
    assert report.fused == 1 and report.ok and report.validation.rows  # type: ignore[union-attr]
    (rotation,) = report.rotations
    assert (rotation.layout, rotation.rotary_dim, rotation.head_dim, rotation.heads, rotation.base) == (
        layout,
        D // 2 if partial else D,
        D,
        N,
        10000.0,
    )
    domain = {n.domain for n in fused.graph.node if n.op_type == "RotaryEmbedding"}
    assert domain == ({""} if target == "onnx23" else {"com.microsoft"})
    assert _fuse._opset(fused) == (23 if target == "onnx23" else 18)
    x, pos = sample(axes)
    assert np.max(np.abs(run(fused, x, pos) - oracle(x, pos, layout, rotation.rotary_dim, axes))) <= 1e-5


def test_exact_caches_fix_the_float32_recipe_at_long_positions():
    model = rope_graph()
    rows = 1 << 17
    fused, report = fuse_rotary(model, max_positions=rows, providers="cpu")
    x, pos = sample("bhsd", top=rows, seed=1)
    want = oracle(x, pos, "half", D, "bhsd")
    assert np.max(np.abs(run(model, x, pos) - want)) > 1e-3  # float32 angles at ~1e5
    assert np.max(np.abs(run(fused, x, pos) - want)) <= 2e-6
    assert report.rotations[0].tables == f"stored, {rows} rows"


def test_model_tables_keep_the_model_computation():
    fused, report = fuse_rotary(rope_graph("interleaved", partial=True), tables="model", providers="cpu")
    ops = collections.Counter(n.op_type for n in fused.graph.node)
    assert ops["RotaryEmbedding"] == 1 and ops["Cos"] == 1 and report.rotations[0].tables == "the model's"
    x, pos = sample("bhsd")
    assert np.max(np.abs(run(fused, x, pos) - oracle(x, pos, "interleaved", D // 2, "bhsd"))) <= 1e-5
    _, refused = fuse_rotary(rope_graph(), target="ort", tables="model", validate=False)
    assert refused.fused == 0 and "2-D caches" in refused.rotations[0].reason


LOOKALIKES = {  # a graph with RoPE's shape that is no RoPE -> the reason it is left alone
    "the sine turned the other way": (dict(sign=-1.0), "opposite sign"),
    "cos where the sine should be": (dict(tables=("Cos", "Cos")), "no rotary embedding: pairs are scaled"),
    "Sin where the cosine should be": (dict(tables=("Sin", "Sin")), "no rotary embedding"),
}


@pytest.mark.parametrize("case", list(LOOKALIKES))
def test_lookalikes_are_left_alone(case):
    kwargs, reason = LOOKALIKES[case]
    model = rope_graph(**kwargs)
    fused, report = fuse_rotary(model, providers="cpu")
    assert report.fused == 0 and len(report.rotations) == 1 and reason in report.rotations[0].reason
    assert [n.op_type for n in fused.graph.node] == [n.op_type for n in model.graph.node]
    assert report.status == "not verified" and not report.ok  # nothing fused: nothing was verified


def mla_graph(passing=0):
    """DeepSeek's interleaved MLA as torch.onnx.export writes it: ``Concat(a C - b S, b C + a S)`` of the even
    features ``a`` and the odd ones ``b`` (output in half-split order), after ``passing`` features that pass
    through (``q_pass``) in the same Concat."""
    g = Graph()
    last = g.const([-1])
    width = D - passing
    f = g.op(
        "Mul",
        g.op("Cast", g.op("Unsqueeze", "pos", g.const([2])), to=1),
        g.const(inv_freq_formula(width, 10000.0).astype(np.float32)),
    )
    cos, sin = (g.op("Unsqueeze", g.op(op, f), g.const([1])) for op in ("Cos", "Sin"))
    x = g.op("Slice", "x", g.const([passing]), g.const([D]), last) if passing else "x"
    a = g.op("Slice", x, g.const([0]), g.const([width]), last, g.const([2]))
    b = g.op("Slice", x, g.const([1]), g.const([width]), last, g.const([2]))
    first = g.op("Sub", g.op("Mul", a, cos), g.op("Mul", b, sin))
    second = g.op("Add", g.op("Mul", b, cos), g.op("Mul", a, sin))
    parts = [g.op("Slice", "x", g.const([0]), g.const([passing]), last)] if passing else []
    return g.model(g.op("Concat", *parts, first, second, axis=-1))


@pytest.mark.parametrize("passing", [0, 4])
def test_deepseek_interleaved_mla_fuses_to_a_gather_and_one_node(passing):
    """The half-split order of its output is a Gather of the input before a half-split fused node."""
    g = mla_graph(passing)
    fused, report = fuse_rotary(g, max_positions=64, providers="cpu")
    assert report.fused == 1 and report.ok, report
    (rotation,) = report.rotations
    assert rotation.node.startswith("Gather (interleaved pairs to half-split order)") and rotation.layout == "half"
    ops = collections.Counter(n.op_type for n in fused.graph.node)
    assert ops["RotaryEmbedding"] == 1 and ops["Gather"] == 1 and not {"Cos", "Sin", "Sub"} & set(ops)
    x, pos = sample("bhsd")
    rotated = oracle(x[..., passing:], pos, "interleaved", D - passing, "bhsd")  # rotary dim over its own width
    want = np.concatenate([x[..., :passing], rotated[..., 0::2], rotated[..., 1::2]], axis=-1)
    assert np.max(np.abs(run(fused, x, pos) - want)) <= 1e-5


def test_a_cos_table_no_known_rotation_reads_is_reported_with_the_reason():
    g = Graph()
    f = g.op(
        "Mul",
        g.op("Cast", g.op("Unsqueeze", "pos", g.const([2])), to=1),
        g.const(inv_freq_formula(D, 10000.0).astype(np.float32)),
    )
    cos, sin = (g.op("Unsqueeze", g.op(op, g.op("Concat", f, f, axis=-1)), g.const([1])) for op in ("Cos", "Sin"))
    y = g.op("Add", g.op("Mul", "x", cos), g.op("Mul", "x", sin))  # no feature moves: no rotation
    _, report = fuse_rotary(g.model(y), providers="cpu")
    assert report.fused == 0 and len(report.rotations) == 1 and report.status == "not verified"
    assert "feeds no rotation of a form fuse_rotary knows" in report.rotations[0].reason


def test_tables_without_positions_are_left_alone():
    g = Graph()
    angles = g.const(np.random.default_rng(0).uniform(0, 3, (1, 1, 6, D)).astype(np.float32))
    cos, sin = g.op("Cos", angles), g.op("Sin", angles)
    last = g.const([-1])
    x1 = g.op("Slice", "x", g.const([0]), g.const([D // 2]), last)
    x2 = g.op("Slice", "x", g.const([D // 2]), g.const([D]), last)
    y = g.op("Add", g.op("Mul", "x", cos), g.op("Mul", g.op("Concat", g.op("Neg", x2), x1, axis=-1), sin))
    _, report = fuse_rotary(g.model(y), validate=False, inputs=dict(zip(("x", "pos"), sample("bhsd"), strict=True)))
    assert report.fused == 0 and "no integer positions" in report.rotations[0].reason


def test_portable_arrayrope_graph_and_an_already_fused_model():
    portable = rotary_model(D, rotary_dim=12, layout="interleaved", target="portable", max_positions=64)
    fused, report = fuse_rotary(portable, max_positions=64, providers="cpu")
    # one fused node, after the guard that sends ids outside the caches to their NaN row
    assert [n.op_type for n in fused.graph.node] == ["Clip", "Mod", "RotaryEmbedding"] and report.nodes_before > 1
    again, second = fuse_rotary(fused, providers="cpu")
    assert second.fused == 0 and "already a fused" in second.rotations[0].reason
    assert list(again.graph.node) == list(fused.graph.node)


def test_models_past_protobufs_limit_run_from_a_file(monkeypatch):
    monkeypatch.setattr(_fuse_probe, "_PROTOBUF_LIMIT", 1)  # every model counts as too large to pass in memory
    model = rope_graph(partial=True)
    fused, report = fuse_rotary(model, max_positions=64, providers="cpu")
    assert report.fused == 1 and report.ok
    # the tensors of both models stay in memory (saving with external data moves them out of the proto it saves)
    assert all(
        t.data_location != onnx.TensorProto.EXTERNAL for t in [*model.graph.initializer, *fused.graph.initializer]
    )


def test_validation_names_a_missing_provider_as_skipped(monkeypatch):
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    _, report = fuse_rotary(rope_graph(), providers=["cuda", "cpu"])
    assert [r.device for r in report.validation.rows] == ["CPU"] and report.ok  # type: ignore[union-attr]
    assert [what for what, _ in report.validation.skipped] == ["onnxruntime CUDA"]  # type: ignore[union-attr]


def test_bad_arguments():
    model = rope_graph()
    with pytest.raises(ValueError, match="target must be one of"):
        fuse_rotary(model, target="onnx")
    with pytest.raises(ValueError, match="tables must be one of"):
        fuse_rotary(model, tables="float32")
    with pytest.raises(ValueError, match="max_positions"):
        fuse_rotary(model, max_positions=0)
    with pytest.raises(TypeError, match="model must be"):
        fuse_rotary(42)
    with pytest.raises(ValueError, match=r"^tables='stored' stores max_positions rows: pass max_positions"):
        fuse_rotary(model, tables="stored")
    with pytest.raises(ValueError, match=r"^max_positions=64 bounds stored tables, and tables='computed' stores none"):
        fuse_rotary(model, tables="computed", max_positions=64)


@pytest.mark.parametrize(
    "rows, tables, words",
    [
        (64, None, "stored, 64 rows"),
        (None, None, "computed from the position ids"),
        (64, "stored", "stored, 64 rows"),
        (None, "computed", "computed from the position ids"),
    ],
)
def test_tables_default_to_stored_with_a_bound_and_computed_without(rows, tables, words):
    """One vocabulary with ExportOptions: the bound decides where the tables come from, unless tables= says."""
    fused, report = fuse_rotary(rope_graph(), tables=tables, max_positions=rows, providers="cpu")
    assert report.fused == 1 and report.ok and report.tables == ("stored" if rows else "computed")
    assert report.rotations[0].tables == words
    assert ("Cos" in {n.op_type for n in fused.graph.node}) is False


def test_cli_writes_the_fused_model_and_reports_each_rotation(tmp_path, capsys):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(rope_graph(partial=True), src)
    assert main(["export", "fuse", str(src), "-o", str(out), "--max-positions", "128", "--provider", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "1 rotary application, 1 fused" in text and "fused t" in text and "rotary_dim 8 of 16" in text
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Clip", "Mod", "RotaryEmbedding", "Identity"]
    assert main(["export", "fuse", str(tmp_path / "missing.onnx"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("arrayrope export fuse: error: model ") and len(err.strip().splitlines()) == 1
    assert main(["export", "--head-dim", "8"]) == 2  # the export command without fuse still needs -o


def test_inputs_the_model_does_not_run_on(tmp_path, capsys):
    model = rope_graph()
    bad = {"x": np.ones((1, N, 4, D), np.float32), "pos": np.zeros((1, 5), np.int64)}  # 4 tokens, 5 positions
    with pytest.raises(ValueError, match="does not run on the given inputs"):
        fuse_rotary(model, inputs=bad)
    src, feed = tmp_path / "in.onnx", tmp_path / "feed.npz"
    onnx.save(model, src)
    np.savez(feed, **bad)
    assert main(["export", "fuse", str(src), "-o", str(tmp_path / "out.onnx"), "--inputs", str(feed)]) == 2
    assert "pass --inputs with a feed" in capsys.readouterr().err
    x, pos = sample("bhsd")
    np.savez(feed, x=x, pos=pos)
    assert main(["export", "fuse", str(src), "-o", str(tmp_path / "out.onnx"), "--inputs", str(feed)]) == 0


def test_probes_stay_within_the_rows_of_the_model_s_tables(tmp_path, capsys):
    """A model whose stored tables hold 64 rows (NaN past them) is measured on positions 0..63 and fused: probing
    further measured NaN and left it alone."""
    model = rotary_model(16, target="portable", max_positions=64)
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    assert main(["export", "fuse", str(src), "-o", str(out), "--provider", "cpu"]) == 0
    assert "1 of 1 rotary application fused" in capsys.readouterr().out and out.exists()


@pytest.mark.parametrize(("bound", "fused"), [(4096, 0), (2048, 1)])
def test_tables_wrong_only_at_far_positions_within_the_bound_are_left_alone(bound, fused, tmp_path):
    """Stored tables right up to position 2999 and wrong from 3000 on: a bound of 4096 reaches the wrong rows, so the
    rotation is left alone; a bound of 2048 never does, and it is fused."""
    model = rotary_model(16, target="portable", max_positions=4096)
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" and a.ndim >= 2 and a.shape[0] >= 4096:
            a = a.copy()
            a[3000:] = a[3000:][::-1]  # rows of other positions
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    report = fuse_rotary(model, max_positions=bound, providers="cpu").report
    assert report.fused == fused, report
    if not fused:
        assert report.status == "not verified" and report.validation is None
        assert "its stored tables differ from a rotation of fixed frequencies at position" in report.rotations[0].reason


def test_attention_that_does_not_rotate_is_not_reported_as_rotating(tmp_path, capsys):
    """GroupQueryAttention with do_rotary=0 leaves queries and keys as they are: nothing to fuse, and no word of
    attention that rotates."""
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "exporters", "genai", "qwen2", "model.onnx")
    model = onnx.load(path)
    nodes = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    for node in nodes:
        next(a for a in node.attribute if a.name == "do_rotary").i = 0
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, src)
    assert nodes and main(["export", "fuse", str(src), "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        "arrayrope export fuse: error: nothing to fuse: no rotary embedding found "
        "(no cos/sin tables applied to a tensor, no rotary node)"
    )
    assert not out.exists()


def test_cli_does_not_write_a_model_that_fails_validation(tmp_path, capsys, monkeypatch):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(rope_graph(), src)
    monkeypatch.setattr(_fuse, "SAME", {"float32": -1.0})  # the whole-model comparison fails
    assert main(["export", "fuse", str(src), "-o", str(out)]) == 1
    assert not out.exists() and "not written" in capsys.readouterr().out


def test_cli_checks_its_arguments_before_any_work(tmp_path, capsys, monkeypatch):
    """A bound the checks cannot run under and an output folder that does not exist are refused at once, naming
    the option; before, the first failed inside ONNX Runtime and the second after the whole fusion."""
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(rope_graph(), src)
    assert main(["export", "fuse", str(src), "-o", str(out), "--max-positions", "2"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "arrayrope export fuse: error: --max-positions 2 is below the 8 positions of the sample inputs the "
        "fusion is checked with (the exact caches must hold a row for every position a model runs at); "
        "use --max-positions >= 8\n"
    )
    assert main(["export", "fuse", str(src), "-o", str(out), "--max-positions", "8", "--provider", "cpu"]) == 0
    capsys.readouterr()

    def never(*args, **kwargs):
        raise AssertionError("fuse_rotary ran before the arguments were checked")

    monkeypatch.setattr("arrayrope.export.fuse_rotary", never)
    for argv, message in [
        (["-o", str(tmp_path / "missing" / "out.onnx")], f"-o {tmp_path / 'missing' / 'out.onnx'}: the folder "),
        (["-o", str(out), "--max-positions", "0"], "--max-positions must be a positive int, got 0"),
        (["-o", str(tmp_path)], f"-o {tmp_path}: is a folder"),
        (["-o", str(out), "--inputs", str(tmp_path / "feed.npz")], f"--inputs {tmp_path / 'feed.npz'}: does not exist"),
    ]:
        assert main(["export", "fuse", str(src), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"arrayrope export fuse: error: {message}") and err.count("\n") == 1, err


def test_cli_verdicts_of_a_fusion_not_compared(tmp_path, capsys):
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(rope_graph(), src)
    assert main(["export", "fuse", str(src), "-o", str(out), "--no-validate"]) == 3
    assert (
        "verdict: not verified: the fused model was not compared with the original (--no-validate)"
        in (capsys.readouterr().out)
        and out.exists()
    )
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert main(["export", "fuse", str(src), "-o", str(out), "--provider", "cuda"]) == 3
        assert "verdict: not verified: --provider cuda could not run here" in capsys.readouterr().out


def test_a_fused_model_that_fails_to_run_is_a_failure_not_a_skip():
    from arrayrope.export.fuse._rewrite import _validation

    model = rope_graph()
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    broken.graph.node[-1].op_type = "NoSuchOp"
    x, pos = sample("bhsd")
    report = _validation(model, broken, {"x": x, "pos": pos}, "cpu")
    assert report.status == "failed" and "the fused model fails where the original runs" in report.rows[0].note


def narrow(model, elem_type):
    """``model`` with x and y of ``elem_type`` and its tables cast to it after Cos/Sin, as exporters write a
    float16 or bfloat16 model."""
    g = model.graph
    g.input[0].type.tensor_type.elem_type = g.output[0].type.tensor_type.elem_type = elem_type
    nodes = []
    for n in g.node:
        nodes.append(n)
        if n.op_type in ("Cos", "Sin"):
            out = n.output[0]
            n.output[0] = f"{out}_wide"
            nodes.append(helper.make_node("Cast", [f"{out}_wide"], [out], to=elem_type))
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_float16_graphs_fuse_and_agree(layout):
    """A float16 model (tables cast to float16 after Cos/Sin) fuses into a float16 node whose output equals the
    original's within float16 rounding; positions to the table end."""
    model = narrow(rope_graph(layout), TensorProto.FLOAT16)
    fused, report = fuse_rotary(model, max_positions=64, providers="cpu")
    assert report.fused == 1 and report.ok, report
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, N, 7, D)).astype(np.float16)
    pos = np.array([np.arange(7), np.arange(57, 64)])
    got = run(fused, x, pos)
    assert got.dtype == np.float16
    want = np.stack(
        [rope_by_matrix(x[b].astype(np.float64), pos[b], inv_freq_formula(D, 10000.0), layout) for b in range(2)]
    )
    assert np.abs(got.astype(np.float64) - want).max() <= 4 * 2.0**-11 * np.abs(want).max()


def test_a_bfloat16_graph_is_refused_with_the_reason():
    with pytest.raises(
        ValueError, match=r"^input 'x' is bfloat16, and a bfloat16 model cannot be probed: .* no bfloat16 kernels"
    ):
        fuse_rotary(narrow(rope_graph(), TensorProto.BFLOAT16), max_positions=64, providers="cpu")
