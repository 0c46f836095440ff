"""Other busy processes during the measurements, as on a machine someone else is using.

Each is a pure-Python spin loop in its own interpreter: it keeps one core busy and
touches no memory to speak of, so it takes CPU time from the bench and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

SPIN = "while True:\n    pass\n"


def load_average() -> float | None:
    """The one-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


@contextlib.contextmanager
def busy(n: int) -> Iterator[dict[str, Any]]:
    """Keep ``n`` spinning processes for the duration of the block; yields what the results record.

    The record holds the count, the processes' ids, the load average before they
    start and after the block, and whether every one was still spinning at the end.
    """
    if n < 0:
        raise ValueError(f"the number of busy processes is >= 0, got {n}")
    info: dict[str, Any] = {"busy processes": n, "load average before": load_average()}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.extend(
            subprocess.Popen(
                [sys.executable, "-c", SPIN],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(n)
        )
        info["pids"] = [p.pid for p in procs]
        if procs:
            time.sleep(0.5)  # past the interpreter's start: spinning when the first measurement starts
        yield info
        info["load average after"] = load_average()
        info["stayed busy"] = all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
