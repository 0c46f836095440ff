"""``arrayrope demo``: RoPE on every installed backend against a float64 NumPy reference."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

HELP = "apply RoPE on every installed backend and compare each with a float64 NumPy reference"

SHAPE = (1, 32, 1024, 128)  # (batch, heads, seq, head_dim): one Llama-sized layer's queries


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backends", default=None, help="comma-separated backends (default: all installed)")


def _reference(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """Half-split RoPE in float64 from its definition, independent of arrayrope's code."""
    ang = positions[:, None].astype(np.float64) * inv_freq
    c = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)
    s = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * c + rot * s


def run(args: argparse.Namespace) -> int:
    import arrayrope
    from arrayrope.testing import backends, default_tolerance, to_numpy

    names = args.backends.split(",") if args.backends else None
    found, missing = backends(names, with_reasons=True)
    rng = np.random.default_rng(0)
    x64 = rng.standard_normal(SHAPE)
    offset = 4000
    positions = np.arange(offset, offset + SHAPE[2])
    rope = arrayrope.RotaryEmbedding(SHAPE[-1])
    ref = _reference(x64, positions, rope.freqs.inv_freq)
    print(f"RoPE on x of shape {SHAPE} at positions {offset}..{offset + SHAPE[2] - 1}, half-split layout")
    print(f"{'backend':<28} {'device':<12} {'dtype':<9} {'max error':>10} {'tolerance':>10} {'time':>9}  ok")
    failures = 0
    for b in found:
        for dtype in ("float32", "float64", "bfloat16", "float16"):
            if dtype not in b.dtypes:
                continue
            x = b.asarray(x64, dtype=dtype)
            xin = to_numpy(x).astype(np.float64)
            expected = _reference(xin, positions, rope.freqs.inv_freq)
            y = _timed(lambda: rope(x, offset=offset))
            elapsed, out = y
            err = float(np.max(np.abs(to_numpy(out).astype(np.float64) - expected)))
            rtol, atol = default_tolerance(dtype)
            tol = atol + rtol * float(np.max(np.abs(ref)))
            ok = err <= tol
            failures += not ok
            print(
                f"{b.name:<28} {b.device_label:<12} {dtype:<9} {err:>10.2e} {tol:>10.2e} "
                f"{elapsed * 1e3:>7.1f}ms  {'yes' if ok else 'NO'}"
            )
    for name, reason in missing.items():
        print(f"{name:<28} skipped: {reason.split(':', 1)[-1].strip()[:60]}")
    print("verdict:", "all backends agree with the float64 reference" if not failures else f"{failures} row(s) FAILED")
    return 1 if failures else 0


def _timed(fn: Any) -> tuple[float, Any]:
    out = fn()
    _force(out)  # warm-up and, for lazy backends, the compute itself is timed below
    t0 = time.perf_counter()
    out = fn()
    _force(out)
    return time.perf_counter() - t0, out


def _force(out: Any) -> None:
    mod = type(out).__module__
    if mod.startswith("dask"):
        out.compute()
    elif hasattr(out, "block_until_ready"):
        out.block_until_ready()
    elif mod.startswith("torch") and out.is_cuda:
        import torch

        torch.cuda.synchronize()
