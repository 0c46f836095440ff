"""fuse_rotary on Hugging Face transformers models exported by torch.onnx.export, run on ONNX Runtime CPU.

Small random models of each family (tests/hf_models.py); the oracle of every
fused model is eager PyTorch on the same inputs, and the exported model itself
for what fusion must leave unchanged.
"""

from __future__ import annotations

import collections
import functools

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")

import hf_models  # noqa: E402
from arrayrope.export import fuse_rotary  # noqa: E402
from helpers import double_uses  # noqa: E402

LAYERS = 2
CASES = [  # family, exporter, target: every family by TorchScript; the dynamo forms on one family each
    ("llama", "torchscript-17", "onnx23"),
    ("qwen2", "torchscript-17", "ort"),
    ("neox", "torchscript-17", "onnx23"),
    ("gptj", "torchscript-17", "ort"),
    ("gptj", "dynamo-18", "onnx23"),
    ("qwen2", "dynamo-23", "onnx23"),
    ("deepseek_v3", "torchscript-17", "onnx23"),  # MLA: Concat(a C - b S, b C + a S) of the even and odd features
]


@functools.cache
def exported(family, exporter):
    net = hf_models.model(family, LAYERS)
    return net, hf_models.export(net, exporter)


def run(model, feed):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feed.items() if k in names})[0]


@pytest.mark.parametrize("family,exporter,target", CASES)
def test_every_rotation_fused_and_the_model_agrees_with_pytorch(family, exporter, target, capfd):
    net, model = exported(family, exporter)
    capfd.readouterr()
    fused, report = fuse_rotary(model, target=target, max_positions=512, providers="cpu")
    # probes run past the model's own tables (GPT-J's 256 rows) on purpose: ONNX Runtime says nothing of it
    assert "onnxruntime" not in capfd.readouterr().err
    assert len(report.rotations) == 2 * LAYERS and report.fused == 2 * LAYERS, report  # q and k of every layer
    assert report.ok and report.validation.rows  # type: ignore[union-attr]  # ONNX Runtime: fused against the exported model
    ops = collections.Counter(n.op_type for n in fused.graph.node)
    assert ops["RotaryEmbedding"] == 2 * LAYERS and not {"Cos", "Sin"} & set(ops) and double_uses(fused) == []
    assert report.nodes_after < report.nodes_before
    assert report.opset_after == (23 if target == "onnx23" else report.opset_before)
    rotary = {"neox": 4, "gptj": 8}.get(family, 16)
    assert {(r.layout, r.rotary_dim) for r in report.rotations} == {
        ("interleaved" if family == "gptj" else "half", rotary)
    }
    if family == "qwen2":  # grouped-query keys: 2 heads against 4 query heads
        assert sorted({r.heads for r in report.rotations}) == [2, 4]  # type: ignore[type-var]
    if family == "deepseek_v3":  # q_pe of 4 heads, one k_pe shared by all; interleaved in, half-split order out
        assert sorted({r.heads for r in report.rotations}) == [1, 4]  # type: ignore[type-var]
        assert all(r.node.startswith("Gather (interleaved pairs to half-split order)") for r in report.rotations)
    feed = hf_models.inputs(batch=3, seq=11, start=200, seed=1)  # other sizes than the export's, far positions
    want = hf_models.logits(net, feed)
    assert np.max(np.abs(run(fused, feed) - want)) <= 1e-4 * (1 + np.max(np.abs(want)))


def test_pytorch_opset23_nodes_get_exact_caches():
    """PyTorch's exporter fuses Llama-family rotations at opset 23 but computes Cos/Sin per node in float32."""
    _, model = exported("qwen2", "dynamo-23")
    before = collections.Counter(n.op_type for n in model.graph.node)
    assert before["RotaryEmbedding"] == 2 * LAYERS and before["Cos"] == before["Sin"] == 2 * LAYERS
    fused, report = fuse_rotary(model, tables="model", validate=False)
    assert report.fused == 0 and all("already a fused" in r.reason for r in report.rotations)
    assert [n.op_type for n in fused.graph.node] == [n.op_type for n in model.graph.node]


def test_half_precision_model_without_position_ids():
    """Positions made inside the model from the sequence; float16 weights, inv_freq and caches."""
    net = hf_models.model("llama", 1, positions=False).half()
    model = hf_models.export(net, "torchscript-17")
    fused, report = fuse_rotary(model, target="ort", max_positions=4096, providers="cpu")
    assert report.fused == 2 and report.ok, report
    assert all("the model's float16 frequencies" in r.tables for r in report.rotations)
    assert {t.data_type for t in fused.graph.initializer if "cos_cache" in t.name} == {onnx.TensorProto.FLOAT16}
    feed = hf_models.inputs(batch=3, seq=9, seed=2, positions=False)
    want = hf_models.logits(net, feed).astype(np.float64)
    assert np.max(np.abs(run(fused, feed) - want)) <= 2e-2 * (1 + np.max(np.abs(want)))


@pytest.mark.parametrize("bound", [None, 256])
def test_longrope_rotations_are_left_alone_with_the_reason_and_the_verdict_says_so(bound, tmp_path, capsys):
    """Phi-3's LongRoPE exported by dynamo switches factors past original_max_position_embeddings (64): no fused node
    of fixed frequencies replaces it. Nothing fused is 'not verified' (exit 3), nothing written; probes and reasons
    stay below the bound, and name no option fuse does not have."""
    from arrayrope import cli

    _, model = exported("phi3_longrope", "dynamo-18")
    src, out = tmp_path / "model.onnx", tmp_path / "fused.onnx"
    onnx.save(model, src)
    args = ["export", "fuse", str(src), "-o", str(out), "--provider", "cpu"]
    assert cli.main(args + ([] if bound is None else ["--max-positions", str(bound)])) == 3
    said = capsys.readouterr().out
    assert not out.exists() and f"{out} not written" in said
    assert said.splitlines()[-1].startswith("verdict: not verified: none of the 4 rotary applications found was fused")
    reasons = [line for line in said.splitlines() if line.startswith("  left alone")]
    assert len(reasons) == 4 and all("do not grow linearly with the position" in r for r in reasons)
    assert not any("max_position=" in r or "fused model against the original" in r for r in said.splitlines())
    if bound is not None:
        at = [int(r.split(" at position ")[1].split(",")[0]) for r in reasons]
        assert all(64 <= p < bound for p in at), at  # past the original context, within the bound


def test_the_whole_model_check_compares_every_position_s_logits():
    """transformers 5's models take logits_to_keep, and read a tensor as the indices of the positions kept.
    Exported with a 0-d one as an input (TorchScript), the check of the fused model keeps the last position,
    whose rotation turns furthest, not position 0's, where no rotation shows."""
    import io
    import warnings

    import torch

    net = hf_models.model("llama", 1).net

    class Keep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask, position_ids, logits_to_keep):
            out = self.net(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=False,
                logits_to_keep=logits_to_keep,
            )
            return out.logits

    feed = hf_models.inputs()
    names = [*feed, "logits_to_keep"]
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Keep().eval(),
            (*(torch.from_numpy(v) for v in feed.values()), torch.tensor(1)),
            f,
            dynamo=False,
            opset_version=17,
            input_names=names,
            output_names=["logits"],
            dynamic_axes={n: {0: "batch", 1: "seq"} for n in names[:3]},
        )
    model = onnx.load_from_string(f.getvalue())
    from arrayrope.export.fuse._match import Graph
    from arrayrope.export.fuse._probe import sample_inputs

    feed = sample_inputs(Graph(model))
    last = feed["input_ids"].shape[1] - 1
    assert feed["logits_to_keep"] == last
    full = dict(feed, logits_to_keep=np.array(0))
    plain = {k: feed[k] for k in ("input_ids", "attention_mask", "position_ids")}
    want = hf_models.logits(hf_models.model("llama", 1), plain)
    assert np.allclose(run(model, feed), want[:, last], atol=1e-5)  # the oracle: transformers' own logits
    assert not np.allclose(run(model, full), want[:, last], atol=1e-5)
