"""What a config says each layer's rotation is: its settings, its frequencies at any length, where to probe it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from arrayrope._config_keys import Settings
from arrayrope._config_layers import layer_count
from arrayrope._config_read import text_config
from arrayrope.config import TransformersConfig, load_config, rope_frequencies_from_config, settings
from arrayrope.encodings.mrope import pair_axes
from arrayrope.frequencies import RopeFrequencies
from arrayrope.scaling import ROPE_TYPES, rope_type

#: Consecutive positions probed in one call.
BLOCK = 8


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer of the config: its settings (``settings.nope``: no rotation) and its index."""

    index: int
    settings: Settings
    #: shared by the layers of one config: layers of the same settings compute each answer once
    cache: dict[Any, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def frequencies(self, config: Mapping[str, Any], seq_len: int) -> RopeFrequencies:
        """The frequencies transformers uses for a call whose longest sequence is ``seq_len``."""
        key = ("frequencies", repr(self.settings), seq_len)
        if key not in self.cache:
            self.cache[key] = rope_frequencies_from_config(config, seq_len=seq_len, layer_idx=self.index)
        found: RopeFrequencies = self.cache[key]
        return found

    def matrices(self, config: Mapping[str, Any], positions: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """``(S, D, D)``: the rotation the config gives at each of ``positions`` (one call), in float64; M-RoPE
        positions ``(axes, S)`` turn each pair by its axis's position."""
        key = ("matrices", repr(self.settings), positions.tobytes(), positions.shape)
        if key not in self.cache:
            freqs = self.frequencies(config, int(positions.max()) + 1)
            axes = self.pair_axes(freqs.rotary_dim // 2) if positions.ndim == 2 else None
            self.cache[key] = rotation_matrices(freqs, positions, self.layout, self.settings.rotary_features, axes)
        found: npt.NDArray[np.float64] = self.cache[key]
        return found

    def pair_axes(self, pairs: int) -> npt.NDArray[np.int64] | None:
        """The M-RoPE axis whose position turns each pair (``mrope_section`` and its interleaving), else None."""
        if self.settings.mrope is None:
            return None
        sections, interleaved = self.settings.mrope
        axes: npt.NDArray[np.int64] = pair_axes(sections, interleaved, pairs)
        return axes

    @property
    def layout(self) -> str:
        return self.settings.layout or "half"


def rotation_matrices(
    freqs: RopeFrequencies,
    positions: npt.NDArray[np.int64],
    layout: str,
    features: str = "leading",
    axes: npt.NDArray[np.int64] | None = None,
) -> npt.NDArray[np.float64]:
    """``M[s][:, j]``: what the rotation of ``freqs`` makes of unit vector ``j`` at ``positions[s]``, in float64;
    with M-RoPE positions ``(axes, S)``, pair ``i`` at ``positions[axes[i], s]`` (every axis at once without
    ``axes``: refused)."""
    d, r = freqs.head_dim, freqs.rotary_dim
    inv = np.asarray(freqs.inv_freq, np.float64)[: r // 2]
    if positions.ndim == 2:
        if axes is None:
            raise ValueError("positions of several axes need each pair's axis")
        angle = np.asarray(positions, np.float64)[axes, :].T * inv[None, :]
    else:
        angle = np.asarray(positions, np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(angle) * freqs.attention_factor, np.sin(angle) * freqs.attention_factor
    first, second = pair_features(d, r, layout, features)
    out = np.broadcast_to(np.eye(d), (positions.shape[-1], d, d)).copy()
    out[:, first, first] = cos
    out[:, second, second] = cos
    out[:, second, first] = sin
    out[:, first, second] = -sin
    return out


def pair_features(
    head_dim: int, rotary_dim: int, layout: str, features: str
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The two features of each rotary pair, in pair order: half-split ``(i, i + r/2)`` or interleaved
    ``(2i, 2i + 1)``, from the leading or the trailing end of the head."""
    half = rotary_dim // 2
    start = 0 if features == "leading" else head_dim - rotary_dim
    first = start + (np.arange(half) if layout == "half" else 2 * np.arange(half))
    return first, first + (half if layout == "half" else 1)


@dataclasses.dataclass(frozen=True)
class Expected:
    """Every layer of a config, and the positions where its rotations are compared."""

    config: Mapping[str, Any]
    layers: tuple[Layer, ...]
    model_type: str | None
    where: str

    @property
    def rope(self) -> tuple[Layer, ...]:
        return tuple(layer for layer in self.layers if not layer.settings.nope)

    def blocks(self, rows: int | None) -> list[tuple[str, npt.NDArray[np.int64]]]:
        """``(what, positions)`` probed, each one call: near 0, each side of the length where the frequencies
        change, the end of ``max_position_embeddings``, of the context a length-dependent type implies and of the
        model's own ``rows`` of stored tables. A type whose frequencies follow the call's length is also probed
        near 0 in a call that reaches the end of its context (positions ``0 .. BLOCK - 2`` and the last one), where
        transformers turns every position by the frequencies of that length."""
        s = self.rope[0].settings
        out: list[tuple[str, npt.NDArray[np.int64]]] = []

        def block(what: str, start: int) -> None:
            out.append((what, np.arange(max(start, 0), max(start, 0) + BLOCK, dtype=np.int64)))

        block("near 0", 0)
        context = length_context(s)
        longest = s.max_position_embeddings
        if context is not None:
            changes, reach, said = context
            call = np.array([*range(BLOCK - 1), reach - 1], np.int64)
            out.append((f"near 0, in a call of the {reach} positions of {said}", call))
            block(f"below {_changes_at(s)}", changes - BLOCK)
            block(f"past {_changes_at(s)}", changes)
            if longest is not None and longest != reach:
                block("end of max_position_embeddings", longest - BLOCK)
            block(f"end of the {reach} positions of {said}", reach - BLOCK)
        else:
            original = _original(s)
            if original is not None and (longest is None or original < longest):
                block("below original_max_position_embeddings", original - BLOCK)
                block("past original_max_position_embeddings", original)
            if longest is not None:
                block("end of max_position_embeddings", longest - BLOCK)
        if rows is not None and rows != longest and (context is None or rows < context[1]):
            block("end of the model's tables", rows - BLOCK)
        seen: set[bytes] = set()
        blocks = []
        for what, positions in out:
            if positions.tobytes() not in seen:
                seen.add(positions.tobytes())
                blocks.append((what, positions))
        return blocks


def length_context(s: Settings) -> tuple[int, int, str] | None:
    """For a rope type whose frequencies follow the call's length: ``(changes, reach, said)``, the length past which
    they change and the end of the context the config implies, with how to say that end; None for fixed ones and
    for those that never change within the context. A type that reads ``original_max_position_embeddings``
    (LongRoPE) changes past it, up to ``max_position_embeddings``; one that does not (dynamic NTK) changes past
    ``max_position_embeddings``, which its ``factor`` extends."""
    kind = ROPE_TYPES.get(kind_of(s.scaling))
    longest = s.max_position_embeddings
    if kind is None or kind.length is None or s.scaling is None or longest is None:
        return None
    if kind.reads_original_length:
        original = _original(s) or longest
        return (original, longest, f"max_position_embeddings {longest}") if longest > original else None
    factor = float(s.scaling.get("factor", 1.0) or 1.0)
    reach = max(round(factor * longest), longest + BLOCK)
    return longest, reach, f"{kind.name} factor {factor:g} over max_position_embeddings {longest}"


def kind_of(scaling: Mapping[str, Any] | None) -> str:
    """The registry's name of a scaling dict's type (an alias such as ``"su"`` gives the type it names)."""
    return rope_type(scaling).name if scaling else "default"


def _changes_at(s: Settings) -> str:
    return (
        "original_max_position_embeddings"
        if ROPE_TYPES[kind_of(s.scaling)].reads_original_length and _original(s) is not None
        else "max_position_embeddings"
    )


def _original(s: Settings) -> int | None:
    scaling = s.scaling or {}
    value = scaling.get("original_max_position_embeddings")
    return int(value) if value is not None else None


def expected(config: Mapping[str, Any] | str | os.PathLike[str] | TransformersConfig) -> Expected:
    """Every layer's rotation as the config describes it (ValueError naming the config where it has no RoPE)."""
    cfg = load_config(config)
    where = f"config file {os.fspath(config)!r}" if isinstance(config, (str, os.PathLike)) else "config"
    text, text_where, fam = text_config(cfg, where)
    stated = any(text.get(k) is not None for k in ("rope_theta", "rope_scaling", "rope_parameters"))
    if fam is None and not stated:
        raise ValueError(
            f"{text_where}: no rope_theta, rope_scaling or rope_parameters, and model type "
            f"{text.get('model_type')!r} is no transformers family with RoPE: the config describes no rotary "
            "embedding to audit against"
        )
    if fam is not None and fam.layout is None and not fam.refused and not fam.out_of_scope:
        raise ValueError(
            f"{text_where}: model type {text.get('model_type')!r} uses no rotary embedding in transformers; "
            "there is nothing to audit"
        )
    layers_count = layer_count(text, fam, text_where)
    if layers_count > 4096:
        raise ValueError(f"{text_where}: num_hidden_layers={layers_count} is not a model's layer count")
    cache: dict[Any, Any] = {}
    layers = tuple(Layer(i, settings(cfg, layer_idx=i), cache) for i in range(layers_count))
    if not any(not layer.settings.nope for layer in layers):
        raise ValueError(f"{text_where}: no layer of this config uses RoPE; there is nothing to audit")
    return Expected(cfg, layers, text.get("model_type"), where)
