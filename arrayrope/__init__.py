"""arrayrope: positional encodings for attention models, written once against the Array API.

The pipeline reads top to bottom: frequencies (host, float64) -> cos/sin tables
(on the input's device) -> application to queries and keys; the encodings are
built on these stages. Importing arrayrope imports no optional backend.
"""

from .apply import apply_rotary, permute_rotary_rows, to_half_split, to_interleaved
from .config import rope_frequencies_from_config
from .encodings import (
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    axial_rope_tables,
    mixed_rope_frequencies,
    mixed_rope_tables,
    mrope_positions,
    mrope_tables,
    pixel_frequencies,
    rerotate,
    sinusoidal_embedding,
    t5_relative_bias,
    t5_relative_buckets,
    xpos_scales,
    xpos_tables,
)
from .frequencies import RopeFrequencies, rope_frequencies
from .tables import rope_tables

__version__ = "0.1.0"

__all__ = [
    "RopeFrequencies",
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "axial_rope_tables",
    "mixed_rope_frequencies",
    "mixed_rope_tables",
    "mrope_positions",
    "mrope_tables",
    "permute_rotary_rows",
    "pixel_frequencies",
    "rerotate",
    "rope_frequencies",
    "rope_frequencies_from_config",
    "rope_tables",
    "sinusoidal_embedding",
    "t5_relative_bias",
    "t5_relative_buckets",
    "to_half_split",
    "to_interleaved",
    "xpos_scales",
    "xpos_tables",
]
