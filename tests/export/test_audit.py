"""audit_rotary and ``arrayrope audit`` on the exporters' own models, and on faults made from them here.

The oracle is the config each model was exported from, as transformers computes its rotation
(arrayrope's config reading is checked against transformers in tests/test_config*.py), and for
each fault the property the fault changed. Every faithful export verifies, except where the
exporter disagrees with transformers for its own config, which the tests name.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper  # noqa: E402

import arrayrope  # noqa: E402
from arrayrope import cli  # noqa: E402
from arrayrope.export import audit_rotary, rotary_model  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "exporters")
OPTIMUM = (
    *("cohere", "gemma2", "gemma3", "glm", "gpt_neox", "gptj", "granite", "llama3", "mistral", "nemotron", "olmo2"),
    *("phi", "qwen2", "qwen2_yarn", "qwen3", "smollm3", "stablelm"),
)
GENAI = (
    "gemma2",
    "granite",
    "llama3",
    "mistral",
    "nemotron",
    "phi",
    "qwen2",
    "qwen3",
)  # qwen3: separate q, k, v inputs


def rope_layers(config: dict) -> list[int]:
    """The layers that rotate: every one, but SmolLM3's NoPE layers (0 in its no_rope_layers)."""
    uses = config.get("no_rope_layers") or [1] * int(config.get("num_hidden_layers", config.get("n_layer")))  # GPT-J
    return [i for i, rope in enumerate(uses) if rope]


def fixture(exporter: str, family: str) -> tuple[str, dict]:
    folder = os.path.join(FIXTURES, exporter, family)
    with open(os.path.join(folder, "config.json")) as f:
        return os.path.join(folder, "model.onnx"), json.load(f)


def load(exporter: str, family: str):
    path, config = fixture(exporter, family)
    return onnx.load(path), config


@pytest.mark.parametrize(("exporter", "family"), [("optimum", f) for f in OPTIMUM] + [("genai", f) for f in GENAI])
def test_faithful_exports_verify(exporter, family):
    path, config = fixture(exporter, family)
    report = audit_rotary(path, config)
    assert report.status == "verified", str(report)
    per_layer = 2 if exporter == "optimum" else 1  # q and k, or one GroupQueryAttention rotating both
    found = [f.layer for f in report.findings if f.layer is not None]
    assert len(found) == len(report.findings) and sorted(found) == sorted(rope_layers(config) * per_layer)
    assert all(f.max_error < 1e-3 for f in report.findings)
    assert not report.missing and report.exit_status == 0


def test_optimum_phi3_never_uses_the_long_factors():
    """optimum-onnx traces Phi-3's LongRoPE with a short prompt: the short factors are baked in at every position."""
    report = audit_rotary(*fixture("optimum", "phi3_longrope"))
    assert report.status == "failed"
    # a call reaching past 256 turns every position by the long factors in transformers, the first ones too
    assert {f.difference for f in report.findings} == {
        "long factors never used past 256: positions 0..6 in a call reaching position 1023 turn by the short factors"
    }
    assert all(f.max_error > 1 for f in report.findings)  # radians' worth at the end of the context


def test_genai_yarn_ramp_is_not_truncated():
    """ONNX Runtime GenAI's builder computes YaRN's ramp without rounding its bounds; transformers rounds them."""
    report = audit_rotary(*fixture("genai", "qwen2_yarn"))
    assert report.status == "failed"
    assert all(f.difference.startswith("yarn truncate False found, True expected") for f in report.findings)
    # the rest agrees: the same config with truncate false verifies
    path, config = fixture("genai", "qwen2_yarn")
    config["rope_scaling"]["truncate"] = False
    assert audit_rotary(path, config).status == "verified"


def test_genai_phi3_caches_agree_but_onnx_runtime_refuses_the_node():
    """Its LongRoPE caches (an If on the length) match both regimes, but GroupQueryAttention refuses caches of
    12 columns (a multiple of 8 is required): not verified, with ONNX Runtime's reason."""
    report = audit_rotary(*fixture("genai", "phi3_longrope"))
    assert report.status == "not verified" and report.exit_status == 3
    assert all("ONNX Runtime refuses to run the node" in f.difference for f in report.findings)
    assert all(f.max_error < 1e-3 for f in report.findings)


# ---- faults, made from the exporters' models the way a broken conversion makes them


def replace_constant(model, old: np.ndarray, new: np.ndarray, *, rtol: float = 1e-5) -> int:
    """Replace every float constant (initializer or Constant node) equal to ``old`` by ``new``; how many."""
    count = 0
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" and a.size == old.size and np.allclose(a.ravel(), old.ravel(), rtol=rtol):
            t.CopyFrom(numpy_helper.from_array(new.reshape(a.shape).astype(a.dtype), t.name))
            count += 1
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute[0].name == "value":
            a = numpy_helper.to_array(n.attribute[0].t)
            if a.dtype.kind == "f" and a.size == old.size and np.allclose(a.ravel(), old.ravel(), rtol=rtol):
                n.attribute[0].t.CopyFrom(numpy_helper.from_array(new.reshape(a.shape).astype(a.dtype)))
                count += 1
    return count


def caches(freqs, rows: int) -> tuple[np.ndarray, np.ndarray]:
    cos, sin = arrayrope.rope_tables(freqs, np.arange(rows), dtype=np.float64)
    return np.asarray(cos, np.float32), np.asarray(sin, np.float32)


def set_initializer(model, name: str, value: np.ndarray) -> None:
    t = next(t for t in model.graph.initializer if t.name == name)
    t.CopyFrom(numpy_helper.from_array(value, name))


def audit_fault(model, config, tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return audit_rotary(path, config)


def test_fault_optimum_wrong_base(tmp_path):
    model, config = load("optimum", "qwen2")
    right = arrayrope.rope_frequencies_from_config(config).inv_freq
    wrong = arrayrope.rope_frequencies(32, base=10000.0).inv_freq
    assert replace_constant(model, right, wrong) == 1
    report = audit_fault(model, config, tmp_path)
    assert report.status == "failed" and report.exit_status == 1
    assert {f.difference for f in report.findings} == {"rope_theta 10000 found, 1e+06 expected"}


def test_fault_optimum_llama3_scaling_dropped(tmp_path):
    model, config = load("optimum", "llama3")
    right = arrayrope.rope_frequencies_from_config(config).inv_freq
    assert replace_constant(model, right, arrayrope.rope_frequencies(32, base=500000.0).inv_freq) == 1
    report = audit_fault(model, config, tmp_path)
    assert report.status == "failed"
    assert all(f.difference.startswith("llama3 scaling missing") for f in report.findings), str(report)


def test_fault_optimum_yarn_dropped(tmp_path):
    """YaRN dropped: frequencies unscaled and cos, sin without its attention factor."""
    model, config = load("optimum", "qwen2_yarn")
    freqs = arrayrope.rope_frequencies_from_config(config)
    assert replace_constant(model, freqs.inv_freq, arrayrope.rope_frequencies(32, base=1e6).inv_freq) == 1
    assert replace_constant(model, np.array([freqs.attention_factor]), np.array([1.0])) == 2
    report = audit_fault(model, config, tmp_path)
    assert report.status == "failed"
    assert all(f.difference.startswith("yarn scaling missing") for f in report.findings), str(report)


def test_fault_genai_wrong_base_and_llama3_dropped(tmp_path):
    model, config = load("genai", "qwen2")
    cos, sin = caches(arrayrope.rope_frequencies(32, base=10000.0), 1024)
    set_initializer(model, "cos_cache", cos)
    set_initializer(model, "sin_cache", sin)
    report = audit_fault(model, config, tmp_path)
    assert {f.difference for f in report.findings} == {"rope_theta 10000 found, 1e+06 expected"}

    model, config = load("genai", "llama3")
    cos, sin = caches(arrayrope.rope_frequencies(32, base=500000.0), 1024)
    set_initializer(model, "cos_cache", cos)
    set_initializer(model, "sin_cache", sin)
    report = audit_fault(model, config, tmp_path)
    assert report.status == "failed"
    assert all(f.difference.startswith("llama3 scaling missing") for f in report.findings), str(report)


def test_fault_genai_longrope_long_factors_dropped(tmp_path):
    """The If's long branch given the short factors' tables: past original_max_position_embeddings nothing changes."""
    model, config = load("genai", "phi3_longrope")
    short = arrayrope.rope_frequencies_from_config(config, seq_len=256)
    cos, sin = caches(short, 1024)
    node = next(n for n in model.graph.node if n.op_type == "If")
    then = next(a.g for a in node.attribute if a.name == "then_branch")
    for n in then.node:
        table = cos if n.output[0].startswith("cos") else sin
        n.attribute[0].t.CopyFrom(numpy_helper.from_array(table))
    report = audit_fault(model, config, tmp_path)
    assert report.status == "failed"
    # a call reaching past 256 turns every position by the long factors in transformers, the first ones too
    assert {f.difference for f in report.findings} == {
        "long factors never used past 256: positions 0..6 in a call reaching position 1023 turn by the short factors"
    }


def test_fault_genai_layout_flipped_in_the_attribute(tmp_path):
    model, config = load("genai", "qwen2")
    for node in model.graph.node:
        if node.op_type == "GroupQueryAttention":
            next(a for a in node.attribute if a.name == "rotary_interleaved").i = 1
    report = audit_fault(model, config, tmp_path)
    assert {f.difference for f in report.findings} == {"pairs interleaved where model type 'qwen2' pairs half-split"}


def test_fault_tables_truncated(tmp_path):
    model, config = load("genai", "llama3")
    for name in ("cos_cache", "sin_cache"):
        t = next(t for t in model.graph.initializer if t.name == name)
        set_initializer(model, name, numpy_helper.to_array(t)[:512].copy())
    report = audit_fault(model, config, tmp_path)
    assert report.status == "failed"
    assert all(f.difference.startswith("tables hold 512 rows, max_position_embeddings 1024") for f in report.findings)


def test_fault_tables_one_row_short(tmp_path):
    """max_position_embeddings 1024 needs rows 0..1023: 1023 rows fail, the boundary itself."""
    model, config = load("genai", "llama3")
    for name in ("cos_cache", "sin_cache"):
        t = next(t for t in model.graph.initializer if t.name == name)
        assert numpy_helper.to_array(t).shape[0] == config["max_position_embeddings"] == 1024
        set_initializer(model, name, numpy_helper.to_array(t)[:1023].copy())
    report = audit_fault(model, config, tmp_path)
    assert report.status == "failed" and report.exit_status == 1
    assert all(
        f.difference.startswith("tables hold 1023 rows, max_position_embeddings 1024 needs 1024")
        for f in report.findings
    ), str(report)


def test_fault_genai_separate_inputs_wrong_base(tmp_path):
    """Qwen3's GroupQueryAttention takes query, key and value apart; its caches are measured and its node run."""
    model, config = load("genai", "qwen3")
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert gqa and all(n.input[1] and n.input[2] for n in gqa)  # separate key and value inputs
    cos, sin = caches(arrayrope.rope_frequencies(32, base=10000.0), 1024)
    set_initializer(model, "cos_cache", cos)
    set_initializer(model, "sin_cache", sin)
    report = audit_fault(model, config, tmp_path)
    assert {f.difference for f in report.findings} == {"rope_theta 10000 found, 1e+06 expected"}
    assert not any("refuses" in f.note for f in report.findings)  # the node itself ran on its caches


def test_gqa_separate_inputs_that_do_not_rotate_by_their_caches_are_not_verified(tmp_path, monkeypatch):
    """The node is run on unit keys given as its separate key input: caches read one way and applied another fail."""
    from arrayrope.export.audit import _measure

    real = _measure._read_caches
    monkeypatch.setattr(_measure, "_read_caches", lambda c, s, d, inter: real(c, -s, d, inter))  # the other direction
    report = audit_rotary(*fixture("genai", "qwen3"))
    assert report.status == "not verified"
    assert all("does not rotate by its caches as ONNX Runtime documents them" in f.difference for f in report.findings)


# ---- rope types whose frequencies follow the call's length


def test_dynamic_ntk_traced_at_one_length_fails():
    """optimum-onnx traces transformers' dynamic NTK with a short prompt: the base never grows. A call of 2048
    positions (factor 4 over max_position_embeddings 512) turns every position by a grown base in transformers."""
    path, config = fixture("optimum", "llama_dynamic")
    assert config["rope_scaling"]["factor"] == 4.0 and config["max_position_embeddings"] == 512
    report = audit_rotary(path, config)
    assert report.status == "failed" and report.exit_status == 1
    assert {f.difference for f in report.findings} == {
        "dynamic frequencies fixed at one length: positions 0..6 in a call reaching position 2047 turn by the "
        "frequencies of a call of 512 positions, where transformers computes them for the call's 2048"
    }
    for f in report.findings:  # both sides of 512, and the end of the 2048 positions
        assert {0, 6, 2047, 504, 511, 512, 519, 2040} <= set(f.positions)
    # the oracle: transformers' own frequencies for a call of 2048 differ from those of 512
    short, long = (arrayrope.rope_frequencies_from_config(config, seq_len=n).inv_freq for n in (512, 2048))
    assert np.array_equal(short, arrayrope.rope_frequencies(32, base=10000.0).inv_freq)
    assert 2047 * np.max(np.abs(short - long)) > 1


def test_longrope_named_by_its_alias_is_probed_as_longrope():
    """Older Phi-3 configs say "su": the same type, the same probes and the same finding."""
    path, config = fixture("optimum", "phi3_longrope")
    config["rope_scaling"] = {**config["rope_scaling"], "type": "su"}
    report = audit_rotary(path, config)
    assert {f.difference for f in report.findings} == {
        "long factors never used past 256: positions 0..6 in a call reaching position 1023 turn by the short factors"
    }


def test_longrope_without_an_original_context_never_switches():
    """Without original_max_position_embeddings transformers takes max_position_embeddings for it: the short
    factors at every position of the context, so a model of those frequencies and 1024 rows verifies."""
    model = rotary_model(32, target="portable", max_positions=1024)  # factors of 1: rope_theta 10000's frequencies
    scaling = {"rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [2.0] * 16}
    config = {"head_dim": 32, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 1024}
    report = audit_rotary(model, {**config, "rope_scaling": scaling})
    assert report.status == "verified", report
    assert (
        arrayrope.rope_frequencies_from_config({**config, "rope_scaling": scaling}, seq_len=1024).attention_factor == 1
    )


def test_dynamic_ntk_with_too_few_rows_fails():
    """ONNX Runtime GenAI's builder stores 512 rows of unscaled caches: a longer call cannot run at all."""
    report = audit_rotary(*fixture("genai", "llama_dynamic"))
    assert report.status == "failed"
    assert {f.difference for f in report.findings} == {
        "tables hold 512 rows, dynamic factor 4 over max_position_embeddings 512 needs 2048: positions 512..2047 "
        "cannot be rotated"
    }
    assert all(f.max_error < 1e-4 for f in report.findings)  # what it has agrees below 512


def test_layers_that_differ_and_rotations_their_names_do_not_place_are_not_verified(tmp_path):
    """Gemma 3's sliding layer turns at base 1e4, its full layer at 1e6 with linear scaling: a rotation whose
    node and value names say no layer cannot be judged against either."""
    model, config = load("optimum", "gemma3")
    assert audit_rotary(model, config).status == "verified"
    outside = {i.name for i in model.graph.input} | {o.name for o in model.graph.output}
    outside |= {t.name for t in model.graph.initializer}
    names: dict[str, str] = {}
    for i, node in enumerate(model.graph.node):
        node.name = f"n{i}"
        del node.metadata_props[:]
        for field in (node.input, node.output):
            for k, v in enumerate(field):
                if v and v not in outside:
                    field[k] = names.setdefault(v, f"v{len(names)}")
    for info in model.graph.value_info:
        info.name = names.get(info.name, info.name)
    report = audit_fault(model, config, tmp_path)
    assert report.findings and all(f.layer is None for f in report.findings)
    assert report.status == "not verified" and report.exit_status == 3
    assert all(f.status == "not verified" and "config's layers differ" in f.difference for f in report.findings)


def test_fault_rotary_width_and_layout_in_the_config():
    """A config that says otherwise than the model: the width (partial_rotary_factor) and the pairs."""
    path, config = fixture("optimum", "llama3")
    config["partial_rotary_factor"] = 0.5
    report = audit_rotary(path, config)
    assert {f.difference for f in report.findings} == {"rotary width 32 found, 16 expected (partial_rotary_factor 0.5)"}
    path, config = fixture("optimum", "glm")  # GLM pairs interleaved; a llama config pairs half-split
    config["model_type"] = "llama"
    config.pop("partial_rotary_factor", None)
    report = audit_rotary(path, config)
    assert report.status == "failed"
    assert all(f.difference == "pairs interleaved where model type 'llama' pairs half-split" for f in report.findings)


def test_fault_nope_layer_rotated():
    """SmolLM3 leaves every layer marked 0 in no_rope_layers without RoPE: a model rotating there fails."""
    path, config = fixture("optimum", "llama3")
    config = {**config, "model_type": "smollm3", "no_rope_layers": [1, 0]}
    report = audit_rotary(path, config)
    assert report.status == "failed"
    by_layer = {f.layer: f for f in report.findings}
    assert by_layer[0].status == "verified"
    assert by_layer[1].difference == "layer 1 rotates, but the config gives it no RoPE (a NoPE layer)"


# ---- arrayrope's own exports


@pytest.mark.parametrize("target", ["portable", "onnx23", "ort"])
@pytest.mark.parametrize("tables", ["stored", "computed"])
def test_own_exports(target, tables):
    config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    rows = {"max_positions": 64} if tables == "stored" else {}
    model = rotary_model(16, target=target, tables=tables, **rows)
    assert audit_rotary(model, config).status == "verified"
    model = rotary_model(16, target=target, tables=tables, layout="interleaved", **rows)
    report = audit_rotary(model, config)
    assert report.findings[0].difference == "pairs interleaved where the config pairs half-split"
    scaled = {**config, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    model = rotary_model(16, target=target, tables=tables, **rows)
    assert audit_rotary(model, scaled).findings[0].difference.startswith("linear scaling missing")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("target", ["portable", "onnx23", "ort"])
def test_own_half_precision_exports(target, dtype):
    """Tables stored in half precision (with the NaN row past them): verified, and a wrong base still named."""
    config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    model = rotary_model(16, target=target, max_positions=64, dtype=dtype)
    assert audit_rotary(model, config).status == "verified"
    model = rotary_model(16, target=target, max_positions=64, dtype=dtype, base=500000.0)
    assert audit_rotary(model, config).findings[0].difference == "rope_theta 500000 found, 10000 expected"


@pytest.mark.parametrize("family", ["llama3", "qwen3"])  # packed query, key and value; separate ones
@pytest.mark.parametrize("dtype", [onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16])
def test_genai_caches_in_half_precision(dtype, family, tmp_path):
    """GroupQueryAttention's caches as a float16 or bfloat16 export stores them: verified within their rounding;
    truncated, still named."""
    model, config = load("genai", family)
    for t in model.graph.initializer:
        if t.name in ("cos_cache", "sin_cache"):
            a = numpy_helper.to_array(t)
            t.CopyFrom(helper.make_tensor(t.name, dtype, a.shape, a.ravel().tolist()))
    assert audit_fault(model, config, tmp_path).status == "verified"
    for t in model.graph.initializer:
        if t.name in ("cos_cache", "sin_cache"):
            a = numpy_helper.to_array(t).astype(np.float32)[:512]
            t.CopyFrom(helper.make_tensor(t.name, dtype, a.shape, a.ravel().tolist()))
    report = audit_fault(model, config, tmp_path)
    assert all(f.difference.startswith("tables hold 512 rows") for f in report.findings), str(report)


def test_no_rotation_found_is_not_verified():
    """A model without any rotation for a config with RoPE: never verified."""
    x = helper.make_tensor_value_info("x", 1, ["B", 4])
    y = helper.make_tensor_value_info("y", 1, ["B", 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y]))
    report = audit_rotary(model, {"head_dim": 16, "num_hidden_layers": 2, "rope_theta": 10000.0})
    assert report.status == "not verified" and report.missing == ((0, "expected: RoPE"), (1, "expected: RoPE"))
    assert "no rotation was found" in report.verdict()


# ---- the command


def test_command_exit_statuses_and_json(tmp_path, capsys):
    path, _ = fixture("optimum", "llama3")
    folder = os.path.dirname(path)
    assert cli.main(["audit", path, "--config", folder]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("verdict: verified: 4 rotations in 2 layers match the config")
    phi3, _ = fixture("optimum", "phi3_longrope")
    assert cli.main(["audit", phi3, "--config", phi3.replace("model.onnx", "config.json"), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "failed" and data["exit_status"] == 1
    assert data["rotations"][0]["difference"].startswith("long factors never used past 256")
    path3, _ = fixture("genai", "phi3_longrope")
    assert cli.main(["audit", path3, "--config", os.path.dirname(path3)]) == 3
    assert capsys.readouterr().out.splitlines()[-1].startswith("verdict: not verified: ")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        ("not_onnx", "does not load as an ONNX model"),
        ("truncated", "does not load as an ONNX model"),
        ("no_config", "--config"),
        ("no_rope_config", "describes no rotary embedding"),
        ("outside", "outside the model's folder"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(make, message, tmp_path, capsys):
    path, config = fixture("optimum", "llama3")
    model_path, config_path = tmp_path / "model.onnx", tmp_path / "config.json"
    shutil.copy(path, model_path)
    config_path.write_text(json.dumps(config))
    if make == "not_onnx":
        model_path.write_text("not a model")
    elif make == "truncated":
        with open(path, "rb") as f:
            model_path.write_bytes(f.read()[:5000])
    elif make == "no_config":
        config_path.unlink()
    elif make == "no_rope_config":
        config_path.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64}))
    elif make == "outside":
        weights = tmp_path / "sub"
        weights.mkdir()
        onnx.save(onnx.load(path), weights / "model.onnx", save_as_external_data=True, location="w.data")
        os.replace(weights / "w.data", tmp_path / "outside.data")
        model = onnx.load(weights / "model.onnx", load_external_data=False)
        for t in model.graph.initializer:
            for entry in t.external_data:
                if entry.key == "location":
                    entry.value = "../outside.data"  # what onnx.save refuses to write
        model_path = weights / "model.onnx"
        model_path.write_bytes(model.SerializeToString())
    before = sorted(os.listdir(tmp_path))
    assert cli.main(["audit", str(model_path), "--config", str(config_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("arrayrope audit: error: ") and message in err, err
    assert "Traceback" not in err and sorted(os.listdir(tmp_path)) == before


def test_a_config_of_another_head_dim_than_the_key_caches_is_refused(tmp_path, capsys):
    """optimum's Llama against its config with another head dim (the rotary width of the config's head the model's
    own): the key caches the model takes say its heads' width, and the audit refuses the config, naming both."""
    path, config = fixture("optimum", "llama3")
    head = config["hidden_size"] // config["num_attention_heads"]
    wider = {**config, "head_dim": 2 * head, "partial_rotary_factor": 0.5, "model_type": "stablelm"}
    with pytest.raises(ValueError, match=rf"head_dim is {2 * head}.*'past_key_values.0.key' holds heads of {head} "):
        audit_rotary(path, wider)
    (tmp_path / "config.json").write_text(json.dumps(wider))
    assert cli.main(["audit", path, "--config", str(tmp_path / "config.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("arrayrope audit: error: --config: its head_dim is"), err
