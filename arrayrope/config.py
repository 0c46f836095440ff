"""Rotary frequencies from a Hugging Face ``config.json`` (transformers v4 and v5 layouts)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._config_keys import CONFIG_KEYS, Settings
from ._config_read import no_rope, read, text_config
from ._lib import checks
from ._lib.files import read_regular_file
from .families import part_of_class
from .frequencies import RopeFrequencies, rope_frequencies, turned_back
from .scaling import rope_type

__all__ = [
    "CONFIG_KEYS",
    "MAX_CONFIG_BYTES",
    "TransformersConfig",
    "load_config",
    "no_rope",
    "rope_config",
    "rope_frequencies_from_config",
    "settings",
]


@runtime_checkable
class TransformersConfig(Protocol):
    """A config object, such as transformers' ``PretrainedConfig``: anything with ``to_dict()``.

    Its ``to_dict()`` gives the contents of its ``config.json``; every function that
    takes a config takes one.

    Methods
    -------
    to_dict()
        The config's keys and values.

    Examples
    --------
    >>> import arrayrope
    >>> from arrayrope.config import TransformersConfig
    >>> class Config:
    ...     def to_dict(self):
    ...         return {"head_dim": 64, "rope_theta": 1e6}
    >>> isinstance(Config(), TransformersConfig)
    True
    >>> arrayrope.rope_frequencies_from_config(Config()).base
    1000000.0
    """

    def __init__(self) -> None: ...  # a protocol takes no arguments (numpydoc reads this signature)

    def to_dict(self) -> dict[str, Any]:
        """The config's keys and values.

        Returns
        -------
        dict
            The config as ``config.json`` holds it.
        """
        ...


#: The largest config.json read (Hugging Face configs are a few KiB).
MAX_CONFIG_BYTES = 16 << 20


def rope_frequencies_from_config(
    config: Mapping[str, Any] | str | os.PathLike[str] | TransformersConfig,
    *,
    seq_len: int | None = None,
    layer_type: str | None = None,
    layer_idx: int | None = None,
) -> RopeFrequencies:
    """The :class:`RopeFrequencies` a model's config describes, as transformers computes them.

    Parameters
    ----------
    config : dict, TransformersConfig or path
        A parsed config, or the path of a ``config.json`` (or of the folder holding it).
        Read: ``head_dim`` (else ``hidden_size // num_attention_heads``), ``rope_theta``,
        ``partial_rotary_factor``, ``max_position_embeddings``,
        ``original_max_position_embeddings`` and the scaling dict, ``rope_scaling``
        (v4) or ``rope_parameters`` (v5, which may also hold ``rope_theta`` and
        ``partial_rotary_factor``), as the config class of its ``model_type`` reads
        them (:mod:`arrayrope.families`: aliases such as GPT-J's ``n_embd``, defaults
        for keys the file leaves out, the family's head-dim and rotary-dim rules). A
        multimodal config is read from the sub-config its family names
        (``text_config``, ``thinker_config.text_config``...).
    seq_len : int, optional
        Current sequence length, for the rope types that depend on it (``dynamic``:
        NTK base beyond ``max_position_embeddings``; ``longrope``: long factors
        beyond ``original_max_position_embeddings``). Default: the frequencies a
        model starts with.
    layer_type : {"full_attention", "sliding_attention"} or str, optional
        Which layers' rope, where it differs per layer type (transformers' names): v5
        ``rope_parameters`` keyed by layer type, and the v4 keys of families whose
        sliding-window layers have a base of their own (Gemma 3's ``rope_local_base_freq``,
        ModernBERT's ``local_rope_theta``). Such configs require it; a config with one set of
        parameters accepts any layer type its ``layer_types`` lists.
    layer_idx : int, optional
        One layer: its layer type from ``layer_types``, and, where the config marks layers
        without RoPE (``no_rope_layers``, ``no_rope_layer_interval``, a family's layer types
        without rotation), frequencies of 0 for those layers (``rope_type "none"``: cos 1,
        sin 0, the identity).

    Returns
    -------
    RopeFrequencies
        The frequencies transformers computes for this config (and layer type).

    Raises
    ------
    ValueError
        A key that changes RoPE in transformers but is not read here (named, with why),
        a per-layer config without ``layer_type``, and the checks of :func:`rope_frequencies`.

    Notes
    -----
    Where transformers has a precedence, the same one is used: a non-empty
    ``rope_scaling`` over ``rope_parameters``; ``rope_theta`` and ``partial_rotary_factor``
    in the dict over the top-level ones; a missing base is the model type's default
    (10000 for most; Gemma 3: 1e6 for full attention and 10000 for sliding windows;
    Llama 4: 500000...); for llama3, yarn and longrope a top-level
    ``original_max_position_embeddings`` (Phi-3) over the dict's, which falls back to
    ``max_position_embeddings``. Family keys: GPT-NeoX's ``rotary_pct`` (default 0.25) and
    ``rotary_emb_base``; GPT-J's and CodeGen's ``rotary_dim``; DeepSeek's (MLA)
    ``qk_rope_head_dim``, the rotary dim, rotating the trailing features of heads of
    ``qk_nope_head_dim + qk_rope_head_dim``. :data:`arrayrope.config.CONFIG_KEYS` lists
    every key transformers reads for rope with arrayrope's answer.

    Examples
    --------
    >>> import arrayrope
    >>> cfg = {"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
    ...        "max_position_embeddings": 131072,
    ...        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ...                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    >>> f = arrayrope.rope_frequencies_from_config(cfg)
    >>> f.rope_type, f.head_dim, f.inv_freq.shape
    ('llama3', 128, (64,))
    """
    s = settings(config, layer_type=layer_type, layer_idx=layer_idx)
    if seq_len is None or s.nope:
        return s.freqs
    seq_len = checks.non_negative_int(seq_len, "seq_len")
    if s.scaling is None or rope_type(s.scaling).length is None:
        return s.freqs  # a rope type that does not follow the sequence length
    with warnings.catch_warnings():  # what the scaling reports was reported once, when the config was read
        warnings.simplefilter("ignore")
        found = rope_frequencies(
            s.head_dim,
            base=s.base,
            rotary_dim=s.rotary_dim,
            partial_rotary_factor=s.partial_rotary_factor,
            scaling=s.scaling,
            max_position_embeddings=s.max_position_embeddings,
            seq_len=seq_len,
        )
    return turned_back(found) if bool(np.any(s.freqs.inv_freq < 0)) else found  # nanochat's turn the other way


def rope_config(
    config: Mapping[str, Any] | str | os.PathLike[str] | TransformersConfig,
    *,
    layer_type: str | None = None,
    layer_idx: int | None = None,
) -> dict[str, Any]:
    """The keyword arguments of :func:`rope_frequencies` that a config describes, checked.

    ``head_dim``, ``base``, ``rotary_dim``, ``partial_rotary_factor``, ``scaling`` and
    ``max_position_embeddings``; see :func:`rope_frequencies_from_config`.

    A path is read only when it is a regular file of at most :data:`MAX_CONFIG_BYTES`
    (FIFOs, devices and folders without ``config.json`` are refused without being
    read). Every problem with a file, from its bytes to a value of the wrong type or
    out of range, is one ``ValueError`` that names the file and the key.

    Parameters
    ----------
    config : dict, TransformersConfig or path
        A config as transformers writes it (``config.json``'s contents), or the path of that file or of
        the folder holding it.
    layer_type : str, optional
        The layer type whose parameters to read, for families with parameters per layer type
        (``"full_attention"``, ``"sliding_attention"``).
    layer_idx : int, optional
        The layer whose parameters to read (its layer type, its own overrides, whether it has RoPE).

    Returns
    -------
    dict
        The keyword arguments, for ``rope_frequencies(**rope_config(config))``.

    Examples
    --------
    >>> from arrayrope.config import rope_config
    >>> rope_config({"head_dim": 64, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    {'head_dim': 64, 'base': 1000000.0, 'rotary_dim': None, 'partial_rotary_factor': None, 'scaling': None, \
'max_position_embeddings': None}
    """
    s = settings(config, layer_type=layer_type, layer_idx=layer_idx)
    if s.nope:
        raise ValueError(
            f"layer {layer_idx} of this config has no RoPE; rope_frequencies_from_config gives its identity frequencies"
        )
    if s.freqs.inv_freq.size and s.freqs.inv_freq[0] < 0:
        raise ValueError(
            f"model type {s.model_type!r} turns each pair the other way, which rope_frequencies cannot be asked "
            "for; rope_frequencies_from_config gives its (negative) frequencies"
        )
    if s.rotary_dim is not None and s.partial_rotary_factor is not None:
        raise ValueError(
            f"model type {s.model_type!r} computes rope_type 'proportional' over its {s.rotary_dim} rotary features "
            f"of a {s.head_dim}-feature head, which rope_frequencies cannot be asked for; "
            "rope_frequencies_from_config gives its frequencies"
        )
    return {
        "head_dim": s.head_dim,
        "base": s.base,
        "rotary_dim": s.rotary_dim,
        "partial_rotary_factor": s.partial_rotary_factor,
        "scaling": s.scaling,
        "max_position_embeddings": s.max_position_embeddings,
    }


def settings(
    config: Mapping[str, Any] | str | os.PathLike[str] | TransformersConfig,
    *,
    layer_type: str | None = None,
    layer_idx: int | None = None,
) -> Settings:
    """Everything a config says about its rotary embedding (frequencies, rotary features, layout), checked.

    The config is read once: its frequencies (``.freqs``, at the model's starting length) are computed
    here, every value checked as :func:`rope_frequencies` checks it, and each warning of the scaling is
    given once. A problem is raised with the config (or the file) named, and from a file always as one
    ``ValueError``.

    Parameters
    ----------
    config : dict, TransformersConfig or path
        A config as transformers writes it (``config.json``'s contents), or the path of that file or of
        the folder holding it.
    layer_type : str, optional
        The layer type whose parameters to read, for families with parameters per layer type
        (``"full_attention"``, ``"sliding_attention"``).
    layer_idx : int, optional
        The layer whose parameters to read (its layer type, its own overrides, whether it has RoPE).

    Returns
    -------
    Settings
        The resolved settings, frequencies included, that :class:`~arrayrope.RotaryEmbedding` is built from.

    Examples
    --------
    >>> from arrayrope.config import settings
    >>> s = settings({"head_dim": 64, "rope_theta": 1e6, "partial_rotary_factor": 0.5})
    >>> s.head_dim, s.freqs.rotary_dim, s.freqs.base
    (64, 32, 1000000.0)
    """
    if layer_type is not None and not isinstance(layer_type, str):
        raise TypeError(f"layer_type must be a string such as 'full_attention', got {layer_type!r}")
    if layer_idx is not None and (isinstance(layer_idx, bool) or not isinstance(layer_idx, int)):
        raise TypeError(f"layer_idx must be an int (the layer's index), got {layer_idx!r}")
    cfg, where = _load(config)
    try:
        cfg, where, fam = text_config(cfg, where)
        return read(cfg, where, layer_type, layer_idx, fam)  # the frequencies checked here, so that errors name it
    except (TypeError, ValueError) as exc:
        message = str(exc)
        message = message if message.startswith(where) else f"{where}: {message}"
        if where.startswith("config") and not where.startswith("config file"):  # a dict: the error keeps its type
            raise type(exc)(message) from None
        raise ValueError(message) from None


def load_config(config: Mapping[str, Any] | str | os.PathLike[str] | TransformersConfig) -> Mapping[str, Any]:
    """A config as a mapping: a dict as it is, or a ``config.json`` (or its folder) read with the checks above.

    Parameters
    ----------
    config : dict, TransformersConfig or path
        A config as transformers writes it (``config.json``'s contents), or the path of that file or of
        the folder holding it.

    Returns
    -------
    mapping
        The config's keys and values.

    Examples
    --------
    >>> from arrayrope.config import load_config
    >>> load_config({"head_dim": 64})["head_dim"]
    64
    """
    return _load(config)[0]


def _load(config: Any) -> tuple[Mapping[str, Any], str]:
    """The config as a mapping, and how messages name it (``config`` or ``config file '...'``)."""
    if isinstance(config, Mapping):
        return config, "config"
    if not isinstance(config, (str, os.PathLike)):
        made = config.to_dict() if callable(getattr(config, "to_dict", None)) else None
        if isinstance(made, Mapping):  # a transformers config object
            part = None if made.get("model_type") else part_of_class(type(config).__name__)
            return ({**made, "model_type": part} if part else made), "config"
        raise TypeError(
            f"config must be a dict, a transformers config or the path of a config.json, got {type(config).__name__}"
        )
    path = os.fspath(config)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    where = f"config file {path!r}"
    raw = read_regular_file(path, where, MAX_CONFIG_BYTES)
    import json  # config files only: not at start-up

    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{where} is not UTF-8 text: {err}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} is not valid JSON: {err}") from None
    except RecursionError:
        raise ValueError(f"{where} nests JSON arrays or objects too deeply to be a config") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold a JSON object, got {type(data).__name__}")
    return data, where
