"""Conformance with other libraries: every comparison records what it compared and its largest differences.

With ``ARRAYROPE_CONFORMANCE=<path>`` set, the records are written to ``path`` as JSON when the
session ends; ``python tests/conformance/table.py`` runs this folder that way and renders the
documentation's conformance tables from them.
"""

from __future__ import annotations

import json
import os

import pytest

RECORDS: list[dict] = []


@pytest.fixture
def record():
    """``record(library=..., family=..., rope_type=..., layout=..., compared=..., dtype=..., max_error=...,
    library_error=..., arrayrope_error=..., tolerance=...)``: one row of the conformance table."""

    def add(**row):
        RECORDS.append({k: (float(v) if hasattr(v, "dtype") else v) for k, v in row.items()})

    return add


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("ARRAYROPE_CONFORMANCE")
    if path and RECORDS:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(RECORDS, fh, indent=1)
