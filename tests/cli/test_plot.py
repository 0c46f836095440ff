"""``arrayrope plot``: the decay bound against its definition, and the command end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arrayrope import cli
from arrayrope.cli.plot import relative_decay_bound


def test_bound_matches_its_definition():
    theta = np.array([10000.0 ** (-2 * i / 16) for i in range(8)])
    distances = np.array([0.0, 1.0, 7.0, 100.0, 5000.0])
    want = []
    for r in distances:
        partial, total = 0j, 0.0
        for t in theta:
            partial += complex(np.cos(r * t), np.sin(r * t))
            total += abs(partial)
        want.append(total / len(theta))
    np.testing.assert_allclose(relative_decay_bound(theta, distances), want, rtol=1e-12)
    assert relative_decay_bound(theta, np.array([0.0]))[0] == pytest.approx(4.5)  # (1 + ... + 8) / 8


def test_plot_command_writes_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "head_dim": 64,
                "max_position_embeddings": 32768,
                "rope_theta": 1e6,
                "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096},
            }
        )
    )
    out = tmp_path / "rope.png"
    assert cli.main(["plot", str(cfg), "--types", "default,linear", "--head-dim", "64", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    # yarn x8 attention factor 0.1 ln 8 + 1
    assert f"{0.1 * np.log(8) + 1:.4f}" in text and "linear x8" in text and "(yarn)" in text


def test_plot_command_reports_bad_input(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert cli.main(["plot", "--types", "longrope", "-o", str(tmp_path / "x.png")]) == 2
    assert "longrope needs its factor lists" in capsys.readouterr().err
