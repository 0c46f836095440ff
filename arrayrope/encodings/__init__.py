"""The encodings, built on the three stages: RoPE for queries and keys, its variants, and biases.

* :mod:`.embedding`: :class:`RotaryEmbedding`, the stages with a table cache.
* :mod:`.rerotate`, :mod:`.xpos`: moving rotated keys to new frequencies; xPos scales.
* :mod:`.sinusoidal`: the Transformer paper's absolute encoding.
* :mod:`.axial`, :mod:`.mrope`, :mod:`.mixed`: images, video and multimodal positions
  (their token grids in :mod:`._grid`); :mod:`.mrope_positions`: the position ids of M-RoPE models.
* :mod:`.biases`: ALiBi and T5 relative position buckets.
"""

from .axial import axial_rope_tables, pixel_frequencies
from .biases import alibi_bias, alibi_slopes, t5_relative_bias, t5_relative_buckets
from .embedding import RotaryEmbedding
from .mixed import mixed_rope_frequencies, mixed_rope_tables
from .mrope import mrope_tables
from .mrope_positions import mrope_positions
from .rerotate import rerotate
from .sinusoidal import sinusoidal_embedding
from .xpos import xpos_scales, xpos_tables

__all__ = [
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "axial_rope_tables",
    "mixed_rope_frequencies",
    "mixed_rope_tables",
    "mrope_positions",
    "mrope_tables",
    "pixel_frequencies",
    "rerotate",
    "sinusoidal_embedding",
    "t5_relative_bias",
    "t5_relative_buckets",
    "xpos_scales",
    "xpos_tables",
]
