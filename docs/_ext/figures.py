"""The site's figures, drawn when the documentation builds (into ``docs/_generated``, not committed).

* ``wavelengths.png``: ``arrayrope plot`` itself (:mod:`arrayrope.cli.plot`) over the rope types it knows;
* ``precision.png``: the worst error of float32 cos/sin tables against position, arrayrope's
  :func:`arrayrope.rope_tables` and the common recipe ``cos(float32(p) * float32(theta))``, each
  against exact angles (:func:`arrayrope.testing.exact_angles`, then cos in float64);
* ``speed.png``: the bench's own plot (``bench._report.plot``) of the committed runs in ``bench/results``.

The CLI reference holds the commands' help itself (``tools/cli_reference.py`` writes it).
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
from typing import Any

import numpy as np

DOCS = pathlib.Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
OUT = DOCS / "_generated"


def wavelengths(path: pathlib.Path) -> None:
    from arrayrope.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["plot", "--types", "default,linear,dynamic,yarn,llama3", "-o", str(path)])
    if status != 0:
        raise RuntimeError(f"arrayrope plot exited with status {status}")


def table_errors(bits: int = 44, per_octave: int = 24, head_dim: int = 128) -> dict[str, Any]:
    """Positions from 1 to ``2**bits`` and, at each, the worst error of float32 cos and sin over the pairs."""
    import arrayrope
    from arrayrope.testing import exact_angles

    freqs = arrayrope.rope_frequencies(head_dim)
    positions = np.unique(np.round(np.geomspace(1, 2.0**bits, bits * per_octave)).astype(np.int64))
    exact = exact_angles(positions, freqs.inv_freq)
    cos_ref, sin_ref = np.cos(exact), np.sin(exact)
    cos, sin = arrayrope.rope_tables(freqs, positions, dtype=np.float32)
    angle = positions.astype(np.float32)[:, None] * freqs.inv_freq.astype(np.float32)  # the common recipe
    recipe_cos, recipe_sin = np.cos(angle), np.sin(angle)

    def worst(c: np.ndarray, s: np.ndarray) -> np.ndarray:
        err = np.maximum(np.abs(c.astype(np.float64) - cos_ref), np.abs(s.astype(np.float64) - sin_ref))
        out: np.ndarray = err.max(axis=-1)
        return out

    return {"positions": positions, "arrayrope": worst(cos, sin), "recipe": worst(recipe_cos, recipe_sin)}


def precision(path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    e = table_errors()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.loglog(e["positions"], e["recipe"], label="common recipe: cos(float32(p) · float32(θ))", color="tab:red")
    ax.loglog(e["positions"], e["arrayrope"], label="arrayrope.rope_tables, float32", color="tab:blue")
    ax.axhline(2.0**-25, color="gray", linestyle="--", linewidth=0.8)
    ax.text(1.5, 2.0**-25 / 2.2, "half a float32 ulp of 1: correctly rounded", color="gray", fontsize=8)
    ax.set(
        xlabel="position p",
        ylabel="worst |error| of cos, sin over 64 pairs",
        title="float32 cos/sin tables against exact angles (head_dim 128, base 10000)",
        ylim=(1e-9, 4),
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def speed(path: pathlib.Path) -> None:
    from bench import _report

    data = json.loads((ROOT / "bench" / "results" / "results.json").read_text())
    _report.plot([r for r in data["records"] if r["section"] == "sweep"], path, data["machine"])
    if not path.exists():
        raise RuntimeError("bench/results/results.json holds no sweep to plot")


FIGURES = {"wavelengths.png": wavelengths, "precision.png": precision, "speed.png": speed}


def draw(app: Any = None) -> None:
    OUT.mkdir(exist_ok=True)
    for name, figure in FIGURES.items():
        figure(OUT / name)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", draw)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
