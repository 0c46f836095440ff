"""One measuring process under one thread setting: ``python -m bench._worker CONFIG.json OUT.json``.

:mod:`bench.run` starts one per thread setting with the thread variables already
in its environment, so they hold before NumPy, PyTorch, JAX or ONNX Runtime load;
the process writes its metadata and records to ``OUT.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ._config import Config, thread_env


class Progress:
    """One line per measurement on stderr: ``[ 12.3 s] threads 1: section: what``."""

    def __init__(self, label: str) -> None:
        self.start = time.perf_counter()
        self.label = label

    def __call__(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] threads {self.label}: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    config_path, out_path = sys.argv[1:3] if argv is None else argv
    config = Config.from_json(json.loads(Path(config_path).read_text()))
    os.environ.update(thread_env(config.threads))  # the parent set these already; a direct run needs them
    from . import _suite  # imports the libraries, after the thread settings

    meta, records = _suite.run(config, Progress(config.threads))
    Path(out_path).write_text(json.dumps({"meta": meta, "records": records}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
