"""ONNX protobuf helpers shared by the builders and validation: loading models, IR versions."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeAlias

import onnx
from onnx import OperatorSetIdProto, helper

from arrayrope._lib.files import open_regular_file

#: The largest serialized model protobuf can hold (2 GiB); tables beyond it cannot be exported.
PROTOBUF_LIMIT = (1 << 31) - 1

ModelSource: TypeAlias = onnx.ModelProto | str | os.PathLike[str]
"""A model, or the path of a ``.onnx`` file."""


def ir_version_for(opset_imports: Iterable[OperatorSetIdProto]) -> int:
    """The oldest IR version that can hold these opsets.

    ``onnx.helper.make_model`` writes the newest IR version the installed onnx
    knows, which ONNX Runtime releases older than that onnx refuse; the oldest
    sufficient one is accepted by every runtime that implements the opsets.
    """
    return helper.find_min_ir_version_for(list(opset_imports), ignore_unknown=True)


def load_model(model: object, argument: str = "model") -> onnx.ModelProto:
    """``model`` as a ModelProto: itself, or loaded from a path (errors name ``argument``)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, bytes, os.PathLike)):
        path = os.fsdecode(model)
        where = f"{argument}={path!r}"
        with open_regular_file(path, where, PROTOBUF_LIMIT):  # refuses FIFOs, devices, folders, huge files
            pass
        try:
            return onnx.load(path)
        except Exception as exc:  # onnx raises several types for unreadable files
            first = " ".join(str(exc).split())[:200]
            raise ValueError(f"{where} does not load as an ONNX model: {first}") from None
    raise TypeError(f"{argument} must be an onnx.ModelProto or a path to a .onnx file, got {type(model).__name__}")
