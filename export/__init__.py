"""arrayrope.export: ONNX subgraphs that apply rotary embeddings in deployment graphs.

Imported as ``arrayrope.export``; it requires the ``onnx`` extra (and
``onnxruntime`` for :func:`validate`). The tables it embeds come from the core,
so exported graphs are as precise as arrayrope itself.
"""

from __future__ import annotations

from ._api import rotary_function, rotary_model
from ._spec import TARGETS
from ._splice import add_rotary
from ._validate import ValidationError, ValidationReport, validate

__all__ = ["TARGETS", "ValidationError", "ValidationReport", "add_rotary", "rotary_function", "rotary_model", "validate"]
