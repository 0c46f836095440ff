"""arrayrope.export under ``python -OO``: no docstrings and no asserts, every public name still works.

A subprocess uses each public name of ``arrayrope.export`` with docstrings
stripped and saves what the models compute; this process checks the results
against explicit rotation matrices (tests.helpers), not against the export layer.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import arrayrope.export
from helpers import inv_freq_formula, rope_by_matrix

# Each public name of arrayrope.export appears as ``ex.<name>`` below; the test checks that none is missed.
SCRIPT = r"""
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import arrayrope.export as ex
from arrayrope.testing import Report

if ex.rotary_model.__doc__ is not None or sys.flags.optimize < 2:
    raise SystemExit("docstrings were not stripped")

def run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)

rng = np.random.default_rng(0)
x = rng.standard_normal((1, 2, 5, 16)).astype(np.float32)
pos = np.array([[0, 63, 5, 32, 1]])
saved = {"x": x, "pos": pos}

options: ex.ExportKeywords = ex.ExportKeywords(max_positions=64, num_heads=2, rotary_dim=12)
saved["max_positions"] = np.array(ex.ExportOptions(**options).max_positions)
for target in ex.ExportOptions.choices("target"):
    model = ex.rotary_model(16, target=target, **options)
    saved["model_" + target] = run(model, {"x": x, "position_ids": pos})[0]
    report = ex.validate(model, providers="cpu")
    if not isinstance(report, Report) or not report.ok:
        raise SystemExit(f"validate failed for {target}: {report}")

bad = ex.rotary_model(16, target="portable", **options)
for t in bad.graph.initializer:
    if "sin" in t.name:
        a = numpy_helper.to_array(t).copy()
        a[63] = -a[63]
        t.CopyFrom(numpy_helper.from_array(a, t.name))
try:
    ex.validate(bad, providers="cpu")
    raise SystemExit("validate passed a model with a wrong table row")
except ex.ValidationError as exc:
    saved["caught"] = np.array(not exc.report.ok)

f = ex.rotary_function(16, target="portable", **options)
t = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", 2, "S", 16])
node = helper.make_node("RotaryEmbedding", ["a", "p"], ["b"], domain="arrayrope")
g = helper.make_graph([node], "g", [t("a"), helper.make_tensor_value_info("p", TensorProto.INT64, ["B", "S"])],
                      [t("b")])
m = helper.make_model(g, functions=[f], ir_version=8,
                      opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("arrayrope", 1)])
saved["function"] = run(m, {"a": x, "p": pos})[0]

splice: ex.SpliceKeywords = ex.SpliceKeywords(max_positions=64, rotary_dim=12, target="portable")
g = helper.make_graph([helper.make_node("Neg", ["a"], ["q"]), helper.make_node("Identity", ["q"], ["b"])], "g",
                      [t("a"), helper.make_tensor_value_info("p", TensorProto.INT64, ["B", "S"])], [t("b")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
saved["spliced"] = run(ex.add_rotary(m, q="q", position_ids="p", freqs=16, **splice), {"a": x, "p": pos})[0]

tables: ex.FuseTables = "stored"
target: ex.FuseTarget = "onnx23"
fused: ex.Fused = ex.fuse_rotary(ex.rotary_model(16, target="portable", **options), target=target, tables=tables,
                                 max_positions=64, providers="cpu")
if not isinstance(fused.report, ex.FusionReport) or not all(isinstance(r, ex.Rotation) for r in fused.report.rotations):
    raise SystemExit(f"fuse_rotary reported {fused.report!r}")
saved["fused"] = run(fused.model, {"x": x, "position_ids": pos})[0]
saved["fused_ops"] = np.array([n.op_type for n in fused.model.graph.node])

with ex.torch_options(target="ort", max_positions=64) as chosen:
    ok = isinstance(chosen, ex.TorchOptions) and chosen.target == "ort"
    saved["torch_rows"] = np.array(chosen.cache_rows(4096) if ok else -1)
saved["translations"] = np.array(len(ex.torch_translations(23)))

config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
audited: ex.AuditReport = ex.audit_rotary(ex.rotary_model(16, target="portable", max_positions=64), config)
if not all(isinstance(f, ex.Finding) for f in audited.findings):
    raise SystemExit(f"audit_rotary reported {audited!r}")
saved["audit"] = np.array([audited.exit_status, len(audited.findings)])

wrong = ex.rotary_model(16, target="portable", max_positions=64, base=500.0)
repaired: ex.Repaired = ex.repair_rotary(wrong, config)
if not isinstance(repaired.report, ex.RepairReport):
    raise SystemExit(f"repair_rotary reported {repaired.report!r}")
saved["repair"] = np.array([repaired.report.exit_status, repaired.report.repaired])
saved["repaired"] = run(repaired.model, {"x": x, "position_ids": pos})[0]
np.savez(sys.argv[1], **saved)
"""


def test_every_public_name_is_used():
    for name in arrayrope.export.__all__:
        assert f"ex.{name}" in SCRIPT, name


def test_the_simplest_call():
    code = "import arrayrope.export; arrayrope.export.rotary_model(64)"
    subprocess.run([sys.executable, "-OO", "-c", code], check=True, capture_output=True, timeout=120)


def test_every_public_name_works_without_docstrings(tmp_path):
    out = tmp_path / "out.npz"
    done = subprocess.run([sys.executable, "-OO", "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    saved = np.load(out)
    x, pos = saved["x"], saved["pos"][0]
    expected = rope_by_matrix(x, pos, inv_freq_formula(12, 10000.0), "half")
    # the portable graph, fused into one node (after the id guard)
    assert saved["fused_ops"].tolist() == ["Clip", "Mod", "RotaryEmbedding"]
    targets = arrayrope.export.ExportOptions.choices("target")
    for name in [f"model_{t}" for t in targets] + ["function", "fused"]:
        assert np.max(np.abs(saved[name] - expected)) <= 1e-6, name
    full = rope_by_matrix(x, pos, inv_freq_formula(16, 10000.0), "half")  # base 500 repaired to the config's
    assert saved["repair"].tolist() == [0, 1] and np.max(np.abs(saved["repaired"] - full)) <= 1e-6
    assert np.max(np.abs(saved["spliced"] + expected)) <= 1e-6  # the rotation of -x
    assert bool(saved["caught"]) and int(saved["max_positions"]) == 64
    assert int(saved["torch_rows"]) == 64  # the block's rows win over the module's
    assert int(saved["translations"]) == 1
    assert saved["audit"].tolist() == [0, 1]  # the rotation found, and it matches the config it was built from
