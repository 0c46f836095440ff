"""The array libraries arrayrope supports, named once: everything else that lists them derives from here.

Adding a library is a row of :data:`TABLE` and its module in this package (``<name>.py``, providing
the contract of :mod:`._protocol`, whose mypy check names it too), and its single-device backends
in :data:`VARIANTS`. Derived from the table: :data:`arrayrope.backends.LIBRARIES` (the registry), which
array types belong to which library and how their devices are read (:mod:`._namespace`), which
import means a library is in use (:mod:`.dispatch`), and the extra that installs each, named by the
command line when a library is missing (:data:`arrayrope.cli.EXTRAS`). ``tests/backends/test_registry.py``
checks that the lists agree with the table.

It imports no array library: the command line reads it without loading any backend.
"""

from __future__ import annotations

import dataclasses

__all__ = ["TABLE", "VARIANTS", "ArrayLibrary", "by_name"]


@dataclasses.dataclass(frozen=True)
class ArrayLibrary:
    """One array library and the facts about it that the rest of arrayrope reads."""

    #: arrayrope's name for it: a backend name, and the name of its module in this package.
    name: str
    #: The top-level modules its array types are defined in (``jax`` arrays come from ``jaxlib`` too).
    modules: tuple[str, ...]
    #: The module whose import means the library is in use (its backend module then loads at no import cost).
    import_name: str
    #: The extra of arrayrope that installs it, None for a library that is always there or a test dependency.
    extra: str | None
    #: Whether all its arrays live on one device (no device check needed).
    one_device: bool = False
    #: Whether its arrays carry their device as ``.device`` (``array_api_compat.device`` would return it).
    device_attribute: bool = False


#: The libraries, in the order their backends are listed.
TABLE: tuple[ArrayLibrary, ...] = (
    ArrayLibrary("numpy", ("numpy",), "numpy", None, one_device=True),
    ArrayLibrary(
        "array_api_strict",
        ("array_api_strict",),
        "array_api_strict",
        None,
        device_attribute=True,
    ),
    ArrayLibrary("torch", ("torch",), "torch", "torch", device_attribute=True),
    ArrayLibrary("jax", ("jax", "jaxlib"), "jax", "jax"),
    ArrayLibrary("dask", ("dask",), "dask.array", "dask", one_device=True),
    ArrayLibrary("cupy", ("cupy",), "cupy", "cupy", device_attribute=True),
)

#: Single-device backends (``<library>-<device>``), and why they may be missing although their library is installed.
VARIANTS = {
    "torch-cuda": "no CUDA device for PyTorch",
    "jax-cuda": "no CUDA device for JAX",
    "array_api_strict-no_float64": "array_api_strict has no no_float64 device",
}


def by_name(name: str) -> ArrayLibrary:
    """The row of library ``name``."""
    for row in TABLE:
        if row.name == name:
            return row
    raise KeyError(name)
