"""Configs read layer by layer (``layer_idx=``), against transformers' own model and attention layers.

Granite SWA builds a rotary module per base of ``layer_rope_theta`` (0: no RoPE), Muse reads that key for
its zeros only, Molmo 2 gives the layers of ``rope_scaling_layers`` the scaled tables. The oracle is what
each decoder layer of the family's own model receives as ``position_embeddings`` when the model runs
(``tools/_family_layers.py``), against ``from_config(cfg, layer_idx=i)``. Flint, Kolibri and Dory fill in
the layer types a config leaves out by a fixed pattern; Dory saves an ``"mlp"`` block after each layer's type.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import pytest
from _conformance import table_bound, transformers_probe

import arrayrope
from arrayrope.families import family

hp = transformers_probe()
import _family_layers as fl  # noqa: E402


@functools.cache
def _uses() -> dict[str, Any]:
    return {u.model_type: u for u in hp.rotary_uses() if u.model_type in MODEL_TYPES}


def _use(model_type: str) -> Any:
    return _uses()[model_type]


MODEL_TYPES = (
    "modernbert",
    "embedding_gemma2_text",
    "granite_swa",
    "granitemoe_swa",
    "muse_spark_text",
    "muse_glimmer_text",
    "molmo2_text",
    "flint",
    "kolibri1",
    "dory",
)


def _layers(model_type: str, **values: Any) -> tuple[dict[str, Any], list[Any]]:
    """The config dict a config.json would hold, and the tables each decoder layer of the model receives."""
    use = _use(model_type)
    config = hp.tiny_config(use.config_cls, **values)
    seen = fl.run_layers(use, config)
    assert seen is not None, f"transformers' {model_type} model did not run"
    return {"model_type": model_type, **config.probe_kwargs}, seen


def _family(model_type: str) -> Any:
    fam = family(model_type)
    assert fam is not None
    return fam


def _ours(cfg: dict[str, Any], **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return arrayrope.rope_frequencies_from_config(cfg, **kwargs)


def _assert_layer(cfg: dict[str, Any], i: int, theirs: Any) -> None:
    f = _ours(cfg, layer_idx=i)
    if theirs is None:
        assert f.rope_type == "none", f"transformers gives layer {i} no RoPE, arrayrope {f.rope_type!r}"
        return
    assert f.rope_type != "none", f"arrayrope gives layer {i} no RoPE, transformers rotates it"
    cos_t, sin_t = (np.asarray(t)[0, :, : f.rotary_dim // 2] for t in theirs)  # half layout: each pair once
    angles = fl.POSITIONS[:, None].astype(np.float64) * f.inv_freq
    cos, sin = arrayrope.rope_tables(f, fl.POSITIONS.astype(np.float64))
    # transformers' float32 tables: its own frequencies' rounding and the float32 angles
    bound = table_bound(angles, 8 * 2.0**-23 * (2 + np.log(f.base)), f.attention_factor)
    assert np.all(np.abs(cos - cos_t) <= bound), f"layer {i}: cos differs by {np.abs(cos - cos_t).max():.2e}"
    assert np.all(np.abs(sin - sin_t) <= bound), f"layer {i}: sin differs by {np.abs(sin - sin_t).max():.2e}"


@pytest.mark.parametrize("model_type", ["granite_swa", "granitemoe_swa"])
def test_a_base_per_layer(model_type):
    assert _family(model_type).per_layer == {"key": "layer_rope_theta", "sets": "rope_theta"}
    n = 6
    bases = [0, 1e4, 5e5, 0, 2e6, 1e4]
    cfg, seen = _layers(model_type, num_hidden_layers=n, layer_rope_theta=bases)
    assert [s is None for s in seen] == [b == 0 for b in bases]  # the oracle does have NoPE layers
    for i in range(n):
        _assert_layer(cfg, i, seen[i])
    with pytest.raises(ValueError, match=r"layer_rope_theta gives the layers the bases .*pass layer_idx="):
        _ours(cfg)
    one = {**cfg, "layer_rope_theta": [0, 5e5, 5e5, 0, 5e5, 5e5]}  # one base: read without a layer index
    assert _ours(one).base == 5e5
    with pytest.raises(ValueError, match=r"layer_rope_theta\[1\]"):
        _ours({**cfg, "layer_rope_theta": [0, -1.0, 1e4, 0, 1e4, 1e4]}, layer_idx=2)


@pytest.mark.parametrize("model_type", ["muse_spark_text", "muse_glimmer_text"])
def test_zeros_of_layer_rope_theta_are_layers_without_rope(model_type):
    assert _family(model_type).per_layer == {
        "key": "layer_rope_theta",
        "sets": "",
        "zeros": {"every": 4, "at": 0, "from": "last"},
    }
    for n in (6, 7):  # the default: every fourth layer from the last has no RoPE
        cfg, seen = _layers(model_type, num_hidden_layers=n)
        assert "layer_rope_theta" not in cfg  # the config class fills it in
        assert any(s is None for s in seen) and any(s is not None for s in seen)
        base = _family(model_type).defaults["rope_parameters"]["rope_theta"]
        stated = {**cfg, "layer_rope_theta": [0 if s is None else base for s in seen]}
        for i in range(n):
            _assert_layer(cfg, i, seen[i])
            _assert_layer(stated, i, seen[i])
    other = [0 if s is None else 2 * base for s in seen]
    _, seen_other = _layers(model_type, num_hidden_layers=n, layer_rope_theta=other)
    assert all((a is None and b is None) or np.array_equal(a[0], b[0]) for a, b in zip(seen, seen_other, strict=True))
    with pytest.raises(ValueError, match=r"reads only its zeros"):  # transformers ignores them: refused
        _ours({**cfg, "layer_rope_theta": other}, layer_idx=1)


def test_rope_scaling_layers_scale_the_layers_listed():
    assert _family("molmo2_text").per_layer == {"key": "rope_scaling_layers", "sets": "scaling"}
    scaled = {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4}
    cfg, seen = _layers("molmo2_text", num_hidden_layers=4, rope_parameters=scaled, rope_scaling_layers=[1, 3])
    assert not np.array_equal(seen[0][0], seen[1][0])  # the oracle's layers differ
    for i in range(4):
        _assert_layer(cfg, i, seen[i])
    assert _ours(cfg, layer_idx=1).rope_type == "linear" and _ours(cfg, layer_idx=0).rope_type == "default"
    with pytest.raises(ValueError, match=r"rope_scaling_layers=\[1, 3\].*pass layer_idx="):
        _ours(cfg)
    assert _ours({**cfg, "rope_scaling_layers": [0, 1, 2, 3]}).rope_type == "linear"
    assert _ours({**cfg, "rope_scaling_layers": []}).rope_type == "default"


# ---- layer types a config leaves out, by a fixed pattern of its config class; Dory's saved block list ----


@pytest.mark.parametrize("model_type", ["flint", "kolibri1", "dory"])
@pytest.mark.parametrize("n", [7, 9])
def test_each_layer_as_the_config_class_fills_in_its_types(model_type, n):
    """A config that states no layer_types (as a checkpoint's may not), and the one transformers saves (Dory's
    lists an "mlp" block after each layer's type and counts both): each layer rotates as transformers' attention
    layer of that index does, NoPE layers included."""
    use = _use(model_type)
    config = hp.tiny_config(use.config_cls, num_hidden_layers=n)
    with hp.quiet():
        saved = config.to_dict()
    hub = {"model_type": model_type, **config.probe_kwargs}
    assert "layer_types" not in hub
    for i in range(n):
        att = hp.Attention(use, config, i)
        _, rotating = hp.rotating_features(att)
        inv, _ = hp.module_frequencies(att.rotary, config.layer_types[i])
        for cfg in (hub, saved):
            f = _ours(cfg, layer_idx=i)
            if not rotating.size:
                assert f.rope_type == "none", (i, config.layer_types[i])
                continue
            assert f.rope_type != "none", (i, config.layer_types[i])
            assert inv is not None and np.allclose(f.inv_freq, inv, rtol=1e-6 * (2 + np.log(f.base)), atol=0), i
    with pytest.raises(ValueError, match=r"layer_idx=.* names"):
        _ours(hub, layer_idx=n)


def test_per_layer_lists_refuse_what_they_cannot_answer():
    """A layer index beyond the config's layers, indices that are not ints, and a list of zeros only (no layer
    rotates: the identity, as transformers gives every layer)."""
    muse = {"model_type": "muse_spark_text", "num_hidden_layers": 8, "head_dim": 64, "hidden_size": 512}
    with pytest.raises(ValueError, match=r"layer_idx=8 but the config has num_hidden_layers=8"):
        _ours(muse, layer_idx=8)
    molmo = {"model_type": "molmo2_text", "num_hidden_layers": 4, "head_dim": 64, "hidden_size": 512}
    with pytest.raises(ValueError, match=r"layer_idx=4 but"):
        _ours(molmo, layer_idx=4)
    with pytest.raises(ValueError, match=r"rope_scaling_layers must list layer indices"):
        _ours({**molmo, "rope_scaling_layers": [0.5]}, layer_idx=0)
    granite = {"model_type": "granite_swa", "num_hidden_layers": 4, "head_dim": 64, "hidden_size": 512}
    assert _ours({**granite, "layer_rope_theta": [0, 0, 0, 0]}).rope_type == "none"


@pytest.mark.parametrize(
    ("model_type", "key", "value"),
    [("modernbert", "global_attn_every_n_layers", 2), ("embedding_gemma2_text", "sliding_window_pattern", 3)],
)
def test_layer_types_from_a_key_arrayrope_does_not_model_are_not_guessed(model_type, key, value):
    """Their config classes fill in layer_types from a key, by a rule no pattern of the table holds: a layer index
    is refused (pass layer_type=) rather than read by the pattern of the key's default."""
    config = hp.tiny_config(_use(model_type).config_cls, **{key: value, "num_hidden_layers": 6})
    cfg = {"model_type": model_type, **config.probe_kwargs}
    assert "layer_types" not in cfg and len(set(config.layer_types)) == 2  # transformers' layers differ
    with pytest.raises(ValueError, match=r"pass layer_type="):
        _ours(cfg, layer_idx=2)
