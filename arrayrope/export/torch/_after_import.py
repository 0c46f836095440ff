"""Run a function right after a given module is imported, without importing it.

The PyTorch bridge uses this for one thing: adding its translations to PyTorch's
ONNX exporter when the exporter's registry module loads (see :mod:`arrayrope.export.torch`),
so that nothing imports the exporter, onnx or onnxscript before an export does. The
hook is installed when arrayrope's PyTorch backend loads, never by ``import arrayrope``.
A hook is a finder at
the front of ``sys.meta_path`` that answers for one module name only: it finds
the module's spec with the other finders and wraps its loader so that the
function runs once the module has executed. The function's errors are caught:
a hook never breaks the import it watches.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importlib.abc imports importlib.resources, tempfile, shutil...: not at start-up
    import importlib.abc
    import importlib.machinery
    import types

__all__ = ["after_import"]


def after_import(name: str, callback: Callable[[], object]) -> None:
    """Call ``callback()`` once module ``name`` is imported: now if it already is, else right after its import."""
    if name in sys.modules:
        _run(callback)
    elif not any(isinstance(f, _Watch) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _Watch(name, callback))


def _run(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:  # the integration degrades (its caller records why); the watched import must not fail
        return


class _Watch:  # a meta path finder (the protocol: find_spec)
    """Finds nothing itself: wraps the loader of module ``name`` and then leaves ``sys.meta_path``."""

    def __init__(self, name: str, callback: Callable[[], object]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.callback)  # type: ignore[assignment]
        return spec


class _Loader:  # a loader (the protocol: create_module, exec_module)
    """Executes the module with the real loader, then runs the callback."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[], object]) -> None:
        self.loader = loader
        self.callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        _run(self.callback)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename...: the real loader's
        return getattr(self.loader, name)
