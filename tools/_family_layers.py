"""Per-layer rope keys of a family, measured from its text model for ``tools/families.py``.

Some families choose each layer's rotation in the model, not in the attention layer: Granite SWA builds a
rotary module per base of ``layer_rope_theta`` (0: the layer has no RoPE), Muse reads the same key only
for its zeros, Molmo 2 gives the layers of ``rope_scaling_layers`` the scaled tables and the others the
unscaled ones. An attention layer run alone cannot show this. Here the family's model (the smallest default
config) runs once per setting of the key, and the ``position_embeddings`` each decoder layer receives are
compared: a uniform setting against another says whether the key changes the tables at all, and a mixed
setting says, layer by layer, which uniform one each layer follows.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Iterator
from typing import Any

import _hf_probe as hp
import numpy as np
import torch
import transformers

from arrayrope._config_layers import zero_layers

__all__ = ["POSITIONS", "layer_tables", "measure_per_layer", "run_layers", "text_model"]

# list-valued keys of a config that the nope rules or the layer types read, not this probe
_OTHER_RULES = frozenset({"no_rope_layers", "layer_types", "mrope_section"})
POSITIONS = np.array([0, 1, 2, 3, 7, 100, 1000, 5000], dtype=np.int64)


def text_model(use: hp.Use, config: Any, dtype: Any = torch.float64) -> Any:
    """The family's model built on ``config`` in ``dtype``, the one holding its decoder layers and rotary
    module; None where it has none that builds."""
    for obj in vars(use.module).values():
        if not (
            inspect.isclass(obj)
            and issubclass(obj, transformers.PreTrainedModel)
            and getattr(obj, "config_class", None) is use.config_cls
            and not obj.__name__.endswith("PreTrainedModel")
        ):
            continue
        try:
            with hp.quiet():
                previous = torch.get_default_dtype()
                torch.set_default_dtype(dtype)
                try:
                    config._attn_implementation = "eager"  # every model has it
                    torch.manual_seed(0)
                    model = obj(config)
                finally:
                    torch.set_default_dtype(previous)
        except Exception:
            continue
        if isinstance(getattr(model, "layers", None), torch.nn.ModuleList):
            return model.to(dtype).eval()
    return None


@contextlib.contextmanager
def _captured(model: Any) -> Iterator[dict[int, Any]]:
    """The ``position_embeddings`` each decoder layer of ``model`` receives (None: none), by layer index."""
    seen: dict[int, Any] = {}

    def hook(i: int) -> Any:
        def pre(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
            pe = kwargs.get("position_embeddings")
            seen[i] = None if pe is None else tuple(t.detach().to(torch.float64).numpy().copy() for t in pe)

        return pre

    handles = [layer.register_forward_pre_hook(hook(i), with_kwargs=True) for i, layer in enumerate(model.layers)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def layer_tables(use: hp.Use, values: dict[str, Any]) -> list[Any] | None:
    """(cos, sin) each decoder layer of the family's model receives at :data:`POSITIONS` (None: no RoPE), with
    the config keys ``values``; None where the model does not build or run."""
    try:
        config = hp.tiny_config(use.config_cls, **values)
    except Exception:
        return None
    return run_layers(use, config)


def run_layers(use: hp.Use, config: Any) -> list[Any] | None:
    """:func:`layer_tables` of the model built on ``config``."""
    embeds = np.random.default_rng(0).standard_normal((1, len(POSITIONS), config.hidden_size))
    for dtype in (torch.float64, torch.float32):  # float32 where a kernel (MoE's grouped matmul) has no float64
        model = text_model(use, config, dtype)
        if model is None:
            return None
        try:
            with _captured(model) as seen, hp.quiet(), torch.no_grad():
                x = torch.from_numpy(embeds).to(dtype)
                model(inputs_embeds=x, position_ids=torch.from_numpy(POSITIONS)[None], use_cache=False)
        except Exception:
            continue
        return [seen.get(i, "not run") for i in range(len(model.layers))]
    return None


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a is None and b is None  # a layer that did not run matches nothing
    return all(np.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(a, b, strict=True))


def measure_per_layer(use: hp.Use, p: Any) -> dict[str, Any] | str:
    """The family's per-layer rope key and what it sets: ``{"key": ..., "sets": "rope_theta"}`` (each layer's
    base, 0 for none), ``"sets": ""`` (0 for none, other values ignored), ``"sets": "scaling"`` (the listed
    layers scale, the others turn by the unscaled base); ``{}`` where it has none; a string: why not known."""
    fields = p.config.to_dict()
    keys = [
        k for k, v in fields.items() if isinstance(v, list) and ("rope" in k or "theta" in k) and k not in _OTHER_RULES
    ]
    if not keys:
        return {}
    if len(keys) > 1:
        return f"its config has several per-layer rope keys {keys}"
    key = keys[0]
    n = len(fields[key]) if fields[key] else int(fields.get("num_hidden_layers") or 0)
    rope = copy.deepcopy(dict(getattr(p.config, "rope_parameters", None) or {}))
    base = float(rope.get("rope_theta", 10_000.0))
    values = dict(p.values)
    if all(isinstance(x, int) and 0 <= x < n for x in fields[key]) and fields[key] == list(range(len(fields[key]))):
        # layer indices: the listed layers take the scaling of the rope parameters
        scaled = {**rope, "rope_type": "linear", "factor": 4.0}
        every = layer_tables(use, {**values, "rope_parameters": scaled, key: list(range(n))})
        none = layer_tables(use, {**values, "rope_parameters": scaled, key: []})
        plain = layer_tables(use, {**values, "rope_parameters": {**rope, "rope_type": "default"}, key: list(range(n))})
        mixed = layer_tables(use, {**values, "rope_parameters": scaled, key: [1]})
        if every is None or none is None or plain is None or mixed is None:
            return f"its model does not run with {key} set"
        unscaled = all(_same(a, b) for a, b in zip(none, plain, strict=True))
        if not unscaled or any(_same(a, b) for a, b in zip(every, none, strict=True)):
            return f"its {key} does not choose between the scaled and the unscaled tables"
        if not all(_same(mixed[i], every[i] if i == 1 else none[i]) for i in range(n)):
            return f"its {key} scales other layers than those it lists"
        return {"key": key, "sets": "scaling"}
    # one value per layer: a base (0: no RoPE)
    one = layer_tables(use, {**values, key: [base] * n})
    two = layer_tables(use, {**values, key: [2 * base] * n})
    stated = [0.0 if i % 3 == 0 else (2 * base if i % 3 == 2 else base) for i in range(n)]
    mixed = layer_tables(use, {**values, key: stated})
    if one is None or two is None or mixed is None:
        return f"its model does not run with {key} set"
    sets = "" if all(_same(a, b) for a, b in zip(one, two, strict=True)) else "rope_theta"
    for i, value in enumerate(stated):
        want = None if value == 0 else (two[i] if value == 2 * base else one[i])
        if not _same(mixed[i], want):
            return f"its {key} gives layer {i} tables arrayrope does not know"
    zeros = _default_zeros(use, p, key)
    if isinstance(zeros, str):
        return zeros
    return {"key": key, "sets": sets, **({"zeros": zeros} if zeros else {})}


def _default_zeros(use: hp.Use, p: Any, key: str) -> dict[str, Any] | str:
    """Where the config class puts zeros (layers without RoPE) in ``key`` when a config states none:
    ``{"every": k, "at": r, "from": "last"}`` (the layers ``i`` with ``(n - 1 - i) % k == r``; ``"first"``:
    ``i % k == r``), found over several layer counts; ``{}`` where it puts none."""
    found = {}
    for n in range(5, 11):
        try:
            config = hp.tiny_config(use.config_cls, **{**p.values, "num_hidden_layers": n})
        except Exception:
            continue
        values = list(getattr(config, key, None) or [])
        if len(values) == n:
            found[n] = [i for i, v in enumerate(values) if v == 0]
    if len(found) < 3:
        return f"its config class fills in {key} by a rule arrayrope could not measure"
    if not any(found.values()):
        return {}
    for every in range(2, 9):
        for at in range(every):
            for start in ("first", "last"):
                rule = {"every": every, "at": at, "from": start}
                if all(zeros == zero_layers(rule, n) for n, zeros in found.items()):
                    return rule
    return f"its config class leaves RoPE out of layers {found} by a rule arrayrope does not know"
