"""Everything that depends on which array library an array comes from, behind one fence.

* :mod:`._namespace`: which library an array belongs to, its namespace, device and
  capabilities (float64 support, laziness, dtype kinds), cached per type and dtype.
* :mod:`.registry`: :class:`Backend` and :func:`available`, the one registry of the
  (library, device) pairs on this machine, used by :mod:`arrayrope.testing`, the
  pytest plugin, the CLI and the benchmarks.
* :mod:`.dispatch`: the fast paths behind ``apply_rotary`` and ``rope_tables``,
  each defined in its library's module (``numpy``, ``torch``, ``dask``, ``jax``) with
  the row-block schedule they share in :mod:`.blocks`.

* :mod:`.torch_onnx`: ``torch.onnx.export`` of modules that use arrayrope, with
  translations that the exporter's registry receives when it loads
  (:mod:`._after_import`).

Library modules are imported only when an array of that library passes or its
backends are listed: importing arrayrope imports no optional library.
"""

from ._after_import import after_import
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
    same_device,
    to_device,
)
from .dispatch import arange_tables, concrete, is_lazy, onnx_exporting, onnx_rotary, prepare, rotate, traced
from .registry import ENV_VAR, LIBRARIES, VARIANTS, Backend, available, to_numpy

__all__ = [
    "ENV_VAR",
    "LIBRARIES",
    "VARIANTS",
    "Backend",
    "arange_tables",
    "available",
    "cache_key",
    "check_device",
    "concrete",
    "default_namespace",
    "device_of",
    "has_float64",
    "has_int64",
    "is_array",
    "is_integral",
    "is_lazy",
    "is_real_floating",
    "known",
    "library_name",
    "library_of",
    "namespace",
    "onnx_exporting",
    "onnx_rotary",
    "prepare",
    "rotate",
    "same_device",
    "to_device",
    "to_numpy",
    "traced",
]


def _register_torch_onnx() -> None:
    from . import torch_onnx

    torch_onnx.register()


#: PyTorch's ONNX exporter builds its translations from this module's registry when an export starts.
TORCH_ONNX_REGISTRY = "torch.onnx._internal.exporter._registration"
after_import(TORCH_ONNX_REGISTRY, _register_torch_onnx)
