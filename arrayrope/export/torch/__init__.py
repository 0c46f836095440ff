"""The PyTorch exporter bridge: ``torch.onnx.export`` of models holding a :class:`~arrayrope.RotaryEmbedding`.

:func:`install` runs once, when arrayrope's PyTorch backend first loads (the entry point
``torch`` of the group ``arrayrope.integrations``): it registers, with the core's
:mod:`arrayrope.backends.integrations`, the rotary embedding to trace while
``torch.onnx.export`` runs (:func:`._bridge.rotary_embedding`: one custom op per rotated
tensor), and, on the PyTorch versions the bridge is tested with
(:data:`TESTED_TORCH`), arranges for the op's translations to join the private list
PyTorch's dynamo exporter builds its registry from, when that list's module is
imported. On other versions it warns once and adds nothing: exports trace
RotaryEmbedding's computation (exact, no float64, no fused node) unless the
translations are passed with ``custom_translation_table=``
(:func:`~arrayrope.export.torch_translations`). Nothing here imports onnx or the
exporter before an export needs them.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

from ._after_import import after_import

__all__ = ["EXPORTER_REGISTRY", "TESTED_TORCH", "install"]

#: The module whose import starts the dynamo exporter's registry (private: registered only on tested versions).
EXPORTER_REGISTRY = "torch.onnx._internal.exporter._registration"
#: (oldest, newest) PyTorch minor versions whose exporter takes the translations, as the test suite checks.
TESTED_TORCH = ((2, 8), (2, 15))

_installed: list[bool] = []


def install() -> None:
    """Plug the bridge into PyTorch's exporters (once per process)."""
    if _installed:
        return
    _installed.append(True)
    import torch

    from arrayrope.backends import integrations

    _in_onnx_export.append(torch.onnx.is_in_onnx_export)
    integrations.register_graph_rotary("torch", _while_exporting)
    version = _minor(torch.__version__)
    lo, hi = TESTED_TORCH
    if version is None or not lo <= version <= hi:
        warnings.warn(
            f"arrayrope: torch.onnx.export with PyTorch {torch.__version__}, outside the versions arrayrope's ONNX "
            f"translations are tested with ({lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}), traces RotaryEmbedding's "
            "computation instead of fused nodes; pass custom_translation_table=arrayrope.export."
            "torch_translations(opset) to torch.onnx.export for fused nodes",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    after_import(EXPORTER_REGISTRY, _register)


def _minor(version: str) -> tuple[int, int] | None:
    found = re.match(r"(\d+)\.(\d+)", version)
    return None if found is None else (int(found[1]), int(found[2]))


def _register() -> None:
    import torch

    from . import _bridge

    if not _bridge.register():
        warnings.warn(
            f"arrayrope: {_bridge.registered()[1]}; torch.onnx.export traces RotaryEmbedding's "
            "computation instead of fused nodes",
            RuntimeWarning,
            stacklevel=2,
        )
    elif torch.onnx.is_in_onnx_export():  # the running export's registry was built without the translations
        _bridge._state["late"] = True
        warnings.warn(
            "arrayrope: its PyTorch bridge loaded during a torch.onnx.export (the RotaryEmbedding was built "
            "inside it): exports in this process trace RotaryEmbedding's computation (exact, no fused "
            "node); build the model before exporting",
            RuntimeWarning,
            stacklevel=2,
        )


def _while_exporting(q: Any, k: Any, **call: Any) -> Any:
    """The bridge's rotary embedding while ``torch.onnx.export`` traces (None under other tracers).

    Under ``torch.compile`` and ``torch.export`` this runs inside dynamo's trace, which must meet no import.
    """
    if not _in_onnx_export[0]():
        return None
    from . import _bridge

    return _bridge.rotary_embedding(q, k, **call)


#: ``torch.onnx.is_in_onnx_export``, taken when the bridge installs (PyTorch is imported then).
_in_onnx_export: list[Callable[[], bool]] = []
