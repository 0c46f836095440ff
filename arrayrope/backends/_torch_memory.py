"""PyTorch tensors as destinations of ``out=``: what :func:`.dispatch.check_out` asks of their memory.

Not while a graph is traced, nor of tensors without storage (``meta``): such tensors hold no memory to compare,
and the reference that a traced call takes computes the result whole before writing it, whatever the overlap.
"""

from __future__ import annotations

import numpy as np
import torch

from ._torch_graph import tracing

__all__ = ["NOUN", "OUT_REFUSED", "memory_known", "out_fault", "same_view", "shares"]

#: Tensors are written by ``out=``.
OUT_REFUSED: str | None = None
NOUN = "a tensor"


def memory_known(out: torch.Tensor) -> bool:
    """Outside a trace, a tensor with storage."""
    return out.device.type != "meta" and not tracing()


def out_fault(out: torch.Tensor) -> str | None:
    """A tensor that repeats elements cannot be written."""
    if any(s == 0 and n > 1 for n, s in zip(out.shape, out.stride(), strict=True)):
        return "repeats elements (a stride of 0, as expand() makes); pass a tensor of its own"
    return None


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` view the same elements in the same order (``a`` is ``b``, or a view like it)."""
    return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride())


def shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` may have an element in common: their spans of memory meet (on the CPU, NumPy
    then tells exactly)."""
    if a.numel() == 0 or b.numel() == 0 or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False  # tensors of different storages share nothing
    lo_a, lo_b = a.data_ptr(), b.data_ptr()
    hi_a = lo_a + (1 + sum((n - 1) * s for n, s in zip(a.shape, a.stride(), strict=True))) * a.element_size()
    hi_b = lo_b + (1 + sum((n - 1) * s for n, s in zip(b.shape, b.stride(), strict=True))) * b.element_size()
    if hi_a <= lo_b or hi_b <= lo_a:
        return False
    if a.device.type != "cpu":
        return True
    from .numpy import shares as exactly

    return exactly(_bytes(a), _bytes(b))


def _bytes(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of ``t``'s memory (any dtype, as unsigned integers of its size)."""
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().view(as_int).numpy()
