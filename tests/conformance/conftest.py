"""Conformance with other libraries: every comparison records what it compared and its largest differences.

With ``ARRAYROPE_CONFORMANCE=<path>`` set, the records are written to ``path`` as JSON when the
session ends; ``python tests/conformance/table.py`` runs this folder that way and renders the
documentation's conformance tables from them.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

RECORDS: list[dict] = []

#: The regeneration of the family table (``tools/families.py --check``), started in a process of its own when
#: the session collects the test that reads it: it probes every family for a minute or two, mostly on one core,
#: while the rest of the suite runs on the other.
REGENERATION: dict[str, subprocess.Popen] = {}
REGENERATION_TEST = "test_the_table_is_what_this_transformers_gives"


def pytest_collection_modifyitems(session, config, items):
    if not any(item.name == REGENERATION_TEST and getattr(item.module, "SAME_RELEASE", False) for item in items):
        return  # not selected, or skipped: the table comes from another transformers release
    tools = pathlib.Path(__file__).resolve().parents[2] / "tools"
    REGENERATION["process"] = subprocess.Popen(
        [sys.executable, str(tools / "families.py"), "--check"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def regeneration():
    """The finished ``tools/families.py --check``: its exit status and what it printed (the differences)."""
    process = REGENERATION.get("process")
    if process is None:
        pytest.skip("the regeneration starts when the session collects its test")
    output, _ = process.communicate()
    return process.returncode, output


@pytest.fixture
def record():
    """``record(library=..., family=..., rope_type=..., layout=..., compared=..., dtype=..., max_error=...,
    library_error=..., arrayrope_error=..., tolerance=...)``: one row of the conformance table."""

    def add(**row):
        RECORDS.append({k: (float(v) if hasattr(v, "dtype") else v) for k, v in row.items()})

    return add


def pytest_sessionfinish(session, exitstatus):
    process = REGENERATION.pop("process", None)
    if process is not None and process.poll() is None:  # its test was not reached (-x, a deselection by keyword)
        process.kill()
        process.wait()
    path = os.environ.get("ARRAYROPE_CONFORMANCE")
    if path and RECORDS:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(RECORDS, fh, indent=1)
