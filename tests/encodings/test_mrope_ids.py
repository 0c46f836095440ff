"""mrope_positions without transformers: published facts, namespaces and the errors.

Its equality with each family's ``get_rope_index`` is tested in ``tests/conformance/test_mrope_positions.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import arrayrope

IMG, V, VS, VE = 60, 61, 58, 59
QWEN = {"image_token_id": IMG, "video_token_id": V, "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2}}
GLM = {"image_token_id": IMG, "video_token_id": V, "video_start_token_id": VS, "video_end_token_id": VE,
       "vision_config": {"spatial_merge_size": 2}}  # fmt: skip
ERNIE = {"image_token_id": IMG, "video_token_id": V,
         "vision_config": {"spatial_merge_size": 2, "temporal_merge_size": 2}}  # fmt: skip
QWEN_LIKE = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "qwen4_exp",
             "cosmos3_edge", "cosmos3_omni", "cohere_compass", "paddleocr_vl", "hy_v4_vl")  # fmt: skip
CONFIGS = {
    **{name: dict(QWEN, model_type=name) for name in QWEN_LIKE},
    **{name: dict(GLM, model_type=name) for name in ("glm4v", "glm4v_moe", "glm46v", "glm_ocr")},
    "ernie4_5_vl_moe": dict(ERNIE, model_type="ernie4_5_vl_moe"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_text_only_is_arange_on_every_axis(name):
    """Qwen2-VL's paper: text tokens take the same position on the three axes, 0, 1, 2, ... (plain 1-D RoPE)."""
    ids = np.arange(1, 11)[None].repeat(2, 0)
    pos, deltas = arrayrope.mrope_positions(ids, config=CONFIGS[name])
    np.testing.assert_array_equal(pos, np.broadcast_to(np.arange(10), (3, 2, 10)))
    np.testing.assert_array_equal(deltas, np.zeros((2, 1)))
    mask = np.ones_like(ids)
    mask[1, :4] = 0  # left padding: the row's own text counts from 0, padding gets 0
    pos, deltas = arrayrope.mrope_positions(ids, config=CONFIGS[name], attention_mask=mask)
    np.testing.assert_array_equal(pos[:, 1], np.broadcast_to([0, 0, 0, 0, *range(6)], (3, 10)))
    np.testing.assert_array_equal(deltas, np.zeros((2, 1)))


def test_a_row_left_empty_by_the_mask():
    ids = np.array([[1, IMG, IMG, 2], [3, 4, 5, 6]])
    mask = np.array([[1, 1, 1, 1], [0, 0, 0, 0]])
    pos, deltas = arrayrope.mrope_positions(
        ids, config=CONFIGS["qwen2_vl"], attention_mask=mask, image_grid_thw=[[1, 2, 4]]
    )
    assert not pos[:, 1].any() and deltas[1, 0] == 0 and deltas[0, 0] == 4 - 4


def test_an_image_takes_its_grid_and_the_text_resumes_after_its_larger_side():
    """Qwen2-VL's paper: an image's tokens take (start, start + row, start + column) of its merged grid."""
    ids = np.array([[1, 2, *[IMG] * 6, 3]])
    pos, deltas = arrayrope.mrope_positions(ids, config=CONFIGS["qwen2_vl"], image_grid_thw=np.array([[1, 4, 6]]))
    rows, cols = np.divmod(np.arange(6), 3)
    np.testing.assert_array_equal(pos[0, 0], [0, 1, *[2] * 6, 5])
    np.testing.assert_array_equal(pos[1, 0], [0, 1, *(2 + rows), 5])
    np.testing.assert_array_equal(pos[2, 0], [0, 1, *(2 + cols), 5])
    assert deltas.tolist() == [[5 + 1 - 9]]


def test_video_time_steps_by_family():
    """Qwen2-VL steps time by 1 per temporal patch, Qwen2.5-VL by tokens_per_second * seconds; Qwen3-VL's
    frames are grids of their own (the text between them, timestamps, moves them on)."""
    ids = np.array([[1, *[V] * 6, 2]])
    grid = np.array([[3, 2, 4]])
    t = arrayrope.mrope_positions(ids, config=CONFIGS["qwen2_vl"], video_grid_thw=grid)[0][0, 0, 1:7]
    np.testing.assert_array_equal(t, [1, 1, 2, 2, 3, 3])
    t = arrayrope.mrope_positions(
        ids, config=CONFIGS["qwen2_5_vl"], video_grid_thw=grid, second_per_grid_ts=np.array([1.5])
    )[0][0, 0, 1:7]
    np.testing.assert_array_equal(t, [1, 1, 4, 4, 7, 7])
    frames = np.array([[1, V, V, 2, V, V, 3, V, V]])
    pos = arrayrope.mrope_positions(frames, config=CONFIGS["qwen3_vl"], video_grid_thw=grid)[0][:, 0]
    np.testing.assert_array_equal(pos[0], [0, 1, 1, 3, 4, 4, 6, 7, 7])
    np.testing.assert_array_equal(pos[2], [0, 1, 2, 3, 4, 5, 6, 7, 8])


def test_glm_video_frames_are_image_tokens_between_video_markers():
    ids = np.array([[1, IMG, IMG, VS, IMG, IMG, 5, IMG, IMG, 6, VE, 2]])
    images, videos = np.array([[1, 2, 4]]), np.array([[2, 2, 4]])
    pos = arrayrope.mrope_positions(ids, config=CONFIGS["glm4v"], image_grid_thw=images, video_grid_thw=videos)[0]
    np.testing.assert_array_equal(pos[2, 0], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    with pytest.raises(ValueError, match=r"3 runs of image tokens .* image_grid_thw has 1 rows"):  # all images
        arrayrope.mrope_positions(ids, config=CONFIGS["qwen3_vl"], image_grid_thw=images, video_grid_thw=videos)


def test_ernie_merges_a_videos_time_steps():
    """ERNIE 4.5 VL: a video of t temporal patches has t // temporal_merge_size frames; an image is not merged."""
    ids = np.array([[1, *[V] * 6, 2, IMG, IMG, 3]])
    pos, deltas = arrayrope.mrope_positions(
        ids, config=CONFIGS["ernie4_5_vl_moe"], video_grid_thw=[[6, 2, 4]], image_grid_thw=[[1, 2, 4]]
    )
    # 3 frames of 1 x 2 from position 1; the text resumes at 1 + max(1, 2); the image from 4
    np.testing.assert_array_equal(pos[0, 0], [0, 1, 1, 2, 2, 3, 3, 3, 4, 4, 6])
    np.testing.assert_array_equal(pos[2, 0], [0, 1, 2, 1, 2, 1, 2, 3, 4, 5, 6])
    assert deltas.tolist() == [[6 + 1 - 11]]
    with pytest.raises(ValueError, match=r"video 0 has 6 tokens .* \(2, 2, 4\) gives 2 tokens \(1 x 1 x 2"):
        arrayrope.mrope_positions(ids[:, :8], config=CONFIGS["ernie4_5_vl_moe"], video_grid_thw=[[2, 2, 4]])


def test_hy_v4_rows_end_with_a_token_and_frames_move_along_every_axis():
    """HY-V4-VL: a merged row of w patches is w + 1 tokens; frame k of a video sits k * max(h, w + 1) further
    on every axis, and the text resumes one past the grid's largest position."""
    ids = np.array([[1, *[V] * 6, 2, *[IMG] * 6, 3]])
    pos, deltas = arrayrope.mrope_positions(
        ids, config=CONFIGS["hy_v4_vl"], video_grid_thw=[[2, 2, 4]], image_grid_thw=[[1, 4, 4]]
    )
    # the video: h = 1, w = 2 + 1, from position 1; frame 1 moves by max(1, 3) = 3; the text resumes at 7
    np.testing.assert_array_equal(pos[:, 0, :8].T, [[0, 0, 0], [1, 1, 1], [1, 1, 2], [1, 1, 3], [4, 4, 4],
                                                    [4, 4, 5], [4, 4, 6], [7, 7, 7]])  # fmt: skip
    # the image: h = 2, w = 2 + 1, from position 8; the text resumes at 8 + max(2, 3)
    np.testing.assert_array_equal(pos[1, 0, 8:], [8, 8, 8, 9, 9, 9, 11])
    np.testing.assert_array_equal(pos[2, 0, 8:], [8, 9, 10, 8, 9, 10, 11])
    assert deltas.tolist() == [[11 + 1 - 15]]


def test_hunyuan_vl_counts_every_token_and_puts_the_image_on_the_last_three_axes():
    """HunYuan-VL: every token's index on every axis; an image's h * (w + 1) tokens (inside the two extra ones)
    take column, row and the image's index in the batch on the last three of ``len(mrope_section)`` axes."""
    config = {"model_type": "hunyuan_vl", "image_token_id": IMG, "vision_config": {"spatial_merge_size": 2},
              "text_config": {"rope_parameters": {"mrope_section": [16, 16, 16, 16]}}}  # fmt: skip
    # row 0: an image of 1 x (2 + 1) tokens and the two extra ones; row 1: 1 x (1 + 1) tokens, without them
    ids = np.array([[1, IMG, IMG, IMG, IMG, IMG, 2, 3], [4, 5, 6, IMG, IMG, 7, 8, 9]])
    pos, deltas = arrayrope.mrope_positions(ids, config=config, image_grid_thw=[[1, 2, 4], [1, 2, 2]])
    assert pos.shape == (4, 2, 8)
    np.testing.assert_array_equal(pos[0], np.broadcast_to(np.arange(8), (2, 8)))
    np.testing.assert_array_equal(
        pos[1:, 0], [[0, 1, 0, 1, 2, 5, 6, 7], [0, 1, 0, 0, 0, 5, 6, 7], [0, 1, 0, 0, 0, 5, 6, 7]]
    )
    np.testing.assert_array_equal(
        pos[1:, 1], [[0, 1, 2, 0, 1, 5, 6, 7], [0, 1, 2, 0, 0, 5, 6, 7], [0, 1, 2, 1, 1, 5, 6, 7]]
    )
    assert deltas.tolist() == [[0], [0]]
    with pytest.raises(ValueError, match=r"image 0 has 4 tokens .* gives 1 x 3 merged patches .* 3 tokens or 5"):
        arrayrope.mrope_positions([[1, IMG, IMG, IMG, IMG]], config=config, image_grid_thw=[[1, 2, 4]])
    flat = {k: v for k, v in config.items() if k != "text_config"}  # older checkpoints: text keys at the top
    flat["rope_scaling"] = {"type": "xdrope", "xdrope_section": [16, 16, 16, 16]}
    np.testing.assert_array_equal(
        arrayrope.mrope_positions(ids, config=flat, image_grid_thw=[[1, 2, 4], [1, 2, 2]])[0], pos
    )
    with pytest.raises(ValueError, match=r"mrope_section'\] must list at least 3 sections"):
        arrayrope.mrope_positions(
            ids, config=dict(config, text_config={"rope_parameters": {"mrope_section": [32, 32]}})
        )


def test_paddleocr_has_no_video_tokens():
    """PaddleOCR-VL's processor marks only image tokens: ``video_token_id`` is text, and not read."""
    ids = np.array([[1, V, V, 2]])
    config = {k: v for k, v in CONFIGS["paddleocr_vl"].items() if k != "video_token_id"}
    pos, deltas = arrayrope.mrope_positions(ids, config=config)
    np.testing.assert_array_equal(pos[:, 0], np.broadcast_to(np.arange(4), (3, 4)))
    assert deltas.tolist() == [[0]]


@pytest.mark.parametrize(
    "name",
    ["qwen2_5_omni", "qwen2_5_omni_thinker", "qwen3_omni_moe", "qwen3_omni_moe_thinker", "minicpmv4_7", "glm_image"],
)
def test_families_of_another_algorithm_are_refused_by_name(name):
    with pytest.raises(ValueError, match=rf"model_type '{name}', whose get_rope_index .* are not supported"):
        arrayrope.mrope_positions([[1, 2]], config=dict(QWEN, model_type=name))


def test_namespaces_and_plain_lists():
    ids = [[1, IMG, IMG, 2]]
    pos, _ = arrayrope.mrope_positions(ids, config=CONFIGS["qwen2_vl"], image_grid_thw=[[1, 2, 4]])
    assert isinstance(pos, np.ndarray) and pos.dtype == np.int64 and pos.shape == (3, 1, 4)
    xp = pytest.importorskip("array_api_strict")
    pos2, deltas2 = arrayrope.mrope_positions(
        xp.asarray(ids), config=CONFIGS["qwen2_vl"], image_grid_thw=xp.asarray([[1, 2, 4]])
    )
    assert type(pos2) is type(xp.asarray(0)) and pos2.dtype == xp.int64 and deltas2.dtype == xp.int64
    np.testing.assert_array_equal(np.asarray(pos2), pos)
    pos3, _ = arrayrope.mrope_positions(ids, config=CONFIGS["qwen2_vl"], image_grid_thw=[[1, 2, 4]], xp=xp)
    assert type(pos3) is type(pos2)


def test_dask_is_computed_and_comes_back_as_dask():
    da = pytest.importorskip("dask.array")
    ids = np.array([[1, IMG, IMG, 2]])
    pos, deltas = arrayrope.mrope_positions(
        da.from_array(ids), config=CONFIGS["qwen2_vl"], image_grid_thw=da.from_array(np.array([[1, 2, 4]]))
    )
    expected = arrayrope.mrope_positions(ids, config=CONFIGS["qwen2_vl"], image_grid_thw=[[1, 2, 4]])
    assert isinstance(pos, da.Array)
    np.testing.assert_array_equal(pos.compute(), expected[0])
    np.testing.assert_array_equal(deltas.compute(), expected[1])


def test_the_ids_feed_mrope_tables():
    pos, _ = arrayrope.mrope_positions([[1, IMG, IMG, 2]], config=CONFIGS["qwen3_vl"], image_grid_thw=[[1, 2, 4]])
    cos, sin = arrayrope.mrope_tables(
        arrayrope.rope_frequencies(32, base=1e6), pos, sections=(6, 5, 5), interleaved=True
    )
    assert cos.shape == sin.shape == (1, 4, 16)


def test_jax_traced_ids_are_refused():
    jax = pytest.importorskip("jax")
    fn = jax.jit(lambda ids: arrayrope.mrope_positions(ids, config=CONFIGS["qwen2_vl"])[0])
    with pytest.raises(TypeError, match=r"outside torch\.compile / jax\.jit"):
        fn(jax.numpy.ones((1, 4), dtype=jax.numpy.int32))


BAD: list[tuple[dict, type, str]] = [
    (dict(image_grid_thw=[[1, 2, 4], [1, 2, 2]]), ValueError, r"1 runs of image tokens .* image_grid_thw has 2 rows"),
    (dict(image_grid_thw=None), ValueError, r"1 runs of image tokens .* image_grid_thw has 0 rows"),
    (
        dict(image_grid_thw=[[1, 4, 4]]),
        ValueError,
        r"image 0 has 2 tokens .* \(1, 4, 4\) gives 4 tokens \(1 x 2 x 2 merged patches",
    ),
    (dict(image_grid_thw=[[1, 2]]), ValueError, r"image_grid_thw must have shape \(n, 3\)"),
    (dict(image_grid_thw=[[0, 2, 4]]), ValueError, "image_grid_thw must hold positive sizes"),
    (dict(image_grid_thw=[[1.0, 2, 4]]), TypeError, "image_grid_thw must be an integer array"),
    (dict(attention_mask=[[1, 1]]), ValueError, r"attention_mask must have shape \(1, 4\)"),
    (dict(mm_token_type_ids=[[0, 1, 1, 3]]), ValueError, "mm_token_type_ids must be 0 .* got 3"),
    (dict(second_per_grid_ts=[1.0]), ValueError, "second_per_grid_ts is read by Qwen2.5-VL only"),
]


@pytest.mark.parametrize(("kwargs", "error", "match"), BAD)
def test_errors_name_the_argument(kwargs, error, match):
    args = dict(image_grid_thw=[[1, 2, 4]])
    args.update(kwargs)
    with pytest.raises(error, match=match):
        arrayrope.mrope_positions([[1, IMG, IMG, 2]], config=CONFIGS["qwen2_vl"], **args)


def test_config_errors():
    ids = [[1, 2]]
    with pytest.raises(ValueError, match=r"model_type 'qwen2_vl_text'.*pass the model's whole config"):
        arrayrope.mrope_positions(ids, config={"model_type": "qwen2_vl_text"})
    with pytest.raises(ValueError, match=r"config\['vision_config'\]\['spatial_merge_size'\] is missing"):
        arrayrope.mrope_positions(ids, config={"model_type": "qwen2_vl", "image_token_id": IMG, "video_token_id": V})
    no_tps = dict(CONFIGS["qwen2_5_vl"], vision_config={"spatial_merge_size": 2})
    with pytest.raises(ValueError, match=r"config\['vision_config'\]\['tokens_per_second'\] is missing"):
        arrayrope.mrope_positions(ids, config=no_tps)
    no_start = {k: v for k, v in CONFIGS["glm4v"].items() if k != "video_start_token_id"}
    with pytest.raises(ValueError, match=r"config\['video_start_token_id'\] is missing"):
        arrayrope.mrope_positions(ids, config=no_start)
    no_merge = dict(CONFIGS["ernie4_5_vl_moe"], vision_config={"spatial_merge_size": 2})
    with pytest.raises(ValueError, match=r"config\['vision_config'\]\['temporal_merge_size'\] is missing"):
        arrayrope.mrope_positions(ids, config=no_merge)
    with pytest.raises(TypeError, match=r"config\['image_token_id'\] must be an int"):
        arrayrope.mrope_positions(ids, config=dict(CONFIGS["qwen2_vl"], image_token_id="60"))
    with pytest.raises(TypeError, match="config must be a dict, a transformers config or the path"):
        arrayrope.mrope_positions(ids, config=3)
    with pytest.raises(TypeError, match=r"input_ids must be an integer array of shape \(batch, seq\)"):
        arrayrope.mrope_positions(5, config=CONFIGS["qwen2_vl"])
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\)"):
        arrayrope.mrope_positions([1, 2, 3], config=CONFIGS["qwen2_vl"])
    with pytest.raises(ValueError, match="second_per_grid_ts has 2 values but video_grid_thw has 1 videos"):
        arrayrope.mrope_positions(
            [[V, V]], config=CONFIGS["qwen2_5_vl"], video_grid_thw=[[1, 2, 4]], second_per_grid_ts=[1.0, 2.0]
        )
