"""``arrayrope repair`` on the exporters' wrong models and on faults made from faithful ones.

Oracles: the audit of the repaired model (it measures each rotation against transformers' formulas for the
config, code repair does not run), the exporter's own graph where it was right (optimum's Phi-3 rotates calls
shorter than the original context correctly: the repair must leave those logits as they were), and ONNX
Runtime running the repaired model.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from export.test_audit import caches, fixture, load, replace_constant, set_initializer  # noqa: E402

import arrayrope  # noqa: E402
from arrayrope import cli  # noqa: E402
from arrayrope.export import audit_rotary, repair_rotary, rotary_model  # noqa: E402
from arrayrope.export.fuse._match import Graph  # noqa: E402
from arrayrope.export.fuse._probe import SAMPLE_SEQ, sample_inputs  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures" / "exporters"


@pytest.mark.parametrize(
    ("exporter", "family", "rewritten", "what"),
    [
        ("optimum", "phi3_longrope", 4, "calls reaching position 256 take the long frequencies"),
        ("genai", "qwen2_yarn", 2, "caches of 16384 rows, yarn, base 1e+06, rotary_dim 32"),
    ],
)
def test_the_real_exporters_wrong_models_repair_to_verified(exporter, family, rewritten, what, tmp_path, capsys):
    path, config = fixture(exporter, family)
    out = tmp_path / "repaired.onnx"
    assert audit_rotary(path, config).status == "failed"
    args = ["repair", path, "--config", path.replace("model.onnx", "config.json"), "-o", str(out)]
    assert cli.main(args) == 0
    said = capsys.readouterr().out
    assert f"{rewritten} of {rewritten} rotations rewritten" in said and what in said, said
    report = audit_rotary(str(out), config)  # the file written, audited afresh
    assert report.status == "verified" and len(report.findings) == rewritten, str(report)


def test_stored_tables_of_both_longrope_regimes_repair_to_verified():
    """--max-positions: each regime's exact tables of that many rows, the switch choosing between them."""
    model, config = load("optimum", "phi3_longrope")
    report = repair_rotary(model, config, max_positions=1024).report
    assert report.status == "verified" and report.repaired == 4, str(report)
    assert all("tables stored, 1024 rows" in c.after for c in report.changes)


def test_repaired_longrope_keeps_what_the_export_got_right():
    """optimum's Phi-3 uses the short factors at every length: right below the original context. The repaired
    model gives the export's logits there, and other logits once a call reaches past it."""
    model, config = load("optimum", "phi3_longrope")
    repaired = repair_rotary(model, config).model
    sessions = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model, repaired)
    ]
    original = config["original_max_position_embeddings"]
    for past, same in ((3, True), (original - SAMPLE_SEQ, True), (original + 5, False)):
        feed = sample_inputs(Graph(model), seed=past, past=past)
        want, got = (s.run(["logits"], feed)[0] for s in sessions)
        differs = float(np.max(np.abs(want - got)))
        assert (differs <= 1e-5 * np.max(np.abs(want))) == same, (past, differs)


def test_a_faithful_export_is_kept_as_it_is(tmp_path, capsys):
    """Nothing to rewrite: the model returned is the input's copy, and the command writes nothing: the repair is
    not verified (exit 3), though the audit it reports is."""
    model, config = load("optimum", "llama3")
    repaired, report = repair_rotary(model, config)
    assert report.repaired == 0 and report.status == "verified"
    assert {c.reason for c in report.changes} == {"it matches the config"}
    assert repaired is not model and repaired.SerializeToString() == model.SerializeToString()
    path, _ = fixture("optimum", "llama3")
    out = tmp_path / "repaired.onnx"
    assert cli.main(["repair", path, "--config", path.replace("model.onnx", "config.json"), "-o", str(out)]) == 3
    said = capsys.readouterr().out.splitlines()
    assert said[-1].startswith("verdict: not verified: nothing to repair, the model needs none (4 rotations"), said
    assert "nothing rewritten; the model's audit:" in said and "the repaired model, audited again:" not in said
    assert not out.exists()


def _wrong_base(model, config):
    right = arrayrope.rope_frequencies_from_config(config).inv_freq
    assert replace_constant(model, right, arrayrope.rope_frequencies(32, base=10000.0).inv_freq) == 1


def _llama3_dropped(model, config):
    right = arrayrope.rope_frequencies_from_config(config).inv_freq
    assert replace_constant(model, right, arrayrope.rope_frequencies(32, base=500000.0).inv_freq) == 1


def _yarn_dropped(model, config):
    freqs = arrayrope.rope_frequencies_from_config(config)
    assert replace_constant(model, freqs.inv_freq, arrayrope.rope_frequencies(32, base=1e6).inv_freq) == 1
    assert replace_constant(model, np.array([freqs.attention_factor]), np.array([1.0])) == 2


def _factor_doubled(model, config):
    freqs = arrayrope.rope_frequencies_from_config(config)
    twice = np.array([2 * freqs.attention_factor])
    assert replace_constant(model, np.array([freqs.attention_factor]), twice) == 2


def _factor_dropped(model, config):
    freqs = arrayrope.rope_frequencies_from_config(config)
    assert replace_constant(model, np.array([freqs.attention_factor]), np.array([1.0])) == 2


def _reversed(model, config):
    right = arrayrope.rope_frequencies_from_config(config).inv_freq
    assert replace_constant(model, right, -right) == 1


def _bases_swapped(model, config):
    """Gemma 3's local (layer 0) and global (layer 1, linear scaling) frequencies each in the other's layer."""
    local, full = (arrayrope.rope_frequencies_from_config(config, layer_idx=i).inv_freq for i in (0, 1))
    held = np.full_like(local, 7.0)
    for old, new in ((local, held), (full, local), (held, full)):
        assert replace_constant(model, old, new) == 1


def _scaling_changed(**wrong):
    """The frequencies (and attention factor) of the same scaling with one setting changed: a wrong factor or
    original context."""

    def make(model, config):
        with warnings.catch_warnings():  # yarn warns where its factor and the lengths disagree
            warnings.simplefilter("ignore", UserWarning)
            other = {**config, "rope_scaling": {**config["rope_scaling"], **wrong}}
            right, made = (arrayrope.rope_frequencies_from_config(c) for c in (config, other))
        assert replace_constant(model, right.inv_freq, made.inv_freq) == 1
        if made.attention_factor != right.attention_factor:
            old, new = np.array([right.attention_factor]), np.array([made.attention_factor])
            assert replace_constant(model, old, new) == 2

    return make


def _genai_caches(base, rows=1024):
    def make(model, config):
        cos, sin = caches(arrayrope.rope_frequencies(32, base=base), rows)
        set_initializer(model, "cos_cache", cos)
        set_initializer(model, "sin_cache", sin)

    return make


@pytest.mark.parametrize(
    ("exporter", "family", "fault"),
    [
        ("optimum", "qwen2", _wrong_base),
        ("optimum", "llama3", _llama3_dropped),
        ("optimum", "qwen2_yarn", _yarn_dropped),
        ("optimum", "qwen2_yarn", _factor_doubled),
        ("optimum", "qwen2_yarn", _factor_dropped),
        ("optimum", "llama3", _scaling_changed(factor=4.0)),
        ("optimum", "qwen2_yarn", _scaling_changed(original_max_position_embeddings=2048)),
        ("optimum", "qwen2", _reversed),
        ("optimum", "gemma3", _bases_swapped),
        ("genai", "qwen2", _genai_caches(10000.0)),
        ("genai", "llama3", _genai_caches(500000.0, rows=512)),  # the scaling dropped, the tables truncated
    ],
)
def test_faults_made_from_faithful_exports_repair_to_verified(exporter, family, fault, tmp_path):
    model, config = load(exporter, family)
    fault(model, config)
    path = tmp_path / "fault.onnx"
    onnx.save(model, path)
    assert audit_rotary(str(path), config).status == "failed"
    repaired, report = repair_rotary(str(path), config)
    assert report.status == "verified" and report.repaired == len(report.changes), str(report)
    assert all(c.before for c in report.changes)
    onnx.save(repaired, tmp_path / "repaired.onnx")
    assert audit_rotary(str(tmp_path / "repaired.onnx"), config).status == "verified"
    sess = ort.InferenceSession(repaired.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = sample_inputs(Graph(repaired if exporter == "optimum" else load("optimum", family)[0]))
    if exporter == "genai":  # the optimum export's inputs; GroupQueryAttention takes one sequence with a past
        names = {i.name: i.type for i in sess.get_inputs()}
        feed = {
            k: v[:1].astype(np.int32 if names[k] == "tensor(int32)" else v.dtype) for k, v in feed.items() if k in names
        }
    assert np.isfinite(sess.run(["logits"], feed)[0]).all()


@pytest.mark.parametrize("target", ["portable", "onnx23", "ort"])
def test_float16_rotations_repair_to_float16_nodes(target):
    """A float16 model's rotations are rewritten in float16 (tables computed exactly, then rounded once); the
    repaired node's output against explicit rotation matrices in float64 is within float16 rounding."""
    config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    repaired, report = repair_rotary(rotary_model(16, target=target, max_positions=64, dtype="float16"), config)
    assert report.repaired == 0  # right as exported
    model = rotary_model(16, target=target, max_positions=64, dtype="float16", base=500000.0)
    repaired, report = repair_rotary(model, config)
    assert report.repaired == 1 and report.status == "verified", str(report)
    sess = ort.InferenceSession(repaired.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    x = np.random.default_rng(3).standard_normal((2, 3, 5, 16)).astype(np.float16)  # (batch, heads, seq, dim)
    positions = np.array([[0, 1, 2, 40, 63], [7, 8, 9, 10, 11]])
    feed = {names[0]: x, names[1]: positions.astype(np.int64)}
    got = sess.run(None, feed)[0]
    assert got.dtype == np.float16
    inv = 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16)
    angle = positions[:, None, :, None] * inv  # (batch, 1, seq, pairs)
    x64 = x.astype(np.float64)
    lo, hi = x64[..., :8], x64[..., 8:]
    want = np.concatenate([lo * np.cos(angle) - hi * np.sin(angle), hi * np.cos(angle) + lo * np.sin(angle)], -1)
    assert np.max(np.abs(got - want) / (np.abs(want) + 1)) <= 2e-3  # float16's rounding of cos, sin, products


def test_bfloat16_rotations_in_standard_ops_are_refused_with_the_reason():
    config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    model = rotary_model(16, target="portable", max_positions=64, dtype="bfloat16", base=500000.0)
    with pytest.raises(ValueError, match=r"bfloat16 model cannot be probed: .* use the float16 or float32 export"):
        repair_rotary(model, config)


@pytest.mark.parametrize("dtype", [onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16])
def test_half_precision_caches_repair_in_their_type(dtype):
    """GenAI's caches stored in float16 or bfloat16, truncated and unscaled: the config's caches in the same type."""
    from onnx import helper

    model, config = load("genai", "llama3")
    wrong = caches(arrayrope.rope_frequencies(32, base=500000.0), 512)
    for t in model.graph.initializer:
        if t.name in ("cos_cache", "sin_cache"):
            a = wrong[t.name != "cos_cache"].astype(np.float32)
            t.CopyFrom(helper.make_tensor(t.name, dtype, a.shape, a.ravel().tolist()))
    repaired, report = repair_rotary(model, config)
    assert report.repaired == 2 and report.status == "verified", str(report)
    read = {n.input[i] for n in repaired.graph.node if n.op_type == "GroupQueryAttention" for i in (7, 8)}
    written = [t for t in repaired.graph.initializer if t.name in read]
    assert len(written) == 2 and {t.data_type for t in written} == {dtype}


def test_dynamic_ntk_takes_the_frequencies_of_each_call_s_length(tmp_path, capsys):
    """optimum's export fixes the frequencies of one traced length: repaired, each call takes those of its own
    length, computed in the graph up to the 2048 positions the config implies (or --max-positions), NaN past."""
    path, config = fixture("optimum", "llama_dynamic")
    out = tmp_path / "repaired.onnx"
    assert cli.main(["repair", path, "--config", path.replace("model.onnx", "config.json"), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "4 of 4 rotations rewritten" in said
    assert said.count("take the frequencies of their length (computed in the graph for lengths up to 2048") == 4
    report = repair_rotary(path, config, max_positions=3000).report
    assert report.status == "verified" and "lengths up to 3000" in report.changes[0].after, str(report)
    report = repair_rotary(path, config, max_positions=2**24).report  # tables of 16M lengths: refused, said
    assert report.repaired == 0 and "pass a smaller max_positions" in report.changes[0].reason, str(report)


def test_frequencies_of_the_call_s_length_are_exact_in_float32():
    """The graph's cos/sin for dynamic NTK against float64 cos and sin of the registry's frequencies for the
    call's length (the oracle; its own error ~1e-16): within 3e-7 at every position up to 16384 (Llama 2's head
    of 128, factor 4 over 4096), where float32 angles are 1e-3 off; negative ids turn backwards; NaN for calls
    longer than the lengths given."""
    from onnx import TensorProto, helper

    from arrayrope.export.build._builder import Builder
    from arrayrope.export.build._lengths import ByLength, by_length_cos_sin, by_length_rows

    config = {
        "head_dim": 128,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "dynamic", "factor": 4.0},
    }
    lengths = (4097, 7001, 16384)
    freqs = {n: arrayrope.rope_frequencies_from_config(config, seq_len=n).inv_freq for n in lengths}
    rows = np.stack([freqs[n] if n in freqs else np.full(64, 7.0) for n in range(4097, 16385)])
    b = Builder("t/")
    by = ByLength(4097, rows, np.ones(len(rows)))
    cos, sin = by_length_cos_sin(b, by, "ids", "float32")
    caches = by_length_rows(b, by, "length", "float32")  # rows 0 .. length - 1, as a cache
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"])
    length = helper.make_tensor_value_info("length", TensorProto.INT64, [1])  # as some exporters shape it
    outs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in (cos, sin, *caches)]
    graph = helper.make_graph(b.nodes, "g", [ids, length], outs, b.initializers)
    sess = ort.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    for n in lengths:
        positions = np.concatenate([np.arange(-3, 500), np.arange(n - 500, n)])[None]
        got = sess.run(None, {"ids": positions, "length": np.array([n])})
        angle = positions[..., None] * freqs[n]
        worst = max(float(np.max(np.abs(g - w))) for g, w in zip(got[:2], (np.cos(angle), np.sin(angle)), strict=True))
        assert worst <= 3e-7, (n, worst)
        cached = np.arange(n)[:, None] * freqs[n]
        assert got[2].shape == cached.shape
        worst = max(
            float(np.max(np.abs(g - w))) for g, w in zip(got[2:], (np.cos(cached), np.sin(cached)), strict=True)
        )
        assert worst <= 3e-7, (n, worst)
        rough = np.cos((positions[..., None].astype(np.float32) * freqs[n].astype(np.float32)).astype(np.float64))
        assert np.max(np.abs(rough - np.cos(angle))) > 1e-4  # what the method is for
    assert all(np.isnan(t).all() for t in sess.run(None, {"ids": np.array([[0, 16384]]), "length": np.array([16385])}))


def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys):
    """Arguments, files and configs the model contradicts (its head dim, head counts, layer count; rotary
    features wider than the head), a model without rotation: one line each, nothing written."""
    from onnx import helper

    path, cfg = fixture("optimum", "qwen2")
    genai, _ = fixture("genai", "qwen2")
    config = path.replace("model.onnx", "config.json")
    out = tmp_path / "out.onnx"

    def changed(name, **keys):
        written = tmp_path / f"{name}.json"
        written.write_text(json.dumps({k: v for k, v in {**cfg, **keys}.items() if v is not None}))
        return str(written)

    (tmp_path / "empty.onnx").write_bytes(b"")
    x, y = (helper.make_tensor_value_info(n, 1, ["B", 4]) for n in ("x", "y"))
    plain = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y]))
    onnx.save(plain, tmp_path / "plain.onnx")
    for args, words in (
        ([path, "--config", changed("wide", head_dim=64), "-o", str(out)], "holds heads of 32 features"),
        ([genai, "--config", changed("wide", head_dim=64), "-o", str(out)], "has heads of 32"),
        ([path, "--config", changed("few", num_hidden_layers=1, layer_types=None), "-o", str(out)], "in layer 1"),
        ([genai, "--config", changed("heads", num_attention_heads=8), "-o", str(out)], "has num_heads=4"),
        ([genai, "--config", changed("kv", num_key_value_heads=4), "-o", str(out)], "has kv_num_heads=2"),
        ([path, "--config", changed("partial", partial_rotary_factor=2.0), "-o", str(out)], "partial_rotary_factor"),
        ([str(tmp_path / "empty.onnx"), "--config", config, "-o", str(out)], "does not load as an ONNX model"),
        ([str(tmp_path / "plain.onnx"), "--config", config, "-o", str(out)], "no rotation was found"),
        ([path, "--config", config, "-o", path], "is the model read"),
        ([path, "--config", str(tmp_path / "none.json"), "-o", str(out)], "does not exist"),
        ([str(tmp_path), "--config", config, "-o", str(out)], "is a folder"),
        ([path, "--config", config, "-o", str(tmp_path / "no" / "out.onnx")], "does not exist"),
        ([path, "--config", config, "-o", str(out), "--max-positions", "0"], "--max-positions must be a positive"),
        ([path, "--config", config, "-o", str(out), "--max-positions", "1000"], "the 1024 positions of the config"),
    ):
        assert cli.main(["repair", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("arrayrope repair: error: ") and words in err[0], err
        assert not out.exists()


def test_genai_caches_chosen_per_run_by_the_total_length(tmp_path, capsys):
    """GroupQueryAttention reads one cos/sin cache: for a length-dependent type an If on the run's total length
    chooses it. Dynamic NTK (GenAI's 512 unscaled rows): caches computed for the run's length past 512.
    LongRoPE (GenAI's own If, computed in the graph, against long factors the export does not have): both
    regimes stored; its 12-column caches still keep ONNX Runtime from running the node (not verified, nothing
    failed)."""
    path, _ = fixture("genai", "llama_dynamic")
    out = tmp_path / "repaired.onnx"
    assert cli.main(["repair", path, "--config", path.replace("model.onnx", "config.json"), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert said.count("runs longer than 512 positions take caches computed for their length in the graph") == 2
    model, config = load("genai", "phi3_longrope")
    config["rope_scaling"]["long_factor"] = [1.5 * f for f in config["rope_scaling"]["long_factor"]]
    assert audit_rotary(model, config).status == "failed"
    report = repair_rotary(model, config).report
    assert report.repaired == 2 and not report.after.failures, str(report)
    assert all("take the long frequencies' caches" in c.after for c in report.changes)
    assert all("refuses to run the node" in f.note for f in report.after.findings), str(report.after)


def test_a_layer_without_rope_loses_its_rotation():
    """SmolLM3's export against a config with its NoPE layer swapped: layer 0 stops rotating; layer 1, which the
    export gives no rotation at all, has none to rewrite, and the re-audit says so (not verified)."""
    model, config = load("optimum", "smollm3")
    report = repair_rotary(model, {**config, "no_rope_layers": [0, 1]}).report
    assert report.repaired == 2 and report.status == "not verified", str(report)
    assert {c.after for c in report.changes} == {"no rotation: its layer takes no rotary embedding in the config"}
    assert report.after.missing == ((1, "expected: RoPE"),) and not report.after.findings


def test_external_data_is_read_from_the_model_s_folder_and_never_written_over(tmp_path, monkeypatch, capsys):
    """GenAI keeps its caches in a data file: the re-audit reads them from the model's folder (not the working
    directory), and an output naming that file is refused before anything is written."""
    model, config = load("genai", "qwen2")
    _genai_caches(10000.0)(model, config)
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(model, folder / "model.onnx", save_as_external_data=True, location="weights.data", size_threshold=0)
    monkeypatch.chdir(tmp_path)
    cfg = fixture("genai", "qwen2")[0].replace("model.onnx", "config.json")
    out = tmp_path / "repaired.onnx"
    assert cli.main(["repair", str(folder / "model.onnx"), "--config", cfg, "-o", str(out)]) == 0
    assert audit_rotary(str(out), config).status == "verified"
    capsys.readouterr()
    before = (folder / "weights.data").read_bytes()
    args = ["repair", str(folder / "model.onnx"), "--config", cfg, "-o", str(folder / "weights.data")]
    assert cli.main(args) == 2
    assert "is a weight file of the model read" in capsys.readouterr().err
    assert (folder / "weights.data").read_bytes() == before


@pytest.mark.parametrize(
    ("family", "prompt"),
    [
        ("phi3_longrope", 2048),  # past the original context of 256, and past max_position_embeddings
        ("llama_dynamic", 2045),  # the base grown at every length past 512, up to the 2048 positions implied
    ],
)
def test_repaired_models_give_the_checkpoint_s_logits(family, prompt):
    """The oracle: transformers' own model on the checkpoint the export was made from (float32, eager). A prefill
    reaching past the original context, then decode steps on the repaired model's own key/value cache: the same
    logits; the export as it was differs there."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = FIXTURES / "checkpoints" / family
    checkpoint = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager", dtype=torch.float32
    ).eval()
    model, config = load("optimum", family)
    repaired = repair_rotary(model, config).model
    sessions = {
        name: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for name, m in (("export", model), ("repaired", repaired))
    }
    prompt = np.random.default_rng(0).integers(0, config["vocab_size"], (1, prompt))
    steps = np.random.default_rng(1).integers(0, config["vocab_size"], 3)
    with torch.no_grad():
        out = checkpoint(input_ids=torch.from_numpy(prompt), use_cache=True)
        want = [out.logits.numpy()]
        cache = out.past_key_values
        for t in steps:
            out = checkpoint(input_ids=torch.tensor([[int(t)]]), past_key_values=cache, use_cache=True)
            want.append(out.logits.numpy())
            cache = out.past_key_values
    heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    for name, sess in sessions.items():
        past = {i.name: np.zeros((1, heads, 0, head_dim), np.float32) for i in sess.get_inputs() if "past" in i.name}
        got, ids, start = [], prompt, 0
        for _ in range(len(steps) + 1):
            n = ids.shape[1]
            feed = {
                "input_ids": ids,
                "attention_mask": np.ones((1, start + n), np.int64),
                "position_ids": np.arange(start, start + n)[None],
                **past,
            }
            outputs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed), strict=True))
            got.append(outputs["logits"])
            past = {k: outputs[k.replace("past_key_values", "present")] for k in past}
            start += n
            ids = steps[len(got) - 1 : len(got)][None] if len(got) <= len(steps) else ids
        worst = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))
        assert (worst <= 1e-4) == (name == "repaired"), (name, worst)


GENAI_CASES = [
    ("qwen2_yarn", "qwen2.modeling_qwen2.Qwen2RotaryEmbedding", 4200),  # past the original 4096
    ("llama_dynamic", "llama.modeling_llama.LlamaRotaryEmbedding", 1500),  # past 512: the base grown
]
STEPS = 2  # decode steps after the prefill


def _generate(models, tokens, prompt):
    """Logits of a prefill of ``prompt`` tokens, then one token at a time on the model's own key/value cache, each
    run on ``models(length)`` (the model for a call of that total length) on ONNX Runtime."""
    out, past, start = [], None, 0
    for end in range(prompt, prompt + STEPS + 1):
        sess = ort.InferenceSession(models(end).SerializeToString(), providers=["CPUExecutionProvider"])
        if past is None:
            past = {i.name: np.zeros((1, 2, 0, 32), np.float32) for i in sess.get_inputs() if "past" in i.name}
        feed = {"input_ids": tokens[:, start:end], "attention_mask": np.ones((1, end), np.int64), **past}
        outputs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed), strict=True))
        out.append(outputs["logits"])
        past = {k: outputs[k.replace("past_key_values", "present")] for k in past}
        start = end
    return out


def _transformers_tables(family, module, model, tokens, prompt):
    """The oracle: the logits of the GenAI export holding, at each step, the cos/sin that transformers' own rotary
    module computes for the checkpoint for a call of that length."""
    import importlib

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path, attr = module.rsplit(".", 1)
    rotary = getattr(importlib.import_module(f"transformers.models.{path}"), attr)
    rotate = rotary(config=transformers.AutoConfig.from_pretrained(FIXTURES / "checkpoints" / family))

    def oracle(length):
        with torch.no_grad():
            cos, sin = rotate(torch.zeros(1), torch.arange(length)[None])
        half = cos.shape[-1] // 2
        m = onnx.ModelProto()
        m.CopyFrom(model)
        set_initializer(m, "cos_cache", cos[0, :, :half].numpy().astype(np.float32))
        set_initializer(m, "sin_cache", sin[0, :, :half].numpy().astype(np.float32))
        return m

    return _generate(oracle, tokens, prompt)


@pytest.mark.parametrize(("family", "module", "prompt"), GENAI_CASES)
def test_repaired_genai_caches_are_transformers_own_tables(family, module, prompt):
    """The GenAI builder's caches repaired: a prefill reaching past the original context and decode steps on the
    model's own key/value cache give the oracle's logits (the export holding transformers' tables at each step);
    the export as it was does not (or cannot run there)."""
    model, config = load("genai", family)
    tokens = np.random.default_rng(0).integers(0, config["vocab_size"], (1, prompt + STEPS))
    want = _transformers_tables(family, module, model, tokens, prompt)
    repaired = repair_rotary(model, config).model
    got = _generate(lambda _: repaired, tokens, prompt)
    assert max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True)) <= 1e-4
    if family == "llama_dynamic":  # GenAI's caches hold 512 rows: ONNX Runtime refuses a longer call
        with pytest.raises(Exception, match="cos_cache"):
            _generate(lambda _: model, tokens, prompt)
    else:
        export = _generate(lambda _: model, tokens, prompt)
        assert max(float(np.max(np.abs(g - w))) for g, w in zip(export, want, strict=True)) > 1e-3


@pytest.mark.parametrize(("family", "module", "prompt"), GENAI_CASES)
def test_onnxruntime_genai_s_own_loop_runs_the_repaired_model(family, module, prompt, tmp_path):
    """The repaired model in the folder the builder wrote, run by onnxruntime-genai's generator (its buffers of
    past keys and values shared with the present ones, its own inputs): the oracle's logits at every step. A
    dynamic NTK model is run past ``max_position_embeddings`` with the genai_config's context raised to the
    config's (factor 4 over 512), as its user would."""
    og = pytest.importorskip("onnxruntime_genai")
    model, config = load("genai", family)
    tokens = np.random.default_rng(0).integers(3, config["vocab_size"], (1, prompt + STEPS))
    want = _transformers_tables(family, module, model, tokens, prompt)
    folder = tmp_path / family
    folder.mkdir()
    repair_rotary(model, config).save(folder / "model.onnx")
    settings = json.loads((FIXTURES / "genai" / family / "genai_config.json").read_text())
    longest = max(settings["model"]["context_length"], 4 * config["max_position_embeddings"])
    settings["model"]["context_length"] = settings["search"]["max_length"] = longest
    (folder / "genai_config.json").write_text(json.dumps(settings))
    generator_model = og.Model(str(folder))
    params = og.GeneratorParams(generator_model)
    params.set_search_options(max_length=prompt + STEPS + 1, do_sample=False)
    generator = og.Generator(generator_model, params)
    got = []
    for start, end in zip([0, *range(prompt, prompt + STEPS)], range(prompt, prompt + STEPS + 1), strict=True):
        generator.append_tokens(tokens[:, start:end].astype(np.int32))  # the tokens given, none chosen
        got.append(np.asarray(generator.get_output("logits")))
    assert [g.shape for g in got] == [w.shape for w in want]
    assert max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True)) <= 1e-4


def test_mrope_rotations_repair_to_the_config_s_sections_and_base():
    """Qwen2-VL's text decoder exported by PyTorch, repaired against a config of other M-RoPE sections and base:
    the repaired model's hidden states, with each position axis at its own positions, are those of transformers'
    own model built from that config with the same weights (the oracle)."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from export.test_audit_transformers import qwen2_vl_text

    model, cfg = qwen2_vl_text("torchscript-17")
    assert audit_rotary(model, cfg).status == "verified"  # the config object itself, as users hold it
    other = cfg.to_dict()
    other["rope_parameters"] = {"rope_type": "default", "rope_theta": 5000.0, "mrope_section": [3, 3, 2]}
    assert audit_rotary(model, other).status == "failed"
    repaired, report = repair_rotary(model, other)
    assert report.status == "verified" and report.repaired == 4, str(report)
    torch.manual_seed(0)  # the weights qwen2_vl_text made
    original = tf.Qwen2VLTextModel(cfg).eval()
    oracle = tf.Qwen2VLTextModel(tf.Qwen2VLTextConfig(**other)).eval()
    oracle.load_state_dict(original.state_dict())
    rng = np.random.default_rng(5)
    ids = rng.integers(0, cfg.vocab_size, (2, 9))
    positions = np.stack([np.arange(9) + 40, np.arange(9) * 3, 100 - np.arange(9)])[:, None].repeat(2, axis=1)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": positions}
    with torch.no_grad():
        want = oracle(**{k: torch.from_numpy(v) for k, v in feed.items()}, use_cache=False).last_hidden_state.numpy()
    sessions = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (repaired, model)
    ]
    got, before = (s.run(None, {i.name: feed[i.name] for i in s.get_inputs()})[0] for s in sessions)
    assert np.max(np.abs(got - want)) <= 1e-4, np.max(np.abs(got - want))
    assert np.max(np.abs(before - want)) > 1e-3


def test_gptj_tables_shorter_than_the_config_s_context_fail_and_repair_keeps_the_layers():
    """optimum's GPT-J reads its stored tables by GatherElements: against its config with a context four times
    longer, ONNX Runtime refuses the positions past the tables, which the audit says as the difference (not an
    error of its own); the repair's nodes say the layers of the nodes they replace, so its audit places them."""
    model, config = load("optimum", "gptj")
    longer = {**config, "n_positions": 4 * config["n_positions"]}
    before = audit_rotary(model, longer)
    assert before.status == "failed"
    assert all("it does not run at positions" in f.difference for f in before.findings), before
    assert "Out of range" in before.findings[0].difference
    repaired, report = repair_rotary(model, longer)
    assert report.repaired == 4 and report.status == "verified", report
    assert [f.layer for f in report.after.findings] == [0, 0, 1, 1]
    assert audit_rotary(repaired, longer).status == "verified"
