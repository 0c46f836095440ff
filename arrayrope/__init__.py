"""arrayrope: positional encodings for attention models, written once against the Array API.

The pipeline reads top to bottom: frequencies (host, float64) -> cos/sin tables
(on the input's device) -> application to queries and keys; the encodings are
built on these stages. Importing arrayrope imports no optional backend.
"""

from .frequencies import RopeFrequencies, rope_frequencies
from .config import rope_frequencies_from_config
from .tables import rope_tables
from .apply import apply_rotary, permute_rotary_rows, to_half, to_interleaved
from .encodings import (
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    axial_rope_tables,
    mixed_rope_frequencies,
    mixed_rope_tables,
    mrope_tables,
    rerotate,
    sinusoidal_embedding,
    t5_relative_bias,
    t5_relative_buckets,
    xpos_scales,
    xpos_tables,
)

__version__ = "0.1.0"

__all__ = [
    "RopeFrequencies",
    "rope_frequencies",
    "rope_tables",
    "rope_frequencies_from_config",
    "rerotate",
    "xpos_scales",
    "xpos_tables",
    "apply_rotary",
    "to_half",
    "to_interleaved",
    "permute_rotary_rows",
    "RotaryEmbedding",
    "sinusoidal_embedding",
    "axial_rope_tables",
    "mrope_tables",
    "mixed_rope_tables",
    "mixed_rope_frequencies",
    "alibi_slopes",
    "alibi_bias",
    "t5_relative_buckets",
    "t5_relative_bias",
]
