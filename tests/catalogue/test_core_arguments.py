"""The catalogue, core: every argument of the encodings and their stages, with bad values (see catalogue_cases)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from catalogue_cases import (
    BOOL,
    COS,
    DEVICE,
    DTYPE,
    EVEN,
    F8,
    FREQS,
    NONNEG,
    POS_INT,
    POS_REAL,
    POSITIONS,
    REAL,
    ROPE,
    SIN,
    TABLE,
    XP,
    Specs,
    arrays,
    check_good_calls,
    check_refusal,
    choice,
    f32,
    refusal_params,
)

import arrayrope as ar

NO_NONE = [p for p in POSITIONS if p is not None]

SPECS: Specs = {
    "rope_frequencies": (
        ar.rope_frequencies,
        dict(head_dim=8),
        dict(
            head_dim=EVEN,
            base=POS_REAL[:-1],
            rotary_dim=[*EVEN, 10],
            scaling=["linear", 3, [1]],
            partial_rotary_factor=[math.nan, 0, 1.5, -0.5, "0.5", True, 1j],
            max_position_embeddings=POS_INT[:-1],
            seq_len=[-1, 1.5, "3", True],
        ),
    ),
    "RopeFrequencies": (
        ar.RopeFrequencies,
        dict(inv_freq=np.ones(2), head_dim=4, rotary_dim=4),
        dict(
            inv_freq=[np.ones(3), np.ones(2, complex), [np.nan, 1], "ab", None, np.ones((1, 2))],
            head_dim=EVEN,
            rotary_dim=[*EVEN, 8],
            attention_factor=POS_REAL,
            base=POS_REAL,
            rope_type=[3, None],
        ),
    ),
    "rope_tables": (
        ar.rope_tables,
        dict(freqs=F8, positions=3),
        dict(freqs=FREQS, positions=[*POSITIONS, -1], xp=XP, dtype=DTYPE, device=DEVICE, apply_attention_factor=BOOL),
    ),
    "apply_rotary": (
        ar.apply_rotary,
        dict(x=f32(3, 8), cos=COS, sin=SIN),
        dict(
            x=[*arrays((3, 8)), f32(3, 3), f32(8)],
            cos=[*arrays((3, 4)), COS[:, :1].repeat(5, 1), COS[:2]],
            sin=[*arrays((3, 4)), SIN[:2]],
            layout=choice("half"),
        ),
    ),
    "to_half_split": (
        ar.to_half_split,
        dict(x=f32(2, 8)),
        dict(x=[None, "x", 3, [1, 2], np.float32(1)], rotary_dim=[*EVEN, 10]),
    ),
    "to_interleaved": (ar.to_interleaved, dict(x=f32(2, 8)), dict(x=[None, "x", 3, f32(2, 7)], rotary_dim=[*EVEN, 10])),
    "permute_rotary_rows": (
        ar.permute_rotary_rows,
        dict(w=f32(16, 3), num_heads=2, head_dim=8),
        dict(
            w=[None, f32(15, 3), f32(16, 3, 1), "w"],
            num_heads=POS_INT,
            head_dim=[*POS_INT, 7],
            rotary_dim=[*EVEN, 10],
            to=choice("half"),
        ),
    ),
    "RotaryEmbedding": (
        ar.RotaryEmbedding,
        dict(head_dim=8),
        dict(
            head_dim=EVEN,
            base=POS_REAL,
            rotary_dim=[*EVEN, 10],
            max_position_embeddings=POS_INT[:-1],
            scaling=[
                "linear",
                3,
                {"rope_type": "linear"},
                {"rope_type": "nope"},
                {"rope_type": "dynamic", "factor": 2.0},
            ],
            layout=choice("half"),
            axes=choice("bhsd"),
            mrope_sections=[(1, 1), (2, 0, 2), 4, "ab", (True, 3), (1.0, 3), ()],
            mrope_interleaved=[*BOOL, True],
        ),
    ),
    "RotaryEmbedding.__call__": (
        ROPE,
        dict(q=f32(1, 2, 3, 8)),
        dict(
            q=[*arrays((1, 2, 3, 8)), f32(2, 3, 8), f32(1, 2, 3, 6)],
            k=[
                "k",
                3,
                np.ones((1, 2, 3, 8), np.int64),
                np.ones((1, 2, 3, 8), np.complex64),
                f32(1, 2, 4, 8),
                f32(2, 2, 3, 8),
                f32(1, 2, 3, 6),
                f32(2, 3, 8),
            ],
            positions=[*NO_NONE, np.arange(4), np.arange(6).reshape(2, 3)],
            offset=[
                -1,
                1.5,
                "3",
                True,
                None,
                np.array([1.5]),
                np.array([1, 2]),
                np.array(-1),
                np.array([-1]),
                2**70,
                np.array([2**63 - 1]),
            ],
            seq_len=[0, -1, 1.5, "3", True],
            return_freqs=BOOL,
        ),
    ),
    "rerotate": (
        ar.rerotate,
        dict(x=f32(3, 8), positions=3, from_freqs=F8, to_freqs=ar.rope_frequencies(8, base=5e2)),
        dict(
            x=[*arrays((3, 8)), f32(3, 6)],
            positions=[*POSITIONS, 5, np.arange(4)],
            from_freqs=[*FREQS, ar.rope_frequencies(16)],
            to_freqs=[*FREQS, ar.rope_frequencies(8, rotary_dim=4)],
            layout=choice("half"),
            apply_attention_factor=BOOL,
        ),
    ),
    "sinusoidal_embedding": (
        ar.sinusoidal_embedding,
        dict(positions=3, dim=8),
        dict(
            positions=POSITIONS,
            dim=EVEN,
            base=POS_REAL,
            layout=choice("interleaved"),
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "xpos_scales": (
        ar.xpos_scales,
        dict(freqs=F8, positions=3),
        dict(
            freqs=FREQS,
            positions=POSITIONS,
            scale_base=POS_REAL,
            gamma=POS_REAL,
            center=REAL,
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "xpos_tables": (
        ar.xpos_tables,
        dict(freqs=F8, positions=3),
        dict(
            freqs=FREQS,
            positions=POSITIONS,
            scale_base=POS_REAL,
            gamma=POS_REAL,
            center=REAL,
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
            apply_attention_factor=BOOL,
        ),
    ),
    "axial_rope_tables": (
        ar.axial_rope_tables,
        dict(positions=(2, 3), head_dim=8),
        dict(
            positions=[
                (0, 3),
                (-1, 2),
                "23",
                None,
                (),
                np.array([[np.nan, 1]]),
                np.ones((2, 2), complex),
                [(1, 2), (3,)],
            ],
            head_dim=EVEN,
            base=POS_REAL,
            axis_dims=[(4, 5), (3, 3), (4,), "44", (4.0, 4.0), (0, 8)],
            rotary_dim=[*EVEN, 10],
            train_grid=[(0, 3), (2,), (2.5, 3), "23"],
            num_prefix_tokens=NONNEG,
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "mrope_tables": (
        ar.mrope_tables,
        dict(freqs=ar.rope_frequencies(16), positions=np.zeros((3, 1, 4), np.int64), sections=(2, 3, 3)),
        dict(
            freqs=FREQS,
            positions=[np.zeros((2, 1, 4)), None, "p", np.full((3, 1, 4), np.nan), np.zeros((3, 1, 4), complex)],
            sections=[(2, 3), (2, 3, 4), (0, 4, 4), (2.0, 3, 3), "233", None, (-1, 5, 4)],
            interleaved=BOOL,
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "mixed_rope_frequencies": (
        ar.mixed_rope_frequencies,
        dict(head_dim=8, num_heads=2),
        dict(head_dim=[*EVEN, 6], num_heads=POS_INT, base=POS_REAL, seed=[-1, 1.5, "s", True]),
    ),
    "mixed_rope_tables": (
        ar.mixed_rope_tables,
        dict(freqs=ar.mixed_rope_frequencies(8, 2, seed=0), positions=(2, 3)),
        dict(
            freqs=[np.ones((3, 2, 4)), np.ones((2, 2, 4), int), None, "f", np.full((2, 2, 4), np.nan), np.ones((2, 4))],
            positions=[(0, 3), (-1, 2), "23", None, np.array([[np.nan, 1]])],
            num_prefix_tokens=NONNEG,
            xp=XP,
            dtype=DTYPE,
        ),
    ),
    "alibi_slopes": (ar.alibi_slopes, dict(num_heads=4), dict(num_heads=POS_INT, xp=XP, dtype=DTYPE, device=DEVICE)),
    "alibi_bias": (
        ar.alibi_bias,
        dict(num_heads=2, q_len=3, k_len=3),
        dict(
            num_heads=POS_INT,
            q_len=POS_INT,
            k_len=POS_INT,
            causal=BOOL,
            offset=[1.5, "1", True, math.nan, 2**70],
            xp=XP,
            dtype=DTYPE,
            device=DEVICE,
        ),
    ),
    "t5_relative_buckets": (
        ar.t5_relative_buckets,
        dict(relative_position=np.arange(-5, 5)),
        dict(
            relative_position=[None, "r", np.arange(3.0), np.array([True]), [1, 2]],
            bidirectional=BOOL,
            num_buckets=[*POS_INT, 1, 3, 2**20],
            max_distance=[*POS_INT, 2, 2**50],
        ),
    ),
    "t5_relative_bias": (
        ar.t5_relative_bias,
        dict(table=TABLE, q_len=2, k_len=3),
        dict(
            table=[None, "t", np.zeros(32), np.zeros((32, 2, 1)), np.zeros((1, 2))],
            q_len=POS_INT,
            k_len=POS_INT,
            bidirectional=BOOL,
            max_distance=[*POS_INT, 2**50],
            offset=[1.5, "1", True, 2**70],
        ),
    ),
}


@pytest.mark.parametrize("fn, good, param, value", list(refusal_params(SPECS)))
def test_a_bad_argument_is_refused_by_name(fn, good, param, value):
    check_refusal(fn, good, param, value)


def test_the_good_calls_succeed():
    check_good_calls(SPECS)
