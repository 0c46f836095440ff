"""What one run of the bench measures: shapes, rounds and sections for each mode, and thread settings.

Imports nothing but the standard library: thread settings must be made before
NumPy, PyTorch, JAX or ONNX Runtime load.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

Shape = tuple[int, int, int, int]

#: Libraries measured unless ``--backends`` says otherwise (``torch`` includes ``torch-cuda``).
DEFAULT_BACKENDS = ("numpy", "torch", "jax", "dask", "cupy")
#: Thread settings of one run: a count pinned before libraries load, or the libraries' own default.
DEFAULT_THREADS = ("1", "default")
#: Every section; the first thread setting runs all, the others those whose figures depend on threads.
SECTIONS = ("apply", "embedding", "compile", "memory", "dask", "tables", "sweep", "far", "startup")
THREADED_SECTIONS = ("apply", "embedding", "compile", "tables", "sweep")
#: Environment variables that fix the thread pools of OpenMP, MKL, OpenBLAS and numexpr.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything one measuring process needs."""

    mode: str  # full, quick or tiny
    decode: tuple[Shape, ...]  # apply_rotary with one new token
    prefill: tuple[Shape, ...]  # apply_rotary on a prompt; the prefill targets are taken on these
    extras: Shape  # float16/bfloat16, partial rotary and memory are measured on this shape
    steps: tuple[tuple[int, int, int], ...]  # decode steps of RotaryEmbedding: (batch, q heads, kv heads)
    sweep: tuple[int, ...]  # sequence lengths of (1, 8, S, 128)
    table_positions: int
    dask_block: Shape
    dask_copies: int
    rounds: int
    batch_s: float = 2e-3
    rss: bool = True  # peak RSS of PyTorch calls, each in a fresh process (seconds each)
    far_offsets: tuple[int, ...] = (10**6, 2**31, 2**62)  # first positions of fresh RotaryEmbeddings ("far")
    compiler: str = "inductor"  # torch.compile's backend in the compile section ("eager": dynamo alone)
    threads: str = "1"
    backends: tuple[str, ...] = DEFAULT_BACKENDS
    sections: tuple[str, ...] = SECTIONS

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        def tuples(v: Any) -> Any:
            return tuple(tuples(i) for i in v) if isinstance(v, list) else v

        return cls(**{k: tuples(v) for k, v in data.items()})


_DECODE = ((1, 8, 1, 128), (64, 8, 1, 128))
_STEPS = ((1, 8, 2), (1, 32, 8), (64, 32, 8))

MODES: dict[str, Config] = {
    "full": Config(
        "full",
        _DECODE,
        ((4, 32, 512, 128), (1, 32, 2048, 128), (4, 8, 4096, 128)),
        (1, 32, 2048, 128),
        _STEPS,
        (1, 4, 16, 64, 256, 1024, 4096, 16384, 32768),
        1 << 20,
        (1, 32, 2048, 128),
        64,
        rounds=7,
    ),
    "quick": Config(
        "quick",
        _DECODE,
        ((1, 8, 512, 128), (4, 32, 512, 128)),
        (1, 8, 512, 128),
        _STEPS,
        (1, 16, 256, 4096),
        1 << 16,
        (1, 8, 1024, 128),
        8,
        rounds=3,
    ),
    # the bench's plumbing in seconds (tests): every section and ratio, figures meaningless
    "tiny": Config(
        "tiny",
        _DECODE[:1],
        ((1, 2, 16, 128), (2, 2, 8, 128)),
        (1, 2, 16, 128),
        _STEPS[:1],
        (1, 16),
        1 << 10,
        (1, 2, 16, 128),
        2,
        rounds=1,
        batch_s=1e-4,
        rss=False,
        far_offsets=(10_000,),
        compiler="eager",
    ),
}


def thread_count(setting: str) -> int | None:
    """The pinned count of a thread setting (``None``: the libraries' default)."""
    if setting == "default":
        return None
    n = int(setting)
    if n < 1:
        raise ValueError(f"a thread setting is a count >= 1 or 'default', got {setting!r}")
    return n


def thread_env(setting: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process measuring under ``setting``: ``base`` with the pins, or unchanged."""
    env = dict(os.environ if base is None else base)
    n = thread_count(setting)
    if n is None:
        return env
    for var in THREAD_VARS:
        env[var] = str(n)
    env.setdefault(
        "XLA_FLAGS", f"--xla_cpu_multi_thread_eigen={'false' if n == 1 else 'true'} intra_op_parallelism_threads={n}"
    )
    return env
