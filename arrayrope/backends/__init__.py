"""Everything that depends on which array library an array comes from, behind one fence.

* :mod:`._namespace`: which library an array belongs to, its namespace, device and
  capabilities (float64 support, laziness, dtype kinds), cached per type and dtype.
* :mod:`.registry`: :class:`Backend` and :func:`available`, the one registry of the
  (library, device) pairs on this machine, used by :mod:`arrayrope.testing`, the
  pytest plugin, the CLI and the benchmarks.
* :mod:`.dispatch`: the fast paths behind ``apply_rotary`` and ``rope_tables``,
  each defined in its library's module (``numpy``, ``torch``, ``dask``, ``jax``) with
  the row-block schedule they share in :mod:`.blocks`.

Library modules are imported only when an array of that library passes or its
backends are listed: importing arrayrope imports no optional library.
"""

from ._namespace import (
    default_namespace,
    device_of,
    has_float64,
    is_array,
    is_integral,
    is_lazy,
    is_real_floating,
    known,
    library_name,
    library_of,
    namespace,
    same_device,
    to_device,
)
from .dispatch import arange_tables, prepare, rotate
from .registry import ENV_VAR, LIBRARIES, VARIANTS, Backend, available, to_numpy

__all__ = [
    "ENV_VAR",
    "LIBRARIES",
    "VARIANTS",
    "Backend",
    "arange_tables",
    "available",
    "default_namespace",
    "device_of",
    "has_float64",
    "is_array",
    "is_integral",
    "is_lazy",
    "is_real_floating",
    "known",
    "library_name",
    "library_of",
    "namespace",
    "prepare",
    "rotate",
    "same_device",
    "to_device",
    "to_numpy",
]
