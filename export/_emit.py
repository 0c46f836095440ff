"""The emitter of a spec's target: the nodes that rotate each tensor, into a builder."""

from __future__ import annotations

from typing import Protocol

from ._builder import Builder
from ._fused import FusedEmitter
from ._portable import PortableEmitter
from ._spec import Spec
from ._tables import check_size


class Emitter(Protocol):
    """Rotates tensors of one spec into one builder; the tensors share tables and positions."""

    def apply(self, x: str, pos: str | None, out: str, heads: int | None) -> str:
        """Rotate ``x`` (``heads`` heads) at positions ``pos`` (None: 0..seq-1) into the tensor ``out``."""
        ...


def emitter(spec: Spec, b: Builder, model_bytes: int = 0) -> Emitter:
    """The emitter for ``spec.target``, once its tables are known to fit in a model (with ``model_bytes`` more)."""
    check_size(spec, model_bytes)
    if spec.target == "portable":
        return PortableEmitter(spec, b)
    return FusedEmitter(spec, b)
