"""``arrayrope export fuse`` on the models that optimum-onnx and ONNX Runtime GenAI's builder export.

The fixtures (``tests/fixtures/exporters``) are tiny random checkpoints of seventeen families exported by the real
tools, each in an environment of its own (``tools/exporters.py``, whose ``VERSIONS.json`` beside them gives
the versions and commands). Oracles: the exported model itself, run by ONNX Runtime on the same inputs
(fusion must not change what it computes), and the checkpoint's own config for the rotation fuse measures.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from arrayrope import cli  # noqa: E402
from arrayrope.export import fuse_rotary  # noqa: E402
from arrayrope.export.fuse._match import Graph  # noqa: E402
from arrayrope.export.fuse._probe import SAMPLE_BATCH, SAMPLE_PAST, SAMPLE_SEQ, sample_inputs  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures" / "exporters"
RECORD = json.loads((FIXTURES / "VERSIONS.json").read_text())
OPTIMUM = sorted(p.parent.name for p in (FIXTURES / "optimum").glob("*/model.onnx"))
GENAI = sorted(p.parent.name for p in (FIXTURES / "genai").glob("*/model.onnx"))
#: Families whose rotations fuse does not fuse yet, with what it says: a strict xfail turns into a failure the
#: day they fuse, so that this list only shrinks.
NOT_YET: dict[str, str] = {}


def test_every_export_is_a_fixture_or_a_recorded_failure():
    """The record names every family and exporter: a model here, or the exporter's own error."""
    for key, entry in RECORD["exports"].items():
        exporter, family = key.split("/")
        assert ("failed" in entry) != (FIXTURES / exporter / family / "model.onnx").exists(), key
        if "failed" not in entry:
            assert (FIXTURES / exporter / family / "config.json").exists(), key
    assert len(OPTIMUM) >= 17 and len(GENAI) >= 11, (OPTIMUM, GENAI)


@pytest.mark.parametrize("family", OPTIMUM)
def test_sample_inputs_of_a_kv_cache_decoder_are_consistent(family):
    """No feed needed: past key/values of a non-zero length, a mask over past and new tokens, position ids after
    the past, token ids inside the vocabulary; ONNX Runtime runs the model on them."""
    model = onnx.load(str(FIXTURES / "optimum" / family / "model.onnx"))
    feed = sample_inputs(Graph(model))
    config = json.loads((FIXTURES / "optimum" / family / "config.json").read_text())
    assert feed["input_ids"].shape == (SAMPLE_BATCH, SAMPLE_SEQ) and feed["input_ids"].max() < config["vocab_size"]
    assert feed["attention_mask"].shape == (SAMPLE_BATCH, SAMPLE_PAST + SAMPLE_SEQ) and feed["attention_mask"].all()
    if "position_ids" in feed:  # Gemma's exports count positions from the cache's length in the graph
        assert (feed["position_ids"] == SAMPLE_PAST + np.arange(SAMPLE_SEQ)).all()
    past = [k for k in feed if k.startswith("past_key_values")]
    assert past and all(feed[k].shape[0] == SAMPLE_BATCH and feed[k].shape[2] == SAMPLE_PAST for k in past)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], feed)[0]
    assert logits.shape == (SAMPLE_BATCH, SAMPLE_SEQ, config["vocab_size"]) and np.isfinite(logits).all()


@pytest.mark.parametrize(
    "family",
    [pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[f])) if f in NOT_YET else f for f in OPTIMUM],
)
def test_optimum_exports_fuse_without_a_feed(family, tmp_path, capsys):
    """Every rotation of q and k in every layer fused, the fused model equal to the export on ONNX Runtime."""
    src, out = FIXTURES / "optimum" / family / "model.onnx", tmp_path / "fused.onnx"
    status = cli.main(["export", "fuse", str(src), "-o", str(out), "--provider", "cpu"])
    said = capsys.readouterr().out
    config = json.loads((FIXTURES / "optimum" / family / "config.json").read_text())
    layers = sum(
        config.get("no_rope_layers") or [1] * config.get("num_hidden_layers", config.get("n_layer"))
    )  # SmolLM3: NoPE layers apart
    assert status == 0 and out.exists(), said
    assert f"{2 * layers} of {2 * layers} rotary applications fused" in said, said


def original_context(config):
    """The context the checkpoint was trained at: positions past it take the scaled regime."""
    scaling = config.get("rope_scaling") or {}
    return int(
        scaling.get("original_max_position_embeddings")
        or config.get("original_max_position_embeddings")
        or config.get("max_position_embeddings", config.get("n_positions"))  # GPT-J names it n_positions
    )


@pytest.mark.parametrize("family", ["gemma3", "qwen2_yarn"])
def test_fused_exports_audit_as_verified(family):
    """The fused nodes' exact tables are read by digits of the position ids: the audit traces them back to the
    ids (Gemma's are counted in the graph from the cache's length) and measures the fused model like the export."""
    from arrayrope.export import audit_rotary

    config = json.loads((FIXTURES / "optimum" / family / "config.json").read_text())
    fused, _ = fuse_rotary(str(FIXTURES / "optimum" / family / "model.onnx"), validate=False)
    report = audit_rotary(fused, config)
    assert report.status == "verified" and len(report.findings) == 2 * config["num_hidden_layers"], str(report)


@pytest.mark.parametrize("family", OPTIMUM)
def test_fused_exports_agree_beyond_the_original_context(family):
    """The fused model and the export, on ONNX Runtime, with a cache reaching past the checkpoint's original
    context (the scaled regime of YaRN, llama3 and LongRoPE) and with a short one: the same logits and keys."""
    model = onnx.load(str(FIXTURES / "optimum" / family / "model.onnx"))
    config = json.loads((FIXTURES / "optimum" / family / "config.json").read_text())
    fused, report = fuse_rotary(model, providers="cpu", validate=False)
    layers = sum(config.get("no_rope_layers") or [1] * config.get("num_hidden_layers", config.get("n_layer")))
    assert report.fused == len(report.rotations) == 2 * layers, report
    sessions = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (model, fused)]
    names = ["logits"] + [o.name for o in model.graph.output if o.name.startswith("present") and "key" in o.name]
    reach = config.get("max_position_embeddings", config.get("n_positions"))  # GPT-J's stored table ends there
    for past in (3, min(original_context(config) + 5, reach - SAMPLE_SEQ)):
        feed = sample_inputs(Graph(model), seed=past, past=past)
        assert feed["attention_mask"].shape[1] == past + SAMPLE_SEQ
        if "position_ids" in feed:
            assert feed["position_ids"].max() == past + SAMPLE_SEQ - 1
        want, got = (s.run(names, feed) for s in sessions)
        for name, a, b in zip(names, want, got, strict=True):
            assert np.abs(a - b).max() <= 1e-4 * (1 + np.abs(a).max()), (family, past, name)


@pytest.mark.parametrize("family", GENAI)
def test_genai_exports_say_their_attention_rotates(family, tmp_path, capsys):
    """GroupQueryAttention with do_rotary=1 rotates inside: exit 2, one line naming it, nothing written."""
    src, out = FIXTURES / "genai" / family / "model.onnx", tmp_path / "fused.onnx"
    assert cli.main(["export", "fuse", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GroupQueryAttention nodes already rotate queries and keys internally" in err[0], err
    assert not out.exists()
    with pytest.raises(ValueError, match=r"^nothing to fuse: \d+ GroupQueryAttention nodes"):
        fuse_rotary(str(src))


def test_a_model_without_rotations_is_refused(tmp_path, capsys):
    """Exit 2 and nothing written, not 'verified': there is nothing to fuse or verify."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])],
    )
    src, out = tmp_path / "plain.onnx", tmp_path / "fused.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8), str(src))
    assert cli.main(["export", "fuse", str(src), "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        "arrayrope export fuse: error: nothing to fuse: no rotary embedding found "
        "(no cos/sin tables applied to a tensor, no rotary node)"
    )
    assert not out.exists()
