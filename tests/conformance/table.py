"""Render the README's conformance tables from the records of the conformance suite.

Run from the repository root::

    python tests/conformance/table.py          # runs tests/conformance, rewrites the tables in README.md
    python tests/conformance/table.py --print  # the same, printed instead of written

The suite writes one record per comparison (``conftest.py``); this script runs it with
``ARRAYROPE_CONFORMANCE`` set and replaces the tables that follow the README heading
``### Conformance with other libraries``. Figures are maxima over the rows of a group.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HEADING = "### Conformance with other libraries"
DTYPES = ("float32", "float16", "bfloat16", "float64")
LIBRARIES = ("transformers", "torchtune", "rotary-embedding-torch", "timm")


def run_suite() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "records.json"
        env = dict(os.environ, ARRAYROPE_CONFORMANCE=str(path))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/conformance"]
        done = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        if done.returncode != 0 or not path.exists():
            sys.exit(f"the conformance suite failed (exit status {done.returncode}); no tables written")
        records: list[dict] = json.loads(path.read_text())
        return records


def _fmt(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.1e}"


def _max(values: list[float]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return max(finite) if finite else None


def render(records: list[dict]) -> str:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in sorted(records, key=lambda r: LIBRARIES.index(r["library"])):
        groups[(r["library"], r["family"])].append(r)
    lines = [
        "| Library | Model family / module | Rope types (layout) | Compared | " + " | ".join(DTYPES)
        + " | identify_rope names it in |",
        "| --- | --- | --- | --- | " + " | ".join("---" for _ in DTYPES) + " | --- |",
    ]
    for (library, family), rows in groups.items():
        compared = [r for r in rows if not r["compared"].startswith("identify_rope")]
        identified = sorted({r["dtype"] for r in rows if r["compared"].startswith("identify_rope")},
                            key=DTYPES.index)
        kinds = sorted({f"{r.get('rope_type', 'default')} ({r['layout']})" for r in rows})
        what = "; ".join(dict.fromkeys(r["compared"] for r in compared))
        errors = [_fmt(_max([r["max_error"] for r in compared if r["dtype"] == d])) for d in DTYPES]
        ident = ", ".join(identified) if identified else "—"
        lines.append(f"| {library} | {family} | {', '.join(kinds)} | {what} | " + " | ".join(errors) + f" | {ident} |")

    lines += ["", "| Library | dtype | library vs float64 | arrayrope vs float64 |", "| --- | --- | --- | --- |"]
    by_lib: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        if not r["compared"].startswith("identify_rope"):
            by_lib[(r["library"], r["dtype"])].append(r)
    for (library, dtype), rows in sorted(by_lib.items(),
                                         key=lambda kv: (LIBRARIES.index(kv[0][0]), DTYPES.index(kv[0][1]))):
        lines.append(f"| {library} | {dtype} | {_fmt(_max([r['library_error'] for r in rows]))} | "
                     f"{_fmt(_max([r['arrayrope_error'] for r in rows]))} |")
    notes = sorted({f"{r['library']}: {r['note']}" for r in records if r.get("note")})
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def replace_in_readme(text: str, tables: str) -> str:
    """``text`` with the tables after the heading replaced (from its first table line to the line before the
    next line that starts neither a table nor a note)."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == HEADING)
    first = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("| Library"))
    end = first
    while end < len(lines) and (lines[end].startswith(("|", "- ")) or not lines[end].strip()):
        if not lines[end].strip() and end + 1 < len(lines) and not lines[end + 1].startswith(("|", "- ")):
            break
        end += 1
    return "".join(lines[:first]) + tables + "".join(lines[end:])


def main() -> None:
    tables = render(run_suite())
    if "--print" in sys.argv:
        print(tables)
        return
    README.write_text(replace_in_readme(README.read_text(), tables))
    print(f"rewrote the conformance tables in {README}")


if __name__ == "__main__":
    main()
