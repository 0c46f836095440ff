"""``Report`` and ``Row`` (``_lib/verdicts.py``): verdicts, combination, the worst failure and the
table, against tables laid out by hand."""

from __future__ import annotations

import dataclasses
import math
import operator

import pytest

from arrayrope.testing import Report, Row

NAN = math.nan


def test_report_table_and_combination():
    row = Row("numpy", "cpu", "float32", 1e-7, 2e-8, 5e-7, True)
    bad = Row("torch", "cpu", "float16", 0.5, 0.1, 4e-3, False, "error above tolerance")
    report = Report((row,)) + Report((bad,), (("cupy", "no GPU"),))
    assert not report.ok and report.failures == (bad,)
    lines = str(report).splitlines()
    titles = ["backend", "device", "dtype", "max", "abs", "err", "max", "rel", "err", "tolerance", "ok"]
    assert lines[0].split() == titles
    assert lines[1].split() == ["numpy", "cpu", "float32", "1.00e-07", "2.00e-08", "5.00e-07", "yes"]
    assert lines[2].endswith("FAIL: error above tolerance") and lines[3] == "skipped cupy: no GPU"
    assert Report((row,)).ok and not Report().ok  # a report that compared nothing is never ok


def test_no_former_names_remain():
    import arrayrope.testing

    for name in ("ParityReport", "ParityRow", "backends"):
        assert not hasattr(arrayrope.testing, name), name


def test_table_columns_are_aligned_numbers_right_text_left():
    rows = (
        Row("numpy", "cpu", "float32", 1e-7, 2e-8, 5e-7, True),
        Row("torch", "cuda:0", "bfloat16", NAN, NAN, 4e-3, False, "raised RuntimeError: no kernel"),
    )
    assert Report(rows, (("jax", "not installed"),), "RoPE").format().splitlines() == [
        "RoPE",
        "backend  device  dtype     max abs err  max rel err  tolerance  ok",
        "numpy    cpu     float32      1.00e-07     2.00e-08   5.00e-07  yes",
        "torch    cuda:0  bfloat16            -            -   4.00e-03  FAIL: raised RuntimeError: no kernel",
        "skipped jax: not installed",
    ]


def test_table_with_case_names_and_without_header_or_skips():
    rows = (
        Row("numpy", "cpu", "float64", 0.0, 0.0, 9.1e-13, True, case="axial"),
        Row("numpy", "cpu", "float32", 3e-6, 1e-6, 4.8e-7, False, "error above tolerance", case="half-split RoPE"),
    )
    report = Report(rows, (("torch", "not installed"),), "parity")
    assert report.format(header=False, skipped=False).splitlines() == [
        # the columns keep the widths of their titles, printed or not
        "axial            numpy    cpu     float64     0.00e+00     0.00e+00   9.10e-13  yes",
        "half-split RoPE  numpy    cpu     float32     3.00e-06     1.00e-06   4.80e-07  FAIL: error above tolerance",
    ]
    assert report.format().splitlines()[:2] == [
        "parity",
        "case             backend  device  dtype    max abs err  max rel err  tolerance  ok",
    ]
    assert str(report) == report.format()


def test_a_report_that_compared_nothing_is_not_verified_and_prints_its_skips_only():
    report = Report(skipped=(("cupy", "no GPU"),))
    assert not report.ok and report.failures == () and report.worst() is None
    assert (report.status, report.exit_status) == ("not verified", 3)
    assert report.verdict() == (
        "not verified: no numeric check could run here; not run here: cupy (the report says why)"
    )
    assert str(report) == "skipped cupy: no GPU"


def test_status_verified_failed_not_verified():
    good = Row("onnxruntime", "CPU", "float32", 1e-7, 1e-7, 5e-7, True)
    structural = Row("onnx", "-", "bfloat16", NAN, NAN, NAN, True, case="onnx.checker (full)", numeric=False)
    bad_structure = dataclasses.replace(structural, ok=False, note="invalid graph")
    bad = Row("onnxruntime", "CPU", "float32", 1e-3, 1e-3, 5e-7, False, "error above tolerance")
    only_structure = Report((structural,), (("onnxruntime CPU", "no bfloat16 kernel"),))
    assert (only_structure.status, only_structure.ok, only_structure.exit_status) == ("not verified", False, 3)
    assert only_structure.verdict().startswith(
        "not verified: no numeric check could run here (1 structural check passed); not run here: onnxruntime CPU"
    )
    assert (Report((structural, good)).status, Report((structural, good)).exit_status) == ("verified", 0)
    assert Report((structural, good, good)).verdict() == "verified: 2 numeric checks agree (onnxruntime CPU)"
    for failed in (Report((good, bad)), Report((bad_structure,)), Report((bad_structure, good))):
        assert (failed.status, failed.ok, failed.exit_status) == ("failed", False, 1)
    assert Report((good, bad)).verdict() == (
        "failed: 1 of 2 checks disagree (onnxruntime CPU float32: error above tolerance)"
    )


def test_worst_is_the_failure_furthest_beyond_its_tolerance():
    ok = Row("numpy", "cpu", "float32", 1.0, 1.0, 2.0, True)
    twice = Row("torch", "cpu", "float32", 2e-6, 0.0, 1e-6, False)  # 2 x tolerance
    tenfold = Row("jax", "cpu", "float32", 1e-3, 0.0, 1e-4, False)  # 10 x tolerance
    assert Report((ok, twice, tenfold)).worst() is tenfold
    assert Report((ok, twice)).worst() is twice
    raised = Row("dask", "cpu", "float32", NAN, NAN, NAN, False, "raised ValueError")
    zero = Row("cupy", "cuda:0", "float32", 1e-9, 0.0, 0.0, False)
    assert Report((tenfold, raised)).worst() is raised  # no numbers: counts as furthest
    assert Report((tenfold, zero)).worst() is zero  # no tolerance at all: likewise
    assert Report((ok,)).worst() is None


def test_sum_keeps_rows_in_order_skips_once_and_the_first_title():
    a = Row("numpy", "cpu", "float32", 0.0, 0.0, 1e-7, True)
    b = Row("torch", "cpu", "float32", 1.0, 1.0, 1e-7, False)
    left = Report((a,), (("cupy", "no GPU"),), "")
    right = Report((b,), (("cupy", "no GPU"), ("jax", "not installed")), "second")
    total = left + right
    assert total.rows == (a, b) and total.skipped == (("cupy", "no GPU"), ("jax", "not installed"))
    assert total.title == "second" and (Report(title="first") + right).title == "first"
    assert not total.ok and total.failures == (b,)
    with pytest.raises(TypeError):
        operator.add(left, (b,))


def test_rows_and_reports_are_frozen():
    row = Row("numpy", "cpu", "float32", 0.0, 0.0, 1e-7, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.ok = False  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Report((row,)).rows = ()  # type: ignore[misc]
