"""Hugging Face transformers' model families: what a config does not say about its rotary embedding.

A ``config.json`` names its model type and gives sizes and rope parameters; which features pair up,
which of them rotate, which way, which keys give the head dim and the rotary dim, what transformers
fills in for keys the file leaves out and where a multimodal config keeps its language model's
settings are facts of the family's code. They live in one table, :data:`FAMILIES` (``_table.py``),
written by ``tools/families.py`` from the transformers release :data:`TRANSFORMERS_VERSION` by running
each family's own rotary module and attention layer, and checked against that release by the tests.
:func:`family` is the one place they are looked up.

Examples
--------
>>> from arrayrope.families import family
>>> f = family("glm")
>>> f.layout, f.rotary_dim
('interleaved', 'partial')
>>> family("no_such_model") is None
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ._table import FAMILIES, TRANSFORMERS_VERSION

__all__ = ["FAMILIES", "TRANSFORMERS_VERSION", "Family", "family", "part_of_class"]


@dataclasses.dataclass(frozen=True)
class Family:
    """The facts of one model type (see ``tools/families.py`` for how each is measured).

    Attributes
    ----------
    model_type : str
    layout : {"half", "interleaved"} or None
        Which features pair up in the apply function its attention calls.
    direction : {1, -1}
        -1 where pairs turn by ``-position * inv_freq`` (a ``rotate_half`` of ``(x2, -x1)``).
    rotary_features : {"leading", "trailing"}
        Whether the rotary features are the first of each head or the last (MLA's ``q_pe``).
    head_dim, rotary_dim : str
        The rules giving the kernel's head dim and the rotary dim from config keys (see
        :mod:`arrayrope._config_keys`).
    defaults : mapping
        What transformers uses for keys a config leaves out (``rope_parameters`` as it standardises an
        empty one, per layer type where the family keeps several).
    aliases : mapping
        Config keys under other names (``{"hidden_size": "n_embd"}``).
    head_dim_from : mapping
        Where its config class takes ``head_dim`` from, which transformers' scaled rope types compute over:
        ``{"key": "qk_rope_head_dim", "keeps_stated": True}`` (DeepSeek-V3: that key's value where the config
        states no ``head_dim``; with ``keeps_stated`` False, whatever it states); {} where ``head_dim`` is the
        config's own.
    legacy : mapping
        Older keys the family's config class converts: key -> ``((layer type or "", parameter), ...)``
        (Gemma 3's ``rope_local_base_freq`` -> the sliding layers' ``rope_theta``). The parameter
        ``rotary_dim`` means ``partial_rotary_factor = value / head_dim`` (MiniMax-M2's ``rotary_dim``); a
        ``head_dim`` fills in ``per_layer_config`` where the config states none.
    legacy_stated : tuple of str
        Those of the older keys that the config class converts only into a rope dict the config states:
        where it states none, the class's own default dict keeps its values (Ministral 3's base).
    legacy_when_stated : mapping
        Where those of the older keys go when the config states a rope dict, where that differs (an empty
        list: nowhere): Dots3 Note's ``swa_rope_theta`` is the sliding layers' base only where it states none.
    legacy_follows : mapping
        Older per-layer keys whose default the config class computes from other older keys: key -> those keys
        (Dots3 Note's ``swa_qk_rope_head_dim``, ``swa_head_dim - swa_qk_nope_head_dim``). arrayrope knows the
        default only while none of those is stated.
    scaling_to : tuple of str
        Layer types a flat ``rope_scaling`` applies to, for families with parameters per layer type.
    layer_pattern : mapping
        How the config class fills in ``layer_types`` a config leaves out: ``{"key":
        "sliding_window_pattern", "default": 6, "every": "full_attention", "else": "sliding_attention"}``
        (every ``key``-th layer, 1-based, of one type); without a key, a fixed pattern: ``{"default": 4, "at":
        1, "first": 2, "last": True, ...}`` (layer ``i`` is of type ``every`` when ``i % default == at``, ``i <
        first`` or it is the last layer).
    layer_type_renames : mapping
        Layer type names its config class rewrites in a stated ``layer_types`` (transformers' older names,
        Dots3 Note's ``"full_attention"`` for its indexed layers).
    last_layer_type : str
        The type its config class gives the last layer whatever a stated ``layer_types`` says (Gemma 4's
        ``"full_attention"``); '' where it keeps the list as stated.
    layer_blocks : str
        The block a saved ``layer_types`` lists after each layer's type, counted in ``num_hidden_layers`` too
        (Dory's ``"mlp"``); '' where it lists only the layers' types.
    rope_sets : mapping
        The rope set (a key of ``rope_parameters``) each layer type turns by, where a family names its sets
        otherwise than its layer types (DeepSeek-V4: ``{"sliding_attention": "main", ...}``).
    nope : mapping
        How a config marks layers without RoPE: ``{"key": "no_rope_layers", "rope": 1, "interval_key": ...,
        "interval": 4}``, or ``{"layer_types": [...]}`` for layer types without rope parameters.
    per_layer : mapping
        A list in the config that the family's model reads layer by layer to choose its tables:
        ``{"key": "layer_rope_theta", "sets": "rope_theta"}`` (Granite SWA: each layer's base, 0 for no RoPE),
        ``"sets": ""`` (Muse: 0 for no RoPE, other values unread), ``{"key": "rope_scaling_layers", "sets":
        "scaling"}`` (Molmo 2: the layers listed scale, the others turn by the unscaled base; a config that
        lists none scales every layer). ``"zeros"``: the layers without RoPE where a config states no list,
        ``{"every": 4, "at": 0, "from": "last"}`` (every fourth layer counted from the last).
    switches : mapping
        Boolean config keys that change the rotation: key -> {value: facts that change}.
    variants : mapping
        Rope-dict keys the family's own code reads, and the arrayrope rope type that computes them
        (an empty string: no arrayrope rope type does).
    mrope : mapping
        Multimodal RoPE (M-RoPE): ``{"sections": [16, 24, 24], "interleaved": False}``, the rotary pairs
        each position axis drives where a config states no ``mrope_section``, and whether the axes take
        turns pair by pair (Qwen3-VL) rather than holding consecutive sections (``"spatial"``: ERNIE 4.5 VL's
        turns; ``"full_width"``: HunYuan-VL's sections over the whole rotary width); empty for 1-D RoPE. With
        ``"stated": False`` where the family's code ignores a stated ``mrope_section`` (NeoMME), ``"required":
        True`` where its code has no default and a config must state them (the sections are then a published
        checkpoint's), ``"aliases"``: older names of ``mrope_section`` the config class converts (HunYuan-VL's
        ``xdrope_section``), ``"layer_types"`` where the sections differ per layer type, or only ``"refused"``: why
        arrayrope does not model the family's multimodal rope (its text positions, the same on every axis, are
        read as 1-D RoPE).
    output_order : str or None
        ``"half"`` where the apply function writes half-split order from interleaved input.
    config_path : tuple of str
        Where a composite config keeps its language model's settings (``("text_config",)``).
    config_model_type : str or None
        The model type of that sub-config where the file does not name it.
    config_also : tuple of tuple of str
        Other sub-configs that build the same rotary module (T5Gemma 2's ``decoder``): a config whose rope
        settings there differ from those at ``config_path`` is refused.
    config_class : str
        For a sub-config without a model type of its own, keyed by where it sits (``"evolla.protein_encoder_config"``):
        the name of transformers' config class, by which a config object of that class is read as this entry.
    refused, out_of_scope : str
        Why arrayrope does not read this model type ('' when it does).
    """

    model_type: str
    layout: str | None = None
    direction: int = 1
    rotary_features: str = "leading"
    head_dim: str = "head_dim"
    rotary_dim: str = "head_dim"
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    head_dim_from: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    legacy: Mapping[str, tuple[tuple[str, str], ...]] = dataclasses.field(default_factory=dict)
    legacy_stated: tuple[str, ...] = ()
    legacy_when_stated: Mapping[str, tuple[tuple[str, str], ...]] = dataclasses.field(default_factory=dict)
    legacy_follows: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    scaling_to: tuple[str, ...] = ()
    layer_pattern: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    layer_type_renames: Mapping[str, str] = dataclasses.field(default_factory=dict)
    last_layer_type: str = ""
    layer_blocks: str = ""
    rope_sets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    nope: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    per_layer: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    switches: Mapping[str, Mapping[str, Mapping[str, Any]]] = dataclasses.field(default_factory=dict)
    variants: Mapping[str, str] = dataclasses.field(default_factory=dict)
    mrope: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    output_order: str | None = None
    config_path: tuple[str, ...] = ()
    config_model_type: str | None = None
    config_also: tuple[tuple[str, ...], ...] = ()
    config_class: str = ""
    refused: str = ""
    out_of_scope: str = ""

    @property
    def composite(self) -> bool:
        """Whether the model type's rotary settings live in a sub-config."""
        return bool(self.config_path)


_FIELDS = {f.name for f in dataclasses.fields(Family)}
_CACHE: dict[str, Family] = {}


def family(model_type: object) -> Family | None:
    """The facts of ``model_type``, or None for a model type transformers :data:`TRANSFORMERS_VERSION` lacks.

    Examples
    --------
    >>> from arrayrope.families import family
    >>> family("qwen2_vl").config_path
    ('text_config',)
    """
    if not isinstance(model_type, str):
        return None
    found = _CACHE.get(model_type)
    if found is None:
        raw = FAMILIES.get(model_type)
        if raw is None:
            return None
        found = _CACHE.setdefault(model_type, _entry(model_type, raw))
    return found


def part_of_class(class_name: str) -> str | None:
    """The table's key for a sub-config class without a model type of its own, or None.

    Examples
    --------
    >>> from arrayrope.families import part_of_class
    >>> part_of_class("Qwen3OmniMoeCode2WavConfig")
    'qwen3_omni_moe.code2wav_config'
    """
    if not _PARTS:
        _PARTS.update({raw["config_class"]: key for key, raw in FAMILIES.items() if "config_class" in raw})
        _PARTS.setdefault("", "")
    return _PARTS.get(class_name) or None


_PARTS: dict[str, str] = {}


def _entry(model_type: str, raw: Mapping[str, Any]) -> Family:
    """The :class:`Family` of a table entry (the lists of the table as tuples)."""
    unknown = set(raw) - _FIELDS
    if unknown:  # the table and this loader come from one generator
        raise RuntimeError(f"arrayrope.families: unknown fields {sorted(unknown)} for {model_type!r}")
    values = dict(raw)
    for key in ("config_path", "scaling_to", "legacy_stated"):
        if key in values:
            values[key] = tuple(values[key])
    if "legacy" in values:
        values["legacy"] = {k: tuple(tuple(x) for x in v) for k, v in values["legacy"].items()}
    if "legacy_when_stated" in values:
        values["legacy_when_stated"] = {k: tuple(tuple(x) for x in v) for k, v in values["legacy_when_stated"].items()}
    if "legacy_follows" in values:
        values["legacy_follows"] = {k: tuple(v) for k, v in values["legacy_follows"].items()}
    if "config_also" in values:
        values["config_also"] = tuple(tuple(x) for x in values["config_also"])
    return Family(model_type, **values)
