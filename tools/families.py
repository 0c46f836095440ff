"""Write arrayrope's table of transformers' model families from the installed transformers.

    python tools/families.py            # probe every family, rewrite arrayrope/families/_table.py
    python tools/families.py --check    # probe, print what differs from the shipped table (exit status 1 if any)
    python tools/families.py --report   # one line per model type: the facts, or why it is refused

Every ``*RotaryEmbedding`` module of ``transformers.models`` is built from its family's default config
with small sizes and run inside the family's own attention layer (``_hf_probe``). The facts arrayrope
reads configs with come from those runs, never from a hand-written list:

* the layout, the direction and the offset of the rotation, as :func:`arrayrope.testing.identify_rope`
  names the apply function the attention calls (measured on unit vectors), and whether that function
  writes its output in another order than it reads it (DeepSeek's interleaved kernel);
* which features of the attention kernel's head rotate (leading or trailing), per layer, and which
  layers rotate nothing (NoPE) with the config key that says so;
* which config keys give the head dim and the rotary dim (a menu of rules, each checked against the
  module on variants of the config), whether the default rope reads ``partial_rotary_factor``, the
  defaults transformers fills in for keys a ``config.json`` leaves out, and the attribute aliases
  (``n_embd`` for ``hidden_size``...);
* the older keys the config class converts and where each lands (a rope parameter of a layer type, a
  per-layer head dim, ``rotary_dim / head_dim`` as the partial factor), and those that land only in a
  rope dict the config states, not in the class's own default dict;
* where a multimodal config keeps the settings of its language model (``text_config``,
  ``thinker_config.text_config``...), and the other sub-configs of the same rotary module (T5Gemma 2's
  decoder);
* for multimodal RoPE (M-RoPE), the sections of rotary pairs each position axis drives when a config
  states no ``mrope_section``, and whether the axes hold consecutive sections or take turns pair by pair,
  measured on position ids that differ per axis (two, three or four axes; each column of the module's
  tables matched to its frequency), or why they are no sections of pairs;
* a per-layer list the family's model reads to choose each layer's tables (a base per layer, layers that
  scale), from the tables its decoder layers receive when the whole model runs (``_family_layers``);
* the layer types the config class fills in where a config states none (from a pattern key, or a fixed
  pattern found over several layer counts), and the blocks a saved ``layer_types`` lists besides them.

A default config whose attention cannot run is probed as a checkpoint's config is made (``PUBLISHED``:
keys every checkpoint states; sizes that agree with each other). A model type whose facts cannot be
measured is written with the reason, and arrayrope refuses it.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import difflib
import inspect
import math
import pathlib
import pprint
import re
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from typing import Any
from unittest import mock

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _hf_probe as hp
import torch
from _family_layers import measure_per_layer
from _family_mrope import measure_mrope

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TABLE = ROOT / "arrayrope" / "families" / "_table.py"

from arrayrope._config_view import LAYER_DIMS  # noqa: E402
from arrayrope.testing import identify_rope  # noqa: E402

#: Values of published checkpoints for the model types whose default config cannot run its own attention
#: (the defaults contradict each other, or leave unset a key every checkpoint states); each with the
#: checkpoint it comes from.
PUBLISHED: dict[str, dict[str, Any]] = {
    "glm4v_text": {"partial_rotary_factor": 0.5},  # zai-org/GLM-4.1V-9B-Thinking (mrope_section 8/12/12 of 64)
    "glm_image_text": {"partial_rotary_factor": 0.5},  # zai-org/GLM-Image
    "glm4v_moe_text": {"head_dim": 128},  # zai-org/GLM-4.5V (4096 / 96 heads is no head dim)
    "qwen3_omni_moe_text": {"head_dim": 128},  # Qwen/Qwen3-Omni-30B-A3B-Instruct (2048 / 28 heads is no head dim)
    # the same checkpoint's talker (its text_config states head_dim 128: the module's default mrope_section
    # [24, 20, 20] bounds 64 pairs, of which the class's 1024 / 16 heads would show 32)
    "qwen3_omni_moe_talker_text": {"head_dim": 128},
    "glm4_moe": {"head_dim": 128},  # zai-org/GLM-4.5 (4096 / 96 heads is no head dim)
    "esm": {"position_embedding_type": "rotary"},  # facebook/esm2_t33_650M_UR50D (the default is absolute)
    # transformers-community/dbrx-instruct: its attention reads the attn_config's rope_theta, which the class lacks
    # (500000 there, while the rotary module turns by rope_parameters' base: here the two agree, as they must)
    "dbrx": {"attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8}},
    "zamba2": {"use_mem_rope": True},  # Zyphra/Zamba2-2.7B (the default applies no rotary embedding)
    # tencent/HunyuanOCR states its M-RoPE sections (xdrope_section, four axes); the default config has none
    "hunyuan_vl_text": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16] * 4}},
    # CohereLabs/North-Micro-Vision-Instruct states a rope dict per layer type; the default config has none
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    # Qwen4-Exp's indexed attention needs the QSA indexer's sizes, which its default config leaves unset
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 256,
        "indexer_budget": 64,
        "indexer_compress_ratio": 4,
    },
}
# config keys that may hold the kernel's head dim, the rotary dim and sizes, as rules of the reader name them
SIZE_KEYS = (
    "head_dim",
    "hidden_size",
    "num_attention_heads",
    "rotary_dim",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "max_position_embeddings",
    "original_max_position_embeddings",
    "num_hidden_layers",
    "partial_rotary_factor",
)


def _fields(config: Any) -> dict[str, Any]:
    with hp.quiet():
        return dict(config.to_dict())


def _module_width(rotary: Any, layer_type: str | None) -> int:
    """Features the rotary module's frequencies turn (twice its nonzero frequencies)."""
    name = f"{layer_type}_inv_freq" if layer_type else "inv_freq"
    inv = dict(rotary.named_buffers()).get(name)
    if inv is None:
        inv = dict(rotary.named_buffers()).get("inv_freq")
    if inv is None:  # GPT-J, CodeGen: a table of sin | cos columns
        table = dict(rotary.named_buffers()).get("embed_positions")
        if table is None:
            raise RuntimeError(f"{type(rotary).__name__} has no inv_freq")
        return int(table.shape[-1])
    return 2 * int(np.count_nonzero(inv.detach().cpu().numpy()))


def _layer_count(config: Any) -> int:
    """Layers to probe: the config's, at most ``hp.LAYERS``."""
    for key in ("num_hidden_layers", "n_layer", "n_layers", "decoder_num_hidden_layers"):
        with contextlib.suppress(Exception):
            n = getattr(config, key)
            if isinstance(n, int) and n > 0:
                return min(n, hp.LAYERS)
    return 1


def _features(rotating: np.ndarray, d: int, width: int) -> str | None:
    """Where the slice of ``width`` features the attention gives its apply function sits in the head of ``d``
    (the features that turn lie within it): ``leading``, ``trailing``, or None."""
    if rotating.size == 0:
        return None
    if rotating[-1] < width:
        return "leading"
    return "trailing" if rotating[0] >= d - width else None


def _convention(layer: hp.Layer) -> tuple[dict[str, Any], str]:
    """The apply function's convention (layout, direction, offset, rotary width) as identify_rope names it,
    and why it names none."""
    width = layer.width
    found = identify_rope(layer, head_dim=width, seq_len=hp.PROBE_SEQ, dtype="float32")
    direction = 1
    if not found.matched and "opposite sign" in found.reason and found.layout is not None:
        # conjugating by a reflection of each pair's second feature turns the rotation the other way
        flip = np.ones(width)
        r = found.rotary_dim or width
        start = 0 if found.rotary_features == "leading" else width - r
        second = np.arange(r // 2, r) if found.layout == "half" else np.arange(1, r, 2)
        flip[start + second] = -1.0
        found = identify_rope(
            lambda x, p: flip * layer(flip * x, p), head_dim=width, seq_len=hp.PROBE_SEQ, dtype="float32"
        )
        direction = -1
    if not found.matched:
        return {}, found.reason
    facts = {
        "layout": found.layout,
        "direction": direction,
        "offset": found.offset,
        "apply_width": width,
        "apply_rotary_dim": found.rotary_dim,
        "apply_features": found.rotary_features,
        "base": found.base,
        "attention_factor": found.attention_factor,
        "scaling": found.scaling,
    }
    return facts, ""


class Probe:
    """A family's rotary module and attention layers, on the smallest default config its layers run with."""

    def __init__(self, use: hp.Use) -> None:
        self.use = use
        self.values = dict(PUBLISHED.get(use.model_type, {}))
        self.notes: list[str] = []
        error: Exception | None = None
        for config in hp.tiny_configs(use.config_cls, **self.values):
            self.config = config
            for i in range(_layer_count(config)):  # the first layer that runs alone (hybrids start with others)
                try:
                    hp.rotating_features(self.attention(i))
                    return
                except hp.HeadsDiffer:
                    raise
                except Exception as exc:
                    error = error or exc
        assert error is not None
        raise error

    def attention(self, layer_idx: int, config: Any = None) -> hp.Attention:
        config = config if config is not None else self.config
        try:
            return hp.Attention(self.use, config, layer_idx)
        except Exception:
            # a default config without the head dim its attention needs (published configs state it)
            if getattr(config, "head_dim", 0) is None:
                with hp.quiet():
                    config.head_dim = config.hidden_size // config.num_attention_heads
                # what published configs state: later variants are built with it
                self.values["head_dim"] = config.head_dim
                config.probe_kwargs = {**config.probe_kwargs, "head_dim": config.head_dim}
                return hp.Attention(self.use, config, layer_idx)
            raise

    def layers(self) -> list[dict[str, Any]]:
        """Per layer that runs alone: its layer type, kernel head dim and the features that rotate."""
        out = []
        for i in range(_layer_count(self.config)):
            try:
                att = self.attention(i)
                d, rotating = hp.rotating_features(att)
            except Exception as exc:
                self.notes.append(f"layer {i} does not run alone ({type(exc).__name__})")
                continue
            out.append({"index": i, "layer_type": att.layer_type, "head_dim": d, "rotating": rotating, "att": att})
        return out


class Refused(Exception):
    """A model type whose facts cannot be measured, with the reason."""


def measure(use: hp.Use) -> tuple[Probe, dict[str, dict[str, Any]], list[int]]:
    """Run a family's attention layers: the convention per layer type and the layers that rotate nothing."""
    try:
        p = Probe(use)
        layers = p.layers()
        p.measured = layers
    except hp.HeadsDiffer as exc:
        raise Refused(str(exc)) from None
    except Exception as exc:
        raise Refused(
            f"transformers' default {use.model_type} config does not run its attention layer "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
        ) from None
    groups: dict[str | None, list[dict[str, Any]]] = {}
    for lay in layers:
        groups.setdefault(lay["layer_type"], []).append(lay)
    per_type: dict[str, dict[str, Any]] = {}
    for layer_type, members in groups.items():
        rotating = [m for m in members if m["rotating"].size]
        if not rotating:
            per_type[layer_type or ""] = {
                "nope": True,
                "head_dim": members[0]["head_dim"],
                "index": members[0]["index"],
            }
            continue
        first = rotating[0]
        try:
            layer = hp.Layer(first["att"])
            conv, why = _convention(layer)
        except Exception as exc:
            raise Refused(
                f"its attention's rotation could not be measured ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:160]})"
            ) from None
        if why:
            raise Refused(f"identify_rope names no convention for its attention: {why}")
        d, rot = first["head_dim"], first["rotating"]
        features = conv["apply_features"] if layer.width == d else _features(rot, d, layer.width)
        if features is None:
            raise Refused(
                f"its attention rotates features {rot.min()}..{rot.max()} of {d}, neither the leading "
                "nor the trailing ones"
            )
        per_type[layer_type or ""] = {
            "head_dim": d,
            "rotary_features": features,
            "index": first["index"],
            "output_order": "half" if layer.permutation is not None else None,
            **conv,
        }
    nope = sorted(m["index"] for m in layers if not m["rotating"].size)
    return p, per_type, nope


def _scope(use: hp.Use) -> str:
    """Why a rotary module is out of scope (not a 1-D rope of positions), or ''."""
    params = list(inspect.signature(use.rotary.forward).parameters)[1:]
    if getattr(use.config_cls, "default_rope_type", "default") == "axial":
        return "the 2-D (axial) rope of a vision encoder's patch grid (arrayrope.axial_rope_tables)"
    if "position_ids" not in params:
        return f"its rotary module takes ({', '.join(params)}), no 1-D positions"
    if _head_positions(use):
        return "its model turns each head by its head index (position ids arange(num_heads)), not by sequence positions"
    return ""


_HEAD_IDS = re.compile(r"position_ids\s*=\s*torch\.arange\(\s*self\.num_(attention_)?heads\b")


def _head_positions(use: hp.Use) -> bool:
    """Whether a method of the family's module builds its rotary module's position ids from the head count (the
    codecs NeuCodec and X-Codec 2 rotate each head by its index)."""
    for cls in vars(use.module).values():
        if not inspect.isclass(cls) or cls.__module__ != use.module.__name__:
            continue
        for fn in vars(cls).values():
            if not inspect.isfunction(fn):
                continue
            try:
                source = inspect.getsource(fn)
            except (OSError, TypeError):  # made at run time (a dataclass's __init__)
                continue
            if "rotary_emb(" in source and _HEAD_IDS.search(source):
                return True
    return False


# ---- reading facts: what a config.json says, checked against the module on variants of the config ----

#: sample dicts of the rope types transformers shares between families (lists sized by the module)
SAMPLES: dict[str, Callable[[int, int], dict[str, Any]]] = {
    "linear": lambda half, mp: {"rope_type": "linear", "factor": 4.0},
    "dynamic": lambda half, mp: {"rope_type": "dynamic", "factor": 2.0},
    "yarn": lambda half, mp: {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": max(mp // 4, 8)},
    "longrope": lambda half, mp: {
        "rope_type": "longrope",
        "short_factor": [1.0 + i / half for i in range(half)],
        "long_factor": [1.5 + 2 * i / half for i in range(half)],
        "original_max_position_embeddings": max(mp // 4, 8),
    },
    "llama3": lambda half, mp: {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": max(mp // 4, 8),
    },
    "proportional": lambda half, mp: {"rope_type": "proportional", "partial_rotary_factor": 0.5},
}
_GENERIC_ROPE_KEYS = {
    "rope_type",
    "type",
    "rope_theta",
    "partial_rotary_factor",
    "factor",
    "mrope_section",
    "original_max_position_embeddings",
    "mrope_interleaved",
}


def _plain(value: Any) -> Any:
    """``value`` as JSON-like Python data (tuples as lists, numbers as int/float)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    return str(value)


def _aliases(config_cls: type) -> dict[str, str]:
    amap = getattr(config_cls, "attribute_map", {}) or {}
    return {k: v for k, v in amap.items() if k in SIZE_KEYS and k != v}


def _head_dim_from(use: hp.Use, p: Probe, aliases: Mapping[str, str]) -> dict[str, Any]:
    """The key whose value the config class gives its ``head_dim`` (DeepSeek-V3 sets it to ``qk_rope_head_dim``:
    the head dim transformers' scaled rope types compute over), and whether a ``head_dim`` the config states
    wins; {} where ``head_dim`` is the config's own."""
    fields = _fields(p.config)
    if "head_dim" in aliases or not isinstance(fields.get("qk_rope_head_dim"), int):
        return {}
    values = {k: v for k, v in p.values.items() if k != "head_dim"}
    got = []
    for rope in (16, 24):
        try:
            unstated = _fields(_unchecked(use, {**values, "qk_rope_head_dim": rope})).get("head_dim")
            stated = _fields(_unchecked(use, {**values, "qk_rope_head_dim": rope, "head_dim": 40})).get("head_dim")
        except Exception:
            return {}
        if unstated != rope or stated not in (rope, 40):
            return {}
        got.append(stated == 40)
    if len(set(got)) != 1:
        return {}
    return {"key": "qk_rope_head_dim", "keeps_stated": got[0]}


def _field_defaults(config_cls: type, aliases: Mapping[str, str]) -> dict[str, Any]:
    """Class defaults of the size keys (by their canonical names), as the dataclass fields give them."""
    fields = {f.name: f.default for f in dataclasses.fields(config_cls)} if dataclasses.is_dataclass(config_cls) else {}
    out = {}
    for key in (*SIZE_KEYS, "no_rope_layer_interval"):
        name = aliases.get(key, key)
        if name in fields and fields[name] is not dataclasses.MISSING:
            value = fields[name]
            if value is None or isinstance(value, (bool, int, float)):
                out[key] = value
    return out


def _rope_defaults(use: hp.Use, p: Probe) -> Any:
    """``rope_parameters`` as transformers standardises a config that states none."""
    with hp.quiet():
        try:
            config = use.config_cls()
        except Exception:
            config = p.config
    return _plain(copy.deepcopy(getattr(config, "rope_parameters", None) or {}))


def _popped_keys(config_cls: type) -> dict[str, Any]:
    """Keys the config class reads from ``kwargs`` (older names it converts), with their literal defaults."""
    keys: dict[str, Any] = {}
    for klass in config_cls.__mro__:
        if not klass.__module__.startswith("transformers.models."):
            continue
        with contextlib.suppress(OSError, TypeError, SyntaxError):
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("pop", "get")
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "kwargs"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    default = None
                    if len(node.args) > 1:
                        with contextlib.suppress(ValueError):
                            default = ast.literal_eval(node.args[1])
                    keys.setdefault(node.args[0].value, default)
                elif isinstance(node, (ast.DictComp, ast.ListComp, ast.GeneratorExp)):
                    keys.update({k: d for k, d in _prefixed_pops(node).items() if k not in keys})
    return keys


def _prefixed_pops(node: ast.DictComp | ast.ListComp | ast.GeneratorExp) -> dict[str, Any]:
    """Keys a comprehension pops as ``kwargs.pop(f"swa_{name}", default)`` over ``{name: default, ...}.items()``
    (Dots3 Note's sliding layers), with their defaults."""
    out: dict[str, Any] = {}
    for gen in node.generators:
        it, target = gen.iter, gen.target
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr == "items"
            and isinstance(it.func.value, ast.Dict)
            and isinstance(target, ast.Tuple)
            and len(target.elts) == 2
            and all(isinstance(e, ast.Name) for e in target.elts)
        ):
            continue
        name, default = (e.id for e in target.elts)  # type: ignore[attr-defined]
        with contextlib.suppress(ValueError):
            literal = ast.literal_eval(it.func.value)
            for call in ast.walk(node):
                if not (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "pop"
                    and isinstance(call.func.value, ast.Name)
                    and call.func.value.id == "kwargs"
                    and call.args
                    and isinstance(call.args[0], ast.JoinedStr)
                ):
                    continue
                parts = call.args[0].values
                if (
                    len(parts) == 2
                    and isinstance(parts[0], ast.Constant)
                    and isinstance(parts[1], ast.FormattedValue)
                    and isinstance(parts[1].value, ast.Name)
                    and parts[1].value.id == name
                ):
                    given = call.args[1] if len(call.args) > 1 else None
                    uses_default = isinstance(given, ast.Name) and given.id == default
                    out.update({f"{parts[0].value}{k}": v if uses_default else None for k, v in literal.items()})
    return out


def _landing(config: Any, value: Any) -> list[list[str]]:
    """Where ``value`` ended up in a standardised config: ``[layer type or '', parameter]`` pairs; a value that
    became ``partial_rotary_factor = value / head_dim`` (MiniMax-M2's ``rotary_dim``) lands as ``rotary_dim``."""
    out = []
    params = getattr(config, "rope_parameters", None) or {}
    nested = params and all(isinstance(v, Mapping) or v is None for v in params.values())
    head = hp._head_dim(config)
    for layer_type, entry in params.items() if nested else [("", params)]:
        if not isinstance(entry, Mapping):
            continue
        out.extend([layer_type, name] for name in ("rope_theta", "partial_rotary_factor") if entry.get(name) == value)
        prf = entry.get("partial_rotary_factor")
        if head and isinstance(prf, float) and isinstance(value, int) and math.isclose(prf * head, value):
            out.append([layer_type, "rotary_dim"])
    types = getattr(config, "layer_types", None) or []
    with contextlib.suppress(Exception):
        for idx, over in (_fields(config).get("per_layer_config") or {}).items():
            if not isinstance(over, Mapping) or int(idx) >= len(types):
                continue
            for param in sorted(LAYER_DIMS):
                pair = [types[int(idx)], param]
                if over.get(param) == value and pair not in out:
                    out.append(pair)
    return sorted(out)


def _bare(p: Probe) -> Any:
    """A stated rope dict with no base and no factor (per layer type where the family keeps several)."""
    rp = getattr(p.config, "rope_parameters", None) or {}
    nested = rp and all(isinstance(v, Mapping) or v is None for v in rp.values())
    if nested:
        return {t: ({"rope_type": "default"} if v is not None else None) for t, v in rp.items()}
    return {"rope_type": "default"}


def _legacy(use: hp.Use, p: Probe, nested: bool) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Older keys the config class converts, where each lands, their defaults, and those that land only in a
    rope dict the config states (the class's own default dict keeps its values: Ministral 3's base)."""
    keys = _popped_keys(use.config_cls)
    keys.update({"rope_theta": None, "partial_rotary_factor": None})  # where the top-level keys land
    if dataclasses.is_dataclass(use.config_cls):  # fields of a rope set's own (DeepSeek-V4's compress_rope_theta)
        for f in dataclasses.fields(use.config_cls):
            if re.search("rope|rotary|theta", f.name) and f.name not in keys:
                keys[f.name] = f.default if isinstance(f.default, (int, float)) else None
    legacy, defaults, stated_only, when_stated = {}, {}, [], {}
    bare = {"rope_parameters": _bare(p)}
    for key, default in sorted(keys.items()):
        if key in ("rope_scaling", "rope_parameters", "dtype", "torch_dtype"):
            continue
        lands = {}  # where the key lands with no rope dict stated, and with one
        for form, stated in (("unstated", {}), ("stated", bare)):
            for value in (12345.0, 0.375, 48):
                where = _lands(use, p, stated, key, value)
                if where:
                    lands[form] = (value, where)
                    break
        found = bool(lands)
        if not found:
            continue
        if "unstated" in lands:
            value, where = lands["unstated"]
            in_stated = _lands(use, p, bare, key, value)
            # a rope dict the config states takes it elsewhere, or not at all: where the class does not keep the
            # key (a key it keeps, transformers' scaled rope types may still move into the dict when they run)
            if (
                in_stated is not None
                and in_stated != where
                and all(param not in LAYER_DIMS for _, param in where)
                and (in_stated or not _kept(use, p, key, value))
            ):
                when_stated[key] = in_stated
        else:
            where = lands["stated"][1]
            stated_only.append(key)
        legacy[key] = where
        if default is None and all(param in LAYER_DIMS for _, param in where):
            # a per-layer override the class computes where the key is missing (Dots3 Note's sliding layers'
            # qk_rope_head_dim = swa_head_dim - swa_qk_nope_head_dim): its value
            default = _layer_value(p.config, *where[0])
        if default is not None:
            defaults[key] = default
        if found and any(param in LAYER_DIMS for _, param in legacy[key]):
            # a per-layer override fills in per_layer_config: one the config states is taken as it is
            with contextlib.suppress(Exception):
                config = _unchecked(use, {**p.values, key: 48, "per_layer_config": {}})
                if any(param in LAYER_DIMS for _, param in _landing(config, 48)):
                    raise Refused(f"its {key} changes the head dim of layers that per_layer_config states")
    return legacy, defaults, stated_only, when_stated


def _kept(use: hp.Use, p: Probe, key: str, value: Any) -> bool:
    """Whether the config class keeps ``key`` as an attribute of the config (``standardize_rope_params`` reads
    ``rope_theta`` and ``partial_rotary_factor`` from there)."""
    with contextlib.suppress(Exception):
        config = _unchecked(use, {**p.values, "rope_parameters": _bare(p), key: value})
        return bool(config._getattr_without_heterogeneous_validation(key, None) == value)
    return True


def _lands(use: hp.Use, p: Probe, stated: Mapping[str, Any], key: str, value: Any) -> list[list[str]] | None:
    """Where ``key: value`` lands in the config (``_landing``) beyond where ``value`` already was; None where the
    class refuses the config."""
    try:
        before = _landing(_unchecked(use, {**p.values, **stated}), value)
        config = _unchecked(use, {**p.values, **stated, key: value})
    except Exception:
        return None
    return [w for w in _landing(config, value) if w not in before]


def _follows(use: hp.Use, p: Probe, legacy: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, list[str]]:
    """Older per-layer keys whose default the config class computes from other older keys (Dots3 Note's
    ``swa_qk_rope_head_dim = swa_head_dim - swa_qk_nope_head_dim``): key -> those keys, found by changing each."""
    layer_keys = {
        key: where[0]
        for key, where in legacy.items()
        if len(where) == 1 and where[0][1] in LAYER_DIMS and isinstance(defaults.get(key), int)
    }
    out: dict[str, list[str]] = {}
    for key, (layer_type, param) in layer_keys.items():
        for other in layer_keys:
            if other == key:
                continue
            with contextlib.suppress(Exception):
                config = _unchecked(use, {**p.values, other: defaults[other] + 32})
                if _layer_value(config, layer_type, param) != defaults[key]:
                    out.setdefault(key, []).append(other)
    return out


def _unchecked(use: hp.Use, values: Mapping[str, Any]) -> Any:
    """The tiny config of ``values``; where the class's validation refuses it, the config without validation
    (where an older key lands does not depend on the sizes agreeing: Dots3 Note's ``swa_qk_rope_head_dim``)."""
    try:
        return hp.tiny_config(use.config_cls, **values)
    except Exception:
        if not hasattr(use.config_cls, "validate"):
            raise
    with mock.patch.object(use.config_cls, "validate", return_value=None):
        return hp.tiny_config(use.config_cls, **values)


def _layer_value(config: Any, layer_type: str, param: str) -> Any:
    """``param`` of the layers of ``layer_type`` (their per-layer override, else the config's own value)."""
    types = list(getattr(config, "layer_types", None) or [])
    overrides = _fields(config).get("per_layer_config") or {}
    for idx, over in overrides.items():
        if int(idx) < len(types) and types[int(idx)] == layer_type and isinstance(over, Mapping) and param in over:
            return over[param]
    return _fields(config).get(param)


def _fallback(use: hp.Use, p: Probe, nested: bool, scaled: bool = False) -> Any:
    """What transformers fills into a stated rope dict that lacks the base and the factor (per layer type); with
    ``scaled``, into one of a scaled type, whose rotary module first moves the config's own ``rope_theta`` and
    ``partial_rotary_factor`` into it (``standardize_rope_params``)."""
    rp = getattr(p.config, "rope_parameters", None) or {}
    one = {"rope_type": "linear", "factor": 2.0} if scaled else {"rope_type": "default"}
    bare = {t: (dict(one) if v is not None else None) for t, v in rp.items()} if nested else dict(one)
    with contextlib.suppress(Exception):
        config = hp.tiny_config(use.config_cls, **{**p.values, "rope_parameters": bare})
        if scaled:
            with hp.quiet():
                config.standardize_rope_params()
        got = config.rope_parameters or {}

        def keep(d: Any) -> Any:
            return {k: v for k, v in d.items() if k in ("rope_theta", "partial_rotary_factor")} if d else d

        return _plain({t: keep(v) for t, v in got.items()} if nested else keep(got))
    return {}


def _layer_pattern(use: hp.Use, p: Probe) -> dict[str, Any]:
    """How the config class fills in ``layer_types`` a config leaves out: every ``P``-th layer (1-based) of one
    type, the others of another, ``P`` from a key; checked with two values of the key."""
    fields = _fields(p.config)
    if "layer_types" not in fields:
        return {}
    popped = _popped_keys(use.config_cls)
    candidates = sorted(
        {
            k
            for k in (*popped, *fields)
            if re.search("pattern|interval|every|period", k) and k not in ("no_rope_layer_interval",)
        }
    )
    n = 12
    layers_key = next((k for k in ("num_hidden_layers", "n_layer", "n_layers") if k in fields), "num_hidden_layers")
    for key in candidates:
        found = []
        for period in (3, 5):
            try:
                config = hp.tiny_config(use.config_cls, **{**p.values, key: period, layers_key: n, "layer_types": None})
            except Exception:
                break
            types = list(getattr(config, "layer_types", None) or [])
            if len(types) != n:
                break
            every, other = types[period - 1], types[0]
            if every == other or types != [every if (i + 1) % period == 0 else other for i in range(n)]:
                break
            found.append((every, other))
        if len(found) == 2 and found[0] == found[1]:
            default = fields.get(key, popped.get(key))
            if isinstance(default, int):
                return {"key": key, "default": default, "every": found[0][0], "else": found[0][1]}
    return _fixed_pattern(use, p, layers_key)


def _last_layer_type(use: hp.Use, p: Probe) -> str:
    """The type the config class gives the last layer whatever a stated ``layer_types`` says (Gemma 4 forces
    ``full_attention``), or ''; found by stating each of its types last."""
    types = list(_fields(p.config).get("layer_types") or [])
    kinds = sorted({t for t in types if isinstance(t, str)})
    if len(types) < 2 or len(kinds) < 2:
        return ""
    got = set()
    for kind in kinds:
        try:
            config = hp.tiny_config(use.config_cls, **{**p.values, "layer_types": [*types[:-1], kind]})
        except Exception:
            return ""
        got.add(list(config.layer_types)[-1])
    return got.pop() if len(got) == 1 else ""


def _layer_type_renames(use: hp.Use, p: Probe) -> dict[str, str]:
    """The layer type names the config class rewrites in a stated ``layer_types`` (transformers' older names,
    Dots3 Note's ``full_attention`` for its indexed layers): each name transformers allows, stated first."""
    from transformers import configuration_utils as cu

    types = list(_fields(p.config).get("layer_types") or [])
    if not types:
        return {}
    names = {*getattr(cu, "ALLOWED_LAYER_TYPES", ()), *getattr(cu, "_LEGACY_LAYER_TYPE_REMAP", {})}
    out = {}
    for name in sorted(names - set(types)):
        with contextlib.suppress(Exception):
            config = hp.tiny_config(use.config_cls, **{**p.values, "layer_types": [name, *types[1:]]})
            kept = config.layer_types[0]
            if kept != name and kept in types:
                out[name] = kept
    return out


def _token_keys(att: hp.Attention) -> str:
    """Why a layer that runs one token at a time cannot be compared with a rotation of its queries and keys
    (more keys than queries: a draft model's context states), or ''."""
    try:
        att.run(np.arange(3, dtype=np.int64), identity=True, batch=1)
        return ""
    except Exception:
        pass
    try:
        q, k = att.run(np.array([1], dtype=np.int64), identity=True, batch=1)
    except Exception:
        return ""  # what keeps it from running is reported where its rotation is measured
    if k.shape[2] != q.shape[2]:
        return (
            f"{type(att.layer).__name__} runs one token at a time with {k.shape[2]} keys for {q.shape[2]} query "
            "(a draft model's context states), whose positions arrayrope cannot pair with its queries'"
        )
    return ""


def _layer_blocks(p: Probe) -> str:
    """The block a saved ``layer_types`` lists after each layer's type (Dory's ``"mlp"``: released configs list
    attention and MLP blocks, and count both in ``num_hidden_layers``), '' where it lists the layers' types;
    a string starting "its " says why it is neither."""
    with hp.quiet():
        saved = p.config.to_dict()
    listed, types = saved.get("layer_types"), list(getattr(p.config, "layer_types", None) or [])
    if not listed or list(listed) == types:
        return ""
    others = set(listed[1::2])
    n = _layer_count(p.config)
    paired = list(listed[::2]) == types and len(listed) == 2 * n and saved.get("num_hidden_layers") == 2 * n
    if paired and len(others) == 1 and others.isdisjoint(types):
        return str(others.pop())
    return f"its config class saves layer_types {listed} for its layers' types {types} by a rule arrayrope lacks"


def _from_layer_count(config_cls: type) -> bool:
    """Whether every list the config class assigns to ``self.layer_types`` is made from the layer count alone
    (no other attribute, keyword or local: ModernBERT's ``global_attn_every_n_layers`` is a key)."""
    method = next((c.__dict__["__post_init__"] for c in config_cls.__mro__ if "__post_init__" in c.__dict__), None)
    if method is None:
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError, SyntaxError):
        return False
    made = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "layer_types" for t in node.targets)
        and isinstance(node.value, ast.ListComp)
    ]
    for value in made:
        bound = {n.id for g in value.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} - bound - {"self", "range", "len"}
        attrs = {n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)}
        if names or attrs - {"num_hidden_layers"}:
            return False
    return bool(made)


def _fixed_pattern(use: hp.Use, p: Probe, layers_key: str) -> dict[str, Any]:
    """A pattern of no key: the layer types the config class fills in for several layer counts, as the simplest
    rule of :func:`arrayrope._config_layers.layer_types` that gives them all."""
    from arrayrope._config_layers import pattern_types

    if not _from_layer_count(use.config_cls):
        return {}
    seen: dict[int, list[Any]] = {}
    for n in range(6, 14):
        try:
            config = hp.tiny_config(use.config_cls, **{**p.values, layers_key: n, "layer_types": None})
        except Exception:
            continue
        types = list(getattr(config, "layer_types", None) or [])
        if len(types) == n:
            seen[n] = types
    kinds = sorted({str(t) for types in seen.values() for t in types})
    if len(seen) < 4 or len(kinds) != 2:
        return {}
    for every, other in (kinds, kinds[::-1]):
        for period in range(2, 9):
            for first in range(4):
                for last in (False, True):
                    for at in range(period):
                        rule = {"default": period, "at": at, "first": first, "last": last}
                        rule.update(every=every, **{"else": other})
                        if all(pattern_types(rule, n, period) == types for n, types in seen.items()):
                            return {k: v for k, v in rule.items() if v or k in ("default", "at")}
    return {}


def _scaling_to(use: hp.Use, p: Probe) -> list[str]:
    """Layer types a flat (v4) ``rope_scaling`` applies to in a family with parameters per layer type."""
    with contextlib.suppress(Exception):
        config = hp.tiny_config(use.config_cls, **{**p.values, "rope_scaling": {"rope_type": "linear", "factor": 2.0}})
        params = config.rope_parameters or {}
        return sorted(t for t, v in params.items() if isinstance(v, Mapping) and v.get("rope_type") == "linear")
    return []


def _rope_types(use: hp.Use, p: Probe, nested: bool, half: int) -> list[str]:
    """The shared rope types the family's rotary module computes (it records them as its rope_type)."""
    out = ["default"]
    mp = int(getattr(p.config, "max_position_embeddings", 4096) or 4096)
    for name, sample in SAMPLES.items():
        params = sample(half, mp)
        base = copy.deepcopy(getattr(p.config, "rope_parameters", None) or {})
        if nested:
            rp = {t: ({**v, **params} if isinstance(v, Mapping) else v) for t, v in base.items()}
        else:
            rp = {**base, **params}
        try:
            config = hp.tiny_config(use.config_cls, **{**p.values, "rope_parameters": rp})
            with hp.quiet():
                rot = use.rotary(config)
        except Exception:
            continue
        kind = getattr(rot, "rope_type", None)
        kinds = set(kind.values()) if isinstance(kind, Mapping) else {kind}
        if name in kinds:
            out.append(name)
    return out


def _reader(entry: Mapping[str, Any], use: hp.Use) -> Any:
    from arrayrope.families import _entry

    return _entry(use.model_type, {k: v for k, v in entry.items() if k not in ("refused", "out_of_scope")})


def _arrayrope_width(
    fam: Any, cfg: Mapping[str, Any], layer_type: str | None, layer_idx: int | None
) -> tuple[int, np.ndarray]:
    """arrayrope's kernel head dim and default-rope frequencies for a config dict, as the reader gives them."""
    import warnings

    from arrayrope._config_read import read

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = read(cfg, "config", layer_type, None, fam)  # the settings and their frequencies
    return s.head_dim, s.freqs.inv_freq


def _module(use: hp.Use, p: Probe, values: Mapping[str, Any], layer_idx: int) -> tuple[dict[str, Any], int, Any]:
    """A variant config (its kwargs, as a hub config.json states them), its kernel head dim and its module's
    inv_freq for layer ``layer_idx``."""
    kwargs = {**p.config.probe_kwargs, **values}
    with hp.quiet():
        config = use.config_cls(**copy.deepcopy(kwargs))
    config.probe_kwargs = kwargs
    att = p.attention(layer_idx, config)
    d, _ = hp.rotating_features(att)
    name = f"{att.layer_type}_inv_freq" if att.layer_type else "inv_freq"
    buffers = dict(att.rotary.named_buffers())
    inv = buffers.get(name, buffers.get("inv_freq"))
    if inv is None:  # GPT-J, CodeGen: frequencies of a table of sin | cos columns
        r = _module_width(att.rotary, None)
        inv = 1.0 / (10000.0 ** (np.arange(0, r, 2) / r))
    else:
        inv = inv.detach().double().numpy()
    hub = {"model_type": use.model_type, **_plain(config.probe_kwargs)}
    return {"hub": hub, "saved": _plain(config.to_dict()), "config": config, "label": att.layer_type}, d, inv


def _variants(use: hp.Use, p: Probe, per_type: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Configs that tell the rules apart: as is, partial rotary, another head dim, hidden size, rotary dim."""
    fields = _fields(p.config)
    out: list[dict[str, Any]] = [{}]
    if "rope_parameters" in fields:  # a config class with rope parameters (GPT-J has none)
        rp = copy.deepcopy(getattr(p.config, "rope_parameters", None) or {})
        nested = rp and all(isinstance(v, Mapping) or v is None for v in rp.values())
        half = (
            {t: {**v, "partial_rotary_factor": 0.5} if isinstance(v, Mapping) else v for t, v in rp.items()}
            if nested
            else {**rp, "partial_rotary_factor": 0.5}
        )
        out.append({"rope_parameters": half})
    head = next(iter(per_type.values()))["head_dim"]
    if "head_dim" in fields and isinstance(fields["head_dim"], int):
        rp = fields.get("rope_parameters")
        prf = rp.get("partial_rotary_factor") if isinstance(rp, Mapping) else None
        wider = fields["head_dim"] + 32
        if isinstance(prf, float) and int(wider * prf) % 2:  # an odd rotary dim: no checkpoint has one
            wider = 2 * fields["head_dim"]
        out.append({"head_dim": wider})
    hidden_key = next((k for k in ("hidden_size", "n_embd", "d_model") if isinstance(fields.get(k), int)), None)
    if hidden_key and fields.get("head_dim") is None:
        out.append({hidden_key: 2 * fields[hidden_key]})
    if isinstance(fields.get("rotary_dim"), int):
        out.append({"rotary_dim": max(2, fields["rotary_dim"] // 2)})
    if isinstance(fields.get("qk_rope_head_dim"), int):
        out.append({"qk_rope_head_dim": 32, "qk_nope_head_dim": 64})
    del head
    return out


def _rules(use: hp.Use, p: Probe, entry: dict[str, Any], per_type: Mapping[str, Any]) -> tuple[str, str, str]:
    """The head-dim and rotary-dim rules the module follows on every variant, and what was not matched."""
    from arrayrope._config_keys import HEAD_DIM_RULES, ROTARY_DIM_RULES

    rotating = {t: e for t, e in per_type.items() if not e.get("nope")}
    measured = []
    plain: dict[str, Any] = {}
    for values in _variants(use, p, per_type):
        for layer_type, e in rotating.items():
            try:
                dicts, d, inv = _module(use, p, values, e["index"])
            except Exception:
                continue
            if not values:
                plain[layer_type] = inv
            # a partial factor the module ignores: arrayrope refuses it (the config contradicts the code)
            ignored = "rope_parameters" in values and np.array_equal(inv, plain.get(layer_type))
            measured.append((values, layer_type or None, e["index"], dicts, d, inv, ignored))
    if not measured:
        return "", "", "no variant of its config runs"
    whys = []
    for order, (head, rotary) in enumerate((h, r) for h in HEAD_DIM_RULES for r in ROTARY_DIM_RULES):
        fam = _reader({**entry, "head_dim": head, "rotary_dim": rotary}, use)
        reached, bad = _mismatch(fam, measured)
        if not bad:
            return head, rotary, ""
        whys.append((-reached, order, f"{head}/{rotary}: {bad}"))
    return "", "", min(whys)[2]  # the rules that matched the most configs (the first of them): their first difference


def _mismatch(fam: Any, measured: list[Any]) -> tuple[int, str]:
    """How many measured configs arrayrope reads as the module computes them, and the first difference ('')."""
    for reached, (values, layer_type, idx, dicts, d, inv, ignored) in enumerate(measured):
        why = _differs(fam, values, layer_type, idx, dicts, d, inv, ignored)
        if why:
            return reached, why
    return len(measured), ""


def _differs(
    fam: Any,
    values: Any,
    layer_type: str | None,
    idx: int,
    dicts: Mapping[str, Any],
    d: int,
    inv: np.ndarray,
    ignored: bool,
) -> str:
    """How arrayrope's reading of one measured config differs from its module ('' where it does not)."""
    raw = fam.defaults.get("rope_parameters")
    base = float(raw.get("rope_theta") or 1e4) if isinstance(raw, Mapping) and "rope_theta" in raw else 1e4
    for form in ("hub", "saved"):
        try:
            head, ours = _arrayrope_width(fam, dicts[form], layer_type, idx)
        except ValueError as exc:
            if ignored and "partial_rotary_factor" in str(exc):
                continue
            return f"{form} config {values}: {type(exc).__name__}: {exc}"
        except Exception as exc:
            return f"{form} config {values}: {type(exc).__name__}: {exc}"
        if head != d:
            return f"{form} config {values}: head dim {head}, transformers {d}"
        # the module's buffer may hold them in another order (Ernie 4.5 VL's sections): compare the sets; a family
        # whose pairs turn the other way has them negated (the module's are magnitudes)
        a, b = np.sort(fam.direction * ours[ours != 0]), np.sort(inv[inv != 0])
        if a.shape != b.shape or not np.allclose(a, b, rtol=4 * 2**-23 * (2 + math.log(max(base, 1e6))), atol=1e-12):
            return f"{form} config {values}: {a.size} frequencies {a[-3:]}..., transformers {b.size} {b[-3:]}..."
    return ""


def _nope_rule(use: hp.Use, p: Probe, nope: list[int], per_type: Mapping[str, Any]) -> dict[str, Any] | str:
    """How the config marks layers without RoPE, checked by running every layer; a string says why not known."""
    fields = _fields(p.config)
    rule: dict[str, Any] = {}
    n = _layer_count(p.config)

    def scan(values: Mapping[str, Any]) -> list[int] | None:
        try:
            config = hp.tiny_config(use.config_cls, **{**p.values, **values})
            out = []
            for i in range(_layer_count(config)):
                _, rot = hp.rotating_features(p.attention(i, config))
                if not rot.size:
                    out.append(i)
            return out
        except Exception:
            return None

    popped = _popped_keys(use.config_cls)
    if "no_rope_layers" in fields:
        flags = [0 if i % 3 == 1 else 1 for i in range(n)]
        got = scan({"no_rope_layers": flags})
        if got == [i for i in range(n) if not flags[i]]:
            rule = {"key": "no_rope_layers", "rope": 1}
        elif got == [i for i in range(n) if flags[i]]:
            rule = {"key": "no_rope_layers", "rope": 0}
        else:
            return f"its layers without RoPE follow no_rope_layers by a rule arrayrope does not know ({got})"
        if "no_rope_layer_interval" in fields or "no_rope_layer_interval" in popped:
            got = scan({"no_rope_layer_interval": 3, "no_rope_layers": None})
            if got == [i for i in range(n) if (i + 1) % 3 == 0]:
                interval = fields.get("no_rope_layer_interval", popped.get("no_rope_layer_interval"))
                rule.update(interval_key="no_rope_layer_interval", interval=interval)
            else:
                return f"its no_rope_layer_interval leaves RoPE out of layers {got}, by a rule arrayrope does not know"
        if scan({"no_rope_layers": None}) not in (
            [],
            [i for i in range(n) if (i + 1) % rule.get("interval", n + 1) == 0],
        ):
            return "its default config leaves RoPE out of some layers by a rule arrayrope does not know"
    if nope and not rule:
        types = list(getattr(p.config, "layer_types", None) or [])
        params = getattr(p.config, "rope_parameters", None) or {}
        if all(i < len(types) and params.get(types[i], {}) is None for i in nope):
            return rule  # layer types without rope parameters (the config says so)
        quiet = sorted({types[i] for i in nope if i < len(types)})
        if len(types) >= n and quiet and all((types[i] in quiet) == (i in nope) for i in range(n)):
            return {"layer_types": quiet}  # the attention of these layer types applies no rotation
        return f"its layers {nope} rotate nothing, by a rule arrayrope does not know"
    return rule


def _switches(use: hp.Use, p: Probe, per_type: Mapping[str, Any]) -> dict[str, Any]:
    """Config keys that change the rotation its attention applies, and how: boolean ones flipped, and the keys
    the probe set to a published value, at their class default."""
    fields = _fields(p.config)
    first = next(e for e in per_type.values() if not e.get("nope"))
    out: dict[str, Any] = {}
    trials = [
        (k, v, not v)
        for k, v in sorted(fields.items())
        if isinstance(v, bool) and re.search("rope|rotary|interleave", k)
    ]
    with hp.quiet():
        class_default = _fields(use.config_cls())
    trials += [
        (k, v, class_default.get(k))
        for k, v in sorted(PUBLISHED.get(use.model_type, {}).items())
        if isinstance(class_default.get(k), (bool, str))
    ]
    for key, _, other in trials:
        try:
            config = hp.tiny_config(use.config_cls, **{**p.values, key: other})
            att = p.attention(first["index"], config)
            d, rot = hp.rotating_features(att)
            if not rot.size:
                out[key] = {
                    str(other).lower(): {"refused": f"with {key}={other!r} its attention applies no rotary embedding"}
                }
                continue
            att = p.attention(first["index"], config)
            d, rot = hp.rotating_features(att)
            layer = hp.Layer(att)
            conv, why = _convention(layer)
        except Exception:
            continue
        if why:
            out[key] = {str(other).lower(): {"refused": why}}
            continue
        features = conv["apply_features"] if layer.width == d else _features(rot, d, layer.width)
        got = {
            "layout": conv["layout"],
            "rotary_features": features,
            "output_order": "half" if layer.permutation is not None else None,
        }
        changed = {k: v for k, v in got.items() if v != first.get(k)}
        if changed:
            out[key] = {str(other).lower(): changed}
    return out


def _rope_keys(use: hp.Use) -> list[str]:
    """Keys of the rope dict that the family's rotary module reads in code of its own."""
    keys: set[str] = set()
    with contextlib.suppress(OSError, TypeError, SyntaxError):
        tree = ast.parse(textwrap.dedent(inspect.getsource(use.rotary)))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
                and "rope_parameters" in ast.unparse(node.value)
            ):
                keys.add(node.slice.value)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and "rope_parameters" in ast.unparse(node.func.value)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                keys.add(node.args[0].value)
    return sorted(keys - _GENERIC_ROPE_KEYS)


def _family_variants(use: hp.Use, p: Probe, half: int) -> dict[str, str]:
    """Rope keys the family computes in code of its own, each with the arrayrope rope type that reproduces it
    (checked on the module's frequencies and its cos at position 0), or '' where none does."""
    import warnings

    from arrayrope import rope_frequencies
    from arrayrope.scaling import ROPE_TYPES

    own = _rope_keys(use)
    if not own:
        return {}
    out: dict[str, str] = {}
    mp = int(getattr(p.config, "max_position_embeddings", 4096) or 4096)
    for name, sample in SAMPLES.items():
        params = {**sample(half, mp), **dict.fromkeys(own, 1.25)}
        base = {**(getattr(p.config, "rope_parameters", None) or {}), **params}
        try:
            config = hp.tiny_config(use.config_cls, **{**p.values, "rope_parameters": base})
            with hp.quiet():
                rot = use.rotary(config)
                x = torch.zeros(1, 1, 8, dtype=torch.float64)
                cos = rot(x, torch.zeros(1, 1, dtype=torch.int64))[0]
            inv = rot.inv_freq.detach().double().numpy()
            att = float(cos.flatten()[0])
        except Exception:
            continue
        candidates = [t for t, e in ROPE_TYPES.items() if set(own) & e.keys]
        match = ""
        for cand in candidates:
            with contextlib.suppress(Exception), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f = rope_frequencies(
                    2 * inv.size,
                    base=float(base["rope_theta"]),
                    scaling={**params, "rope_type": cand},
                    max_position_embeddings=mp,
                )
                if np.allclose(f.inv_freq, inv, rtol=2e-6) and abs(f.attention_factor - att) < 1e-6:
                    match = cand
                    break
        for key in own:
            with contextlib.suppress(Exception):
                plain = hp.tiny_config(
                    use.config_cls, **{**p.values, "rope_parameters": {k: v for k, v in base.items() if k not in own}}
                )
                with hp.quiet():
                    ref = use.rotary(plain)
                if np.array_equal(ref.inv_freq.detach().double().numpy(), inv) and not match:
                    continue  # the key changes nothing for this rope type
            out[f"{name}+{key}"] = match
    return out


def _rope_sets(p: Probe) -> dict[str, str]:
    """The rope set each layer type turns by, where the layers name their sets otherwise than their layer
    types (DeepSeek-V4: sliding layers the "main" set, compressed ones the "compress" set)."""
    types = list(getattr(p.config, "layer_types", None) or [])
    labels = {lay["layer_type"] for lay in p.measured if lay["layer_type"]}
    if not types or labels <= set(types):
        return {}
    return {
        str(types[lay["index"]]): str(lay["layer_type"])
        for lay in p.measured
        if lay["layer_type"] and lay["index"] < len(types)
    }


def nope_layers_by_type(per_type: Mapping[str, Any], p: Probe) -> bool:
    """Whether some layer type of the default config rotates nothing."""
    return any(e.get("nope") for e in per_type.values()) or bool(getattr(p.config, "layer_types", None))


def facts(use: hp.Use) -> dict[str, Any]:
    """The table entry of one rotary module's model type."""
    scope = _scope(use)
    if scope:
        return {"out_of_scope": scope}
    try:
        p, per_type, nope = measure(use)
    except Refused as exc:
        return {"refused": str(exc)}
    rotating = {t: e for t, e in per_type.items() if not e.get("nope")}
    if not rotating:
        return {"refused": "none of its attention layers rotates its queries in the default config"}
    why = _token_keys(p.attention(next(iter(rotating.values()))["index"]))
    if why:
        return {"refused": why}
    learned = sorted(name for name, _ in p.attention(next(iter(rotating.values()))["index"]).rotary.named_parameters())
    if learned:
        return {
            "refused": f"its rotary module has learned parameters {learned}, which the checkpoint's weights "
            "hold, not its config"
        }
    conventions = {
        (e["layout"], e["direction"], e["rotary_features"], e["output_order"], e["offset"]) for e in rotating.values()
    }
    if len(conventions) > 1:
        return {"refused": f"its layer types rotate in different conventions {sorted(map(str, conventions))}"}
    layout, direction, features, output_order, offset = conventions.pop()
    if offset:
        return {"refused": f"its attention rotates by the positions shifted by {offset:+d}"}
    entry: dict[str, Any] = {"layout": layout, "rotary_features": features}
    if direction != 1:
        entry["direction"] = direction
    if output_order:
        entry["output_order"] = output_order
    aliases = _aliases(use.config_cls)
    if aliases:
        entry["aliases"] = aliases
    head_from = _head_dim_from(use, p, aliases)
    if head_from:
        entry["head_dim_from"] = head_from
    rope_defaults = _rope_defaults(use, p)
    nested = bool(rope_defaults) and all(isinstance(v, Mapping) or v is None for v in rope_defaults.values())
    half = next(iter(rotating.values()))["apply_rotary_dim"] // 2
    if not rope_defaults:  # a config class without rope parameters: the base its module uses, and nothing else
        base = {e["base"] for e in rotating.values()}
        if len(base) != 1:
            return {"refused": f"its config has no rope parameters and its layers use the bases {sorted(base)}"}
        rope_defaults = {"rope_type": "default", "rope_theta": base.pop()}
        rope_types = ["default"]
    else:
        rope_types = _rope_types(use, p, nested, half)
    defaults = {**_field_defaults(use.config_cls, aliases), "rope_parameters": rope_defaults, "rope_types": rope_types}
    try:
        legacy, legacy_defaults, stated_only, when_stated = _legacy(use, p, nested)
    except Refused as exc:
        return {"refused": str(exc)}
    defaults.update(legacy_defaults)
    if rope_types != ["default"] or _fields(p.config).get("rope_parameters") is not None:
        defaults["rope_fallback"] = _fallback(use, p, nested)
        scaled = _fallback(use, p, nested, scaled=True) if rope_types != ["default"] else None
        if scaled and scaled != defaults["rope_fallback"]:
            defaults["rope_fallback_scaled"] = scaled
    entry["defaults"] = defaults
    if legacy:
        entry["legacy"] = legacy
    if stated_only:
        entry["legacy_stated"] = stated_only
    if when_stated:
        entry["legacy_when_stated"] = when_stated
    follows = _follows(use, p, legacy, defaults)
    if follows:
        entry["legacy_follows"] = follows
    if nested:
        entry["scaling_to"] = _scaling_to(use, p)
    pattern = _layer_pattern(use, p) if nested or nope_layers_by_type(per_type, p) else {}
    if pattern:
        entry["layer_pattern"] = pattern
    last = _last_layer_type(use, p)
    if last:
        entry["last_layer_type"] = last
    renames = _layer_type_renames(use, p) if nested else {}
    if renames:
        entry["layer_type_renames"] = renames
    blocks = _layer_blocks(p)
    if blocks.startswith("its "):
        return {"refused": blocks}
    if blocks:
        entry["layer_blocks"] = blocks
    sets = _rope_sets(p)
    if sets:
        entry["rope_sets"] = sets
    with hp.quiet():
        labels = hp.rotary_labels(p.attention(next(iter(rotating.values()))["index"]).rotary)
    mrope = measure_mrope(use, p, labels)
    if mrope:
        entry["mrope"] = mrope
    variants = _family_variants(use, p, half)
    if variants:
        entry["variants"] = variants
    nope_rule = _nope_rule(use, p, nope, per_type)
    if isinstance(nope_rule, str):
        return {"refused": nope_rule}
    if nope_rule:
        entry["nope"] = nope_rule
    per_layer = measure_per_layer(use, p)
    if isinstance(per_layer, str):
        return {"refused": per_layer}
    if per_layer:
        entry["per_layer"] = per_layer
    switches = _switches(use, p, per_type)
    if switches:
        entry["switches"] = switches
        with hp.quiet():
            class_default = _fields(use.config_cls())
        defaults.update({key: class_default.get(key) for key in switches})
    head, rotary, why = _rules(use, p, entry, per_type)
    if why:
        return {"refused": f"arrayrope's reading of its config differs from its rotary module: {why}"}
    if head != "head_dim":
        entry["head_dim"] = head
    if rotary != "head_dim":
        entry["rotary_dim"] = rotary
    return _plain(entry)


def composites(uses: list[hp.Use]) -> dict[str, dict[str, Any]]:
    """Model types whose config keeps a text model with a rotary module in a sub-config: where, and its type."""
    from transformers import CONFIG_MAPPING

    text = {u.model_type for u in uses if not _scope(u)}
    rotary_of = {u.model_type: u.rotary for u in uses if not _scope(u)}
    out: dict[str, dict[str, Any]] = {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        if model_type in text:
            continue
        with hp.quiet():
            try:
                config = CONFIG_MAPPING[model_type]()
            except Exception:
                continue
            paths = [
                (path, sub.model_type)
                for path, sub in hp.sub_configs(config)
                if getattr(sub, "model_type", None) in text
            ]
        if not paths:
            continue
        paths.sort(key=lambda ps: (not ps[0][-1].startswith("text"), "talker" in ".".join(ps[0]), len(ps[0]), ps[0]))
        path, sub_type = paths[0]
        out[model_type] = {"config_path": list(path), "config_model_type": sub_type}
        # sub-configs that build the same rotary module with the same default settings (T5Gemma 2's decoder): a
        # config may give them other rope settings, which reading the first path alone would miss (a vocoder's
        # own settings, different by default, are another model's: Qwen3-Omni's code2wav)
        with hp.quiet():
            saved = config.to_dict()
            also = [
                list(other)
                for other, sub in hp.sub_configs(config)
                if other[: len(path)] != path
                and path[: len(other)] != other
                and hp._builds(rotary_of[sub_type], sub)
                and _same_by_default(saved, path, other)
            ]
        if also:
            out[model_type]["config_also"] = also
    return out


def _same_by_default(saved: Mapping[str, Any], path: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Whether a default composite config gives the rotary module the same settings at both paths."""
    from arrayrope._config_keys import same_rope, sub_config

    try:
        same_rope(sub_config(saved, path), sub_config(saved, other), "config", path, other)
    except ValueError:
        return False
    return True


def generate(only: list[str] | None = None, log: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Every model type's entry."""
    uses = [u for u in hp.rotary_uses() if u.model_type]  # a sub-model without a model type of its own: no key
    table: dict[str, dict[str, Any]] = {}
    for use in uses:
        if only and use.family not in only and use.model_type not in only:
            continue
        t = time.time()
        entry = facts(use)
        if not use.config_cls.model_type:  # a sub-config keyed by where it sits: its class recognises an object
            entry["config_class"] = use.config_cls.__name__
        if log:
            log(f"{use.model_type:28s} {time.time() - t:5.2f}s {entry}")
        if use.model_type in table and table[use.model_type] != entry:
            previous = table[use.model_type]
            if "refused" in previous or "out_of_scope" in previous:
                table[use.model_type] = entry
            elif "refused" not in entry and "out_of_scope" not in entry:
                table[use.model_type] = {"refused": "its rotary modules differ between the models that share it"}
            continue
        table[use.model_type] = entry
    if not only:
        table.update(composites(uses))
    return dict(sorted(table.items()))


def render(table: Mapping[str, Any]) -> str:
    """The table module's source."""
    import transformers

    body = pprint.pformat(dict(table), width=116, sort_dicts=True, indent=1)
    return (
        '"""Generated by ``python tools/families.py`` from transformers '
        f'{transformers.__version__}: do not edit (see arrayrope.families)."""\n\n'
        "from typing import Any\n\n"
        f'TRANSFORMERS_VERSION = "{transformers.__version__}"\n'
        f"FAMILIES: dict[str, dict[str, Any]] = {body}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print the differences, write nothing")
    parser.add_argument("--report", action="store_true", help="one line per model type, write nothing")
    parser.add_argument("--only", nargs="*", help="probe these families or model types only (implies --report)")
    args = parser.parse_args(argv)
    t0 = time.time()
    log = print if args.report or args.only else None
    table = generate(args.only, log)
    source = render(table)
    shipped = TABLE.read_text(encoding="utf-8") if TABLE.exists() else ""
    if args.check:
        diff = list(difflib.unified_diff(shipped.splitlines(True), source.splitlines(True), "shipped", "fresh"))
        sys.stdout.writelines(diff)
        return 1 if diff else 0
    if not (args.report or args.only):
        TABLE.write_text(source, encoding="utf-8")
        print(f"wrote {len(table)} model types to {TABLE.relative_to(ROOT)} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
