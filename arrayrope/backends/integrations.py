"""Where packages built on the core plug in, per array library.

A distribution declares an entry point in the group :data:`GROUP` named after a
library (``torch``); the function it names is called once, when that library's
backend module first loads (the first array of that library that arrayrope sees).
arrayrope's own :mod:`arrayrope.export` uses it so that ``torch.onnx.export`` of a
model holding a :class:`~arrayrope.RotaryEmbedding` writes one fused node per rotation:
it registers, with :func:`register_graph_rotary`, the rotary embedding to trace instead
of the core's computation while PyTorch traces a graph. The core names no package that
plugs in here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["GROUP", "graph_rotary", "load", "register_graph_rotary"]

#: The entry-point group of integrations.
GROUP = "arrayrope.integrations"

_graph_rotaries: dict[str, Callable[..., Any]] = {}
_loaded: set[str] = set()


def register_graph_rotary(library: str, fn: Callable[..., Any]) -> None:
    """Trace ``fn`` in place of :class:`~arrayrope.RotaryEmbedding`'s computation in graphs of ``library``.

    ``fn(q, k, *, freqs, positions, offset, layout, axes, max_positions)`` returns the
    rotated ``q`` (and ``k``), or None to let the core compute them; ``freqs()`` gives the
    frequencies the graph keeps (it raises for the rope types that follow the sequence length
    when the call gives no ``seq_len``), to be called only by a ``fn`` that rotates. Calls with
    multimodal RoPE positions ``(axes, B, S)`` (checked against the instance's sections) also
    pass ``mrope=(sections, interleaved)``, as :func:`arrayrope.mrope_tables` takes them.
    """
    _graph_rotaries[library] = fn


def graph_rotary(library: str) -> Callable[..., Any] | None:
    """The function registered for ``library``, or None."""
    return _graph_rotaries.get(library)


def load(library: str) -> None:
    """Call the integrations of ``library`` (once per process); one that fails is reported, never raised."""
    if library in _loaded:
        return
    _loaded.add(library)
    from importlib.metadata import entry_points  # already imported by the libraries that have integrations

    for point in entry_points(group=GROUP, name=library):
        try:
            point.load()()
        except Exception as exc:  # an optional integration never breaks the core
            warnings.warn(
                f"arrayrope: the {library} integration {point.value} did not load: {exc}", RuntimeWarning, stacklevel=2
            )
