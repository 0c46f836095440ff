"""fuse_rotary and ``arrayrope export fuse`` on a model whose weights are in an external data file.

The model (bench/large_model.py) is small here, a few MB, with every float initializer
external, the rotation's inv_freq too. Oracles: the original model run on ONNX Runtime for what
the fused one computes, and the original files' bytes for what must not change.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto  # noqa: E402

from arrayrope.cli import main  # noqa: E402
from arrayrope.export import fuse_rotary  # noqa: E402
from arrayrope.export._graph import load_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.large_model import write_model  # noqa: E402

MB = 1 << 20


@pytest.fixture
def model_path(tmp_path):
    folder = tmp_path / "original"
    folder.mkdir()
    return write_model(str(folder), 4 * MB)


def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir())}


def outputs(path, seed=0):
    rng = np.random.default_rng(seed)
    rows = onnx.load(path, load_external_data=False).graph.initializer[0].dims[0]
    feed = {
        "input_ids": rng.integers(0, rows, (2, 9)).astype(np.int64),
        "position_ids": np.broadcast_to(np.arange(300, 309), (2, 9)).astype(np.int64),
    }
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feed)[0]


def test_load_model_keeps_the_weights_in_their_file(model_path):
    model = load_model(model_path, keep_external=True)
    floats = [t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT]
    assert len(floats) == 8  # 4 tables, 2 projections, the bias, inv_freq
    for t in floats:
        assert t.data_location == TensorProto.EXTERNAL and not t.raw_data, t.name
    assert model.ByteSize() < 64 * 1024  # the graph only


def test_fuse_rotary_reads_the_weights_from_their_file(model_path, monkeypatch):
    before = digests(os.path.dirname(model_path))
    read = []
    load = onnx.external_data_helper.load_external_data_for_tensor

    def spy(tensor, base_dir):
        read.append(tensor.name)
        load(tensor, base_dir)

    monkeypatch.setattr(onnx.external_data_helper, "load_external_data_for_tensor", spy)
    fused, report = fuse_rotary(model_path, providers="cpu")
    assert read == ["inv_freq"]  # the rotation's constant, for the cut-out probed alone; no weight
    assert report.fused == 1 and report.status == "verified", str(report)
    assert report.data_folder == os.path.dirname(os.path.abspath(model_path))
    external = [t for t in fused.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert {t.name for t in external} >= {"embed0", "wq", "wo"}
    assert all(not t.raw_data for t in external)
    assert "RotaryEmbedding" in [n.op_type for n in fused.graph.node]
    assert digests(os.path.dirname(model_path)) == before


def test_cli_writes_the_model_with_one_data_file_beside_it(model_path, tmp_path, capsys):
    before = digests(os.path.dirname(model_path))
    out = tmp_path / "written" / "fused.onnx"
    out.parent.mkdir()
    assert main(["export", "fuse", model_path, "-o", str(out), "--provider", "cpu"]) == 0, capsys.readouterr()
    assert sorted(p.name for p in out.parent.iterdir()) == ["fused.onnx", "fused.onnx.data"]
    assert os.path.getsize(out) < 1 * MB  # the weights are in the data file
    loaded = onnx.load(str(out))  # whole: every external tensor found beside it
    assert "RotaryEmbedding" in [n.op_type for n in loaded.graph.node]
    onnx.checker.check_model(str(out))
    written = load_model(str(out), keep_external=True)
    assert {t.external_data[0].value for t in written.graph.initializer if t.external_data} == {"fused.onnx.data"}
    np.testing.assert_allclose(outputs(str(out)), outputs(model_path), rtol=1e-5, atol=1e-5)
    assert digests(os.path.dirname(model_path)) == before


def test_cli_refuses_to_overwrite_the_weights_it_reads(tmp_path, capsys):
    folder = tmp_path / "m"
    folder.mkdir()
    path = write_model(str(folder), MB)
    os.rename(folder / "model.data", folder / "model.onnx.data")  # the name exporters often give it
    model = onnx.load(path, load_external_data=False)
    for entry in (e for t in model.graph.initializer for e in t.external_data if e.key == "location"):
        entry.value = "model.onnx.data"
    onnx.save(model, path)
    before = digests(folder)
    for out, words in ((path, "is the model read"), (str(folder / "model.onnx.data"), "model.onnx.data")):
        assert main(["export", "fuse", path, "-o", out, "--provider", "cpu"]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err, err
        assert digests(folder) == before
