"""PyTorch's tracers (``torch.compile``, ``torch.export``, TorchScript): whether one runs, which tensors hold values,
and host data handed to a graph as its constants.

Host data that the tables need (:func:`constant`, :func:`host`) reaches a graph that dynamo traces
(``torch.compile``, strict ``torch.export``) as a constant computed while it traces, outside the graph,
through ``torch.compiler.assume_constant_result``.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import array_api_compat.torch as _xp
import numpy as np
import torch

__all__ = ["concrete", "constant", "host", "plain_floating", "tracing"]

_jit_tracing: Callable[[], bool] = torch.jit.is_tracing  # type: ignore[attr-defined]


def tracing() -> bool:
    """Whether the running code is being traced (torch.compile, torch.export, TorchScript) rather than run."""
    return torch.compiler.is_compiling() or _jit_tracing()


def concrete(x: torch.Tensor) -> bool:
    """A plain tensor outside any trace, with storage: not a fake, functional or meta tensor of a tracer."""
    return type(x) is torch.Tensor and not x.is_meta and not tracing()


def plain_floating(arrays: tuple[Any, ...]) -> Any:
    """array_api_compat's namespace where ``arrays`` are tensors of exactly ``torch.Tensor``, of one real floating
    dtype, on one device; else None."""
    first = arrays[0]
    if type(first) is not torch.Tensor:
        return None
    dtype = first.dtype
    if not (dtype is torch.float32 or dtype is torch.bfloat16 or dtype is torch.float16 or dtype is torch.float64):
        return None
    cpu = first.is_cpu  # CPU tensors share one device: a flag each instead of comparing device objects
    for other in arrays:
        if type(other) is not torch.Tensor or other.dtype is not dtype:
            return None
        if (not other.is_cpu) if cpu else other.device != first.device:
            return None
    return _xp


#: Host constants kept on their devices (digit rotations, turns), per maker, arguments and device; the least
#: recently used goes when a new one would exceed this many (its slot then names the new one).
CONSTANTS_KEPT = 64
#: key -> (slot, tensor), least recently used first; a slot names the function that hands the tensor to a graph
_constants: dict[tuple[Any, ...], tuple[int, torch.Tensor]] = {}
_constants_lock = threading.Lock()


def constant(xp: Any, make: Callable[..., np.ndarray], args: tuple[Hashable, ...], device: Any) -> torch.Tensor:
    """``make(*args)`` on ``device``, made once; a constant of the graph under ``torch.compile`` and ``torch.export``.

    dynamo calls the functions marked with ``torch.compiler.assume_constant_result`` eagerly while it traces,
    outside the graph, and keeps their tensors as constants of the graph; torch.export's non-strict mode and
    TorchScript tracing call them as they are, and take the tensors as constants too. Up to PyTorch 2.14,
    dynamo names such a constant after the function's code, and two different tensors of one graph under one
    name fail in inductor ("already in seen_sources"): each kept tensor comes from a function of its own
    (a slot), which :func:`_slot` picks. The tensor comes as a view of its shape: dynamo reads no ``.shape``
    of such a constant where the graph is traced with dynamic shapes.
    """
    slot, shape = _slot(make, args, device)
    found: torch.Tensor = _SLOTS[slot](make, args, device)
    return found.view(shape)


_F = TypeVar("_F", bound=Callable[..., Any])


def _at_trace_time(fn: _F) -> _F:
    """``fn`` marked for dynamo to call while it traces, its result a constant of the graph."""
    marked: _F = torch.compiler.assume_constant_result(fn)  # type: ignore[no-untyped-call]
    return marked


@_at_trace_time
def _slot(make: Callable[..., np.ndarray], args: tuple[Hashable, ...], device: Any) -> tuple[int, tuple[int, ...]]:
    """The slot whose function returns this constant, made and kept now if it is new (0 if it cannot be kept),
    and the constant's shape."""
    key = (make, args, device)
    entry = _constants.get(key)
    if entry is not None:  # the most recently used last: the one that goes is the least recently used, never
        with _constants_lock:  # one that the graph being traced took a moment ago
            if key in _constants and next(reversed(_constants)) != key:
                _constants[key] = _constants.pop(key)
    if entry is None:
        tensor = torch.tensor(make(*args), device=device)
        if type(tensor) is not torch.Tensor or tensor.device.type == "meta":  # a tracer's fake (non-strict export)
            return 0, tuple(tensor.shape)
        with _constants_lock:
            entry = _constants.get(key)
            if entry is None:
                while len(_constants) >= CONSTANTS_KEPT:
                    _constants.pop(next(iter(_constants)))
                used = {slot for slot, _ in _constants.values()}
                entry = _constants[key] = (min(set(range(len(_SLOTS))) - used), tensor)
    return entry[0], tuple(entry[1].shape)


def host(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn(*args)``; under ``torch.compile`` and ``torch.export`` run while dynamo traces, the result a constant.

    The arguments go one by one: dynamo fixes a dynamic int to its value as an argument of its own (with a
    guard), not inside a tuple.
    """
    return _host(fn, *args)


@_at_trace_time
def _host(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _kept(make: Callable[..., np.ndarray], args: tuple[Hashable, ...], device: Any) -> torch.Tensor:
    entry = _constants.get((make, args, device))
    return entry[1] if entry is not None else torch.tensor(make(*args), device=device)


def _slot_function(i: int) -> Callable[[Callable[..., np.ndarray], tuple[Hashable, ...], Any], torch.Tensor]:
    """:func:`_kept` under a name of its own (the name of the graph's constant)."""
    code = _kept.__code__.replace(co_name=f"arrayrope_constant_{i}")
    return _at_trace_time(types.FunctionType(code, _kept.__globals__, code.co_name))


#: More slots than kept tensors: a new one always finds a free slot.
_SLOTS = [_slot_function(i) for i in range(2 * CONSTANTS_KEPT)]
