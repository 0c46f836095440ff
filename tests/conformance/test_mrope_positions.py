"""Multimodal RoPE position ids: :func:`arrayrope.mrope_positions` against transformers' ``get_rope_index``.

For every family :func:`arrayrope.mrope_positions` covers, the model class's own ``get_rope_index`` runs on
an instance of the class made from the family's config class without its ``__init__`` (no layers, no
weights: ``get_rope_index`` reads only the config), given token rows laid out as the family's processor
lays out text, images and videos, with ``mm_token_type_ids`` made by the processor class's own
``create_mm_token_type_ids``. Position ids and deltas must be equal, element for element.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
from typing import Any

import numpy as np
import pytest

import arrayrope

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")
transformers.logging.set_verbosity_error()

#: Token ids of the tests (a vocabulary of 64): text is 1..39, 0 pads.
PAD, IMAGE, VIDEO, START, END = 0, 60, 61, 62, 63
IMAGE_START, IMAGE_END, VIDEO_START, VIDEO_END = 56, 57, 58, 59
MERGE = 2
TOKENS_PER_SECOND = 2
TEMPORAL_MERGE = 2
QWEN_TOKENS = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
GLM_TOKENS = dict(
    image_token_id=IMAGE,
    video_token_id=VIDEO,
    image_start_token_id=IMAGE_START,
    image_end_token_id=IMAGE_END,
    video_start_token_id=VIDEO_START,
    video_end_token_id=VIDEO_END,
)
VISION = dict(spatial_merge_size=MERGE)


@dataclasses.dataclass(frozen=True)
class Family:
    model: str
    processor: str
    vision: dict[str, Any] = dataclasses.field(default_factory=lambda: VISION)
    tokens: dict[str, int] = dataclasses.field(default_factory=lambda: QWEN_TOKENS)
    glm: bool = False  # frames as <image_start> images <image_end> timestamp inside <video_start> ... <video_end>
    frames: bool = False  # each video frame is a block of its own, after a timestamp
    videos: bool = True  # the processor marks video tokens
    temporal: int = 1  # a video's t is divided by this (vision_config.temporal_merge_size)
    row_ends: bool = False  # each row of a merged grid ends with one more token
    image_ends: bool = False  # an image's run holds one more image token at each end
    text: dict[str, Any] = dataclasses.field(default_factory=dict)  # text_config, where it matters


def qwen3(model: str, processor: str = "Qwen3VLProcessor") -> Family:
    return Family(model, processor, frames=True)


def glm(model: str, processor: str = "Glm4vProcessor") -> Family:
    return Family(model, processor, tokens=GLM_TOKENS, glm=True, frames=True)


FAMILIES = {
    "qwen2_vl": Family("Qwen2VLModel", "Qwen2VLProcessor"),
    "qwen2_5_vl": Family(
        "Qwen2_5_VLModel", "Qwen2_5_VLProcessor", vision=dict(VISION, tokens_per_second=TOKENS_PER_SECOND)
    ),
    "qwen3_vl": qwen3("Qwen3VLModel"),
    "qwen3_vl_moe": qwen3("Qwen3VLMoeModel"),
    "qwen3_5": qwen3("Qwen3_5Model"),
    "qwen3_5_moe": qwen3("Qwen3_5MoeModel"),
    "qwen4_exp": qwen3("Qwen4ExpModel"),
    "cosmos3_edge": qwen3("Cosmos3EdgeModel", "Cosmos3EdgeProcessor"),
    "cosmos3_omni": qwen3("Cosmos3OmniModel"),
    "cohere_compass": qwen3("CohereCompassModel", "CohereCompassProcessor"),
    "glm4v": glm("Glm4vModel"),
    "glm4v_moe": glm("Glm4vMoeModel"),
    "glm46v": glm("Glm46VModel", "Glm46VProcessor"),
    "glm_ocr": glm("GlmOcrModel"),
    "paddleocr_vl": Family("PaddleOCRVLModel", "PaddleOCRVLProcessor", videos=False),
    "ernie4_5_vl_moe": Family(
        "Ernie4_5_VLMoeModel",
        "Ernie4_5_VLMoeProcessor",
        vision=dict(VISION, temporal_merge_size=TEMPORAL_MERGE),
        tokens=GLM_TOKENS,
        temporal=TEMPORAL_MERGE,
    ),
    "hy_v4_vl": Family(
        "HYV4VLModel", "HYV4VLProcessor", tokens=dict(image_token_id=IMAGE, video_token_id=VIDEO), row_ends=True
    ),
    "hunyuan_vl": Family(
        "HunYuanVLModel",
        "HunYuanVLProcessor",
        tokens=dict(image_token_id=IMAGE),
        videos=False,
        row_ends=True,
        image_ends=True,
        text=dict(rope_parameters=dict(rope_type="default", rope_theta=1e4, mrope_section=[16, 16, 16, 16])),
    ),
}
#: Families whose model computes the next positions from the deltas in ``compute_3d_position_ids`` (HunYuan-VL's
#: leaves that to ``generate``, which adds the deltas to its text positions likewise)
DECODE_FROM_DELTAS = [name for name in FAMILIES if name != "hunyuan_vl"]


@functools.cache
def model(name: str) -> Any:
    """The family's model class, made without its ``__init__``: only its config, which ``get_rope_index`` reads."""
    fam = FAMILIES[name]
    text = {"text_config": fam.text} if fam.text else {}
    cfg = transformers.CONFIG_MAPPING[name](vision_config=fam.vision, **text, **fam.tokens)
    cls = getattr(transformers, fam.model)
    net = cls.__new__(cls)
    torch.nn.Module.__init__(net)
    net.config = cfg
    net.rope_deltas = None
    return net


def block(name: str, kind: str, grid: tuple[int, int, int], rng: np.random.Generator) -> list[int]:
    """The tokens of one image or video as the family's processor lays them out (timestamps as text)."""
    fam = FAMILIES[name]
    t, h, w = grid
    per_frame = (h // MERGE) * (w // MERGE + fam.row_ends)
    if kind == "image":
        tokens = t * per_frame + 2 * fam.image_ends
        return [IMAGE_START if fam.glm else START, *[IMAGE] * tokens, IMAGE_END if fam.glm else END]
    if fam.glm:
        frames = [tok for _ in range(t) for tok in [IMAGE_START, *[IMAGE] * per_frame, IMAGE_END, *text(rng, 1)]]
        return [VIDEO_START, *frames, VIDEO_END]
    if fam.frames:
        return [tok for _ in range(t) for tok in [*text(rng, 3), START, *[VIDEO] * per_frame, END]]
    return [START, *[VIDEO] * (t // fam.temporal * per_frame), END]


def text(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(1, 40, size=n).tolist()


def layout(name: str, segments: list[tuple[str, Any]], rng: np.random.Generator) -> tuple[list[int], list, list]:
    """One row of tokens from segments ``("text", n)``, ``("image", (t, h, w))``, ``("video", (t, h, w))``."""
    row: list[int] = []
    images: list[list[int]] = []
    videos: list[list[int]] = []
    for kind, arg in segments:
        if kind == "text":
            row += text(rng, arg)
        else:
            if kind == "video":  # t counts patches before the temporal merge
                arg = (arg[0] * FAMILIES[name].temporal, *arg[1:])
            row += block(name, kind, arg, rng)
            (images if kind == "image" else videos).append(list(arg))
    return row, images, videos


def batch(name: str, rows: list[list[tuple[str, Any]]], seed: int = 0, side: str = "left") -> dict[str, Any]:
    """A padded batch of rows, their grids in order, and its mask: what a processor returns."""
    rng = np.random.default_rng(seed)
    built = [layout(name, segments, rng) for segments in rows]
    width = max(len(r) for r, _, _ in built)
    ids = np.full((len(rows), width), PAD, dtype=np.int64)
    mask = np.zeros_like(ids)
    for b, (row, _, _) in enumerate(built):
        where = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[b, where] = row
        mask[b, where] = 1
    images = [g for _, im, _ in built for g in im]
    videos = [g for _, _, vi in built for g in vi] if FAMILIES[name].videos else []  # else video tokens are text
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "image_grid_thw": np.array(images, dtype=np.int64).reshape(-1, 3) if images else None,
        "video_grid_thw": np.array(videos, dtype=np.int64).reshape(-1, 3) if videos else None,
    }


def token_types(name: str, ids: np.ndarray) -> list[list[int]]:
    """``mm_token_type_ids`` by the processor class's own method, on an instance made without its ``__init__``
    that holds the token ids its ``__init__`` would set."""
    fam = FAMILIES[name]
    cls = getattr(transformers, fam.processor)
    processor = cls.__new__(cls)
    processor.image_token_id = IMAGE
    if fam.videos:
        processor.video_token_id = VIDEO
    processor.video_start_id, processor.video_end_id = VIDEO_START, VIDEO_END  # GLM's
    out: list[list[int]] = cls.create_mm_token_type_ids(processor, ids.tolist())
    return out


def transformers_ids(name: str, inputs: dict[str, Any], seconds: Any = None) -> tuple[np.ndarray, np.ndarray]:
    tensors = {k: None if v is None else torch.from_numpy(v) for k, v in inputs.items()}
    extra = {} if seconds is None else {"second_per_grid_ts": seconds}
    with torch.no_grad():
        pos, deltas = model(name).get_rope_index(
            mm_token_type_ids=torch.tensor(token_types(name, inputs["input_ids"])), **tensors, **extra
        )
    return pos.numpy(), deltas.numpy()


def check(name: str, inputs: dict[str, Any], seconds: Any = None, *, config: Any = None) -> None:
    expected_pos, expected_deltas = transformers_ids(name, inputs, seconds)
    pos, deltas = arrayrope.mrope_positions(
        **inputs, config=model(name).config if config is None else config, second_per_grid_ts=seconds
    )
    assert isinstance(pos, np.ndarray) and pos.dtype == np.int64 and pos.shape == expected_pos.shape
    np.testing.assert_array_equal(pos, expected_pos)
    assert deltas.dtype == np.int64 and deltas.shape == expected_deltas.shape
    np.testing.assert_array_equal(deltas, expected_deltas)


CASES: dict[str, list[list[tuple[str, Any]]]] = {
    "text": [[("text", 9)]],
    "image": [[("text", 3), ("image", (1, 4, 6)), ("text", 4)]],
    "two images": [[("text", 2), ("image", (1, 4, 6)), ("text", 3), ("image", (1, 8, 2)), ("text", 2)]],
    "image first and last": [[("image", (1, 2, 4)), ("text", 3), ("image", (1, 6, 6))]],
    "video": [[("text", 2), ("video", (3, 4, 4)), ("text", 3)]],
    "image and video": [[("text", 2), ("image", (1, 4, 4)), ("text", 1), ("video", (2, 2, 6)), ("text", 2)]],
    "two videos": [[("text", 1), ("video", (4, 2, 2)), ("text", 2), ("video", (1, 4, 2)), ("text", 1)]],
    "left-padded batch": [
        [("text", 2), ("image", (1, 4, 6)), ("text", 3)],
        [("text", 5), ("video", (2, 2, 4)), ("text", 2), ("image", (1, 2, 2)), ("text", 1)],
    ],
    "batch of text and images": [[("text", 4)], [("text", 1), ("image", (1, 4, 2)), ("text", 1)], [("text", 7)]],
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", list(FAMILIES))
def test_equal_to_get_rope_index(name, case):
    check(name, batch(name, CASES[case]))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_right_padding_and_no_mask(name):
    rows = CASES["left-padded batch"]
    check(name, batch(name, rows, side="right"))
    inputs = batch(name, rows[1:])
    check(name, dict(inputs, attention_mask=None))


@pytest.mark.parametrize(
    "seconds",
    [
        [0.5],
        [2 / 3],
        [1.0 / 3.0],
        [1.7],
        np.array([2 / 3], dtype=np.float32),
        np.array([0.1], dtype=np.float64),
        np.array([3]),
    ],
    ids=repr,
)
def test_qwen2_5_vl_seconds_per_grid(seconds):
    inputs = batch("qwen2_5_vl", [[("text", 2), ("video", (5, 2, 4)), ("text", 2)]])
    check("qwen2_5_vl", inputs, seconds=torch.from_numpy(seconds) if isinstance(seconds, np.ndarray) else seconds)
    if isinstance(seconds, np.ndarray):  # a NumPy array computes as the tensor of its dtype does
        expected = transformers_ids("qwen2_5_vl", inputs, torch.from_numpy(seconds))
        got = arrayrope.mrope_positions(**inputs, config=model("qwen2_5_vl").config, second_per_grid_ts=seconds)
        np.testing.assert_array_equal(got[0], expected[0])


def test_qwen2_5_vl_time_steps_in_the_dtype_torch_computes_in():
    """25 * (2 * 0.58) is 29 in float32 but 28.999... in float64: truncated, the dtype shows."""
    inputs = batch("qwen2_5_vl", [[("text", 1), ("video", (26, 2, 2)), ("text", 1)]])
    found = {}
    for seconds in ([0.58], torch.tensor([0.58]), torch.tensor([0.58], dtype=torch.float64)):
        check("qwen2_5_vl", inputs, seconds=seconds)
        found[str(getattr(seconds, "dtype", "list"))] = transformers_ids("qwen2_5_vl", inputs, seconds)[0]
    assert found["list"][0, 0, -3] == found["torch.float32"][0, 0, -3] == 2 + 29  # the last frame, from 2
    assert found["torch.float64"][0, 0, -3] == 2 + 28


def test_qwen2_5_vl_seconds_per_video_across_the_batch():
    inputs = batch(
        "qwen2_5_vl",
        [
            [("text", 2), ("video", (3, 2, 2)), ("text", 1), ("image", (1, 2, 2)), ("video", (2, 2, 4))],
            [("video", (4, 4, 2)), ("text", 3)],
        ],
    )
    check("qwen2_5_vl", inputs, seconds=torch.tensor([0.5, 2.0, 1 / 3]))


def random_rows(name: str, rng: np.random.Generator) -> list[list[tuple[str, Any]]]:
    rows = []
    for _ in range(int(rng.integers(1, 4))):
        segments: list[tuple[str, Any]] = []
        for _ in range(int(rng.integers(1, 6))):
            kind = str(rng.choice(["text", "text", "image", "video"]))
            if kind == "text":
                segments.append(("text", int(rng.integers(1, 6))))
            else:
                t = 1 if kind == "image" else int(rng.integers(1, 5))
                h, w = (int(MERGE * rng.integers(1, 5)) for _ in range(2))
                segments.append((kind, (t, h, w)))
        rows.append(segments)
    return rows


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("name", list(FAMILIES))
def test_random_mixes(name, seed):
    rng = np.random.default_rng([seed, len(name)])
    inputs = batch(name, random_rows(name, rng), seed=seed, side=str(rng.choice(["left", "right"])))
    seconds = None
    if name == "qwen2_5_vl" and inputs["video_grid_thw"] is not None:
        seconds = torch.tensor(rng.uniform(0.1, 2.0, size=len(inputs["video_grid_thw"])), dtype=torch.float32)
    check(name, inputs, seconds)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_config_as_dict_object_or_file(name, tmp_path):
    inputs = batch(name, CASES["image and video"])
    check(name, inputs, config=model(name).config.to_dict())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(model(name).config.to_dict()))
    check(name, inputs, config=path)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_given_mm_token_type_ids(name):
    inputs = batch(name, CASES["left-padded batch"])
    expected = transformers_ids(name, inputs)
    kinds = np.array(token_types(name, inputs["input_ids"]))
    got = arrayrope.mrope_positions(**inputs, config=model(name).config, mm_token_type_ids=kinds)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


@pytest.mark.parametrize("name", ["qwen2_5_vl", "glm4v"])
def test_tensors_in_tensors_out(name):
    inputs = batch(name, CASES["left-padded batch"])
    expected_pos, expected_deltas = transformers_ids(name, inputs)
    tensors = {k: None if v is None else torch.from_numpy(v) for k, v in inputs.items()}
    pos, deltas = arrayrope.mrope_positions(**tensors, config=model(name).config)
    assert isinstance(pos, torch.Tensor) and pos.dtype == torch.int64 and pos.device == torch.device("cpu")
    assert isinstance(deltas, torch.Tensor) and deltas.dtype == torch.int64
    np.testing.assert_array_equal(pos.numpy(), expected_pos)
    np.testing.assert_array_equal(deltas.numpy(), expected_deltas)


@pytest.mark.parametrize("name", DECODE_FROM_DELTAS)
def test_decoding_continues_from_the_delta(name):
    """The model's own position for the next token while decoding (``compute_3d_position_ids`` with a
    cache and the mask grown by one) is the row's token count (padding not counted) plus its delta: one
    past the row's largest position."""
    inputs = batch(name, CASES["left-padded batch"])
    pos, deltas = arrayrope.mrope_positions(**inputs, config=model(name).config)
    net = model(name)
    net.rope_deltas = torch.from_numpy(deltas)
    mask = torch.from_numpy(np.pad(inputs["attention_mask"], ((0, 0), (0, 1)), constant_values=1))
    cache = types.SimpleNamespace(get_seq_length=lambda: inputs["input_ids"].shape[1])
    try:
        with torch.no_grad():
            grown = net.compute_3d_position_ids(
                input_ids=None,
                inputs_embeds=torch.zeros((2, mask.shape[1], 32)),
                image_grid_thw=None,
                video_grid_thw=None,
                attention_mask=mask,
                cache=cache,
            )
    finally:
        net.rope_deltas = None
    tokens = inputs["attention_mask"].sum(-1, keepdims=True)
    np.testing.assert_array_equal(grown[:, :, -1].numpy(), np.broadcast_to((tokens + deltas)[:, 0], (3, 2)))
    np.testing.assert_array_equal((tokens + deltas)[:, 0], pos.max(axis=(0, 2)) + 1)


def test_every_model_with_get_rope_index_is_covered_or_refused():
    """Each model type of transformers whose modeling defines ``get_rope_index`` is a family here, or one
    that ``mrope_positions`` refuses, naming what it does not support."""
    from pathlib import Path

    from arrayrope.encodings._mrope_families import FAMILIES as COVERED
    from arrayrope.encodings._mrope_families import UNSUPPORTED

    found = {
        path.parent.name
        for path in Path(transformers.models.__file__).parent.glob("*/modeling_*.py")
        if "def get_rope_index(" in path.read_text(encoding="utf-8")
    }
    assert found, "no modeling module of transformers defines get_rope_index"
    assert found <= set(COVERED) | set(UNSUPPORTED), sorted(found - set(COVERED) - set(UNSUPPORTED))
    assert set(FAMILIES) == set(COVERED)  # and every family covered is tested here against its model
    for name in sorted(found & set(UNSUPPORTED)):
        config = transformers.CONFIG_MAPPING[name]()
        with pytest.raises(ValueError, match=rf"model_type '{name}'.*not supported"):
            arrayrope.mrope_positions(np.ones((1, 4), dtype=np.int64), config=config)


HUNYUAN_CONFIGS = {  # as transformers nests them, and as older checkpoints keep them: flat, the axes as xdrope_section
    "3 axes": dict(
        text_config=dict(rope_parameters=dict(rope_type="default", rope_theta=1e4, mrope_section=[22, 21, 21]))
    ),
    "4 axes": dict(text_config=dict(rope_parameters=dict(rope_type="default", rope_theta=1e4, mrope_section=[16] * 4))),
    "flat": dict(rope_scaling=dict(type="xdrope", rope_theta=1e4, factor=1.0, xdrope_section=[16] * 4)),
}


@pytest.mark.parametrize("layout", list(HUNYUAN_CONFIGS))
def test_hunyuan_vl_axes_configs_and_images_without_their_end_tokens(layout):
    """HunYuan-VL has one axis per ``mrope_section`` entry; an image's run holds its ``h * (w + 1)`` tokens and
    two more (the processor's ``cat_extra_token``), or only its grid's. The plain dict of the config is read as
    transformers reads it."""
    plain = dict(HUNYUAN_CONFIGS[layout], model_type="hunyuan_vl", vision_config=VISION, image_token_id=IMAGE)
    cfg = transformers.HunYuanVLConfig(**{k: v for k, v in plain.items() if k != "model_type"})
    axes = len(cfg.text_config.rope_parameters["mrope_section"])
    net = model("hunyuan_vl")
    rows = [[("text", 2), ("image", (1, 4, 6)), ("text", 3), ("image", (1, 2, 2))], [("image", (1, 6, 2)), ("text", 4)]]
    inputs = batch("hunyuan_vl", rows)
    bare = inputs["input_ids"].copy()
    for b in range(len(bare)):  # the first and the last token of each image's run become text
        kinds = np.array(token_types("hunyuan_vl", bare[b : b + 1])[0])
        edges = np.flatnonzero(np.diff(np.concatenate([[0], kinds, [0]])) != 0)
        for start, end in zip(edges[::2], edges[1::2], strict=True):
            bare[b, start], bare[b, end - 1] = 7, 8
    for ids in (inputs["input_ids"], bare):
        case = dict(inputs, input_ids=ids)
        original, net.config = net.config, cfg
        try:
            expected = transformers_ids("hunyuan_vl", case)
        finally:
            net.config = original
        for config in (cfg, plain):
            pos, deltas = arrayrope.mrope_positions(**case, config=config)
            assert pos.shape == (axes, *ids.shape)
            np.testing.assert_array_equal(pos, expected[0])
            np.testing.assert_array_equal(deltas, expected[1])
