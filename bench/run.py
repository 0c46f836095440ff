"""arrayrope's benchmark: rotary application, decode steps, tables, memory, Dask and a sweep over sequence lengths.

Run from the repository root::

    python -m bench            # full run (about 7 minutes on 2 cores)
    python -m bench --quick    # smaller shapes and fewer rounds (a minute or two): the smoke run
    python -m bench --tiny     # the bench's own check in seconds: every section, figures meaningless
    python -m bench --load 1   # the same with one other busy process on the machine
    python -m bench --sections compile   # some sections only

Each run writes to a folder of its own, ``bench/runs/<time>-<mode>`` (not committed),
unless ``--out`` names one: the committed results are rewritten only when asked,
with ``--out bench/results`` (``--out bench/results/load1`` for ``--load 1``).

Every figure is a median over rounds inside one process, and is also given as a
ratio to references timed in the same rounds: a copy of x (what any function
returning a new array pays), the naive formulas on the same library, and ONNX
Runtime's fused kernel when onnxruntime is installed. Each thread setting
(default: one thread, then the libraries' defaults) runs in its own process with
the thread variables set before any library loads; the results are merged into
one report that shows the settings side by side. GPUs (CuPy, PyTorch CUDA) are
included when present, as ratios to a device-to-device copy, synchronising around
every timed batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import _load, _machine, _report, _targets
from ._config import (
    DEFAULT_BACKENDS,
    DEFAULT_THREADS,
    MODES,
    SECTIONS,
    THREADED_SECTIONS,
    Config,
    thread_count,
    thread_env,
)

RESULTS = Path(__file__).parent / "results"
#: Where a run writes when ``--out`` is not given: a new folder per run.
RUNS = Path(__file__).parent / "runs"
#: ``--tiny`` checks the bench, not speed: one thread setting and the libraries that start fast (no JAX
#: compilations, no second process) unless the command line asks for others.
TINY_THREADS, TINY_BACKENDS = ("default",), ("numpy", "torch", "dask")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small shapes, few rounds (a smoke run)")
    size.add_argument("--tiny", action="store_true", help="every section in seconds; checks the bench, not speed")
    parser.add_argument(
        "--threads",
        default=None,
        help="comma-separated thread settings, each a count or 'default' (default: 1,default; with --tiny: default)",
    )
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="keep N other busy processes during the measurements (default 0)",
    )
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated libraries or backends of arrayrope.backends.available() (default: "
        f"{','.join(DEFAULT_BACKENDS)}; with --tiny: {','.join(TINY_BACKENDS)})",
    )
    parser.add_argument(
        "--sections",
        default=None,
        help=f"comma-separated sections to measure (default: all of {','.join(SECTIONS)}; the first thread "
        f"setting runs them, the others those of {','.join(THREADED_SECTIONS)})",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default: a new bench/runs/<time>-<mode>; the committed results are bench/results)",
    )
    parser.add_argument(
        "--report", action="store_true", help="rewrite results.md from the results.json of --out (no measuring)"
    )
    args = parser.parse_args(argv)
    if args.report and args.out is None:
        parser.error("--report rewrites the report of a folder: pass --out FOLDER")
    if args.sections is not None:
        asked = tuple(s.strip() for s in args.sections.split(",") if s.strip())
        unknown = [s for s in asked if s not in SECTIONS]
        if unknown or not asked:
            parser.error(f"--sections takes some of {','.join(SECTIONS)}, got {args.sections!r}")
        args.sections = asked
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    mode = "quick" if args.quick else "tiny" if args.tiny else "full"
    out = Path(args.out) if args.out is not None else RUNS / f"{time.strftime('%Y%m%d-%H%M%S')}-{mode}"
    if args.report:
        data = json.loads((out / "results.json").read_text())
        _report.write(out, data["machine"], data["records"], _targets.targets(data["records"], data["machine"]))
        return 0
    threads = args.threads or ",".join(TINY_THREADS if args.tiny else DEFAULT_THREADS)
    settings = [s.strip() for s in threads.split(",") if s.strip()]
    for s in settings:
        thread_count(s)  # a count >= 1 or "default"
    backends = args.backends or ",".join(TINY_BACKENDS if args.tiny else DEFAULT_BACKENDS)
    base = dataclasses.replace(MODES[mode], backends=tuple(n.strip() for n in backends.split(",") if n.strip()))
    meta = _machine.host()
    meta.update(
        mode=mode, settings=settings, prefill=[list(p) for p in base.prefill], decode=[list(p) for p in base.decode]
    )
    runs: dict[str, dict[str, Any]] = {}
    records: list[dict[str, Any]] = []
    failed: list[str] = []
    with _load.busy(args.load) as load:
        for i, setting in enumerate(settings):
            sections: tuple[str, ...] = SECTIONS if i == 0 else THREADED_SECTIONS
            if args.sections is not None:
                sections = tuple(s for s in sections if s in args.sections)
            if not sections:
                continue
            config = dataclasses.replace(base, threads=setting, sections=sections)
            got = measure_in_process(config)
            if got is None:
                failed.append(setting)
                continue
            runs[setting] = got["meta"]
            records.extend(got["records"])
    meta["load"] = {k: v for k, v in load.items() if k != "pids"}
    meta["runs"] = runs
    meta["missing"] = next(iter(runs.values()), {}).get("missing", {})
    tgts = _targets.targets(records, meta)
    _report.write(out, meta, records, tgts)
    print(f"wrote {out / 'results.md'}, {out / 'results.json'}, {out / 'rotary_vs_copy.png'}", file=sys.stderr)
    if failed:
        print(f"no results for thread setting(s) {failed}: see the errors above", file=sys.stderr)
        return 1
    return 0


def measure_in_process(config: Config) -> dict[str, Any] | None:
    """Run ``config`` in a fresh interpreter with its thread settings; its metadata and records."""
    with tempfile.TemporaryDirectory(prefix="arrayrope-bench-") as tmp:
        cfg, res = Path(tmp) / "config.json", Path(tmp) / "results.json"
        cfg.write_text(json.dumps(config.to_json()))
        done = subprocess.run(
            [sys.executable, "-m", "bench._worker", str(cfg), str(res)],
            env=thread_env(config.threads),
            cwd=Path(__file__).resolve().parent.parent,
            check=False,
        )
        if done.returncode != 0 or not res.exists():
            return None
        got: dict[str, Any] = json.loads(res.read_text())
        return got
