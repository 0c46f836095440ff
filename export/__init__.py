"""arrayrope.export: ONNX subgraphs that apply rotary embeddings in deployment graphs.

Imported as ``arrayrope.export``; it requires the ``onnx`` extra (and
``onnxruntime`` for :func:`validate`). The tables it embeds come from the core,
so exported graphs are as precise as arrayrope itself. Every builder takes the
options of :class:`ExportOptions` as keyword arguments.

Modules: ``_options`` (the options: types, defaults, checks, documentation),
``_spec`` (options resolved against the frequencies and ONNX), ``_builder`` (the
graph builder), ``_emit`` choosing between ``_fused`` (targets ``onnx23`` and
``ort``) and ``_portable`` (with ``_tables``: constant or computed tables),
``_model`` (model and function), ``_splice`` (:func:`add_rotary`),
``_validate``, ``_proto`` (loading models, IR versions), and ``_from_torch`` (the
graphs ``torch.onnx.export`` writes for arrayrope's PyTorch op, :func:`torch_options`);
:func:`fuse_rotary` in ``_fuse`` (with ``_fuse_match`` finding rotations,
``_fuse_probe`` measuring them, ``_fuse_report`` saying what was done).
"""

from __future__ import annotations

from ._from_torch import TorchOptions, torch_options
from ._fuse import FuseTables, FuseTarget, fuse_rotary
from ._fuse_report import Fused, FusionReport, Rotation
from ._model import rotary_function, rotary_model
from ._options import TARGETS, ExportKeywords, ExportOptions, SpliceKeywords
from ._splice import add_rotary
from ._validate import ValidationError, ValidationReport, validate

__all__ = [
    "TARGETS",
    "ExportKeywords",
    "ExportOptions",
    "FuseTables",
    "FuseTarget",
    "Fused",
    "FusionReport",
    "Rotation",
    "SpliceKeywords",
    "TorchOptions",
    "ValidationError",
    "ValidationReport",
    "add_rotary",
    "fuse_rotary",
    "rotary_function",
    "rotary_model",
    "torch_options",
    "validate",
]
