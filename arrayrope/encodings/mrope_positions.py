"""The position ids of multimodal RoPE, from token ids and vision grids, as transformers' ``get_rope_index``.

Qwen2-VL and the families that took its multimodal RoPE rotate every token by three positions
(temporal, height, width). Text tokens take consecutive positions, equal on the three axes; the
tokens of an image or a video frame take the cells of its grid, merged by ``spatial_merge_size``,
offset by the position where the image starts; the text after it resumes at that offset plus the
larger of the merged height and width. What differs between the families is data, in
:data:`._mrope_families.FAMILIES`: which tokens are video tokens, whether a video is one grid or a
grid per frame, how its time steps are spaced, whether a grid's rows end with a token of their own.
The algorithm, :func:`_row`, is written once; HunYuan-VL's, where every token keeps its index and an
image adds its column, row and index on the last axes, is :func:`_text_axes_row`.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .. import backends
from .._lib.dtypes import index_dtype
from .._lib.types import Array, Namespace
from ..families import TRANSFORMERS_VERSION
from ._mrope_families import Rules, read_config

__all__ = ["mrope_positions"]


def mrope_positions(
    input_ids: Array,
    *,
    config: Any,
    image_grid_thw: Array | None = None,
    video_grid_thw: Array | None = None,
    attention_mask: Array | None = None,
    second_per_grid_ts: Array | None = None,
    mm_token_type_ids: Array | None = None,
    xp: Namespace | None = None,
) -> tuple[Array, Array]:
    """Position ids ``(3, batch, seq)`` of multimodal RoPE and their deltas, as the model's ``get_rope_index``.

    Equal to ``get_rope_index`` of transformers |version| for the model types below, so that the
    tables of :func:`~arrayrope.mrope_tables` can be built without transformers (a NumPy script,
    ONNX Runtime). Text tokens take consecutive positions, equal on the three axes (temporal,
    height, width); an image's tokens take the cells of its grid ``(t, h // m, w // m)`` (``m`` the
    ``spatial_merge_size``), offset by the position where it starts, and the text after it resumes
    at that offset plus ``max(h, w) // m``. Tokens where ``attention_mask`` is 0 are left out and
    get position 0. The families differ in their videos and grids:

    - ``qwen2_vl`` (Qwen2-VL), ``paddleocr_vl`` (PaddleOCR-VL, whose processor marks no video
      tokens): a video is one grid, its time stepping by 1 per temporal patch.
    - ``qwen2_5_vl`` (Qwen2.5-VL): time steps by ``tokens_per_second * second_per_grid_ts``,
      truncated, computed in the floating dtype of ``second_per_grid_ts`` (float32 for a list, as
      PyTorch does).
    - ``qwen3_vl``, ``qwen3_vl_moe`` (Qwen3-VL), ``qwen3_5``, ``qwen3_5_moe`` (Qwen3.5),
      ``qwen4_exp``, ``cosmos3_edge``, ``cosmos3_omni`` (Cosmos3), ``cohere_compass``: each video
      frame is a grid of its own, the frames separated by timestamp text.
    - ``glm4v``, ``glm4v_moe`` (GLM-4.1V, GLM-4.5V), ``glm46v`` (GLM-4.6V), ``glm_ocr`` (GLM-OCR):
      likewise, a frame's tokens being ``image_token_id`` between ``video_start_token_id`` and
      ``video_end_token_id``.
    - ``ernie4_5_vl_moe`` (ERNIE 4.5 VL): a video's ``t`` is divided by
      ``vision_config.temporal_merge_size``.
    - ``hy_v4_vl`` (HY-V4-VL): every row of a merged grid ends with one more token (``h * (w + 1)``
      tokens a frame), frame ``k`` moves by ``k * max(h, w + 1)`` on every axis, and the text
      resumes one past the grid's largest position.
    - ``hunyuan_vl`` (HunYuan-VL): one axis per entry of ``text_config.rope_parameters.mrope_section``;
      every token keeps its index in the row on every axis, and an image's ``h * (w + 1)`` tokens
      (inside the two extra ones its processor adds) take their column, row and the image's index
      in the batch on the last three axes. No videos.

    Not covered (a ``ValueError`` says what they need): ``qwen2_5_omni`` and ``qwen3_omni_moe`` (the
    Omni thinkers: audio tokens, videos interleaved with their audio), ``minicpmv4_7`` (slices of an
    image on a canvas) and ``glm_image`` (the grids of images being generated).

    The work depends on the values, so it runs on the host with NumPy; the results come back in the
    namespace and on the device of ``input_ids``, int64 (int32 where the library has no int64). It
    cannot run inside a traced graph (``torch.compile``, ``jax.jit``); Dask arrays are computed.

    Parameters
    ----------
    input_ids : array
        Integer token ids of shape ``(batch, seq)``, as the processor returns them.
    config : mapping, transformers config or path
        The model's config: a dict (``config.json``), a transformers config object, or the path of a
        ``config.json``. Read: ``model_type``, ``image_token_id``, ``video_token_id`` (GLM-4V, GLM-4.6V,
        GLM-OCR: ``video_start_token_id`` and ``video_end_token_id`` instead; PaddleOCR-VL: none),
        ``vision_config.spatial_merge_size``, for Qwen2.5-VL ``vision_config.tokens_per_second`` and
        for ERNIE 4.5 VL ``vision_config.temporal_merge_size``, for HunYuan-VL
        ``text_config.rope_parameters.mrope_section``.
    image_grid_thw : array, optional
        ``(num_images, 3)`` integer grids ``(t, h, w)`` in patches, one per image in the order of the
        images in the batch, as the processor returns them.
    video_grid_thw : array, optional
        ``(num_videos, 3)`` integer grids of the videos, likewise.
    attention_mask : array, optional
        ``(batch, seq)``; tokens where it is 0 (padding) are left out and get position 0.
    second_per_grid_ts : array or sequence, optional
        Qwen2.5-VL only: seconds per temporal patch of each video (default 1).
    mm_token_type_ids : array, optional
        ``(batch, seq)`` modality of each token (0 text, 1 image, 2 video) as the processor returns
        it; by default derived from ``input_ids`` as the family's processor does.
    xp : namespace, optional
        Namespace of the results when ``input_ids`` is not an array (default NumPy).

    Returns
    -------
    position_ids : array
        Shape ``(3, batch, seq)``: the temporal, height and width position of every token (HunYuan-VL:
        ``(len(mrope_section), batch, seq)``).
    deltas : array
        Shape ``(batch, 1)``: ``mrope_position_deltas``, the largest position of each row plus 1 minus
        its number of tokens (padding not counted; 0 for a row that is only text). While decoding, the
        next token's position on every axis is the row's number of tokens so far (padding not counted)
        plus its delta. A row the mask leaves empty gets positions 0 and delta 0 (where transformers fails).

    Raises
    ------
    ValueError
        A family other than those above (the families not covered name what they need), a config
        without a key it needs, grids that do not match the image or video tokens (one grid per run
        of tokens, in order, with ``t * h * w / m**2`` tokens), arrays of the wrong shape.
    TypeError
        Arguments that are not integer arrays, a config of another type.

    Examples
    --------
    A Qwen2-VL prompt: two text tokens, an image of 1 x 4 x 6 patches (merged 2 x 2: 6 tokens), two
    text tokens.

    >>> import numpy as np, arrayrope
    >>> config = {"model_type": "qwen2_vl", "image_token_id": 9, "video_token_id": 8,
    ...           "vision_config": {"spatial_merge_size": 2}}
    >>> ids = np.array([[1, 2, 9, 9, 9, 9, 9, 9, 3, 4]])
    >>> pos, deltas = arrayrope.mrope_positions(ids, config=config, image_grid_thw=np.array([[1, 4, 6]]))
    >>> pos[:, 0]
    array([[0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
           [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
           [0, 1, 2, 3, 4, 2, 3, 4, 5, 6]])
    >>> deltas
    array([[-3]])
    >>> int(ids.shape[1] + deltas[0, 0])  # the position of the next token
    7
    """
    family = read_config(config)
    rules, merge = family.rules, family.merge
    if isinstance(input_ids, (bool, numbers.Number, str, bytes)) or input_ids is None:
        raise TypeError(f"input_ids must be an integer array of shape (batch, seq), got {input_ids!r}")
    if backends.is_array(input_ids):
        ns = backends.namespace(input_ids, xp=xp, names=("input_ids",))
        device = backends.device_of(input_ids)
    else:
        ns, device = backends.namespace(xp=xp), None
    ids = _host(input_ids, "input_ids", ndim=2)
    batch, seq = ids.shape
    mask = np.ones((batch, seq), dtype=bool)
    if attention_mask is not None:
        mask = _host(attention_mask, "attention_mask", ndim=2, shape=ids.shape).astype(bool)
    if mm_token_type_ids is not None:
        types = _host(mm_token_type_ids, "mm_token_type_ids", ndim=2, shape=ids.shape)
        bad = types[mask & ((types < 0) | (types > 2))]
        if bad.size:
            raise ValueError(
                f"mm_token_type_ids must be 0 (text), 1 (image) or 2 (video) where attention_mask is 1, "
                f"got {int(bad[0])}: audio and other modalities have no M-RoPE grid here"
            )
    else:
        types = _token_types(ids, rules, family.tokens)
    runs = [_runs(types[b][mask[b]]) for b in range(batch)]
    images = _grids(image_grid_thw, "image_grid_thw")
    videos = _grids(video_grid_thw, "video_grid_thw")
    steps = _video_steps(videos, second_per_grid_ts, rules, family.tokens_per_second, family.temporal)
    if rules.frames:  # one grid per frame: (t, h, w) -> t times (1, h, w), each at time step 0
        videos = np.repeat(videos, videos[:, 0], axis=0)
        videos[:, 0] = 1
        steps = [np.zeros(1, dtype=np.int64)] * len(videos)
    _check_counts(runs, images, videos, rules)
    positions = np.zeros((family.axes, batch, seq), dtype=np.int64)
    deltas = np.zeros((batch, 1), dtype=np.int64)
    image_steps = [np.arange(int(g[0])) for g in images]  # images' time steps are 1
    queues = {1: iter(zip(images, image_steps, strict=True)), 2: iter(zip(videos, steps, strict=True))}
    counts = {1: 0, 2: 0}
    for b in range(batch):
        if rules.text_axes:
            row = _text_axes_row(runs[b], queues[1], counts, merge, family.axes)
        else:
            row = _row(runs[b], queues, counts, merge, rules)
        positions[:, b, mask[b]] = row
        if row.shape[1]:
            deltas[b, 0] = row.max() + 1 - row.shape[1]
    dtype = index_dtype(ns, device)
    return ns.asarray(positions, dtype=dtype, device=device), ns.asarray(deltas, dtype=dtype, device=device)


def _row(
    runs: list[tuple[int, int, int]],
    queues: dict[int, Any],
    counts: dict[int, int],
    merge: int,
    rules: Rules,
) -> np.ndarray:
    """The ``(3, n)`` positions of one row's kept tokens, given its runs ``(type, start, end)``."""
    pos = 0
    parts = []
    for kind, start, end in runs:
        if kind == 0:
            parts.append(np.broadcast_to(np.arange(pos, pos + end - start), (3, end - start)))
            pos += end - start
            continue
        grid, steps = next(queues[kind])
        t, h, w = len(steps), int(grid[1]) // merge, int(grid[2]) // merge + rules.row_ends
        if t * h * w != end - start:
            name = "image_grid_thw" if kind == 1 else "video_grid_thw"
            what = "image" if kind == 1 else ("video frame" if rules.frames else "video")
            raise ValueError(
                f"{what} {counts[kind]} has {end - start} tokens in input_ids but its grid {name} "
                f"{tuple(int(g) for g in grid)} gives {t * h * w} tokens ({t} x {h} x {w} merged patches"
                f"{', a row-end token on each row' if rules.row_ends else ''}, spatial_merge_size {merge}); "
                "pass the grids the processor returned for these input_ids"
            )
        counts[kind] += 1
        if rules.row_ends:  # HY-V4-VL (w counts the row-end token): frame k moves k * max(h, w) on every axis
            shift = steps[:, None, None] * max(h, w)
            cells = np.broadcast_arrays(shift, np.arange(h)[:, None] + shift, np.arange(w) + shift)
            parts.append(np.stack(cells).reshape(3, -1) + pos)
            pos += t * max(h, w)
            continue
        cells = np.meshgrid(steps + pos, np.arange(h) + pos, np.arange(w) + pos, indexing="ij")
        parts.append(np.stack(cells).reshape(3, -1))
        pos += max(int(grid[1]), int(grid[2])) // merge
    if not parts:
        return np.zeros((3, 0), dtype=np.int64)
    return np.concatenate(parts, axis=1).astype(np.int64, copy=False)


def _text_axes_row(
    runs: list[tuple[int, int, int]], images: Any, counts: dict[int, int], merge: int, axes: int
) -> np.ndarray:
    """HunYuan-VL's ``(axes, n)`` positions of one row: its token indices, and in each image's grid (past
    the run's first token when the run holds two more) its column, row and index on the last three axes."""
    n = runs[-1][2] if runs else 0
    row = np.broadcast_to(np.arange(n, dtype=np.int64), (axes, n)).copy()
    for kind, start, end in runs:
        if kind != 1:  # videos are text
            continue
        grid, _ = next(images)
        h, w = int(grid[1]) // merge, int(grid[2]) // merge + 1
        if end - start not in (h * w, h * w + 2):
            raise ValueError(
                f"image {counts[1]} has {end - start} tokens in input_ids but its grid image_grid_thw "
                f"{tuple(int(g) for g in grid)} gives {h} x {w} merged patches with a row-end token on each row, "
                f"{h * w} tokens or {h * w + 2} with the tokens at its ends (spatial_merge_size {merge}); "
                "pass the grids the processor returned for these input_ids"
            )
        first = start + (end - start - h * w) // 2
        rows, cols = np.divmod(np.arange(h * w), w)
        row[axes - 3 :, first : first + h * w] = np.stack([cols, rows, np.full(h * w, counts[1])])
        counts[1] += 1
    return row


def _runs(types: np.ndarray) -> list[tuple[int, int, int]]:
    """Maximal runs of one token type: ``(type, start, end)``."""
    if types.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(types)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [types.size]])
    return [(int(types[s]), int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def _token_types(ids: np.ndarray, rules: Rules, tokens: dict[str, int]) -> np.ndarray:
    """0 text, 1 image, 2 video for every token, as the family's processor makes ``mm_token_type_ids``."""
    types = np.zeros(ids.shape, dtype=np.int64)
    image = ids == tokens["image_token_id"]
    if rules.video_span:  # GLM-4V: image tokens inside <video_start> ... <video_end> are video
        inside = np.cumsum(ids == tokens["video_start_token_id"], axis=-1) > np.cumsum(
            ids == tokens["video_end_token_id"], axis=-1
        )
        types[image] = 1
        types[image & inside] = 2
    else:
        types[image] = 1
        if rules.videos:
            types[ids == tokens["video_token_id"]] = 2
    return types


def _check_counts(runs: list[list[tuple[int, int, int]]], images: np.ndarray, videos: np.ndarray, rules: Rules) -> None:
    """One grid per run of image (video) tokens, as ``get_rope_index`` takes them in order."""
    for kind, grids, name, token in (
        (1, images, "image_grid_thw", "image tokens"),
        (2, videos, "video_grid_thw", "video tokens"),
    ):
        if kind == 2 and rules.text_axes:  # videos are text
            continue
        found = sum(1 for row in runs for r in row if r[0] == kind)
        if found == len(grids):
            continue
        if rules.frames and kind == 2:
            need = f"has {len(grids)} frames (t summed over its rows), and each frame is a run of tokens of its own"
        else:
            need = f"has {len(grids)} rows"
        raise ValueError(
            f"input_ids holds {found} runs of {token} (where attention_mask is 1) but {name} {need}; "
            f"pass one (t, h, w) row per {'image' if kind == 1 else 'video'}, in the order of the batch"
        )


def _video_steps(videos: np.ndarray, seconds: Any, rules: Rules, tps: Any, temporal: int) -> list[np.ndarray]:
    """The temporal positions (before the offset) of each video's merged patches."""
    if not rules.seconds:
        if seconds is not None:
            raise ValueError(
                "second_per_grid_ts is read by Qwen2.5-VL only (model_type 'qwen2_5_vl'); pass None for this model"
            )
        return [np.arange(int(g[0]) // temporal) for g in videos]
    if seconds is None:
        values: list[Any] = [1] * len(videos)
    elif backends.is_array(seconds) or isinstance(seconds, np.ndarray):
        host = _host(seconds, "second_per_grid_ts", ndim=1, integer=False)
        values = [host[i] for i in range(host.shape[0])]
    else:
        values = list(seconds)
    if len(values) != len(videos):
        raise ValueError(
            f"second_per_grid_ts has {len(values)} values but video_grid_thw has {len(videos)} videos; "
            "pass one value per video"
        )
    return [_time_steps(int(g[0]), tps, s) for g, s in zip(videos, values, strict=True)]


def _time_steps(t: int, tps: Any, s: Any) -> np.ndarray:
    """``(arange(t) * (tokens_per_second * s)).long()`` with PyTorch's dtypes: a tensor's dtype, float32
    for a Python float, integers for integers."""
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (numbers.Real, np.generic)):
        raise TypeError(f"second_per_grid_ts must hold real numbers, got {s!r}")
    if isinstance(tps, numbers.Integral) and isinstance(s, (numbers.Integral, np.integer)):
        return np.arange(t) * (int(tps) * int(s))
    if isinstance(s, np.floating):
        dt = s.dtype
        interval = dt.type(tps) * s
    else:
        dt, interval = np.dtype(np.float32), np.float32(tps * float(s))
    steps = np.arange(t).astype(dt) * interval
    if not np.all(np.isfinite(steps)):
        raise ValueError(f"second_per_grid_ts must be finite, got {s!r}")
    return np.trunc(steps).astype(np.int64)


def _grids(value: Any, name: str) -> np.ndarray:
    """Grids ``(n, 3)`` of positive ints on the host (``(0, 3)`` for None)."""
    if value is None:
        return np.zeros((0, 3), dtype=np.int64)
    grids: np.ndarray = _host(value, name, ndim=2).astype(np.int64)
    if grids.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3), one (t, h, w) per row, got shape {grids.shape}")
    if grids.size and grids.min() < 1:
        raise ValueError(f"{name} must hold positive sizes (t, h, w), got {grids.tolist()}")
    return grids


def _host(
    value: Any, name: str, *, ndim: int, shape: tuple[int, ...] | None = None, integer: bool = True
) -> np.ndarray:
    """``value`` as a NumPy array on the host, checked: its rank, shape and an integer (or real) dtype."""
    if backends.is_array(value):
        if not backends.concrete(value) and backends.library_of(value) != "dask":  # Dask computes here
            raise TypeError(
                f"{name} must hold values that can be read (the positions depend on them); "
                "call mrope_positions outside torch.compile / jax.jit and pass the positions in"
            )
        host: np.ndarray = np.asarray(backends.to_numpy(value))
    else:
        try:
            host = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be an array, got {type(value).__name__}: {exc}") from None
    kind = host.dtype.kind
    ok = kind in "iu" if integer else kind in "iuf"
    if not ok and not (name == "attention_mask" and kind in "bf"):
        expected = "an integer" if integer else "a real"
        raise TypeError(f"{name} must be {expected} array, got dtype {host.dtype}")
    if host.ndim != ndim or (shape is not None and host.shape != shape):
        want = shape if shape is not None else ("(batch, seq)" if ndim == 2 else "(n,)")
        raise ValueError(f"{name} must have shape {want}, got shape {host.shape}")
    return host


if mrope_positions.__doc__:  # the transformers release the rules follow
    mrope_positions.__doc__ = mrope_positions.__doc__.replace("|version|", TRANSFORMERS_VERSION)
