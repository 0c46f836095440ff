"""numpydoc validation of every public name of the public modules (the API reference's).

numpydoc's own rules (the ones scientific Python libraries hold their docstrings to): a one-line
summary, every parameter documented with its type, a Returns section, Examples. Extended
summaries and See Also sections are optional here.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

import pytest

numpydoc_validate = pytest.importorskip("numpydoc.validate", reason="numpydoc is not installed")

#: numpydoc checks not required of every public docstring.
OPTIONAL = {"ES01", "SA01"}
MODULES = ("arrayrope", "arrayrope.export", "arrayrope.testing", "arrayrope.config", "arrayrope.scaling")


def _public() -> Iterator[str]:
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isfunction(obj) or inspect.isclass(obj):  # not the Literal aliases of string choices
                yield f"{name}.{attr}"


@pytest.mark.parametrize("name", list(_public()))
def test_public_docstring_follows_numpydoc(name: str) -> None:
    if name.startswith("arrayrope.export"):
        pytest.importorskip("onnx")
    errors = [
        f"{code}: {message}" for code, message in numpydoc_validate.validate(name)["errors"] if code not in OPTIONAL
    ]
    assert errors == [], name
