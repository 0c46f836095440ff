"""Render the documentation's conformance tables from the records of the conformance suite.

Run from the repository root::

    python tests/conformance/table.py          # runs tests/conformance, rewrites the tables in docs/_includes
    python tests/conformance/table.py --print  # the same, printed instead of written

The suite writes one record per comparison (``conftest.py``); this script runs it with
``ARRAYROPE_CONFORMANCE`` set and writes the tables to the files that the page
``docs/conformance.md`` includes: ``conformance_tables.md`` (the libraries compared) and
``conformance_sweep.md`` (every transformers family). Figures are maxima over the rows of a group.
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
INCLUDES = ROOT / "docs" / "_includes"
TABLES = INCLUDES / "conformance_tables.md"
SWEEP = INCLUDES / "conformance_sweep.md"
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
    records = [r for r in records if r["compared"] != "sweep"]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in sorted(records, key=lambda r: LIBRARIES.index(r["library"])):
        groups[(r["library"], r["family"])].append(r)
    lines = [
        "| Library | Model family / module | Rope types (layout) | Compared | "
        + " | ".join(DTYPES)
        + " | identify_rope names it in |",
        "| --- | --- | --- | --- | " + " | ".join("---" for _ in DTYPES) + " | --- |",
    ]
    for (library, family), rows in groups.items():
        compared = [r for r in rows if not r["compared"].startswith("identify_rope")]
        identified = sorted({r["dtype"] for r in rows if r["compared"].startswith("identify_rope")}, key=DTYPES.index)
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
    for (library, dtype), rows in sorted(
        by_lib.items(), key=lambda kv: (LIBRARIES.index(kv[0][0]), DTYPES.index(kv[0][1]))
    ):
        lines.append(
            f"| {library} | {dtype} | {_fmt(_max([r['library_error'] for r in rows]))} | "
            f"{_fmt(_max([r['arrayrope_error'] for r in rows]))} |"
        )
    notes = sorted({f"{r['library']}: {r['note']}" for r in records if r.get("note")})
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


OUTCOMES = ("match", "refused", "out of scope", "transformers fails")
KINDS = {
    "as is": "default config, keys a hub config.json states",
    "saved": "default config as transformers saves it",
    "partial": "partial_rotary_factor 0.5",
    "composite": "multimodal config: its language model's settings",
}


def _kind(variant: str) -> str:
    if variant in KINDS:
        return KINDS[variant]
    if variant.startswith("variant "):
        return "rope code of the family's own (Hunyuan NTK-alpha, PhiMoE mscales...)"
    return f"rope type {variant}"


def render_sweep(records: list[dict]) -> str:
    """The sweep over every transformers family: outcomes per kind of case, and every default config refused."""
    rows = [r for r in records if r["compared"] == "sweep"]
    if not rows:
        return ""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_kind[_kind(r["rope_type"])].append(r)
    families = {r["family"] for r in rows}
    text = {r["family"] for r in rows if r["rope_type"] == "as is" and r["outcome"] in ("match", "refused")}
    composite = {r["family"] for r in rows if r["rope_type"] == "composite"}
    scope = {r["family"] for r in rows if r["outcome"] == "out of scope"}
    lines = [
        f"The sweep: {len(rows)} cases over {len(families)} model types: {len(text)} with a text rotary embedding of "
        "their own, "
        f"{len(composite)} multimodal configs that keep one in a sub-config, {len(scope)} out of scope.",
        "",
        "| Case | " + " | ".join(OUTCOMES) + " |",
        "| --- | " + " | ".join("---:" for _ in OUTCOMES) + " |",
    ]
    order = [*KINDS.values()]
    for kind in sorted(by_kind, key=lambda k: (order.index(k) if k in order else len(order), k)):
        counts = [sum(r["outcome"] == o for r in by_kind[kind]) for o in OUTCOMES]
        lines.append(f"| {kind} | " + " | ".join(str(c) for c in counts) + " |")
    totals = [sum(r["outcome"] == o for r in rows) for o in OUTCOMES]
    lines.append("| all | " + " | ".join(f"**{c}**" for c in totals) + " |")
    refused = sorted(
        {(r["family"], r["note"]) for r in rows if r["rope_type"] in ("as is", "saved") and r["outcome"] == "refused"}
    )
    reasons: dict[str, list[str]] = defaultdict(list)
    for fam, note in refused:
        if fam not in reasons[_short(note)]:
            reasons[_short(note)].append(fam)
    lines += ["", "| Default configs refused | Why |", "| --- | --- |"]
    lines += [
        f"| {', '.join(f'`{f}`' for f in fams)} | {why} |"
        for why, fams in sorted(reasons.items(), key=lambda kv: kv[1])
    ]
    out_scope: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if r["outcome"] == "out of scope" and r["family"] not in out_scope[_short(r["note"])]:
            out_scope[_short(r["note"])].append(r["family"])
    lines += ["", "| Out of scope | Why |", "| --- | --- |"]
    lines += [f"| {_names(fams)} | {why} |" for why, fams in sorted(out_scope.items())]
    return "\n".join(lines) + "\n"


def _names(families: list[str], shown: int = 3) -> str:
    """``a``, ``b``, ``c`` and N more."""
    names = ", ".join(f"`{f}`" for f in families[:shown])
    return names + (f" and {len(families) - shown} more" if len(families) > shown else "")


def _short(note: str) -> str:
    """A refusal's reason for the table: without the config's name, one line, no pipes."""
    note = note.split("\n")[0].replace("|", "/")
    for prefix in ("config: ",):
        note = note.removeprefix(prefix)
    if "is not read by arrayrope: " in note:
        note = note.split("is not read by arrayrope: ", 1)[1]
    return note if len(note) <= 200 else note[:197] + "..."


def main() -> None:
    records = run_suite()
    tables, sweep = render(records), render_sweep(records)
    if "--print" in sys.argv:
        print(tables)
        print(sweep)
        return
    TABLES.write_text(tables)
    if sweep:
        SWEEP.write_text(sweep)
    print(f"rewrote the conformance tables in {INCLUDES}")


if __name__ == "__main__":
    main()
