"""Cross-backend testing: the backends on this machine, dtype-aware comparison, parity reports
and identification of foreign RoPE implementations.

Backends are imported when :func:`backends` is called, never when arrayrope is.
"""

from __future__ import annotations

from ._backends import Backend, backends, to_numpy
from ._compare import assert_close, default_tolerance
from ._identify import RopeConvention, identify_rope
from ._parity import ParityCase, ParityReport, ParityRow, check_parity

__all__ = [
    "Backend",
    "backends",
    "to_numpy",
    "assert_close",
    "default_tolerance",
    "check_parity",
    "ParityReport",
    "ParityRow",
    "ParityCase",
    "identify_rope",
    "RopeConvention",
]
