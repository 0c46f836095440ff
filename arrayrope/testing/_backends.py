"""The (library, namespace, device) combinations available on this machine, declared once."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import numpy as np

__all__ = ["Backend", "backends", "to_numpy", "KNOWN_BACKENDS", "ENV_VAR"]

ENV_VAR = "ARRAYROPE_BACKENDS"


@dataclasses.dataclass(frozen=True)
class Backend:
    """One array library on one device, with what it can do.

    Attributes
    ----------
    name : str
        ``"numpy"``, ``"torch"``, ``"torch-cuda"``, ``"jax"``, ``"dask"``, ``"cupy"``,
        ``"array_api_strict"`` or ``"array_api_strict-no_float64"``.
    xp : namespace
        The Array API namespace (``array_api_compat`` wrapper where needed).
    device : object
        Where arrays are created.
    dtypes : tuple of str
        Real floating dtypes it has: a subset of float16, bfloat16, float32, float64.
    lazy : bool
        Whether results are built without computing (Dask) or may be traced (JAX).
    """

    name: str
    xp: Any
    device: Any
    dtypes: tuple[str, ...]
    lazy: bool = False

    def asarray(self, value: Any, dtype: str | None = None) -> Any:
        """``value`` (NumPy or Python data) as an array of this backend, on its device."""
        arr = np.asarray(value)
        target = dtype or (arr.dtype.name if arr.dtype.kind == "f" else None)
        if target is not None:
            arr = arr.astype(np.float32 if target == "bfloat16" else target)
        out = self.xp.asarray(arr, device=self.device)
        if target == "bfloat16":
            out = self.xp.astype(out, self.xp.bfloat16)
        return out

    @property
    def device_label(self) -> str:
        """A short name for the device (``cpu``, ``cuda:0``, ``no_float64``...)."""
        text = str(self.device)
        return text.split("'")[1] if "'" in text else text

    def __str__(self) -> str:
        return self.name


def to_numpy(x: Any) -> np.ndarray:
    """Copy any backend's array to a NumPy array on the host (bfloat16 becomes float32)."""
    if isinstance(x, np.ndarray):
        return x
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch

        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.numpy()
    if mod.startswith("cupy"):
        return x.get()
    if mod.startswith("dask"):
        return to_numpy(x.compute())
    if mod.startswith("jax") or mod.startswith("jaxlib"):
        arr = np.asarray(x)
        return arr.astype(np.float32) if arr.dtype.name == "bfloat16" else arr
    if mod.startswith("array_api_strict"):
        import array_api_strict as s

        return np.from_dlpack(s.asarray(x, device=s.Device("CPU_DEVICE"), copy=True))
    return np.asarray(x)


def _numpy() -> list[Backend]:
    import array_api_compat.numpy as xp

    return [Backend("numpy", xp, "cpu", ("float16", "float32", "float64"))]


def _strict() -> list[Backend]:
    import array_api_strict as xp

    return [
        Backend("array_api_strict", xp, xp.Device("CPU_DEVICE"), ("float32", "float64")),
        Backend("array_api_strict-no_float64", xp, xp.Device("no_float64"), ("float32",)),
    ]


def _torch() -> list[Backend]:
    import array_api_compat.torch as xp
    import torch

    found = [Backend("torch", xp, torch.device("cpu"), ("float16", "bfloat16", "float32", "float64"))]
    if torch.cuda.is_available():
        found.append(Backend("torch-cuda", xp, torch.device("cuda"), ("float16", "bfloat16", "float32", "float64")))
    return found


def _jax() -> list[Backend]:
    import jax
    import jax.numpy as xp

    dtypes = ("float16", "bfloat16", "float32") + (("float64",) if jax.config.jax_enable_x64 else ())
    return [Backend("jax", xp, jax.devices("cpu")[0], dtypes, lazy=True)]


def _dask() -> list[Backend]:
    import array_api_compat.dask.array as xp

    return [Backend("dask", xp, "cpu", ("float32", "float64"), lazy=True)]


def _cupy() -> list[Backend]:
    import array_api_compat.cupy as xp
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("no CUDA device")
    return [Backend("cupy", xp, cupy.cuda.Device(0), ("float16", "float32", "float64"))]


KNOWN_BACKENDS: dict[str, Callable[[], list[Backend]]] = {
    "numpy": _numpy,
    "array_api_strict": _strict,
    "torch": _torch,
    "jax": _jax,
    "dask": _dask,
    "cupy": _cupy,
}


def _probe(library: str) -> tuple[list[Backend], str | None]:
    try:
        return KNOWN_BACKENDS[library](), None
    except Exception as exc:  # ImportError, or CuPy without a GPU
        return [], f"{library} unavailable: {type(exc).__name__}: {exc}".strip()


def backends(names: Any = None, *, with_reasons: bool = False) -> Any:
    """The backends available here, in a fixed order.

    Parameters
    ----------
    names : iterable of str, optional
        Library names (see ``KNOWN_BACKENDS``: all of that library's devices) or
        names of single backends such as ``"torch-cuda"`` or
        ``"array_api_strict-no_float64"``. Default: the comma-separated
        ``ARRAYROPE_BACKENDS`` environment variable, else all libraries.
    with_reasons : bool
        Also return ``{name: reason}`` for the requested names that are not available.

    Examples
    --------
    >>> from arrayrope.testing import backends
    >>> backends(["numpy"])[0].name
    'numpy'
    """
    if names is None:
        env = os.environ.get(ENV_VAR, "").strip()
        names = [n.strip() for n in env.split(",") if n.strip()] if env else list(KNOWN_BACKENDS)
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = list(names)
    unknown = [n for n in names if _library_of(n) is None]
    if unknown:
        raise ValueError(
            f"unknown backend(s) {unknown}; known: {list(KNOWN_BACKENDS)} "
            f"or one device of them: {list(_VARIANTS)}"
        )
    found: list[Backend] = []
    missing: dict[str, str] = {}
    for name in names:
        got, reason = _probe(_library_of(name))
        if name not in KNOWN_BACKENDS:
            got = [b for b in got if b.name == name]
            if not got and not reason:
                reason = f"{name} unavailable: {_VARIANTS[name]}"
        found.extend(b for b in got if b not in found)
        if reason:
            missing[name] = reason
    return (found, missing) if with_reasons else found


# single-device backends and why they may be missing although their library is installed
_VARIANTS = {
    "torch-cuda": "no CUDA device for PyTorch",
    "array_api_strict-no_float64": "array_api_strict has no no_float64 device",
}


def _library_of(name: Any) -> str | None:
    if name in KNOWN_BACKENDS:
        return name
    if name in _VARIANTS:
        return name.split("-")[0]
    return None
