"""Multimodal RoPE (M-RoPE) families of transformers: ``RotaryEmbedding.from_config`` against their own code.

For every model type of arrayrope's family table with M-RoPE facts (``Family.mrope``: Qwen2-VL, Qwen2.5-VL,
Qwen2.5-Omni, Qwen3-VL and its MoE, Qwen3.5, Qwen3-Omni, GLM-4V and its MoE, GLM-Image, GLM-OCR,
PaddleOCR-VL, Cosmos3-Edge, HY-V4-VL, HunYuan-VL, NeoMME, Cohere Compass, ERNIE 4.5 VL, and any family the
table gains), the
family's
rotary module and attention layer are built from a small config of that family (two heads, few layers, the
family's head dim and rope parameters, ``tools/_hf_probe.py``; each layer type apart where its rope parameters
are kept per layer type) and run on position ids of shape ``(axes, B, S)``:

* text tokens, the same position on every axis (1-D RoPE);
* image tokens of a video grid, distinct temporal, height and width positions (far ones too);
* a mix: text, an image, text after it (as Qwen-VL's ``get_rope_index`` numbers them), and
  positions drawn independently per axis.

Configs: ``mrope_section`` left to the family (its code's default), stated with other sections than
the default (in the order the family's config states them: ERNIE 4.5 VL's ``[h, w, t]``), and the whole dict
transformers saves. Compared with
``RotaryEmbedding.from_config(config)(q, k, positions=ids)``:

* float64: the queries and keys the family's attention layer hands its kernel (the layer run in
  float64 by transformers, its apply function replaced by the identity for the unrotated ones);
* float32: the family's rotary module and apply function run in float32.

HunYuan-VL's sections split the whole rotary width (the two features of a pair turn by different axes), and
its layer normalizes q and k after rotating them, which commutes with no such turn: its float64 queries and
keys are compared where its apply function takes and returns them. Its code has no default sections: a config
that states none is refused by both. Families whose M-RoPE the table records as refused (none in this
release) are not compared: their positions ``(axes, B, S)`` must be refused with that reason, their text
positions computed as 1-D RoPE.

Tolerance (``_conformance``): transformers' tables come from float32 angles ``position * inv_freq``
with its float32 ``inv_freq`` (``table_bound``, at the largest position of the token on any axis), and
each rotation is rounded to the output dtype (4 eps per side; transformers' side to float32 where its apply
function rotates ``q.float()``, as HY-V4-VL's does, measured); the rotary features are the trailing ones
where the family's are (HY-V4-VL's follow ``qk_nope_head_dim`` unrotated ones). A wrong section, axis assignment, pair
layout (GLM-4V's pairs ``(2i, 2i+1)``, Qwen3-VL's axes taking turns, ERNIE 4.5 VL's spatial axes taking turns
before the temporal section) gives differences of order one.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pathlib
import re
import sys
import warnings
from typing import Any

import numpy as np
import pytest
from _conformance import EPS, inv_freq_rtol, rotation_bound, table_bound

import arrayrope
from arrayrope.encodings.mrope import stated_sections
from arrayrope.families import FAMILIES, TRANSFORMERS_VERSION

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")
TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
import _hf_probe as hp  # noqa: E402
from transformers import CONFIG_MAPPING  # noqa: E402

pytestmark = pytest.mark.skipif(
    transformers.__version__ != TRANSFORMERS_VERSION,
    reason=(
        f"the table comes from transformers {TRANSFORMERS_VERSION}, this is {transformers.__version__}; "
        "regenerate it with python tools/families.py"
    ),
)

MROPE = sorted(t for t, entry in FAMILIES.items() if entry.get("mrope") and not entry["mrope"].get("refused"))
#: M-RoPE families whose axes turn pairs in a way that is no rotation of a pair by one axis's position
REFUSED = sorted(t for t, entry in FAMILIES.items() if (entry.get("mrope") or {}).get("refused"))
#: "short": interleaved sections stated with fewer pairs than rotate (a checkpoint's mrope_section with another
#: partial_rotary_factor): Qwen3-VL's code slices by them, the pairs past them turning by axis 0.
VARIANTS = ("family default", "stated", "saved", "short")
KINDS = ("text", "image", "mixed")
BATCH, SEQ = 3, 16


def test_the_table_has_mrope_families():
    """The parametrization below is not empty: the table's M-RoPE facts are there."""
    assert {"qwen2_vl_text", "qwen3_vl_text", "glm4v_text"} <= set(MROPE)


# --- the family's own modules --------------------------------------------------------------------------------


def _uses(model_type: str) -> list[hp.Use]:
    """The rotary modules of ``model_type``'s folder built from its config class, with their attention classes
    (what ``hp.rotary_uses`` finds, for one folder)."""
    if model_type not in CONFIG_MAPPING:
        return []
    folder = CONFIG_MAPPING[model_type].__module__.split(".")[2]
    try:
        with hp.quiet():
            module = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
    except Exception:
        return []
    callers = hp._rotary_callers(module, inspect.getsource(module))
    uses = []
    for name, cls in vars(module).items():
        if not (inspect.isclass(cls) and name.endswith("RotaryEmbedding") and cls.__module__ == module.__name__):
            continue
        ann = hp._config_annotation(cls)
        if ann is None:
            continue
        for config_cls, path in hp._configs_built(cls, ann):
            if config_cls.model_type == model_type:
                attention, names = hp._attention_classes(module, callers, config_cls, ann)
                if attention and names:
                    uses.append(hp.Use(folder, module, cls, config_cls, path, attention, names))
    return uses


class MRopeAttention(hp.Attention):
    """An attention layer whose rotary module is given position ids ``(axes, B, S)`` (``ids``), with the layer's
    type where the module keeps frequencies per layer type (NeoMME, Cohere Compass)."""

    ids: np.ndarray

    def position_embeddings(self, x: Any, positions: np.ndarray) -> Any:
        return _cos_sin(self.rotary, x, self.ids, self.layer_type)

    def applied(self) -> tuple[Any, Any, Any, Any] | None:
        """The query and key the layer's apply function receives and returns (its first call, float64); None
        where it rotates one tensor per call (Qwen4-exp)."""
        seen: list[tuple[Any, ...]] = []

        def wrap(name: str, fn: Any) -> Any:
            def record(*args: Any, **kwargs: Any) -> Any:
                out = fn(*args, **kwargs)
                if len(args) >= 2 and isinstance(out, tuple) and len(out) >= 2:
                    seen.append((args[0], args[1], out[0], out[1]))
                return out

            return record

        with hp._patched(self.use.module, self.use.apply_names, wrap):
            self.run(np.arange(SEQ), batch=BATCH)
        return seen[0] if seen else None


def _cos_sin(rot: Any, x: Any, ids: np.ndarray, layer_type: str | None) -> Any:
    """The rotary module's cos and sin at position ids ``(axes, B, S)``, of ``layer_type`` where it takes one."""
    with hp.quiet():
        if layer_type is not None and "layer_type" in inspect.signature(rot.forward).parameters:
            return rot(x, torch.from_numpy(ids), layer_type)
        return rot(x, torch.from_numpy(ids))


def _per_type(config: Any) -> list[str | None]:
    """The layer types whose rope parameters the config keeps apart (those of its layers), else ``[None]``."""
    rope = getattr(config, "rope_parameters", None)
    if not (isinstance(rope, dict) and rope and all(isinstance(x, dict) or x is None for x in rope.values())):
        return [None]
    return [*sorted({str(t) for t in getattr(config, "layer_types", None) or rope if rope.get(t)})]


def _sections(model_type: str, layer_type: str | None) -> list[int]:
    """The family's default sections (of ``layer_type`` where they differ per layer type: NeoMME)."""
    facts = FAMILIES[model_type]["mrope"]
    return list((facts.get("layer_types") or {}).get(layer_type or "", facts["sections"]))


_BUILT: dict[str, Any] = {}


def _family(model_type: str) -> tuple[hp.Use, Any]:
    """The first rotary module of ``model_type`` whose attention runs, and its small config (as the generator
    of the table probed it); skips where transformers cannot build one."""
    if model_type not in _BUILT:
        import families

        errors = []
        for use in _uses(model_type):
            try:
                probe = families.Probe(use)
            except Exception as exc:
                errors.append(f"{use.name}: {type(exc).__name__}: {exc}")
                continue
            _BUILT[model_type] = (use, probe.config)
            break
        else:
            _BUILT[model_type] = "; ".join(errors) or "no rotary module built from its config class"
    built = _BUILT[model_type]
    if isinstance(built, str):
        pytest.skip(f"transformers {transformers.__version__} builds no attention layer of {model_type}: {built}")
    return built


def _config(use: hp.Use, probe_config: Any, variant: str) -> tuple[Any, dict[str, Any]]:
    """transformers' config of the variant, and the dict arrayrope reads (as a ``config.json`` holds it); rope
    parameters kept per layer type get their sections per layer type."""
    import families

    values = copy.deepcopy(probe_config.probe_kwargs)
    rope = copy.deepcopy(dict(values.get("rope_parameters") or getattr(probe_config, "rope_parameters", None) or {}))
    nested = bool(rope) and all(isinstance(x, dict) or x is None for x in rope.values())
    for layer_type, entry in rope.items() if nested else [(None, rope)]:
        if isinstance(entry, dict):
            entry.pop("mrope_section", None)
            if variant != "family default":  # other sections than the family's: they must be read, not assumed
                stated = _stated(_sections(use.model_type, layer_type), variant, _form(use.model_type))
                entry["mrope_section"] = list(stated_sections(stated, _form(use.model_type), to_config=True))
    values["rope_parameters"] = rope
    try:
        with hp.quiet():
            config = use.config_cls(**copy.deepcopy(values))
    except Exception as exc:  # nothing to compare: a config.json of this family must state it
        pytest.skip(f"transformers refuses the {variant} config of {use.model_type}: {type(exc).__name__}: {exc}")
    config._attn_implementation = "sdpa"
    cfg = families._plain(config.to_dict() if variant == "saved" else {"model_type": use.model_type, **values})
    return config, cfg


def _form(model_type: str) -> Any:
    """How the family's axes share the pairs (the table's ``interleaved``: False, True or "spatial")."""
    return FAMILIES[model_type]["mrope"].get("interleaved", False)


def _stated(sections: list[int], variant: str, form: Any = False) -> list[int]:
    """The sections (per axis, in arrayrope's order) a variant's config states: two pairs fewer per axis
    ("short"), else the other sections."""
    return [max(1, s - 2) for s in sections] if variant == "short" else _other_sections(sections, form)


def _other_sections(sections: list[int], form: Any = False) -> list[int]:
    """Sections with the same sum as the family's, in another order (or one pair moved between axes); spatial
    ones (ERNIE 4.5 VL) keep the turning axes equal: one pair fewer each, axis 0's section longer."""
    if form == "spatial":
        return [sections[0] + len(sections) - 1, *(s - 1 for s in sections[1:])]
    other = sections[::-1]
    if other == sections:
        other = [sections[0] + 1, sections[1] - 1, *sections[2:]]
    return other


# --- position ids ------------------------------------------------------------------------------------------------


def _grid(dims: tuple[int, ...], start: int, t_step: int) -> np.ndarray:
    """Positions ``(axes, tokens)`` of an image or video grid: axis 0 the frame (``t_step`` apart), the others the
    token's coordinates, all from ``start``."""
    coords = np.indices(dims).reshape(len(dims), -1)
    coords[0] *= t_step
    return start + coords


def _dims(axes: int, tokens: int) -> tuple[int, ...]:
    """A grid of ``axes`` dimensions (frames first) with ``tokens`` tokens: (2, 2, 4) for three axes and 16."""
    dims = [1] * axes
    i, left = 0, tokens
    while left > 1:
        dims[i % axes] *= 2
        left //= 2
        i += 1
    return tuple(dims)


def position_ids(kind: str, axes: int, seed: int = 0) -> np.ndarray:
    """``(axes, BATCH, SEQ)`` int64 position ids of one kind (see the module's docstring)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((axes, BATCH, SEQ), dtype=np.int64)
    if kind == "text":
        for b, start in enumerate((0, 5, 3000)):
            out[:, b] = start + np.arange(SEQ)
    elif kind == "image":  # a video: frames 1 or 25 apart (Qwen2.5-VL's seconds per grid), from 0, 40, 2900
        for b, (start, step) in enumerate(((0, 1), (40, 1), (2900, 25))):
            out[:, b] = _grid(_dims(axes, SEQ), start, step)
    else:  # text, an image of one frame, text from one past the image's largest position; axes drawn apart
        image = _grid((1,) + (3,) * min(axes - 1, 2) + (1,) * max(axes - 3, 0), 0, 1)
        n = image.shape[1]
        for b, start in enumerate((0, 100)):
            out[:, b, :4] = start + np.arange(4)
            out[:, b, 4 : 4 + n] = start + 4 + image
            after = int(out[:, b, : 4 + n].max()) + 1
            out[:, b, 4 + n :] = after + np.arange(SEQ - 4 - n)
        out[:, 2] = rng.integers(0, 5000, size=(axes, SEQ))
    return out


def test_position_ids_are_what_they_say():
    text, image, mixed = (position_ids(kind, 3) for kind in KINDS)
    assert np.all(text == text[:1])
    assert all(len({tuple(image[a, b]) for a in range(3)}) == 3 for b in range(BATCH))
    assert np.all(mixed[:, :2, :4] == mixed[:1, :2, :4]) and np.all(mixed[:, :2, -3:] == mixed[:1, :2, -3:])
    assert not np.all(mixed[:, :2, 4:13] == mixed[:1, :2, 4:13])


# --- the comparison ----------------------------------------------------------------------------------------------


def _bound(
    x: np.ndarray, ids: np.ndarray, inv_lib: np.ndarray, f: Any, dtype: str, rope: Any, lib_dtype: str
) -> np.ndarray:
    """What transformers' float32 tables and both roundings allow, per element of the rotated ``x`` (B, H, S, D):
    the library's result rounded to ``lib_dtype`` (float32 where its apply function rotates ``q.float()``), ours to
    ``dtype``; the rotary features where ``rope`` has them (HY-V4-VL's trail the unrotated ones)."""
    inv, att = f.inv_freq, f.attention_factor
    # the same frequencies, whatever order the module keeps them in (ERNIE 4.5 VL's pre-rotated ones); their
    # order is checked by the rotation itself
    rel_inv = float(np.max(np.abs(np.sort(inv_lib)[::-1] - np.sort(inv)[::-1]) / np.sort(inv)[::-1]))
    assert rel_inv <= inv_freq_rtol(4 * f.base), rel_inv
    largest = np.abs(ids).max(axis=0)  # (B, S): the largest position of each token on any axis
    angles = largest[:, None, :, None].astype(np.float64) * inv  # (B, 1, S, pairs)
    trailing = rope.rotary_features == "trailing"
    lib = rotation_bound(x, table_bound(angles, rel_inv, att), lib_dtype, rope.layout, trailing=trailing)
    ours = rotation_bound(x, np.zeros_like(angles), dtype, rope.layout, trailing=trailing)
    return lib + ours


def _apply_rounds_to_float32(use: hp.Use, rot: Any, axes: int, layer_type: str | None) -> bool:
    """Whether the family's apply function rotates float64 queries in float32 (HY-V4-VL's ``q.float() * cos``):
    run on float64 queries ``1 + 2**-40`` at position 0 (cos 1, sin 0), it then returns 1."""
    with torch.no_grad(), hp.quiet():
        cos, sin = _cos_sin(rot, torch.zeros(1, dtype=torch.float64), np.zeros((axes, 1, 1), np.int64), layer_type)
        q = torch.full((1, 1, 1, cos.shape[-1]), 1.0 + 2.0**-40, dtype=torch.float64)
        out, _ = getattr(use.module, use.apply_names[0])(q, q.clone(), cos, sin)
    return bool(torch.all(out == 1.0))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model_type", MROPE)
def test_rotation_is_the_family_s_own(model_type, variant, kind, record):
    if variant == "short" and _form(model_type) is not True:
        pytest.skip("consecutive and spatial sections must cover the rotary pairs: transformers splits by them")
    use, probe_config = _family(model_type)
    config, cfg = _config(use, probe_config, variant)
    if variant == "family default" and FAMILIES[model_type]["mrope"].get("required"):
        _both_refuse(use, config, cfg, model_type)
        return
    for layer_type in _per_type(config):  # each layer type with its own rope parameters (NeoMME), else once
        _check(use, config, cfg, model_type, variant, kind, layer_type, record)


def _both_refuse(use: hp.Use, config: Any, cfg: dict[str, Any], model_type: str) -> None:
    """A family whose code has no default sections (the table's ``required``: HunYuan-VL), given a config that
    states none: its rotary module fails on position ids, and arrayrope refuses the config, saying what to state."""
    ids = position_ids("text", len(_sections(model_type, None)))
    with hp.quiet():
        rot = use.rotary(config)
    with hp.quiet(), pytest.raises(Exception):  # noqa: B017  # transformers' own failure, whatever it is
        _cos_sin(rot, torch.zeros(1), ids, None)
    with pytest.raises(ValueError, match=r"needs rope_parameters\['mrope_section'\]"):
        arrayrope.RotaryEmbedding.from_config(cfg)


def _check(use: hp.Use, config: Any, cfg: dict[str, Any], model_type: str, variant: str, kind: str, layer_type, record):
    sections = _sections(model_type, layer_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rope = arrayrope.RotaryEmbedding.from_config(cfg, layer_type=layer_type)
    read = variant != "family default" and FAMILIES[model_type]["mrope"].get("stated") is not False
    assert rope.mrope_sections == tuple(_stated(sections, variant, _form(model_type)) if read else sections)
    assert rope.mrope_interleaved == FAMILIES[model_type]["mrope"]["interleaved"]
    assert rope.layout == FAMILIES[model_type]["layout"]
    ids = position_ids(kind, len(sections), seed=len(model_type))
    f = rope.freqs

    # float64: the family's attention layer, run by transformers
    att = _attention(use, config, ids, layer_type)
    q0, k0 = att.run(np.arange(SEQ), identity=True, batch=BATCH)
    q1, k1 = att.run(np.arange(SEQ), batch=BATCH)
    inv_lib, factor = hp.module_frequencies(att.rotary, att.layer_type)
    assert inv_lib is not None and factor == pytest.approx(f.attention_factor, rel=4 * EPS["float32"])
    rot = _rotary(use, config)
    lib64 = "float32" if _apply_rounds_to_float32(use, rot, len(sections), att.layer_type) else "float64"
    applied = att.applied()
    if applied is not None and applied[0].shape == q0.shape and not torch.equal(applied[0], q0):
        # the layer changes q after rotating it (HunYuan-VL's norm of q and k, which commutes with no rotation of
        # pairs by different axes): compared where it rotates
        q0, k0, q1, k1 = applied
    qa, ka = rope(q0, k0, positions=torch.from_numpy(ids))
    worst = _compare(q0, k0, q1, k1, qa, ka, ids, inv_lib, f, "float64", rope, lib64)

    # float32: the family's rotary module and apply function, in float32
    q32, k32 = q0.float(), k0.float()
    with torch.no_grad(), hp.quiet():
        cos, sin = _cos_sin(rot, q32, ids, att.layer_type)
        # trailing rotary features: the attention hands the apply function those alone (HY-V4-VL's q_rot)
        cut = q32.shape[-1] - cos.shape[-1] if rope.rotary_features == "trailing" else 0
        q2, k2 = getattr(use.module, use.apply_names[0])(q32[..., cut:], k32[..., cut:], cos, sin)
        q2, k2 = torch.cat((q32[..., :cut], q2), dim=-1), torch.cat((k32[..., :cut], k2), dim=-1)
    qb, kb = rope(q32, k32, positions=torch.from_numpy(ids))
    assert qb.dtype == torch.float32 and qb.shape == q32.shape
    worst32 = _compare(q32, k32, q2, k2, qb, kb, ids, inv_lib, f, "float32", rope, "float32")
    for dtype, figures in (("float64", worst), ("float32", worst32)):
        record(
            library="transformers",
            family=model_type if layer_type is None else f"{model_type} ({layer_type})",
            rope_type="mrope",
            layout=rope.layout,
            compared="M-RoPE rotated q, k at position ids (axes, B, S): text, image, mixed",
            dtype=dtype,
            **figures,
        )


@pytest.mark.parametrize("model_type", REFUSED)
def test_mrope_arrayrope_does_not_compute_is_refused_with_its_reason(model_type):
    """A family whose multimodal RoPE is no rotation of each pair by one axis's position (HunYuan-VL turns the two
    features of a pair by different axes): positions (axes, B, S) are refused with the table's reason; text
    positions (B, S), the same on every axis, are 1-D RoPE, and computed."""
    use, probe_config = _family(model_type)
    _, cfg = _config(use, probe_config, "family default")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rope = arrayrope.RotaryEmbedding.from_config(cfg)
    assert rope.mrope_sections is None
    x = torch.ones((BATCH, 2, SEQ, rope.head_dim), dtype=torch.float64)
    reason = FAMILIES[model_type]["mrope"]["refused"]
    with pytest.raises(ValueError, match=r"\(axes, B, S\).*" + re.escape(reason)):
        rope(x, x, positions=torch.from_numpy(position_ids("image", 3)))
    q, _ = rope(x, x, positions=torch.from_numpy(position_ids("text", 3)[0]))
    assert q.shape == x.shape


def _attention(use: hp.Use, config: Any, ids: np.ndarray, layer_type: str | None = None) -> MRopeAttention:
    """The first layer of the config (of ``layer_type``) whose attention runs alone (hybrid families start with
    other layers)."""
    errors = []
    types = list(getattr(config, "layer_types", None) or [])
    for idx in range(int(getattr(config, "num_hidden_layers", 1) or 1)):
        if layer_type is not None and idx < len(types) and types[idx] != layer_type:
            continue
        try:
            att = MRopeAttention(use, config, idx)
            att.ids = ids
            att.run(np.arange(SEQ), identity=True, batch=BATCH)
            return att
        except Exception as exc:
            errors.append(f"layer {idx}: {type(exc).__name__}: {exc}")
    pytest.skip(f"no attention layer of {use.model_type} runs alone in transformers: {'; '.join(errors)}")


def _rotary(use: hp.Use, config: Any) -> Any:
    params = inspect.signature(use.rotary.__init__).parameters
    with hp.quiet():
        return use.rotary(config) if "device" not in params else use.rotary(config, device=None)


def _compare(q0, k0, q_lib, k_lib, q_ours, k_ours, ids, inv_lib, f, dtype, rope, lib_dtype) -> dict[str, float]:
    worst = {"max_error": 0.0, "tolerance": 0.0, "library_error": float("nan"), "arrayrope_error": float("nan")}
    for x, lib, ours in ((q0, q_lib, q_ours), (k0, k_lib, k_ours)):
        x64 = x.double().numpy()
        diff = np.abs(lib.double().numpy() - ours.double().numpy())
        bound = _bound(x64, ids, inv_lib, f, dtype, rope, lib_dtype)
        assert np.all(diff <= bound), (
            f"{dtype}: rotations differ by {float(np.max(diff)):.3g} (bound {float(np.max(bound)):.3g}) at "
            f"{np.argwhere(diff > bound)[:4].tolist()}"
        )
        worst["max_error"] = max(worst["max_error"], float(np.max(diff)))
        worst["tolerance"] = max(worst["tolerance"], float(np.max(bound)))
    return worst
