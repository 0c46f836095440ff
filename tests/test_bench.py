"""The benchmark suite's plumbing on a tiny configuration: every record carries its ratios.

Figures from these runs mean nothing (a few microseconds, one round); nothing here
is timed or compared against a speed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEW_TARGETS = (
    "Never slower than naive",
    "float16 / bfloat16 prefill",
    "Start-up: import arrayrope",
    "pytest plugin, no test asking for its fixtures",
    "A far position costs what it uses (numpy, offset 10000)",
    "Decode RotaryEmbedding, q (1, 8, 1, 128), k (1, 2, 1, 128)",
    "With one busy process",
)


@pytest.fixture(scope="module")
def bench():
    """The ``bench`` package of this checkout (it is not installed)."""
    sys.path.insert(0, str(ROOT))
    try:
        from bench import _config, _load, _suite, _targets

        yield _config, _suite, _targets, _load
    finally:
        sys.path.remove(str(ROOT))


@pytest.fixture(scope="module")
def tiny_run(bench):
    config_mod, suite, _, _ = bench
    backends = ("numpy", *(lib for lib in ("dask", "torch") if importlib.util.find_spec(lib)))
    config = dataclasses.replace(config_mod.MODES["tiny"], threads="default", backends=backends)
    meta, records = suite.run(config, lambda text: None)
    return config, meta, records


def _finite(ratios: dict) -> bool:
    return all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in ratios.values())


def test_every_section_and_workload_is_recorded(tiny_run):
    config, meta, records = tiny_run
    dask = {"dask"} if importlib.util.find_spec("dask") else set()  # the Dask section needs Dask
    torch = {"compile"} if importlib.util.find_spec("torch") else set()  # torch.compile's section
    assert {r["section"] for r in records} == {
        "apply",
        "embedding",
        "memory",
        "tables",
        "sweep",
        "far",
        "startup",
    } | dask | torch
    assert all(r["threads"] == "default" for r in records)
    eager = [b for b in ("numpy", "torch") if b not in meta["missing"] and any(r["backend"] == b for r in records)]
    assert "numpy" in eager
    for backend in eager:
        got = {
            (tuple(r["shape"]), r["layout"])
            for r in records
            if r["section"] == "apply"
            and r["backend"] == backend
            and r["dtype"] == "float32"
            and r["rotary_dim"] == r["shape"][-1]
        }
        assert got == {(s, lay) for s in config.decode + config.prefill for lay in ("half", "interleaved")}
        steps = {
            (tuple(r["shape"]), tuple(r["k_shape"]), r["layout"])
            for r in records
            if r["section"] == "embedding" and r["backend"] == backend
        }
        assert ((1, 8, 1, 128), (1, 2, 1, 128), "half") in steps
        assert ((1, 8, 1, 128), (1, 2, 1, 128), "interleaved") in steps


def test_apply_records_have_ratios_to_copy_naive_and_ort(tiny_run):
    _, meta, records = tiny_run
    apply = [r for r in records if r["section"] == "apply"]
    assert apply
    for r in apply:
        assert {"copy", "arrayrope", "reference path", "naive"} <= set(r["x_copy"]), r
        assert r["x_copy"]["copy"] == 1.0 and _finite(r["x_copy"]), r
        assert r["x_naive"]["naive"] == 1.0 and _finite(r["x_naive"]), r
        if r["layout"] == "interleaved":
            assert "naive complex" in r["x_copy"], r
        if r["backend"] in ("numpy", "torch"):  # their arrays take out=
            assert {"arrayrope out=", "arrayrope in place", "arrayrope into cache slice"} <= set(r["x_copy"]), r
        if meta["onnxruntime fused"] and r["backend"] == "numpy" and r["dtype"] in ("float32", "float16"):
            assert r["x_ort"]["ORT fused"] == 1.0 and "arrayrope" in r["x_ort"] and _finite(r["x_ort"]), r


def test_decode_and_other_records_have_their_ratios(tiny_run):
    _, _, records = tiny_run
    for r in records:
        if r["section"] == "embedding":
            assert set(r["x_naive"]) == {
                "copy q and k",
                "naive q and k",
                "naive twice",
                "RotaryEmbedding",
                "RotaryEmbedding, new step",
                "apply_rotary twice",
                "RotaryEmbedding out=",  # NumPy and PyTorch arrays take q_out= and k_out=
            }, r
            assert r["x_naive"]["naive q and k"] == 1.0 and _finite(r["x_naive"]) and _finite(r["x_copy"]), r
        elif r["section"] == "compile":
            assert set(r["x_eager"]) == {"eager", "compiled", "naive", "naive compiled"}, r
            assert r["x_eager"]["eager"] == 1.0 and _finite(r["x_eager"]) and _finite(r["x_naive"]), r
            # a decode step moves to a new offset on every call: one graph, and one more once dynamo makes the
            # int offset dynamic at its second value, whatever the number of calls
            assert 1 <= r["graphs"]["compiled"] <= 2, r
        elif r["section"] == "sweep":
            assert {"arrayrope half", "arrayrope interleaved", "naive half"} <= set(r["x_copy"]), r
            assert _finite(r["x_copy"]), r
        elif r["section"] == "dask":
            assert {"x * 1.0", "arrayrope", "naive"} == set(r["x_copy"]) and _finite(r["x_copy"]), r
            assert r["tasks_in_rotary_layer"] == r["chunks"], r
        elif r["section"] == "tables":
            assert r["x_recipe"]["float32 recipe"] == 1.0 and _finite(r["x_recipe"]), r
            assert all(e < 1e-2 for e in r["max_error"].values()), r
        elif r["section"] == "memory":
            assert {"arrayrope", "reference path", "naive"} == set(r["extra_over_x"]), r
        elif r["section"] == "far":
            assert set(r["x_warm"]) == {"warm decode step", f"fresh, offset {r['offset']}"}, r
            assert _finite(r["x_warm"]), r
            assert r["peak_MB"] is None or r["peak_MB"] > 0, r
        elif r["section"] == "startup":
            assert set(r["seconds"]) == {
                "python",
                "import numpy",
                "import arrayrope",
                "pytest",
                "pytest -p no:arrayrope",
            }, r
            assert r["heavy_modules"] == [] and r["plugin_loads"] == [] and r["modules_beyond_numpy"] > 0, r


def test_targets_are_reported_never_asserted(bench, tiny_run):
    _, _, targets, _ = bench
    config, _, records = tiny_run
    meta = {"settings": ["default"], "prefill": [list(p) for p in config.prefill], "load": {"busy processes": 0}}
    rows = targets.targets(records, meta)
    names = {t["target"] for t in rows}
    assert set(NEW_TARGETS) <= names
    dask = {"Dask 2 GiB chunked"} if importlib.util.find_spec("dask") else set()
    assert {"NumPy prefill, half", "NumPy prefill, half, out=", "Decode apply_rotary (NumPy)"} | dask <= names
    assert all(t["met"] in (True, False, None) and t["reached"] for t in rows)
    assert next(t for t in rows if t["target"] == "With one busy process")["met"] is None  # no load: not measured


def test_command_line_runs_each_thread_setting_in_its_own_process_under_load(tmp_path):
    pins = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "XLA_FLAGS")
    env = {k: v for k, v in os.environ.items() if k not in pins}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--tiny",
            "--backends",
            "numpy",
            "--threads",
            "1,default",
            "--load",
            "1",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    machine = data["machine"]
    assert machine["settings"] == ["1", "default"]
    assert machine["load"]["busy processes"] == 1 and machine["load"]["stayed busy"] is True
    assert machine["runs"]["1"]["environment"]["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in machine["runs"]["default"]["environment"]
    apply = [r for r in data["records"] if r["section"] == "apply"]
    assert {r["threads"] for r in apply} == {"1", "default"}
    assert all("arrayrope" in r["x_copy"] and "arrayrope" in r["x_naive"] for r in apply)
    assert {r["threads"] for r in data["records"] if r["section"] in ("memory", "dask")} <= {"1"}
    loaded = [t for t in data["targets"] if t["target"] == "With one busy process"]
    assert {t["threads"] for t in loaded} == {"1", "default"} and all(t["met"] is not None for t in loaded)
    md = (tmp_path / "results.md").read_text()
    assert "1 thread / default" in md and "1 other busy process" in md


def test_busy_processes_stop_after_the_block(bench):
    _, _, _, load = bench
    with load.busy(1) as info:
        (pid,) = info["pids"]
        assert Path(f"/proc/{pid}").exists() or not Path("/proc").exists()
    assert info["stayed busy"] is True
    if Path("/proc").exists():
        assert not Path(f"/proc/{pid}").exists()


def test_a_run_writes_to_a_folder_of_its_own_and_leaves_the_committed_results(bench, tmp_path, monkeypatch):
    """Without --out a run writes a new folder under bench/runs (here redirected to tmp_path); it rewrote the
    committed results that the documentation includes. --tiny runs one thread setting on the fast-starting libraries."""
    from bench import run

    committed = {p: p.read_bytes() for p in (ROOT / "bench" / "results").rglob("*") if p.is_file()}
    monkeypatch.setattr(run, "RUNS", tmp_path / "runs")
    seen = []
    monkeypatch.setattr(run, "measure_in_process", lambda config: seen.append(config) or None)
    assert run.main(["--tiny"]) == 1  # no records: every setting "failed", which the run reports
    assert [(c.threads, c.backends) for c in seen] == [("default", run.TINY_BACKENDS)]
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name.endswith("-tiny") and (folder / "results.md").exists()
    assert {p: p.read_bytes() for p in (ROOT / "bench" / "results").rglob("*") if p.is_file()} == committed
    with pytest.raises(SystemExit):
        run.parse(["--report"])  # rewriting a report needs the folder named


def test_repair_bench_reports_ratios_of_the_repaired_model_to_the_export(tmp_path):
    """``python -m bench.repair --tiny``: a table of both models' times and their ratio, nothing asserted of them."""
    pytest.importorskip("onnxruntime")
    from bench import repair

    assert repair.main(["--tiny", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "repair.md").read_text()
    rows = [
        line for line in table.splitlines() if line.startswith("| optimum phi3_longrope | computed | export | 1 | 0 |")
    ]
    assert [r.split(" | ")[5] for r in rows] == ["prefill 512", "decode"]
    for r in rows:
        export, repaired, ratio = (float(v) for v in r.strip(" |").split(" | ")[-3:])
        assert abs(ratio - repaired / export) <= 2e-3 * ratio + 1e-3
