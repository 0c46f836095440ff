"""Cross-backend testing: the backends on this machine, strict comparison, parity reports
and identification of foreign RoPE implementations.

Backends are imported when :func:`available_backends` is called, never when arrayrope is.
"""

from __future__ import annotations

from .._identify import RopeConvention, identify_rope
from .._lib.verdicts import Report, Row, default_tolerance, tolerance_at
from ..backends import Backend, to_numpy
from ..backends import available as available_backends
from ._cases import exact_angles
from ._compare import assert_close
from ._parity import ParityCase, check_parity

__all__ = [
    "Backend",
    "ParityCase",
    "Report",
    "RopeConvention",
    "Row",
    "assert_close",
    "available_backends",
    "check_parity",
    "default_tolerance",
    "exact_angles",
    "identify_rope",
    "to_numpy",
    "tolerance_at",
]
