"""A config as its family's config class reads it: :class:`View` looks a key up under its alias, in the layer's
own overrides (``per_layer_config``, or the older keys its class turns into them), then the class's default.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .families import Family

__all__ = ["GENERIC_ALIASES", "LAYER_DIMS", "ROPE_OR_HEAD", "View", "kept_types"]

#: Keys older configs of any family name otherwise (GPT-2's, GPT-NeoX's).
GENERIC_ALIASES = {
    "hidden_size": ("n_embd",),
    "num_attention_heads": ("n_head",),
    "max_position_embeddings": ("n_positions",),
    "partial_rotary_factor": ("rotary_pct",),
    "rope_theta": ("rotary_emb_base",),
}

#: Keys that change RoPE (or the head dim it turns) in transformers.
ROPE_OR_HEAD = re.compile(r"rope|rotary|theta|^head_dim$|^partial_rotary_factor$")


#: The per-layer overrides (transformers' ``per_layer_config``) that give a layer's head dim or rotary dim.
LAYER_DIMS = frozenset({"head_dim", "qk_nope_head_dim", "qk_rope_head_dim", "num_attention_heads"})


def kept_types(types: Any, fam: Family | None) -> Any:
    """A stated ``layer_types`` as the family's config class keeps it: the names it rewrites
    (:attr:`Family.layer_type_renames`), the last layer of the type it forces (Gemma 4's ``full_attention``,
    :attr:`Family.last_layer_type`)."""
    if fam is None or not isinstance(types, (list, tuple)) or not types:
        return types
    out = [fam.layer_type_renames.get(t, t) if isinstance(t, str) else t for t in types]
    if fam.last_layer_type:
        out[-1] = fam.last_layer_type
    return out


class View:
    """A config as its family's config class reads it: a key under its alias, the layer's override, the default."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        fam: Family | None,
        where: str,
        layer_idx: int | None = None,
        layer_type: str | None = None,
        types: Sequence[Any] | None = None,
    ) -> None:
        self.cfg, self.fam, self.where = cfg, fam, where
        self.layer: Mapping[str, Any] = {}
        overrides = cfg.get("per_layer_config")
        if isinstance(overrides, Mapping):
            self.layer = self._override(overrides, layer_idx, layer_type, types)
        elif fam is not None and layer_type is not None and "per_layer_config" not in cfg:
            # older keys the config class turns into this layer type's overrides where the config states none
            # (Gemma 4's global_head_dim, Dots3 Note's swa_qk_nope_head_dim...)
            layer: dict[str, Any] = {}
            for key, targets in fam.legacy.items():
                params = [p for t, p in targets if t == layer_type and p in LAYER_DIMS]
                value = self._older(key) if params else None
                layer.update({p: value for p in params if value is not None})
            self.layer = layer

    def _override(
        self, overrides: Mapping[Any, Any], layer_idx: int | None, layer_type: str | None, types: Sequence[Any] | None
    ) -> Mapping[str, Any]:
        """The ``per_layer_config`` entry of layer ``layer_idx``, or the one the layers of ``layer_type`` share
        (``types``: the config's layer types where it states none); a head dim it cannot place is refused."""
        by_index: dict[int, Any] = {}
        for k, entry in overrides.items():  # transformers saves the indices zero-padded ("05" of 46 layers)
            try:
                by_index[int(k)] = entry
            except (TypeError, ValueError):
                raise ValueError(f"{self.where}: per_layer_config keys must be layer indices, got {k!r}") from None
        for i, entry in by_index.items():
            if not isinstance(entry, Mapping):
                continue
            rope = sorted(k for k in entry if ROPE_OR_HEAD.search(str(k)) and k not in LAYER_DIMS)
            if rope:
                raise ValueError(
                    f"{self.where}: per_layer_config[{i}] states {rope}, rope settings of one layer, which arrayrope "
                    "does not read; state them in rope_parameters"
                )
        dims = sorted(i for i, e in by_index.items() if isinstance(e, Mapping) and LAYER_DIMS & set(e))
        if layer_idx is None and layer_type is not None:
            listed = kept_types(self.cfg.get("layer_types") or types, self.fam)
            same = [i for i, t in enumerate(listed or ()) if t == layer_type]
            if not same and dims:
                raise ValueError(
                    f"{self.where}: per_layer_config gives layers {dims} head dims of their own, and the config has "
                    f"no layer_types to say which layers are {layer_type!r}; pass layer_idx= or state layer_types"
                )
            shared = [{k: v for k, v in (by_index.get(i) or {}).items() if k in LAYER_DIMS} for i in same]
            if any(d != shared[0] for d in shared):
                raise ValueError(
                    f"{self.where}: per_layer_config gives the {layer_type!r} layers different head dims; "
                    "pass layer_idx="
                )
            layer_idx = same[0] if same else None
        entry = by_index.get(layer_idx) if layer_idx is not None else None
        return entry if isinstance(entry, Mapping) else {}

    def _older(self, key: str) -> Any:
        """An older per-layer key: as stated, else its default where the config states none of what it follows."""
        assert self.fam is not None
        if self.cfg.get(key) is not None:
            return self.cfg[key]
        follows = [k for k in self.fam.legacy_follows.get(key, ()) if self.cfg.get(k) is not None]
        if follows:
            raise ValueError(
                f"{self.where}: states {', '.join(follows)} but not {key}, whose default transformers' "
                f"{self.fam.model_type} computes from them; arrayrope does not: state {key}"
            )
        return self.fam.defaults.get(key)

    def names(self, key: str) -> tuple[str, ...]:
        """The config keys that give ``key``, first wins."""
        if self.fam is None:
            return (key, *GENERIC_ALIASES.get(key, ()))
        alias = self.fam.aliases.get(key)
        return (alias, key) if alias else (key,)

    def raw(self, key: str) -> Any:
        """``key`` as the file states it (None where it does not)."""
        if key in self.layer and self.layer[key] is not None:
            return self.layer[key]
        for name in self.names(key):
            if self.cfg.get(name) is not None:
                return self.cfg[name]
        return None

    def get(self, key: str) -> Any:
        """``key`` as the file states it, else the family's default (None for a model type without facts)."""
        value = self.raw(key)
        if value is None and self.fam is not None:
            value = self.fam.defaults.get(key)
        return value

    def stated(self, key: str) -> str:
        """The name ``key`` has in the file, for messages."""
        return next((n for n in self.names(key) if self.cfg.get(n) is not None), key)

    def size(self, key: str) -> int:
        value = self.get(key)
        if value is None:
            raise ValueError(f"{self.where} needs {key!r}{self._no_default()}")
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
            raise ValueError(f"{self.where}: {self.stated(key)} must be a positive int, got {value!r}")
        return int(value)

    def _no_default(self) -> str:
        if self.fam is None:
            return " (a model type arrayrope has no facts for states its sizes)"
        return ""
