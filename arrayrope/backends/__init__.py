"""Everything that depends on which array library an array comes from, behind one fence.

* :mod:`._protocol`: the backend contract, :class:`~._protocol.Library`: what each
  library module (``numpy``, ``torch``, ``jax``, ``dask``, ``cupy``,
  ``array_api_strict``) provides; :mod:`._defaults` for those without a fast path.
* :mod:`._namespace`: which library an array belongs to, its namespace, device and
  capabilities (float64 support, dtype kinds), cached per type and dtype.
* :mod:`.registry`: :class:`Backend` and :func:`available`, the one registry of the
  (library, device) pairs on this machine, used by :mod:`arrayrope.testing`, the
  pytest plugin, the CLI and the benchmarks.
* :mod:`.dispatch`: the one lookup of a library's module, and what the core asks of
  it: fast paths behind ``apply_rotary`` and ``rope_tables`` (with the row-block
  schedule they share in :mod:`.blocks`), whether values may be read
  (:func:`concrete`), whether a graph is being traced (:func:`tracing`).
* :mod:`.integrations`: where packages built on the core plug in per library
  (entry points), such as the export package's PyTorch exporter bridge.

Library modules are imported only when an array of that library passes or its
backends are listed: importing arrayrope imports no optional library.

The private helpers below the fence (:mod:`arrayrope._lib`) import nothing from here:
this package passes itself to :func:`arrayrope._lib.fence.install` as it loads, and
they ask it what :class:`arrayrope._lib.fence.Backends` declares.
"""

from .._lib import fence as _fence
from ._namespace import (
    cache_key,
    check_device,
    default_namespace,
    device_of,
    has_float64,
    has_int64,
    is_array,
    is_integral,
    is_real_floating,
    known,
    library_name,
    library_of,
    namespace,
    plain_floating,
    same_device,
    to_device,
)
from ._protocol import Library
from .dispatch import (
    arange_tables,
    check_out,
    concrete,
    constant,
    graph_rotary,
    host,
    library,
    load_imported,
    module_of,
    prepare,
    rotate,
    tracing,
)
from .registry import ENV_VAR, LIBRARIES, VARIANTS, Backend, available, to_numpy

__all__ = [
    "ENV_VAR",
    "LIBRARIES",
    "VARIANTS",
    "Backend",
    "Library",
    "arange_tables",
    "available",
    "cache_key",
    "check_device",
    "check_out",
    "concrete",
    "constant",
    "default_namespace",
    "device_of",
    "graph_rotary",
    "has_float64",
    "has_int64",
    "host",
    "is_array",
    "is_integral",
    "is_real_floating",
    "known",
    "library",
    "library_name",
    "library_of",
    "load_imported",
    "module_of",
    "namespace",
    "plain_floating",
    "prepare",
    "rotate",
    "same_device",
    "to_device",
    "to_numpy",
    "tracing",
]

from .. import backends as _this  # this package, every name above defined

_fence.install(_this)
