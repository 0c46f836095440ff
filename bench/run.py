"""arrayrope's benchmark: rotary application, tables, memory, Dask and a sweep over sequence lengths.

Run from the repository root::

    python -m bench            # full run (about 10 minutes on 2 cores), writes bench/results/
    python -m bench --quick    # smaller shapes and fewer rounds (about a minute)

Every figure is a median over rounds inside this process, and is also given as a
ratio to references timed in the same rounds: a copy of x (what any function
returning a new array pays), the naive formulas on the same library, and ONNX
Runtime's fused kernel when onnxruntime is installed. Threads are pinned (default
1) before any library loads. GPUs (CuPy, PyTorch CUDA) are included when present,
as ratios to a device-to-device copy, synchronising around every timed batch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PREFILL = [(1, 32, 2048, 128), (4, 8, 4096, 128)]
DECODE = [(1, 8, 1, 128), (64, 8, 1, 128)]
QUICK_PREFILL = [(1, 8, 512, 128), (2, 4, 1024, 128)]
SWEEP = [1, 4, 16, 64, 256, 1024, 4096, 16384, 32768]
QUICK_SWEEP = [1, 16, 256, 4096]
ALL_BACKENDS = ["numpy", "torch", "jax", "dask", "cupy", "torch-cuda"]


def _pin_threads(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[var] = str(n)
    os.environ.setdefault(
        "XLA_FLAGS", f"--xla_cpu_multi_thread_eigen={'false' if n == 1 else 'true'} intra_op_parallelism_threads={n}"
    )


class Progress:
    """One line per measurement on stderr: ``[ 12.3 s] section: what``."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few rounds (a smoke run)")
    parser.add_argument("--threads", type=int, default=1, help="threads for every library (default 1)")
    parser.add_argument("--backends", default=",".join(ALL_BACKENDS), help="comma-separated subset of " + ",".join(ALL_BACKENDS))
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"), help="output folder")
    parser.add_argument("--report", action="store_true", help="rewrite results.md from results.json (no measuring)")
    args = parser.parse_args(argv)
    if args.report:
        from . import _report

        out = Path(args.out)
        data = json.loads((out / "results.json").read_text())
        prefill = [tuple(p) for p in data["machine"].get("prefill", PREFILL)]
        tgts = _report.targets(data["records"], prefill)
        write(out, data["machine"], data["records"], tgts, _report.markdown(data["machine"], data["records"], tgts))
        return 0
    _pin_threads(args.threads)
    from . import _suite  # imports the libraries, after the thread settings

    return _suite.run(args, Progress())


def machine(threads: int) -> dict[str, Any]:
    """CPU, core count, Python and library versions, for the report's header."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "threads": threads,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for mod in ("numpy", "torch", "jax", "dask", "onnxruntime", "onnx", "cupy", "arrayrope", "array_api_compat"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:
            pass
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write(out: Path, meta: dict, records: list[dict], targets: list[dict], markdown: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"machine": meta, "targets": targets, "records": records}, indent=1, default=str))
    (out / "results.md").write_text(markdown)


def rss_peak_extra(code: str) -> float | None:
    """Run ``code`` in a fresh interpreter; it prints the peak RSS growth in bytes beyond its output."""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ)
        return float(done.stdout.strip().splitlines()[-1])
    except Exception:
        return None
