"""The (library, namespace, device) combinations available on this machine, declared once.

:func:`available` is the one registry that :mod:`arrayrope.testing`, the pytest
plugin, the benchmarks and the CLI use. Each library module of this package
(``numpy``, ``torch``, ...) declares its own backends in ``probe()``; a library is
imported only when its backends are asked for.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from .._lib.types import Array, Device, Namespace
from ._libraries import TABLE, VARIANTS
from ._namespace import library_of

if TYPE_CHECKING:
    from ._protocol import Library

__all__ = ["ENV_VAR", "LIBRARIES", "PROBES", "VARIANTS", "Backend", "available", "to_numpy"]

ENV_VAR = "ARRAYROPE_BACKENDS"

#: Libraries in the order backends are listed; each is a module of this package (the rows of :data:`._libraries.TABLE`).
LIBRARIES = tuple(lib.name for lib in TABLE)


def _no_sync() -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Backend:
    """One array library on one device, with what it can do.

    Backends come from :func:`available`; tests and benchmarks take one per parameter.

    Parameters
    ----------
    name : str
        ``"numpy"``, ``"torch"``, ``"torch-cuda"``, ``"jax"``, ``"jax-cuda"``, ``"dask"``, ``"cupy"``,
        ``"array_api_strict"`` or ``"array_api_strict-no_float64"``.
    xp : namespace
        The Array API namespace (``array_api_compat`` wrapper where needed).
    device : object
        Where arrays are created.
    dtypes : tuple of str
        Real floating dtypes it has: a subset of float16, bfloat16, float32, float64.
    lazy : bool
        Whether results are built without computing (Dask) or may be traced (JAX).
    native : module
        The library's own module (``numpy``, ``torch``, ``jax.numpy``, ``cupy``,
        ``dask.array``, ``array_api_strict``), for code that needs its own API.
    synchronize : callable
        Waits for work queued on the device (a no-op on CPUs).

    Examples
    --------
    >>> import numpy as np
    >>> from arrayrope.testing import available_backends
    >>> numpy_backend = available_backends("numpy")[0]
    >>> x = numpy_backend.asarray([1.0, 2.0], dtype="float32")
    >>> numpy_backend.name, numpy_backend.library, x.dtype
    ('numpy', 'numpy', dtype('float32'))
    """

    name: str
    xp: Namespace
    device: Device
    dtypes: tuple[str, ...]
    lazy: bool = False
    native: Any = None  # the library's own module: its API has no static type common to the libraries
    synchronize: Callable[[], None] = dataclasses.field(default=_no_sync, compare=False, repr=False)

    @property
    def library(self) -> str:
        """The library's name (``torch`` for ``torch-cuda``)."""
        return self.name.split("-")[0]

    def asarray(self, value: object, dtype: str | None = None) -> Array:
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

    def __reduce__(self) -> tuple[Callable[[str], Backend], tuple[str]]:
        # namespaces, modules and devices belong to a process: another one takes its own backend of that name
        return _named, (self.name,)

    def __copy__(self) -> Backend:
        return self  # frozen, and what it holds (modules, a device) is one per process

    def __deepcopy__(self, memo: dict[int, Any]) -> Backend:
        return self


def _named(name: str) -> Backend:
    """The backend called ``name`` on this machine: what a pickled :class:`Backend` becomes where it is loaded."""
    found, missing = available([name], with_reasons=True)
    for backend in found:
        if backend.name == name:
            return backend
    raise ValueError(f"backend {name!r} is not available here: {missing.get(name, 'no such device')}")


def library_module(library: str) -> Library:
    """This package's module for ``library`` (imports the library itself only when it is used).

    PyTorch's module loads by an ``import`` statement: the first tensor arrayrope sees may be inside
    ``torch.compile``, whose tracer runs import statements eagerly, outside the graph, but refuses to
    trace ``importlib`` calls.
    """
    if library == "torch":
        from . import torch as torch_module

        found: Library = torch_module  # every one provides the contract
        return found
    module: Library = importlib.import_module(f"{__package__}.{library}")
    return module


def to_numpy(x: Array) -> np.ndarray:
    """Copy any backend's array to a NumPy array on the host (bfloat16 becomes float32).

    Parameters
    ----------
    x : array
        An array of any backend (a NumPy array is returned as it is).

    Returns
    -------
    numpy.ndarray
        The values, on the host.

    Examples
    --------
    >>> import array_api_strict as xp
    >>> from arrayrope.testing import to_numpy
    >>> to_numpy(xp.asarray([1.0, 2.0])).tolist()
    [1.0, 2.0]
    """
    if isinstance(x, np.ndarray):
        return x
    lib = library_of(x)
    if lib is None or lib == "numpy":
        return np.asarray(x)
    converted: np.ndarray = library_module(lib).to_numpy(x)
    return converted


def _module_probe(library: str) -> Callable[[], list[Backend]]:
    def probe() -> list[Backend]:
        found: list[Backend] = library_module(library).probe()
        return found

    return probe


#: library name -> its backends on this machine (raises when the library cannot be used here).
PROBES: dict[str, Callable[[], list[Backend]]] = {lib: _module_probe(lib) for lib in LIBRARIES}


def _probe(library: str) -> tuple[list[Backend], str | None]:
    try:
        found = PROBES[library]()
    except Exception as exc:  # ImportError, or CuPy without a GPU
        return [], f"{library} unavailable: {type(exc).__name__}: {exc}".strip()
    return found, None


def _library(name: str) -> str | None:
    if name in PROBES:
        return name
    if name in VARIANTS:
        return name.split("-")[0]
    return None


@overload
def available(names: Iterable[str] | str | None = ..., *, with_reasons: Literal[False] = ...) -> list[Backend]: ...
@overload
def available(
    names: Iterable[str] | str | None = ..., *, with_reasons: Literal[True]
) -> tuple[list[Backend], dict[str, str]]: ...


def available(
    names: Iterable[str] | str | None = None, *, with_reasons: bool = False
) -> list[Backend] | tuple[list[Backend], dict[str, str]]:
    """The backends available here, in a fixed order.

    Parameters
    ----------
    names : iterable of str or str, optional
        Library names (:data:`LIBRARIES`: all of that library's devices) or names of
        single backends such as ``"torch-cuda"`` or ``"array_api_strict-no_float64"``;
        a string is split at commas. Default: the comma-separated ``ARRAYROPE_BACKENDS``
        environment variable, else every library.
    with_reasons : bool
        Also return ``{name: reason}`` for the requested names that are not available.

    Returns
    -------
    list of Backend, or (list of Backend, dict)
        The backends found, in the order of :data:`LIBRARIES`; with ``with_reasons``,
        also why each requested name that is missing could not be used.

    Examples
    --------
    >>> from arrayrope.backends import available
    >>> available(["numpy"])[0].name
    'numpy'
    """
    from_env = False
    if names is None:
        env = os.environ.get(ENV_VAR, "").strip()
        names, from_env = (env, True) if env else (list(PROBES), False)
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not isinstance(names, Iterable):
        raise TypeError(f"names must be a backend name, a comma-separated string or a list of names, got {names!r}")
    if not isinstance(with_reasons, bool):
        raise TypeError(f"with_reasons must be True or False, got {with_reasons!r}")
    wanted = list(names)
    unknown = [n for n in wanted if not isinstance(n, str) or _library(n) is None]
    if unknown:
        source = f" (from the environment variable {ENV_VAR})" if from_env else ""
        raise ValueError(
            f"unknown backends {unknown}{source}; known: {list(PROBES)} or one device of them: {list(VARIANTS)}"
        )
    found: list[Backend] = []
    missing: dict[str, str] = {}
    for name in wanted:
        library = _library(name)
        assert library is not None
        got, reason = _probe(library)
        if name not in PROBES:
            got = [b for b in got if b.name == name]
            if not got and not reason:
                reason = f"{name} unavailable: {VARIANTS[name]}"
        found.extend(b for b in got if b not in found)
        if reason:
            missing[name] = reason
    return (found, missing) if with_reasons else found
