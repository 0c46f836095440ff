"""Cross-backend testing helpers: the backends on this machine and dtype-aware comparison.

Backends are imported when :func:`backends` is called, never when arrayrope is.
"""

from __future__ import annotations

from ._backends import Backend, backends, to_numpy
from ._compare import assert_close, default_tolerance

__all__ = ["Backend", "backends", "to_numpy", "assert_close", "default_tolerance"]
