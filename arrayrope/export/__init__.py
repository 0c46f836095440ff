"""arrayrope.export: ONNX subgraphs that apply rotary embeddings in deployment graphs.

It requires the ``onnx`` extra (and ``onnxruntime`` for :func:`validate`). The
tables it embeds come from the core, so exported graphs are as precise as
arrayrope itself. Every builder takes the options of :class:`ExportOptions` as
keyword arguments. The package depends on the core and never the other way:

* ``build/``: graphs from frequencies. ``_options`` (:class:`ExportOptions`: types,
  defaults, checks), ``_spec`` (options resolved against the frequencies and ONNX),
  ``_builder`` (the graph builder), ``_emit`` choosing between ``_fused`` (targets
  ``onnx23`` and ``ort``) and ``_portable``, ``_tables`` (stored or computed
  cos/sin), ``_mrope`` (M-RoPE: each pair's cos/sin from its axis), ``_model``
  (:func:`rotary_model`, :func:`rotary_function`) and ``_splice`` (:func:`add_rotary`).
* ``fuse/``: other exporters' graphs. ``_match`` finds rotations, ``_probe``
  measures them (with the core's :mod:`arrayrope._identify`), ``_replace`` builds one
  rotation's fused node and checks it, ``_edit`` writes the kept nodes into the model,
  ``_rewrite`` (:func:`fuse_rotary`) runs them over a model, ``_report`` says what was done.
* ``audit/``: does a deployed model rotate as its config says? ``_expect`` (each layer's
  rotation from the config), ``_measure`` (every rotation found and measured), ``_judge``
  (the first difference, in the config's terms), ``_report`` (:class:`AuditReport`) and
  :func:`audit_rotary`.
* ``repair/``: every rotation the audit finds wrong rewritten to the config's (:func:`repair_rotary`).
* ``torch/``: the PyTorch exporter bridge. ``_graphs`` (:func:`torch_options`, the
  graphs written for arrayrope's PyTorch op), ``_bridge`` (the op and its
  translations) and the install hook the core calls when its PyTorch backend loads.
* ``_graph`` (graph helpers shared by all three) and ``_validate`` (:func:`validate`).

Names are imported from their modules when first used, so that importing this
package (as the PyTorch backend's hook does) imports no ONNX library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers
    from ._validate import ValidationError as ValidationError
    from ._validate import validate as validate
    from .audit import AuditReport as AuditReport
    from .audit import Finding as Finding
    from .audit import audit_rotary as audit_rotary
    from .build._model import rotary_function as rotary_function
    from .build._model import rotary_model as rotary_model
    from .build._options import ExportKeywords as ExportKeywords
    from .build._options import ExportOptions as ExportOptions
    from .build._options import SpliceKeywords as SpliceKeywords
    from .build._splice import add_rotary as add_rotary
    from .fuse._report import Fused as Fused
    from .fuse._report import FusionReport as FusionReport
    from .fuse._report import Rotation as Rotation
    from .fuse._rewrite import FuseTables as FuseTables
    from .fuse._rewrite import FuseTarget as FuseTarget
    from .fuse._rewrite import fuse_rotary as fuse_rotary
    from .repair import Repaired as Repaired
    from .repair import RepairReport as RepairReport
    from .repair import repair_rotary as repair_rotary
    from .torch._graphs import TorchOptions as TorchOptions
    from .torch._graphs import torch_options as torch_options
    from .torch._graphs import torch_translations as torch_translations

_WHERE = {
    "ValidationError": "._validate",
    "AuditReport": ".audit",
    "Finding": ".audit",
    "audit_rotary": ".audit",
    "validate": "._validate",
    "rotary_function": ".build._model",
    "rotary_model": ".build._model",
    "ExportKeywords": ".build._options",
    "ExportOptions": ".build._options",
    "SpliceKeywords": ".build._options",
    "add_rotary": ".build._splice",
    "Fused": ".fuse._report",
    "FusionReport": ".fuse._report",
    "Rotation": ".fuse._report",
    "FuseTables": ".fuse._rewrite",
    "FuseTarget": ".fuse._rewrite",
    "fuse_rotary": ".fuse._rewrite",
    "RepairReport": ".repair",
    "Repaired": ".repair",
    "repair_rotary": ".repair",
    "TorchOptions": ".torch._graphs",
    "torch_options": ".torch._graphs",
    "torch_translations": ".torch._graphs",
}

__all__ = [
    "AuditReport",
    "ExportKeywords",
    "ExportOptions",
    "Finding",
    "FuseTables",
    "FuseTarget",
    "Fused",
    "FusionReport",
    "RepairReport",
    "Repaired",
    "Rotation",
    "SpliceKeywords",
    "TorchOptions",
    "ValidationError",
    "add_rotary",
    "audit_rotary",
    "fuse_rotary",
    "repair_rotary",
    "rotary_function",
    "rotary_model",
    "torch_options",
    "torch_translations",
    "validate",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
