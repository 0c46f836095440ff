"""arrayrope.export: ONNX subgraphs that apply rotary embeddings in deployment graphs.

Imported as ``arrayrope.export``; it requires the ``onnx`` extra (and
``onnxruntime`` for :func:`validate`). The tables it embeds come from the core,
so exported graphs are as precise as arrayrope itself.
"""

from ._api import rotary_function, rotary_model
from ._spec import TARGETS
from ._validate import Check, ValidationError, ValidationReport, validate

__all__ = ["rotary_model", "rotary_function", "validate", "ValidationReport", "ValidationError", "Check", "TARGETS"]
