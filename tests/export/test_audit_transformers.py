"""audit_rotary on Hugging Face transformers models exported by torch.onnx.export.

transformers is the oracle: each small random model (tests/hf_models.py) is built from
a config, and the audit of its export against that config must verify the rotation of
queries and keys in every layer the model itself gives RoPE, and find none in the
others. Against a copy of the config with one property changed, the way a broken
converter gets it wrong, the audit must fail and name that property.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")

import hf_models
from arrayrope.export import audit_rotary

CASES = {  # family: exporter, layers (every family of hf_models)
    "llama": ("torchscript-17", 2),
    "qwen2": ("torchscript-17", 2),
    "neox": ("torchscript-17", 2),  # partial rotary
    "gptj": ("torchscript-17", 2),  # interleaved partial; no shapes inferred: its (batch, seq, heads, dim) axes guessed
    "phi3": ("torchscript-17", 2),  # partial rotary: 8 of 16 features
    "phi3_longrope": ("dynamo-18", 2),  # TorchScript has no ONNX conversion of the aten::copy LongRoPE's update makes
    "gemma3": ("torchscript-17", 2),  # sliding layer at base 1e4, full layer at 1e6 with linear scaling
    "glm": ("dynamo-18", 2),  # interleaved, partial; the TorchScript exporter fails on it ("same rank")
    "deepseek_v3": ("torchscript-17", 2),  # MLA
    "llama4": ("torchscript-17", 4),  # layer 3 without RoPE; its complex rotation written in real arithmetic
}


@functools.cache
def exported(family):
    exporter, layers = CASES[family]
    net = hf_models.model(family, layers)
    return net, hf_models.export(net, exporter)


def config(net):
    """The config the model was built from, as config.json has it (a copy: the fault tests edit it)."""
    return copy.deepcopy(net.net.config.to_dict())


def rope_layers(net):
    """The layers whose attention rotates, as the transformers model itself says (Llama 4's use_rope)."""
    layers = next(m for n, m in net.net.named_modules() if n.endswith((".layers", ".h")))  # the decoder's list
    return [i for i, layer in enumerate(layers) if getattr(getattr(layer, "self_attn", None), "use_rope", True)]


@pytest.mark.parametrize("family", list(CASES))
def test_faithful_export_verifies_every_rotation_of_every_layer_with_rope(family):
    net, model = exported(family)
    report = audit_rotary(model, config(net))
    assert report.status == "verified", report
    assert not report.missing
    # one rotation for the queries and one for the keys, in each layer with RoPE and in no other
    assert sorted(f.layer for f in report.findings) == sorted(2 * rope_layers(net)), report  # type: ignore[type-var]
    assert all(f.status == "verified" and f.kind == "rotation in standard ops" for f in report.findings)
    assert all(f.max_error < 1e-4 for f in report.findings), report
    assert report.verdict().startswith(f"verified: {len(report.findings)} rotations in {len(rope_layers(net))} layers")


def test_partial_rotary_is_measured_at_its_width():
    net, model = exported("phi3")
    c = net.net.config
    assert c.rope_parameters["partial_rotary_factor"] == 0.5 and c.hidden_size // c.num_attention_heads == 16
    report = audit_rotary(model, config(net))
    assert {f.found for f in report.findings} == {"half-split pairs, rotary width 8 of head_dim 16"}


def test_longrope_both_regimes_are_probed():
    """Positions below and past original_max_position_embeddings (64): short factors, then long ones."""
    net, model = exported("phi3_longrope")
    assert net.net.config.original_max_position_embeddings == 64
    report = audit_rotary(model, config(net))
    assert report.status == "verified", report
    for f in report.findings:
        assert {56, 63, 64, 71} <= set(f.positions) and "longrope scaling" in f.expected


def test_dynamic_ntk_traced_by_torchscript_fails_past_max_position_embeddings():
    """transformers grows dynamic NTK's base per call, from the call's longest position; the TorchScript exporter
    traces one call of 7 positions, so the export keeps the base of 64 positions (dynamo cannot export it at all).
    The model itself, run eagerly on a call of 256 positions, turns differently from the export: the oracle."""
    import torch

    net = hf_models.model("llama_dynamic", 2)
    model = hf_models.export(net, "torchscript-17")
    report = audit_rotary(model, config(net))
    assert report.status == "failed" and len(report.findings) == 4
    assert {f.difference for f in report.findings} == {
        "dynamic frequencies fixed at one length: positions 0..6 in a call reaching position 255 turn by the "
        "frequencies of a call of 64 positions, where transformers computes them for the call's 256"
    }
    rotary = net.net.model.rotary_emb
    x = torch.zeros(1, 1, 16)
    short = rotary(x, torch.arange(7)[None])[0][0, 1]  # position 1 in a call of 7 positions
    long = rotary(x, torch.tensor([[0, 1, 2, 3, 4, 5, 255]]))[0][0, 1]  # position 1 in a call reaching 255
    assert float((short - long).abs().max()) > 1e-3


def test_gemma3_layer_types_are_compared_with_their_own_rotation():
    net, model = exported("gemma3")
    types = net.net.config.layer_types
    assert types == ["sliding_attention", "full_attention"]
    report = audit_rotary(model, config(net))
    expected = {f.layer: f.expected for f in report.findings}
    assert "rope_theta 10000, no scaling" in expected[0]
    assert "rope_theta 1e+06, linear scaling" in expected[1]


def test_interleaved_partial_glm():
    net, model = exported("glm")
    report = audit_rotary(model, config(net))
    assert {f.found for f in report.findings} == {"interleaved pairs, rotary width 8 of head_dim 16"}


def test_mla_rotates_the_trailing_features_written_in_half_split_order():
    """DeepSeek-V3: q_pe and k_pe (16 features) read in interleaved pairs, written even features first."""
    net, model = exported("deepseek_v3")
    c = net.net.config
    assert (c.qk_nope_head_dim, c.qk_rope_head_dim, c.rope_interleave) == (16, 16, True)
    report = audit_rotary(model, config(net))
    for f in report.findings:
        assert f.found == "interleaved pairs, rotary width 16 of head_dim 32 (trailing)"
        assert "input features 0, 2, 4, 6, 8, 10, 12, 14, ..." in f.note and "rotary features alone" in f.note


def test_llama4_nope_layers_have_no_rotation():
    net, model = exported("llama4")
    assert net.net.config.no_rope_layers == [1, 1, 1, 0] and rope_layers(net) == [0, 1, 2]
    report = audit_rotary(model, config(net))
    assert report.status == "verified" and 3 not in {f.layer for f in report.findings}, report
    assert {f.found for f in report.findings} == {"interleaved pairs, rotary width 16 of head_dim 16"}


def test_llama4_real_rotation_is_transformers_complex_one():
    """The export's rotation in real arithmetic gives the logits of transformers' complex one."""
    net, _ = exported("llama4")
    feed = hf_models.inputs(batch=2, seq=9, start=200, seed=3)
    want = hf_models.logits(net, feed)
    with hf_models.real_llama4_rotation():
        got = hf_models.logits(net, feed)
    assert np.max(np.abs(got - want)) <= 1e-5 * (1 + np.max(np.abs(want)))


def _theta(c):
    c["rope_parameters"]["rope_theta"] = 500000.0


def _no_scaling_in_full_layers(c):
    c["rope_parameters"]["full_attention"] = {"rope_type": "default", "rope_theta": 1000000.0}


def _whole_head(c):
    c["rope_parameters"]["partial_rotary_factor"] = 1.0


def _half_split(c):
    c["rope_interleave"] = False


def _long_factors_as_short(c):
    c["rope_parameters"]["long_factor"] = c["rope_parameters"]["short_factor"]


def _first_layer_nope(c):
    c["no_rope_layers"] = [0, 1, 1, 1]


FAULTS = [  # family, the config's fault, the layers that fail, what the first failure names
    ("llama", _theta, [0, 1], "rope_theta 10000 found, 500000 expected"),
    ("gemma3", _no_scaling_in_full_layers, [1], "linear scaling found (factor 8.0), none expected"),
    ("phi3", _whole_head, [0, 1], "rotary width 8 found, 16 expected"),
    ("deepseek_v3", _half_split, [0, 1], "pairs interleaved where model type 'deepseek_v3' pairs half-split"),
    (
        "phi3_longrope",
        _long_factors_as_short,
        [0, 1],
        "longrope rotation at positions 0..6 in a call reaching position 255",
    ),
    ("llama4", _first_layer_nope, [0], "layer 0 rotates, but the config gives it no RoPE"),
]


@pytest.mark.parametrize("family,fault,failing,words", FAULTS, ids=[f"{f[0]}-{f[1].__name__[1:]}" for f in FAULTS])
def test_config_fault_fails_and_is_named(family, fault, failing, words):
    net, model = exported(family)
    wrong = config(net)
    fault(wrong)
    report = audit_rotary(model, wrong)
    assert report.status == "failed", report
    assert sorted({f.layer for f in report.failures}) == failing  # type: ignore[type-var]
    assert words in report.failures[0].difference, report
    assert words in report.verdict()
    if len(failing) == len(rope_layers(net)):  # every rotation fails: the first finding says why
        assert words in report.findings[0].difference


def test_a_wider_head_whose_rotary_width_is_the_model_s_head_is_no_partial_rotation(tmp_path):
    """A config of heads twice the model's, rotating half of each (the model's whole head): the model's rotations
    turn whole heads (no Slice cuts their input from a wider one), so audit finds the head dim that differs, never a
    partial rotation the model would join outside it, and repair refuses the config (exit 2) rather than rewriting
    the model to it."""
    from arrayrope import cli

    net, model = exported("llama")
    wider = config(net)
    head = wider["hidden_size"] // wider["num_attention_heads"]
    # StableLM's config: a partial rotary family of the same pairs and base, heads twice as wide
    wider.update(model_type="stablelm", head_dim=None, hidden_size=2 * wider["hidden_size"], partial_rotary_factor=0.5)
    report = audit_rotary(model, wider)
    assert report.status == "failed"
    assert all(f.difference == f"head_dim {head} found, {2 * head} expected" for f in report.findings), report
    assert not any("alone" in f.note for f in report.findings)
    path, cfg = tmp_path / "m.onnx", tmp_path / "config.json"
    import json

    import onnx

    onnx.save(model, path)
    cfg.write_text(json.dumps(wider))
    assert cli.main(["repair", str(path), "--config", str(cfg), "-o", str(tmp_path / "r.onnx")]) == 2
    assert not (tmp_path / "r.onnx").exists()


def test_llama4_layer_the_config_gives_rope_without_one_is_missing():
    """A config that gives the NoPE layer RoPE: no rotation is found there, and the audit does not verify."""
    net, model = exported("llama4")
    wrong = config(net)
    wrong["no_rope_layers"] = [1, 1, 1, 1]
    report = audit_rotary(model, wrong)
    assert report.status == "not verified" and report.missing == ((3, "expected: RoPE"),), report
    assert "no rotation found in layer 3" in report.verdict()


@functools.cache
def qwen2_vl_text(exporter, head_dim=16, interleaved=False):
    """Qwen2-VL's text decoder (head_dim 16, mrope_section [2, 3, 3]; or head_dim 128 at base 1e6 with the family's
    default sections [16, 24, 24], as its checkpoints) exported as users export it, with position ids of shape
    (3, batch, seq): the model, and its config. ``interleaved``: Qwen3-VL's, whose sections take turns."""
    import io
    import warnings

    import onnx
    import torch
    import transformers as tf

    torch.manual_seed(0)
    small = head_dim == 16
    family = tf.Qwen3VLTextConfig if interleaved else tf.Qwen2VLTextConfig
    cfg = family(
        hidden_size=4 * head_dim if small else 2 * head_dim,
        **({"head_dim": head_dim} if interleaved else {}),
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4 if small else 2,
        num_key_value_heads=2 if small else 1,
        vocab_size=hf_models.VOCAB,
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
        if small
        else {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    )
    if interleaved:
        cfg.rope_parameters["mrope_interleaved"] = True  # type: ignore[index]
    text = (tf.Qwen3VLTextModel if interleaved else tf.Qwen2VLTextModel)(cfg).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.text = text

        def forward(self, input_ids, attention_mask, position_ids):
            out = self.text(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            )
            return out.last_hidden_state

    ids = torch.randint(0, hf_models.VOCAB, (2, 7))
    args = (ids, torch.ones(2, 7, dtype=torch.long), torch.arange(7)[None, None].expand(3, 2, 7).contiguous())
    names = ["input_ids", "attention_mask", "position_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript-17":
            f = io.BytesIO()
            axes = {"input_ids": {0: "b", 1: "s"}, "attention_mask": {0: "b", 1: "s"}, "position_ids": {1: "b", 2: "s"}}
            torch.onnx.export(
                Hidden().eval(),
                args,
                f,
                dynamo=False,
                opset_version=17,
                input_names=names,
                output_names=["hidden"],
                dynamic_axes=axes,
            )
            return onnx.load_from_string(f.getvalue()), cfg
        b, s = torch.export.Dim("batch"), torch.export.Dim("seq")
        shapes = {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}, "position_ids": {1: b, 2: s}}
        program = torch.onnx.export(Hidden().eval(), args, dynamo=True, opset_version=18, dynamic_shapes=shapes)
        return program.model_proto, cfg  # type: ignore[union-attr]


@pytest.mark.parametrize("exporter", ["torchscript-17", "dynamo-18"])
def test_mrope_text_decoder_is_measured_axis_by_axis(exporter):
    """Qwen2-VL's rotation turns pairs 0-1 by the temporal position, 2-4 by the height, 5-7 by the width
    (transformers' own section split, the oracle below): the export verifies, with each axis at another position;
    against sections [3, 3, 2] it fails, naming the first pair that turns by another axis."""
    import torch

    model, cfg = qwen2_vl_text(exporter)
    report = audit_rotary(model, cfg.to_dict())
    assert report.status == "verified" and len(report.findings) == 4, report
    assert all("M-RoPE axes at positions 97, 7, 31 (+0..7) checked" in f.note for f in report.findings)
    # the oracle: transformers' cos with only the height axis moved turns exactly pairs 2..4
    pos = torch.zeros(3, 1, 1, dtype=torch.long)
    pos[1] = 5
    cos = tf_rotary(cfg)(torch.zeros(1, 1, 16), pos)[0][0, 0]
    assert (cos[:8] != 1).tolist() == [False, False, True, True, True, False, False, False]

    wrong = cfg.to_dict()
    wrong["rope_parameters"]["mrope_section"] = [3, 3, 2]
    report = audit_rotary(model, wrong)
    assert report.status == "failed"
    assert {f.difference for f in report.findings} == {
        "M-RoPE pairs turn by other axes than mrope_section [3, 3, 2] gives: pair 2 by axis h, expected t "
        "(found, pair by pair: tthhhwww; expected: ttthhhww)"
    }
    plain = {**cfg.to_dict(), "model_type": "qwen2"}
    plain["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    report = audit_rotary(model, plain)
    assert {f.difference for f in report.findings} == {
        "it takes M-RoPE position ids (3, batch, seq), and the config gives no mrope_section"
    }


def test_mrope_axes_are_named_at_a_checkpoint_s_size():
    """head_dim 128 at base 1e6: the slowest pairs turn by 1e-4 rad at the probed positions, still told apart."""
    model, cfg = qwen2_vl_text("torchscript-17", 128)
    assert audit_rotary(model, cfg.to_dict()).status == "verified"
    wrong = cfg.to_dict()
    wrong["rope_parameters"]["mrope_section"] = [24, 20, 20]
    report = audit_rotary(model, wrong)
    found = "t" * 16 + "h" * 24 + "w" * 24
    expected = "t" * 24 + "h" * 20 + "w" * 20
    assert {f.difference for f in report.findings} == {
        f"M-RoPE pairs turn by other axes than mrope_section [24, 20, 20] gives: pair 16 by axis h, expected t "
        f"(found, pair by pair: {found}; expected: {expected})"
    }


def tf_rotary(cfg):
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    return Qwen2VLRotaryEmbedding(config=cfg)


@pytest.mark.parametrize(
    ("exporter", "interleaved", "sections"),
    [
        ("torchscript-17", False, "[2, 3, 3]"),
        ("dynamo-18", False, "[2, 3, 3]"),
        # Qwen3-VL's [2, 3, 3] take turns thwthwth over 8 pairs: 3 pairs of t, 3 of h, 2 of w
        ("torchscript-17", True, "[3, 3, 2] interleaved"),
    ],
)
def test_fuse_writes_mrope_rotations_with_their_sections(exporter, interleaved, sections, tmp_path, capsys):
    """Each M-RoPE rotation fused with the sections measured axis by axis (transformers' split); the fused model
    computes what the export computes with every axis at positions of its own (the oracle: the export itself on
    ONNX Runtime). Reading the model's own tables (one per token) leaves them, saying why."""
    import onnx
    import onnxruntime as ort

    from arrayrope import cli

    model, cfg = qwen2_vl_text(exporter, interleaved=interleaved)
    src, out = tmp_path / "m.onnx", tmp_path / "f.onnx"
    onnx.save(model, src)
    assert cli.main(["export", "fuse", str(src), "-o", str(out), "--provider", "cpu"]) == 0
    said = capsys.readouterr().out
    assert "4 of 4 rotary applications fused" in said and said.count(f"M-RoPE sections {sections};") == 4, said
    assert audit_rotary(str(out), cfg.to_dict()).status == "verified"
    rng = np.random.default_rng(0)
    feed = {
        "input_ids": rng.integers(0, cfg.vocab_size, (2, 9)),
        "attention_mask": np.ones((2, 9), np.int64),
        "position_ids": np.stack([rng.permutation(200)[:9] for _ in range(3)])[:, None].repeat(2, 1),
    }
    outputs = []
    for path in (src, out):
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        outputs.append(sess.run(None, {i.name: v for i, v in zip(sess.get_inputs(), feed.values(), strict=True)})[0])
    assert np.max(np.abs(outputs[0] - outputs[1])) < 1e-4 * np.max(np.abs(outputs[0]))
    assert cli.main(["export", "fuse", str(src), "-o", str(out), "--tables", "model", "--provider", "cpu"]) == 3
    said = capsys.readouterr().out
    assert said.count("its M-RoPE tables are fused as tables='stored' or 'computed'") == 4, said
