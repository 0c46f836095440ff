"""The machine, the versions and the thread pools a run measured on, for the report's header.

:func:`host` runs in the parent process and imports no array library (versions
come from the installed distributions); :func:`process_meta` runs in each
measuring process, after its libraries are loaded.
"""

from __future__ import annotations

import os
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._config import THREAD_VARS, Config

if TYPE_CHECKING:
    from ._libs import Lib

#: Report name -> installed distributions that provide it (the first found is reported).
DISTRIBUTIONS = {
    "numpy": ("numpy",),
    "torch": ("torch",),
    "jax": ("jax",),
    "dask": ("dask",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "onnx": ("onnx",),
    "cupy": ("cupy-cuda12x", "cupy-cuda13x", "cupy"),
    "arrayrope": ("arrayrope",),
    "array_api_compat": ("array-api-compat",),
}


def host() -> dict[str, Any]:
    """CPU, core count, Python and library versions."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if hasattr(os, "sched_getaffinity"):
        info["usable cores"] = len(os.sched_getaffinity(0))
    for name, dists in DISTRIBUTIONS.items():
        for dist in dists:
            try:
                info[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return info


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def process_meta(config: Config, libs: list[Lib]) -> dict[str, Any]:
    """The thread setting of this process and the thread pools its libraries use under it."""
    meta: dict[str, Any] = {
        "threads": config.threads,
        "environment": {v: os.environ[v] for v in (*THREAD_VARS, "XLA_FLAGS") if v in os.environ},
        "library threads": {},
        "sections": list(config.sections),
    }
    for lib in libs:
        if lib.ops.get_threads is not None:
            meta["library threads"][lib.name] = lib.ops.get_threads()
    return meta
