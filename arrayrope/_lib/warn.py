"""Warnings that point at the user's line: the first caller outside the package, however deep the call."""

from __future__ import annotations

import inspect
import os
import warnings

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def warn_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside arrayrope (the user's call),
    so that the warning shows their line and the default filter shows it once per line of theirs."""
    frame = inspect.currentframe()
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    del frame
    warnings.warn(message, category, stacklevel=level)
