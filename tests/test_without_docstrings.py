"""arrayrope under ``python -OO``: no docstrings and no asserts, and every module imports and works.

A subprocess imports every module of the package with docstrings stripped, uses
the public pipeline and encodings, and saves what they compute; this process
checks the results against independent oracles (rotation matrices, the published
sinusoid and ALiBi formulas), not against arrayrope. ``tests/export/test_optimized.py``
does the same for the export layer.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np

from helpers import inv_freq_formula, rope_by_matrix

SCRIPT = r"""
import importlib, pkgutil, sys

import numpy as np

import arrayrope

if arrayrope.rope_tables.__doc__ is not None or sys.flags.optimize < 2:
    raise SystemExit("docstrings were not stripped")
optional = {"torch", "jax", "dask", "cupy", "onnx", "onnxruntime", "array_api_strict", "matplotlib"}
for info in pkgutil.walk_packages(arrayrope.__path__, "arrayrope."):
    if info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:  # a backend module whose library is not installed
        if exc.name not in optional:
            raise

rng = np.random.default_rng(0)
x = rng.standard_normal((1, 2, 5, 16))
f = arrayrope.rope_frequencies(16, scaling={"rope_type": "linear", "factor": 2.0})
cos, sin = arrayrope.rope_tables(f, np.arange(3, 8), dtype=np.float64)
rope = arrayrope.RotaryEmbedding(16, layout="interleaved")
q, k = rope(x, x[:, :1], offset=3)
arrayrope.testing.assert_close(arrayrope.apply_rotary(x, cos, sin), arrayrope.apply_rotary(x, cos, sin))
np.savez(sys.argv[1], inv_freq=f.inv_freq, half=arrayrope.apply_rotary(x, cos, sin), q=q, k=k, x=x,
         sinusoidal=arrayrope.sinusoidal_embedding(8, 6), slopes=arrayrope.alibi_slopes(8))
"""


def test_the_package_works_without_docstrings_or_asserts(tmp_path):
    out = tmp_path / "out.npz"
    subprocess.run([sys.executable, "-OO", "-c", SCRIPT, str(out)], check=True, capture_output=True, text=True)
    r = np.load(out)
    x = r["x"]
    np.testing.assert_allclose(r["inv_freq"], inv_freq_formula(16, 10000.0) / 2.0, rtol=1e-14)
    np.testing.assert_allclose(r["half"], rope_by_matrix(x, np.arange(3, 8), r["inv_freq"], "half"), atol=1e-12)
    plain = inv_freq_formula(16, 10000.0)
    np.testing.assert_allclose(r["q"], rope_by_matrix(x, np.arange(3, 8), plain, "interleaved"), atol=1e-12)
    np.testing.assert_allclose(r["k"], rope_by_matrix(x[:, :1], np.arange(3, 8), plain, "interleaved"), atol=1e-12)
    pos, i = np.arange(6)[:, None], np.arange(4)[None, :]
    angle = pos / 10000.0 ** (2 * i / 8)  # the Transformer paper: sin on even features, cos on odd
    sinusoid = np.empty((6, 8))
    sinusoid[:, 0::2], sinusoid[:, 1::2] = np.sin(angle), np.cos(angle)
    np.testing.assert_allclose(r["sinusoidal"], sinusoid, atol=1e-6)
    np.testing.assert_allclose(r["slopes"], [2.0 ** (-8 * (j + 1) / 8) for j in range(8)], rtol=1e-6)
    assert math.isclose(float(r["slopes"][0]), 0.5)
