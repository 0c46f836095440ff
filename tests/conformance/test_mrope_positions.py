"""Multimodal RoPE position ids: :func:`arrayrope.mrope_positions` against transformers' ``get_rope_index``.

For Qwen2-VL, Qwen2.5-VL, Qwen3-VL (and its MoE), GLM-4V (and its MoE) a model of one small layer is built
from its config (nothing downloaded, nothing run but ``get_rope_index``), and given token rows laid out as
the family's processor lays out text, images and videos, with ``mm_token_type_ids`` made by the processor
class's own ``create_mm_token_type_ids``. Position ids and deltas must be equal, element for element.
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

#: Token ids of the small models (a vocabulary of 64): text is 1..39, 0 pads.
PAD, IMAGE, VIDEO, START, END = 0, 60, 61, 62, 63
IMAGE_START, IMAGE_END, VIDEO_START, VIDEO_END = 56, 57, 58, 59
MERGE = 2
TOKENS_PER_SECOND = 2
TEXT = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    vocab_size=64,
    bos_token_id=None,
    eos_token_id=None,
)
ROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
VISION = dict(depth=1, hidden_size=32, out_hidden_size=32, intermediate_size=64, num_heads=2, spatial_merge_size=MERGE)
QWEN_TOKENS = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
GLM_TOKENS = dict(
    image_token_id=IMAGE,
    video_token_id=VIDEO,
    image_start_token_id=IMAGE_START,
    image_end_token_id=IMAGE_END,
    video_start_token_id=VIDEO_START,
    video_end_token_id=VIDEO_END,
)
MOE = dict(num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32, decoder_sparse_step=1)
GLM_MOE = dict(n_routed_experts=2, num_experts_per_tok=1, moe_intermediate_size=32, first_k_dense_replace=0, n_group=1,
               topk_group=1)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Family:
    model: str
    processor: str
    text: dict[str, Any]
    vision: dict[str, Any]
    tokens: dict[str, int]
    glm: bool = False  # frames as <image_start> images <image_end> timestamp inside <video_start> ... <video_end>
    frames: bool = False  # each video frame is a block of its own, after a timestamp


FAMILIES = {
    "qwen2_vl": Family(
        "Qwen2VLModel",
        "Qwen2VLProcessor",
        {},
        dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, spatial_merge_size=MERGE),
        QWEN_TOKENS,
    ),
    "qwen2_5_vl": Family(
        "Qwen2_5_VLModel",
        "Qwen2_5_VLProcessor",
        {},
        dict(VISION, tokens_per_second=TOKENS_PER_SECOND, fullatt_block_indexes=[0]),
        QWEN_TOKENS,
    ),
    "qwen3_vl": Family(
        "Qwen3VLModel",
        "Qwen3VLProcessor",
        {},
        dict(VISION, deepstack_visual_indexes=[0], num_position_embeddings=16),
        QWEN_TOKENS,
        frames=True,
    ),
    "qwen3_vl_moe": Family(
        "Qwen3VLMoeModel",
        "Qwen3VLProcessor",
        MOE,
        dict(VISION, deepstack_visual_indexes=[0], num_position_embeddings=16),
        QWEN_TOKENS,
        frames=True,
    ),
    "glm4v": Family("Glm4vModel", "Glm4vProcessor", {}, VISION, GLM_TOKENS, glm=True, frames=True),
    "glm4v_moe": Family("Glm4vMoeModel", "Glm4vProcessor", GLM_MOE, VISION, GLM_TOKENS, glm=True, frames=True),
}


@functools.cache
def model(name: str) -> Any:
    fam = FAMILIES[name]
    rope = dict(ROPE, mrope_interleaved=True) if name.startswith("qwen3") else dict(ROPE)
    if fam.glm:
        rope["partial_rotary_factor"] = 0.5
    cfg = transformers.CONFIG_MAPPING[name](
        text_config=dict(TEXT, **fam.text, rope_parameters=rope), vision_config=fam.vision, **fam.tokens
    )
    torch.manual_seed(0)
    return getattr(transformers, fam.model)(cfg).eval()


def block(name: str, kind: str, grid: tuple[int, int, int], rng: np.random.Generator) -> list[int]:
    """The tokens of one image or video as the family's processor lays them out (timestamps as text)."""
    fam = FAMILIES[name]
    t, h, w = grid
    per_frame = h * w // MERGE**2
    if kind == "image":
        return [IMAGE_START if fam.glm else START, *[IMAGE] * (t * per_frame), IMAGE_END if fam.glm else END]
    if fam.glm:
        frames = [tok for _ in range(t) for tok in [IMAGE_START, *[IMAGE] * per_frame, IMAGE_END, *text(rng, 1)]]
        return [VIDEO_START, *frames, VIDEO_END]
    if fam.frames:
        return [tok for _ in range(t) for tok in [*text(rng, 3), START, *[VIDEO] * per_frame, END]]
    return [START, *[VIDEO] * (t * per_frame), END]


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
    videos = [g for _, _, vi in built for g in vi]
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "image_grid_thw": np.array(images, dtype=np.int64).reshape(-1, 3) if images else None,
        "video_grid_thw": np.array(videos, dtype=np.int64).reshape(-1, 3) if videos else None,
    }


def token_types(name: str, ids: np.ndarray) -> list[list[int]]:
    """``mm_token_type_ids`` by the processor class's own method, on a stand-in for the processor."""
    cls = getattr(transformers, FAMILIES[name].processor)
    stand_in = types.SimpleNamespace(
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        image_token_ids=[IMAGE],
        video_token_ids=[VIDEO],
        audio_token_ids=[],
        video_start_id=VIDEO_START,
        video_end_id=VIDEO_END,
    )
    out: list[list[int]] = cls.create_mm_token_type_ids(stand_in, ids.tolist())
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


@pytest.mark.parametrize("name", list(FAMILIES))
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
