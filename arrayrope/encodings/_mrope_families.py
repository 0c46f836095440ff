"""What sets each family's M-RoPE position ids apart, and reading it from the model's config.

:func:`~arrayrope.mrope_positions` computes the algorithm once (:mod:`.mrope_positions`); a family is a
row of :data:`FAMILIES`: how its processor marks video tokens, whether a video is one grid or a grid
per frame, how its time steps are spaced, whether its grids carry a row-end token. Families whose
``get_rope_index`` is another algorithm are rows of :data:`UNSUPPORTED`, with what they do instead.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

from ..families import TRANSFORMERS_VERSION


@dataclasses.dataclass(frozen=True)
class Rules:
    """How one family's ``get_rope_index`` and its processor's ``mm_token_type_ids`` differ from Qwen2-VL's.

    Attributes
    ----------
    video_span : bool
        Video tokens are ``image_token_id`` tokens between ``video_start_token_id`` and
        ``video_end_token_id`` (GLM-4V); otherwise they are ``video_token_id`` tokens.
    frames : bool
        Each video frame is a run of tokens of its own, grid ``(1, h, w)``, the frames separated by
        timestamps in the text (Qwen3-VL, GLM-4V); otherwise a video is one run of grid ``(t, h, w)``.
    seconds : bool
        Temporal positions of a video step by ``vision_config.tokens_per_second * second_per_grid_ts``
        (Qwen2.5-VL); otherwise by 1.
    temporal_merge : bool
        A video's ``t`` is divided by ``vision_config.temporal_merge_size`` (ERNIE 4.5 VL); images' is not.
    row_ends : bool
        Every row of a merged grid ends with one more token (a newline), ``h * (w + 1)`` tokens a frame;
        frame ``k`` is shifted by ``k * max(h, w + 1)`` on every axis, and the text after the grid resumes
        one past its largest position (HY-V4-VL).
    videos : bool
        The processor marks ``video_token_id`` tokens as video; False where it has no video (PaddleOCR-VL,
        HunYuan-VL), and ``video_token_id`` is not read.
    text_axes : bool
        Every token keeps its index in the row on every axis, one axis per entry of
        ``text_config.rope_parameters.mrope_section``; an image's tokens, ``h * (w + 1)`` (a row-end token
        on each row) and one more at each end if the run holds them, take its column, row and index in the
        batch on the last three axes (HunYuan-VL). Videos are text.
    """

    video_span: bool = False
    frames: bool = False
    seconds: bool = False
    temporal_merge: bool = False
    row_ends: bool = False
    videos: bool = True
    text_axes: bool = False


@dataclasses.dataclass(frozen=True)
class Config:
    """What :func:`~arrayrope.mrope_positions` reads from a model's config."""

    rules: Rules
    tokens: dict[str, int]  # the token ids the processor marks by
    merge: int  # vision_config.spatial_merge_size
    tokens_per_second: Any = None  # vision_config.tokens_per_second (Qwen2.5-VL)
    temporal: int = 1  # vision_config.temporal_merge_size (ERNIE 4.5 VL)
    axes: int = 3  # the number of position axes


_QWEN3 = Rules(frames=True)
_GLM4V = Rules(video_span=True, frames=True)

#: The model types whose ``get_rope_index`` (transformers :data:`~arrayrope.families.TRANSFORMERS_VERSION`)
#: :func:`~arrayrope.mrope_positions` computes, and what sets them apart. Model types with Qwen3-VL's rules
#: use its processor (Qwen3VLProcessor, or one that marks ``image_token_id`` and ``video_token_id`` as it
#: does); GLM-OCR uses GLM-4V's.
FAMILIES: dict[str, Rules] = {
    "qwen2_vl": Rules(),
    "qwen2_5_vl": Rules(seconds=True),
    "qwen3_vl": _QWEN3,
    "qwen3_vl_moe": _QWEN3,
    "qwen3_5": _QWEN3,
    "qwen3_5_moe": _QWEN3,
    "qwen4_exp": _QWEN3,
    "cosmos3_edge": _QWEN3,
    "cosmos3_omni": _QWEN3,
    "cohere_compass": _QWEN3,
    "glm4v": _GLM4V,
    "glm4v_moe": _GLM4V,
    "glm46v": _GLM4V,
    "glm_ocr": _GLM4V,
    "paddleocr_vl": Rules(videos=False),
    "ernie4_5_vl_moe": Rules(temporal_merge=True),
    "hy_v4_vl": Rules(row_ends=True),
    "hunyuan_vl": Rules(videos=False, text_axes=True),
}

#: Model types whose position ids are another computation, and what it is.
UNSUPPORTED: dict[str, str] = {
    "qwen2_5_omni": "audio tokens, and videos interleaved with their audio in chunks (use_audio_in_video)",
    "qwen3_omni_moe": "audio tokens, and videos interleaved with their audio (use_audio_in_video)",
    "minicpmv4_7": "thumbnails and slices of an image placed on a shared canvas (target_sizes)",
    "glm_image": "grids of the images being generated, split by images_per_sample",
}
UNSUPPORTED["qwen2_5_omni_thinker"] = UNSUPPORTED["qwen2_5_omni"]  # the thinker's own config
UNSUPPORTED["qwen3_omni_moe_thinker"] = UNSUPPORTED["qwen3_omni_moe"]


def read_config(config: Any) -> Config:
    """The family's rules and the facts of its config that the positions depend on."""
    from ..config import load_config

    config = load_config(config)
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in UNSUPPORTED:
        raise ValueError(
            f"config has model_type {model_type!r}, whose get_rope_index mrope_positions does not compute: "
            f"{UNSUPPORTED[model_type]} are not supported; use the model's own get_rope_index"
        )
    rules = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if rules is None:
        raise ValueError(
            f"config has model_type {model_type!r}; mrope_positions knows the multimodal RoPE positions of "
            f"{sorted(FAMILIES)} (transformers {TRANSFORMERS_VERSION}): pass the model's whole config, not its "
            "text_config or vision_config"
        )
    names = ["image_token_id"]
    if rules.video_span:
        names += ["video_start_token_id", "video_end_token_id"]
    elif rules.videos:
        names.append("video_token_id")
    tokens = {n: _config_int(config, (n,), minimum=0) for n in names}
    merge = _config_int(config, ("vision_config", "spatial_merge_size"), minimum=1)
    tps = None
    if rules.seconds:
        tps = _config_value(config, ("vision_config", "tokens_per_second"))
        if isinstance(tps, bool) or not isinstance(tps, numbers.Real):
            raise TypeError(f"config['vision_config']['tokens_per_second'] must be a number, got {tps!r}")
    temporal = 1
    if rules.temporal_merge:
        temporal = _config_int(config, ("vision_config", "temporal_merge_size"), minimum=1)
    axes = 3
    if rules.text_axes:
        axes = _axes(config)
    return Config(rules, tokens, merge, tps, temporal, axes)


def _axes(config: Mapping[str, Any]) -> int:
    """HunYuan-VL: the number of entries of ``mrope_section`` (``xdrope_section`` in older checkpoints), at least 3,
    in ``text_config``'s ``rope_parameters`` or ``rope_scaling``, or at the top of a flat (older) config."""
    text = config.get("text_config")
    section = None
    for node in (text, config) if isinstance(text, Mapping) else (config,):
        for key in ("rope_parameters", "rope_scaling"):
            rope = node.get(key)
            if isinstance(rope, Mapping) and section is None:
                section = rope.get("mrope_section", rope.get("xdrope_section"))
    if not isinstance(section, (list, tuple)) or len(section) < 3:
        raise ValueError(
            f"config['text_config']['rope_parameters']['mrope_section'] must list at least 3 sections for "
            f"model_type {config.get('model_type')!r} (one per position axis), got {section!r}"
        )
    return len(section)


def _config_value(config: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    where = "config" + "".join(f"[{k!r}]" for k in path)
    node: Any = config
    for key in path:
        if not isinstance(node, Mapping) or key not in node or node[key] is None:
            raise ValueError(
                f"{where} is missing; mrope_positions reads it for model_type {config.get('model_type')!r}: "
                "pass the model's config as transformers or config.json gives it"
            )
        node = node[key]
    return node


def _config_int(config: Mapping[str, Any], path: tuple[str, ...], *, minimum: int) -> int:
    value = _config_value(config, path)
    where = "config" + "".join(f"[{k!r}]" for k in path)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{where} must be an int >= {minimum}, got {value}")
    return int(value)
