"""Type aliases that a package re-exports lazily (``arrayrope.export.FuseTarget``) get the docstring
written under them in the module that defines them: autodoc reads attribute docstrings from the source of
the module a name is documented in, where such an alias has none."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from sphinx.pycode import ModuleAnalyzer


def fill(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what != "data" or any(line.strip() for line in lines):
        return
    package, _, attr = name.rpartition(".")
    where = getattr(importlib.import_module(package), "_WHERE", {}).get(attr)
    if where is None:
        return
    source = importlib.util.resolve_name(where, package)
    lines[:] = ModuleAnalyzer.for_module(source).find_attr_docs().get(("", attr), [])


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", fill, priority=400)  # before numpydoc reads the sections
    return {"parallel_read_safe": True, "parallel_write_safe": True}
