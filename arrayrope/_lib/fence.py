"""What the helpers of this package ask of :mod:`arrayrope.backends`, the fence above them.

``_lib`` lies below the fence: :mod:`arrayrope.backends` imports it (the reference
rotation, the dtype rules, the type aliases), and it imports nothing from
``backends``. Positions, dtypes and digits still ask questions only the fence can
answer (an array's namespace and device, whether its values may be read, a host
constant of a graph being traced): :class:`Backends` declares them, and
:mod:`arrayrope.backends` passes itself in (:func:`install`) when it loads, which
importing any module of arrayrope does first. The helpers call
``fence.backends.<function>``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

import numpy as np

from .types import Array, Device, DType, Namespace

__all__ = ["Backends", "backends", "install"]


class Backends(Protocol):
    """The functions of :mod:`arrayrope.backends` that ``_lib`` calls (a module satisfies this protocol)."""

    def namespace(self, *arrays: Array, xp: Namespace | None = None, names: tuple[str, ...] = ()) -> Namespace: ...
    def is_array(self, x: object) -> bool: ...
    def device_of(self, x: Array) -> Device: ...
    def same_device(self, a: Array, b: Array, name_a: str, name_b: str) -> None: ...
    def to_device(self, x: Array, device: Device) -> Array: ...
    def check_device(self, xp: Namespace, device: Device, name: str = "device") -> None: ...
    def library_name(self, ns: Namespace) -> str: ...
    def is_integral(self, xp: Namespace, dtype: DType) -> bool: ...
    def is_real_floating(self, xp: Namespace, dtype: DType) -> bool: ...
    def has_float64(self, xp: Namespace, device: Device) -> bool: ...
    def has_int64(self, xp: Namespace, device: Device) -> bool: ...
    def concrete(self, x: object) -> bool: ...
    def tracing(self, xp: Namespace) -> bool: ...
    def constant(
        self, xp: Namespace, make: Callable[..., np.ndarray], args: tuple[Hashable, ...], device: Device
    ) -> Array: ...


#: :mod:`arrayrope.backends`, once it has loaded.
backends: Backends


def install(module: Backends) -> None:
    """Called by :mod:`arrayrope.backends` as it loads, with itself."""
    global backends
    backends = module
