"""Every transformers model family with a rotary embedding, against arrayrope's reading of its config.

For each model type of arrayrope's table (:mod:`arrayrope.families`) the family's default config, with
small sizes, is written as a ``config.json`` would hold it (the keys a hub config states, and the
full dict transformers saves); transformers builds its own rotary module and attention layer from it
(``tools/_hf_probe.py``) and arrayrope reads the same dict. Compared, per variant (the default config,
a partial-rotary one, each rope type the family's module computes, each layer type, a layer
without RoPE):

* ``inv_freq`` (within the rounding of transformers' float32 ``pow``) and the attention factor;
* cos/sin at positions up to 5000 in float32: transformers' tables against a float64 reference from
  its own ``inv_freq``, arrayrope's against one from its own, and the two ``inv_freq``;
* attention scores ``q_rot . k_rot`` over all pairs of positions with gaps (0 .. 4097), where
  transformers' are its attention layer's own (the queries and keys its kernel receives) and
  arrayrope's rotate the same unrotated queries and keys in float64: a wrong layout, wrong rotary
  features or a wrong direction gives differences of order one.

Each case ends as a match or as arrayrope's refusal (a ValueError naming the reason); model types
whose rotary embedding is not a 1-D one (vision encoders' 2-D grids) are listed as out of scope.
A silent difference fails. ``test_the_table_is_what_this_transformers_gives`` regenerates the table.
"""

from __future__ import annotations

import copy
import math
import pathlib
import sys
import warnings
from typing import Any

import numpy as np
import pytest
from _conformance import EPS32, inv_freq_rtol

import arrayrope
from arrayrope.families import FAMILIES, TRANSFORMERS_VERSION, family

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
torch = pytest.importorskip("torch", reason="torch is not installed")
TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))
import _hf_probe as hp  # noqa: E402

SAME_RELEASE = transformers.__version__ == TRANSFORMERS_VERSION
pytestmark = pytest.mark.skipif(
    not SAME_RELEASE,
    reason=(
        f"the table comes from transformers {TRANSFORMERS_VERSION}, this is {transformers.__version__}; "
        "regenerate it with python tools/families.py"
    ),
)

TABLE_POSITIONS = np.concatenate([np.arange(64), [100, 257, 1000, 2047, 2048, 2049, 4095, 4096, 4097, 5000]])
SCORE_POSITIONS = np.array([0, 1, 2, 3, 7, 16, 31, 100, 257, 1000, 2048, 4097])
# model types whose default configs a popular checkpoint shares: these must match, not be refused
POPULAR = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi",
    "phi3",
    "deepseek_v2",
    "deepseek_v3",
    "glm",
    "glm4",
    "gpt_neox",
    "gptj",
    "cohere",
    "llama4_text",
    "olmo2",
    "starcoder2",
    "granite",
    "smollm3",
    "gpt_oss",
    "ernie4_5",
    "modernbert",
)


def _uses() -> dict[str, list[hp.Use]]:
    out: dict[str, list[hp.Use]] = {}
    for use in hp.rotary_uses():
        out.setdefault(use.model_type, []).append(use)
    return out


USES = _uses() if SAME_RELEASE else {}


def _cases() -> list[Any]:
    cases = []
    for model_type, entry in sorted(FAMILIES.items()):
        if "config_path" in entry:
            cases.append(pytest.param(model_type, "composite", id=f"{model_type}-composite"))
            continue
        if "out_of_scope" in entry or "refused" in entry:
            cases.append(pytest.param(model_type, "as is", id=f"{model_type}-as-is"))
            continue
        variants = ["as is", "saved", "partial"]
        variants += [t for t in entry.get("defaults", {}).get("rope_types", ()) if t != "default"]
        variants += [f"variant {v}" for v in entry.get("variants", {})]
        cases += [pytest.param(model_type, v, id=f"{model_type}-{v.replace(' ', '-')}") for v in variants]
    return cases


SAMPLES = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 512,
    },
    "proportional": {"rope_type": "proportional", "partial_rotary_factor": 0.5},
}


def _longrope(half: int, original: int) -> dict[str, Any]:
    return {
        "rope_type": "longrope",
        "short_factor": [1.0 + i / half for i in range(half)],
        "long_factor": [1.5 + 2 * i / half for i in range(half)],
        "original_max_position_embeddings": original,
    }


def _with_rope(config: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``rope_parameters`` of ``config`` with ``params`` merged into the flat dict or every per-layer one."""
    base = copy.deepcopy(getattr(config, "rope_parameters", None) or {})
    keep = ("rope_theta", "partial_rotary_factor")
    if base and all(isinstance(v, dict) or v is None for v in base.values()):
        return {t: ({**{k: x for k, x in v.items() if k in keep}, **params} if v else v) for t, v in base.items()}
    return {**{k: x for k, x in base.items() if k in keep}, **params}


def _variant_kwargs(model_type: str, variant: str, probe: Any, rotary_half: int) -> dict[str, Any]:
    if variant in ("as is", "saved"):
        return {}
    if variant == "partial":
        return {"rope_parameters": _with_rope(probe.config, {**_flat(probe.config), "partial_rotary_factor": 0.5})}
    if variant == "longrope":
        rope = _with_rope(probe.config, _longrope(rotary_half, 512))
        return {"max_position_embeddings": 4096, "rope_parameters": rope}
    if variant.startswith("variant "):
        # every key of the family's own code for this rope type; an original length past the positions compared
        # (PhiMoE's short regime: beyond it, arrayrope refuses and test_config says why)
        kind, _, key = variant.removeprefix("variant ").partition("+")
        params = {**(SAMPLES.get(kind) or _longrope(rotary_half, 8192)), "original_max_position_embeddings": 8192}
        value = 1000.0 if key == "alpha" else 1.25
        extra = {k.partition("+")[2]: value for k in FAMILIES[model_type]["variants"] if k.startswith(kind + "+")}
        return {"max_position_embeddings": 16384, "rope_parameters": _with_rope(probe.config, {**params, **extra})}
    return {"max_position_embeddings": 2048, "rope_parameters": _with_rope(probe.config, SAMPLES[variant])}


def _flat(config: Any) -> dict[str, Any]:
    base = getattr(config, "rope_parameters", None) or {}
    if base and all(isinstance(v, dict) or v is None for v in base.values()):
        return {}
    return {k: v for k, v in base.items() if k != "partial_rotary_factor"}


class Refused(Exception):
    """arrayrope's refusal of a case."""


class TransformersFails(Exception):
    """transformers' own code raises on a case: nothing to compare."""


def _arrayrope(cfg: dict[str, Any], layer_type: str | None, layer_idx: int | None, seq_len: int) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            f = arrayrope.rope_frequencies_from_config(cfg, layer_type=layer_type, layer_idx=layer_idx, seq_len=seq_len)
            rope = arrayrope.RotaryEmbedding.from_config(cfg, layer_type=layer_type, layer_idx=layer_idx)
        except ValueError as exc:
            raise Refused(str(exc)) from None
    return f, rope


@pytest.mark.parametrize("model_type, variant", _cases())
def test_family(model_type, variant, record):
    entry = FAMILIES[model_type]
    if "config_path" in entry:
        return _composite(model_type, entry, record)
    if "out_of_scope" in entry or "refused" in entry:
        return _not_read(model_type, entry, record)
    use, probe = _probe(model_type)
    half = _module_half(probe, _layers_to_compare(model_type, probe)[0])
    kwargs = _variant_kwargs(model_type, variant, probe, half)
    try:
        config = _config(use, probe, kwargs)
    except Exception as exc:  # transformers' own config refuses the variant: nothing to compare
        pytest.skip(f"transformers refuses the {variant} config of {model_type}: {type(exc).__name__}: {exc}")
    cfg = (
        {"model_type": model_type, **hp_plain(config.probe_kwargs)}
        if variant != "saved"
        else hp_plain(config.to_dict())
    )
    if variant == "saved" and not cfg.get("model_type"):
        cfg = config  # a sub-config of no model type, saved with model_type "": as users hold it, transformers' object
    outcomes = []
    for idx in _layers_to_compare(model_type, probe):
        try:
            outcomes.append(_compare_layer(use, probe, config, cfg, idx, variant))
        except TransformersFails as exc:
            _record_sweep(
                record,
                model_type,
                variant,
                layout=entry.get("layout", ""),
                dtype="float32",
                outcome="transformers fails",
                note=str(exc),
            )
            pytest.skip(f"transformers' own code fails on the {variant} config of {model_type}: {exc}")
    if not outcomes:
        pytest.skip(f"no layer of the {variant} config of {model_type} runs alone in transformers")
    refused = [o for o in outcomes if o.startswith("refused")]
    outcome = "refused" if refused else "match"
    if model_type in POPULAR and variant in ("as is", "saved"):
        assert not refused, refused
    _record_sweep(
        record,
        model_type,
        variant,
        layout=entry.get("layout", ""),
        dtype="float32",
        outcome=outcome,
        note=refused[0].removeprefix("refused: ") if refused else "",
    )


def _config(use: hp.Use, probe: Any, kwargs: dict[str, Any]) -> Any:
    """The probe's config (the sizes its layers run with) with ``kwargs`` on top."""
    values = {**probe.config.probe_kwargs, **kwargs}
    with hp.quiet():
        config = use.config_cls(**copy.deepcopy(values))
    config.probe_kwargs = values
    return config


def hp_plain(value: Any) -> Any:
    import families

    return families._plain(value)


_PROBES: dict[str, Any] = {}


def _probe(model_type: str) -> Any:
    """The first rotary module of ``model_type`` whose attention runs (as the generator measured it)."""
    import families

    if model_type not in _PROBES:
        error: Exception | None = None
        for use in USES[model_type]:
            try:
                _PROBES[model_type] = use, families.Probe(use)
                break
            except Exception as exc:
                error = exc
        else:
            raise RuntimeError(f"no rotary module of {model_type} runs: {error}")
    return _PROBES[model_type]


def _layers(config: Any) -> int:
    import families

    return int(families._layer_count(config))


def _module_half(probe: Any, idx: int) -> int:
    att = probe.attention(idx)
    inv, _ = hp.module_frequencies(att.rotary, att.layer_type)
    return int(inv.size) if inv is not None else 32


_LAYERS: dict[str, list[int]] = {}


def _layers_to_compare(model_type: str, probe: Any) -> list[int]:
    """One layer of each layer type, and one without RoPE where the default config has such layers."""
    if model_type not in _LAYERS:
        seen: dict[Any, int] = {}
        for i in range(_layers(probe.config)):
            try:
                att = probe.attention(i)
                _, rot = hp.rotating_features(att)
            except Exception:
                continue
            seen.setdefault((att.layer_type, bool(rot.size)), i)
        _LAYERS[model_type] = sorted(seen.values())
    return _LAYERS[model_type]


def _compare_layer(use: hp.Use, probe: Any, config: Any, cfg: dict[str, Any], idx: int, variant: str) -> str:
    att = probe.attention(idx, config)
    layer_type = att.layer_type  # the rotary module's label of the layer (None where it keeps one set)
    seq = int(TABLE_POSITIONS.max()) + 1
    try:
        f, rope = _arrayrope(cfg, layer_type, idx, seq)
    except Refused as exc:
        refused = f"refused: {exc}"
    else:
        refused = ""
    try:
        _, rotating = hp.rotating_features(att)
        hp.run_tokens(att, SCORE_POSITIONS[SCORE_POSITIONS < 2048])
    except Exception as exc:  # a refusal of a config transformers cannot run either counts as its failure
        raise TransformersFails(f"{type(exc).__name__}: {exc}") from None
    if refused:
        return refused
    if not rotating.size:  # a layer without RoPE: arrayrope gives the identity there
        assert not np.any(f.inv_freq), (idx, f)
        _scores(att, rope, f, SCORE_POSITIONS)
        return "match"
    _tables(att, f, layer_type, seq)
    _scores(att, rope, f, SCORE_POSITIONS)
    return "match"


def _tables(att: hp.Attention, f: Any, layer_type: str | None, seq: int) -> None:
    """inv_freq, attention factor and cos/sin of transformers' module against arrayrope's."""
    rot = att._rotary()  # a fresh module: length-dependent ones keep the frequencies of the longest call
    table = dict(rot.named_buffers()).get("embed_positions")
    positions = TABLE_POSITIONS if table is None else TABLE_POSITIONS[table.shape[0] > TABLE_POSITIONS]
    cos_t, sin_t = hp.module_tables(rot, positions, layer_type)  # also updates length-dependent modules
    inv_t, _ = hp.module_frequencies(rot, layer_type)
    factor = float(cos_t[0].max())  # cos at position 0: the factor it applies
    assert math.isclose(factor, f.attention_factor, rel_tol=2 * EPS32), (factor, f.attention_factor)
    inv = f.inv_freq
    if inv_t is None:  # GPT-J, CodeGen: a fixed table; its frequencies are its first row's angles
        c1, s1 = hp.module_tables(rot, np.array([0, 1]), layer_type)
        inv_t = np.unique(np.round(np.arctan2(s1[1], c1[1]), 12))[::-1]
    # the same frequencies (a module may keep them in another order: Ernie 4.5 VL's sections), as many zeros;
    # negated where the family's pairs turn the other way (the module's are magnitudes)
    fam = family(att.use.model_type)
    direction = fam.direction if fam is not None else 1
    ours, theirs = np.sort(direction * inv[inv != 0]), np.sort(inv_t[inv_t != 0])
    assert ours.shape == theirs.shape, (inv_t, inv)
    rel = float(np.max(np.abs(theirs - ours) / np.abs(ours))) if ours.size else 0.0
    assert rel <= inv_freq_rtol(f.base * 4), rel
    # transformers' tables against float64 ones from its own inv_freq; arrayrope's against its own
    angles_t = positions[:, None].astype(np.float64) * np.concatenate([inv_t, [0.0]])
    ref_c, ref_s = factor * np.cos(angles_t), factor * np.sin(angles_t)
    cols = _columns(cos_t, sin_t, ref_c, ref_s)
    bound = factor * (2 * EPS32 + np.abs(angles_t) * 2 * EPS32)
    assert np.all(np.abs(cos_t - ref_c[:, cols]) <= bound[:, cols]), "transformers' cos"
    assert np.all(np.abs(sin_t - ref_s[:, cols]) <= bound[:, cols]), "transformers' sin"
    cos_a, sin_a = arrayrope.rope_tables(f, positions, dtype=np.float32)
    angles_a = positions[:, None].astype(np.float64) * inv
    assert np.all(np.abs(cos_a - f.attention_factor * np.cos(angles_a)) <= 2 * EPS32 * f.attention_factor)
    assert np.all(np.abs(sin_a - f.attention_factor * np.sin(angles_a)) <= 2 * EPS32 * f.attention_factor)


def _columns(cos_t: np.ndarray, sin_t: np.ndarray, ref_c: np.ndarray, ref_s: np.ndarray) -> np.ndarray:
    """For each column of transformers' tables, the pair it holds (the nearest reference column)."""
    err = np.max(np.abs(cos_t[:, :, None] - ref_c[:, None, :]) + np.abs(sin_t[:, :, None] - ref_s[:, None, :]), axis=0)
    return np.argmin(err, axis=1)


def _scores(att: hp.Attention, rope: Any, f: Any, positions: np.ndarray) -> None:
    """q_rot . k_rot over all pairs of positions (and of heads): transformers' attention layer against arrayrope's
    rotation of the same unrotated queries and keys."""
    table = dict(att.rotary.named_buffers()).get("embed_positions")
    if table is not None:  # GPT-J, CodeGen: a table of its n_positions rows
        positions = positions[positions < table.shape[0]]
    att = hp.Attention(att.use, att.config, att.layer_idx)  # fresh: length-dependent modules keep their longest
    q0, k0 = hp.run_tokens(att, positions, identity=True)
    q1, k1 = hp.run_tokens(att, positions)
    s = len(positions)
    k0, k1 = k0[:, :, :s], k1[:, :, :s]  # merged self and cross attention (T5Gemma 2): the self part
    pos = torch.from_numpy(positions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if att.one_token:  # each run had its own length: so has each rotation
            runs = [
                rope(q0[:, :, i : i + 1], k0[:, :, i : i + 1], positions=pos[i : i + 1], seq_len=int(p) + 1)
                for i, p in enumerate(positions)
            ]
            qa, ka = torch.cat([q for q, _ in runs], dim=2), torch.cat([k for _, k in runs], dim=2)
        else:
            qa, ka = rope(q0, k0, positions=pos, seq_len=int(positions.max()) + 1)
    if positions[0] == 0 and f.attention_factor != 1.0:
        # a norm after the rotation (Hunyuan's query_layernorm) takes the factor out again: so does the reference
        seen = float(q1[:, :, 0].norm() / q0[:, :, 0].norm())
        if abs(seen - 1.0) < 1e-4:
            qa, ka = qa / f.attention_factor, ka / f.attention_factor

    def scores(q: Any, k: Any) -> np.ndarray:
        return torch.einsum("bhsd,bgtd->bhgst", q, k).numpy()

    s_t, s_a = scores(q1, k1), scores(qa, ka)
    angle = float(np.max(np.abs(f.inv_freq))) * float(positions.max())  # negative: pairs turning the other way
    delta = f.attention_factor * (4 * EPS32 + angle * 4 * EPS32) + 1e-12
    bound = 2 * delta * scores(q0.abs(), k0.abs()) * max(1.0, f.attention_factor)
    worst = float(np.max(np.abs(s_t - s_a) - bound))
    assert worst <= 0, f"attention scores differ by {float(np.max(np.abs(s_t - s_a))):.3g} (bound {bound.max():.3g})"


def _composite(model_type: str, entry: dict[str, Any], record: Any) -> None:
    """A multimodal config is read from the sub-config its family names, as that model type's own config."""
    from transformers import CONFIG_MAPPING

    with hp.quiet():
        config = CONFIG_MAPPING[model_type]()
    saved = hp_plain(config.to_dict())
    sub = saved
    for key in entry["config_path"]:
        sub = sub[key]
    nested_type = sub.get("model_type") or entry["config_model_type"]
    fam = family(nested_type)
    assert fam is not None
    outcome, note = "match", ""
    try:
        ours = arrayrope.config.settings(saved, layer_type=_first_type(sub))
        theirs = arrayrope.config.settings({**sub, "model_type": nested_type}, layer_type=_first_type(sub))
        assert (ours.head_dim, ours.base, ours.rotary_dim, ours.layout) == (
            theirs.head_dim,
            theirs.base,
            theirs.rotary_dim,
            theirs.layout,
        )
    except ValueError as exc:
        outcome, note = "refused", str(exc)
        if fam.mrope.get("required") and "needs rope_parameters['mrope_section']" in note:
            outcome = "transformers fails"  # the table's "required": its rotary module fails without them too
    _record_sweep(record, model_type, "composite", layout="", dtype="", outcome=outcome, note=note)


def _first_type(sub: dict[str, Any]) -> str | None:
    params = sub.get("rope_parameters") or {}
    if params and all(isinstance(v, dict) or v is None for v in params.values()):
        return next(t for t, v in params.items() if v is not None)
    return None


def _not_read(model_type: str, entry: dict[str, Any], record: Any) -> None:
    """A model type arrayrope does not read: its config is refused with the table's reason."""
    reason = entry.get("out_of_scope") or entry.get("refused")
    assert reason
    cfg = {"model_type": model_type, "head_dim": 64, "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="model type"):
        arrayrope.RotaryEmbedding.from_config(cfg)
    _record_sweep(
        record,
        model_type,
        "as is",
        layout="",
        dtype="",
        outcome="out of scope" if "out_of_scope" in entry else "refused",
        note=reason,
    )


def _record_sweep(
    record: Any, model_type: str, rope_type: str, *, layout: str, dtype: str, outcome: str, note: str
) -> None:
    """One row of the family sweep's table: an outcome, with no error figures (those rows come from the others)."""
    nan = float("nan")
    record(
        library="transformers",
        family=model_type,
        rope_type=rope_type,
        layout=layout,
        compared="sweep",
        dtype=dtype,
        max_error=nan,
        library_error=nan,
        arrayrope_error=nan,
        tolerance=nan,
        outcome=outcome,
        note=note,
    )


def test_the_table_is_what_this_transformers_gives(regeneration):
    """Regenerate the table from the installed transformers: a new release shows what changed.

    ``python tools/families.py --check`` runs beside the other tests (see conftest): it exits 0 when the fresh
    table is the shipped one, and prints the differences otherwise."""
    status, output = regeneration
    if status != 0:
        pytest.fail(
            "arrayrope/families/_table.py differs from what transformers gives; run python "
            "tools/families.py and review:\n" + output[-20000:]
        )
