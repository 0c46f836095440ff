"""Naming the RoPE convention of a foreign function by probing it: core machinery, public through
:mod:`arrayrope.testing` (``identify_rope``, ``RopeConvention``) and used by the export layer (fusion
and audits measure the rotations of ONNX graphs with it).

It lies above the stages it names conventions with (frequencies, tables, apply, the scaling
registry's fits), beside :mod:`arrayrope.encodings`:

* :mod:`.probe`: calling a function on unit vectors, its rotation matrices, its pairs and each
  pair's frequency with its uncertainty.
* :mod:`.convention`: :class:`RopeConvention`, what was found.
* :mod:`.identify`: :func:`identify_rope`, from the measured matrices to a named convention.
"""

from .convention import RopeConvention
from .identify import identify_rope

__all__ = ["RopeConvention", "identify_rope"]
