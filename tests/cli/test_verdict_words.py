"""Every command that gives a verdict says it in the words of ``Report.status`` (``cli/_verdict.py``).

``verdict: verified: ...`` (exit status 0), ``verdict: failed: ...`` (1), ``verdict: not verified: ...``
(3): the same strings, in the same case, as the Python status. Each command runs in-process on NumPy
or on a model of a few nodes, so the module takes about a second.
"""

from __future__ import annotations

import json
import sys
import typing

import numpy as np
import pytest

from arrayrope import cli
from arrayrope._lib.verdicts import EXIT_STATUS, Status
from arrayrope.testing import ParityCase, Report, Row

#: The commands the cases below run, by their prog.
COVERED = {
    *("arrayrope parity", "arrayrope demo", "arrayrope check", "arrayrope export fuse", "arrayrope audit"),
    "arrayrope repair",
}


def verdict_line(out: str) -> str:
    """The one ``verdict: ...`` line; the last line, or followed only by what ``export fuse`` wrote."""
    lines = out.rstrip().splitlines()
    found = [i for i, line in enumerate(lines) if line.startswith("verdict: ")]
    assert len(found) == 1, out
    assert found[0] == len(lines) - 1 or lines[-1].startswith("wrote "), out
    return lines[found[0]]


def assert_says(capsys, status: int, word: Status) -> None:
    line = verdict_line(capsys.readouterr().out)
    assert word in typing.get_args(Status) and status == EXIT_STATUS[word]
    assert line.startswith(f"verdict: {word}: "), line


@pytest.fixture
def model(tmp_path, capsys):
    """A portable export of 10 nodes with tables of 64 rows, which ``export fuse`` fuses into one node."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    path = tmp_path / "rope.onnx"
    argv = ["export", "--head-dim", "16", "--num-heads", "2", "--layout", "half", "--target", "portable"]
    assert cli.main([*argv, "--max-positions", "64", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


def test_parity_says_each_word(capsys, monkeypatch, missing_library):
    status = cli.main(["parity", "--backends", "numpy", "--dtypes", "float32"])
    assert_says(capsys, status, "verified")
    missing_library("cupy")
    status = cli.main(["parity", "--backends", "cupy"])
    assert_says(capsys, status, "not verified")
    doubled = ParityCase("doubled", lambda x: 2 * x, (np.ones(4),), reference=lambda x: x)
    monkeypatch.setattr("arrayrope.testing._cases.builtin_cases", lambda: [doubled])
    status = cli.main(["parity", "--backends", "numpy", "--dtypes", "float64"])
    assert_says(capsys, status, "failed")


def test_demo_says_verified(capsys, monkeypatch):
    from arrayrope.cli import demo

    row = Row("onnxruntime", "cpu", "float32", 2e-7, 1e-7, 1e-6, True, "", "ONNX export")
    monkeypatch.setattr(demo, "_export_case", lambda **kw: Report((row,)))
    status = cli.main(["demo", "--backends", "numpy"])
    assert_says(capsys, status, "verified")


def test_check_says_verified(model, capsys):
    status = cli.main(["check", str(model), "--provider", "cpu"])
    assert_says(capsys, status, "verified")


def test_export_fuse_says_verified_and_not_verified(model, tmp_path, capsys):
    out = tmp_path / "fused.onnx"
    status = cli.main(["export", "fuse", str(model), "-o", str(out), "--max-positions", "64", "--provider", "cpu"])
    assert_says(capsys, status, "verified")
    status = cli.main(["export", "fuse", str(model), "-o", str(out), "--max-positions", "64", "--no-validate"])
    assert_says(capsys, status, "not verified")


def test_audit_says_each_word(model, tmp_path, capsys):
    """The export above against configs that agree (verified), differ (failed) and name a layer it lacks."""
    config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    for layers, base, word in ((1, 10000.0, "verified"), (1, 500.0, "failed"), (2, 10000.0, "not verified")):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**config, "num_hidden_layers": layers, "rope_theta": base}))
        status = cli.main(["audit", str(model), "--config", str(path)])
        assert_says(capsys, status, word)


def test_repair_says_each_word(model, tmp_path, capsys):
    """The export above repaired to another base (verified), kept where the config's rotation has a form repair
    does not write (MLA's trailing rotary features: failed), and against a config of a layer more (not
    verified)."""
    config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 500.0, "max_position_embeddings": 64}
    mla = {
        **config,
        "model_type": "deepseek_v3",
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "num_attention_heads": 2,
        "hidden_size": 64,
    }
    for cfg, word in ((config, "verified"), (mla, "failed"), ({**config, "num_hidden_layers": 2}, "not verified")):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        status = cli.main(["repair", str(model), "--config", str(path), "-o", str(tmp_path / "repaired.onnx")])
        assert_says(capsys, status, word)


def test_every_command_that_gives_a_verdict_is_run_here():
    """A command that gives a verdict (``VERDICT = True``) gets a case above."""
    import argparse

    todo, verdicts = [cli.build_parser()], set()
    while todo:
        parser = todo.pop()
        run = parser.get_default("_run")
        if run is not None and getattr(sys.modules[run.__module__], "VERDICT", False):
            verdicts.add(parser.prog)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    assert verdicts == COVERED, f"give each of {sorted(verdicts - COVERED)} a case that reads its verdict line"


def test_a_failed_check_stays_failed_when_a_provider_named_could_not_run(capsys):
    """A numeric check that disagreed is 'failed' (exit 1) whatever else could not run: 'not verified' is for a
    verdict with nothing against it."""
    from arrayrope.cli._verdict import conclude

    bad = Report((Row("onnxruntime", "CPU", "float32", 1.0, 1.0, 1e-6, False, "differs"),))
    status = conclude(bad, missing=[("--provider cuda", "CUDAExecutionProvider is not available")])
    assert_says(capsys, status, "failed")
    good = Report((Row("onnxruntime", "CPU", "float32", 1e-8, 1e-8, 1e-6, True, ""),))
    status = conclude(good, missing=[("--provider cuda", "CUDAExecutionProvider is not available")])
    assert_says(capsys, status, "not verified")
