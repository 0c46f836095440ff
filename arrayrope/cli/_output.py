"""The ``-o`` of the commands that write a model: checked before any work, so that nothing is half written."""

from __future__ import annotations

import os


def check_output(output: str, model: str) -> None:
    """``output`` names a file to write, in an existing, writable folder, and not the ``model`` read (ValueError
    naming ``-o`` otherwise): the input is never written over."""
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ValueError(f"-o {output}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"-o {output}: the folder {folder!r} is not writable")
    if os.path.isdir(output):
        raise ValueError(f"-o {output}: is a folder; name the .onnx file to write")
    if os.path.exists(output) and os.path.exists(model) and os.path.samefile(output, model):
        raise ValueError(f"-o {output}: is the model read; name another file (the input is never written over)")
