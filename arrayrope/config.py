"""Rotary frequencies from a Hugging Face ``config.json`` (transformers v4 and v5 layouts)."""

from __future__ import annotations

import json
import numbers
import os
import warnings
from collections.abc import Mapping
from typing import Any

from ._lib import checks
from ._lib.files import read_regular_file
from .frequencies import RopeFrequencies, rope_frequencies
from .scaling import rope_type

__all__ = ["MAX_CONFIG_BYTES", "load_config", "rope_config", "rope_frequencies_from_config"]

#: The largest config.json read (Hugging Face configs are a few KiB).
MAX_CONFIG_BYTES = 16 << 20


def rope_frequencies_from_config(
    config: Mapping[str, Any] | str | os.PathLike[str],
    *,
    seq_len: int | None = None,
    layer_type: str | None = None,
) -> RopeFrequencies:
    """The :class:`RopeFrequencies` a model's config describes, as transformers computes them.

    Parameters
    ----------
    config : dict or path
        A parsed config, or the path of a ``config.json`` (or of the folder holding it).
        Read: ``head_dim`` (else ``hidden_size // num_attention_heads``), ``rope_theta``,
        ``partial_rotary_factor``, ``max_position_embeddings``,
        ``original_max_position_embeddings`` and the scaling dict, ``rope_scaling``
        (v4) or ``rope_parameters`` (v5, which may also hold ``rope_theta`` and
        ``partial_rotary_factor``). A config without these fields but with a
        ``text_config`` (multimodal models) is read from its ``text_config``.
    seq_len : int, optional
        Current sequence length, for the rope types that depend on it (``dynamic``:
        NTK base beyond ``max_position_embeddings``; ``longrope``: long factors
        beyond ``original_max_position_embeddings``). Default: the frequencies a
        model starts with.
    layer_type : str, optional
        For v5 configs whose ``rope_parameters`` differ per layer type (for
        example ``{"full_attention": {...}, "sliding_attention": {...}}``): which one.

    Returns
    -------
    RopeFrequencies

    Notes
    -----
    Where transformers has a precedence, the same one is used: a non-empty
    ``rope_scaling`` over ``rope_parameters``; ``rope_theta`` in the dict over the
    top-level one (default 10000); a top-level ``partial_rotary_factor`` over the
    dict's; for llama3, yarn and longrope a top-level ``original_max_position_embeddings``
    (Phi-3) over the dict's, which falls back to ``max_position_embeddings``.
    GPT-NeoX's ``rotary_pct`` and ``rotary_emb_base`` are read as
    ``partial_rotary_factor`` and ``rope_theta``.

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
    kwargs = rope_config(config, layer_type=layer_type)
    with warnings.catch_warnings():  # keys the scaling ignores were reported by rope_config
        warnings.simplefilter("ignore")
        return rope_frequencies(**kwargs, seq_len=seq_len)


def rope_config(config: Mapping[str, Any] | str | os.PathLike[str], *, layer_type: str | None = None) -> dict[str, Any]:
    """The keyword arguments of :func:`rope_frequencies` that a config describes, checked.

    ``head_dim``, ``base``, ``partial_rotary_factor``, ``scaling`` and
    ``max_position_embeddings``; see :func:`rope_frequencies_from_config`.

    A path is read only when it is a regular file of at most :data:`MAX_CONFIG_BYTES`
    (FIFOs, devices and folders without ``config.json`` are refused without being
    read). Every problem with a file, from its bytes to a value of the wrong type or
    out of range, is one ``ValueError`` that names the file and the key.

    Examples
    --------
    >>> from arrayrope.config import rope_config
    >>> rope_config({"head_dim": 64, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    {'head_dim': 64, 'base': 1000000.0, 'partial_rotary_factor': None, 'scaling': None, 'max_position_embeddings': None}
    """
    if layer_type is not None and not isinstance(layer_type, str):
        raise TypeError(f"layer_type must be a string such as 'full_attention', got {layer_type!r}")
    cfg, where = _load(config)
    try:
        kwargs = _read(cfg, where, layer_type)
        rope_frequencies(**kwargs)  # every value checked here, so that errors name the file
    except (TypeError, ValueError) as exc:
        message = str(exc)
        message = message if message.startswith(where) else f"{where}: {message}"
        if where == "config":  # a dict: the error keeps its type
            raise type(exc)(message) from None
        raise ValueError(message) from None
    return kwargs


def _read(cfg: Mapping[str, Any], where: str, layer_type: str | None) -> dict[str, Any]:
    """The arguments of rope_frequencies in ``cfg`` (messages start with ``where``, naming the key)."""
    if not any(k in cfg for k in ("head_dim", "hidden_size")) and isinstance(cfg.get("text_config"), Mapping):
        cfg, where = cfg["text_config"], f"{where}['text_config']"
    head_dim = _head_dim(cfg, where)

    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters") or None
    if scaling is not None:
        if not isinstance(scaling, Mapping):
            raise TypeError(f"{where}: rope_scaling / rope_parameters must be an object, got {scaling!r}")
        scaling = _layer(scaling, layer_type, where)
        scaling = dict(scaling)
    elif layer_type is not None:
        raise ValueError(
            f"{where}: layer_type={layer_type!r} given but the config has no per-layer rope_parameters; "
            "leave layer_type=None"
        )

    base = cfg.get("rope_theta", cfg.get("rotary_emb_base"))
    if scaling is not None and scaling.get("rope_theta") is not None:
        base = scaling["rope_theta"]
    if base is None:
        base = 10000.0
    base = checks.positive_real(base, f"{where}: rope_theta")

    prf = cfg.get("partial_rotary_factor", cfg.get("rotary_pct"))
    if prf is None and scaling is not None:
        prf = scaling.get("partial_rotary_factor")
    if prf is not None:
        if isinstance(prf, bool) or not isinstance(prf, numbers.Real):
            raise TypeError(f"{where}: partial_rotary_factor must be a number in (0, 1], got {prf!r}")
        if prf == 1.0:
            prf = None

    max_len = cfg.get("max_position_embeddings")
    if max_len is not None:
        max_len = checks.positive_int(max_len, f"{where}: max_position_embeddings")

    if scaling is not None:
        scaling.pop("rope_theta", None)
        scaling.pop("partial_rotary_factor", None)
        entry = rope_type(scaling)
        original = cfg.get("original_max_position_embeddings")
        if entry.reads_original_length and original is not None:
            if isinstance(original, float) and original.is_integer():
                original = int(original)
            original = checks.positive_int(original, f"{where}: original_max_position_embeddings")
            scaling["original_max_position_embeddings"] = original
        if entry.name == "default" and not (set(scaling) - {"rope_type", "type"}):
            scaling = None
    return {
        "head_dim": head_dim,
        "base": base,
        "partial_rotary_factor": prf,
        "scaling": scaling,
        "max_position_embeddings": max_len,
    }


def load_config(config: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    """A config as a mapping: a dict as it is, or a ``config.json`` (or its folder) read with the checks above.

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
        raise TypeError(f"config must be a dict or the path of a config.json, got {type(config).__name__}")
    path = os.fspath(config)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    where = f"config file {path!r}"
    raw = read_regular_file(path, where, MAX_CONFIG_BYTES)
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


def _head_dim(config: Mapping[str, Any], where: str) -> int:
    head_dim = config.get("head_dim")
    if head_dim is not None:
        return checks.positive_int(head_dim, f"{where}: head_dim")
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if hidden is None or heads is None:
        missing = [k for k, v in (("hidden_size", hidden), ("num_attention_heads", heads)) if v is None]
        raise ValueError(
            f"{where} needs 'head_dim', or 'hidden_size' and 'num_attention_heads'; missing {missing}"
        )
    for name, v in (("hidden_size", hidden), ("num_attention_heads", heads)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
            raise ValueError(f"{where}: {name} must be a positive int, got {v!r}")
    return int(hidden) // int(heads)


def _layer(scaling: Mapping[str, Any], layer_type: str | None, where: str) -> Mapping[str, Any]:
    nested = bool(scaling) and all(isinstance(v, Mapping) for v in scaling.values())
    if not nested:
        if layer_type is not None:
            raise ValueError(f"{where}: layer_type={layer_type!r} given but the rope parameters are not per layer type")
        return scaling
    if layer_type is None:
        raise ValueError(f"{where}: rope_parameters differ per layer type {sorted(scaling)}; pass layer_type=")
    if layer_type not in scaling:
        raise ValueError(f"{where}: layer_type {layer_type!r} not in the config's {sorted(scaling)}")
    chosen: Mapping[str, Any] = scaling[layer_type]
    return chosen
