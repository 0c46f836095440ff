"""Comparing a measured rotation with its layer's expectation, and naming the first property that differs.

Properties are compared in the order a reader checks a conversion: which features pair up, how many rotate and
where, the head dim, the factor on cos and sin, the length of stored tables, then the angle at every probed
position. Where the angles differ, the difference is named in the config's terms by what the measured rotation
matches instead: the same rotation without its scaling, LongRoPE's other regime, or the base and scaling that
:func:`~arrayrope.testing.identify_rope` fits to it; else the pair and position where it is worst.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from arrayrope._identify import identify_rope
from arrayrope._identify.probe import pairs_of
from arrayrope._lib.verdicts import Status
from arrayrope.frequencies import RopeFrequencies, rope_frequencies

from ..build._spec import np_dtype
from ._expect import BLOCK, Expected, Layer, kind_of, length_context, pair_features, rotation_matrices
from ._measure import Matrices, Rotation
from ._mrope import mrope_finding

_LAYOUT_WORDS = {"half": "half-split", "interleaved": "interleaved"}
#: Relative error of float32 angles ``p * inv_freq`` (the product and the stored frequency rounded), with margin.
_ANGLE_EPS = 2.0**-21


@dataclasses.dataclass(frozen=True)
class Finding:
    """The audit of one rotation: what was expected, what was found, and the first difference.

    Parameters
    ----------
    name : str
        The node (or tensor) of the rotation.
    kind : str
        Its form: ``"rotation in standard ops"``, ``"RotaryEmbedding"``,
        ``"com.microsoft.GroupQueryAttention (do_rotary=1)"``...
    layer : int or None
        The layer it belongs to (from its node names), None where they do not say.
    status : {"verified", "failed", "not verified"}
        It matches the config at every position probed; a property differs; it could not be measured.
    expected : str
        The rotation the config gives this layer.
    found : str
        What was measured (as far as measured).
    difference : str
        The first property that differs, in the config's terms (empty when none); for ``"not verified"``, why.
    max_error : float
        The largest difference from the config's rotation at the positions probed (NaN where none ran).
    worst : str
        Where it is largest: position and pair.
    positions : tuple of int
        The positions probed.
    note : str
        What else was seen (what happens past the model's tables, a node ONNX Runtime refuses to run).

    Examples
    --------
    >>> from arrayrope.export import audit_rotary, rotary_model
    >>> model = rotary_model(16, target="portable", max_positions=64, layout="interleaved")
    >>> config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    >>> finding = audit_rotary(model, config).findings[0]
    >>> finding.status, finding.difference
    ('failed', 'pairs interleaved where the config pairs half-split')
    """

    name: str
    kind: str
    layer: int | None
    status: Status
    expected: str
    found: str = ""
    difference: str = ""
    max_error: float = math.nan
    worst: str = ""
    positions: tuple[int, ...] = ()
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["max_error"] = None if math.isnan(self.max_error) else self.max_error
        out["positions"] = list(self.positions)
        return out


def describe(layer: Layer, config: Mapping[str, Any]) -> str:
    """The expected rotation in one line: layout, rotary width, base, scaling."""
    s = layer.settings
    if s.nope:
        return "no rotation (a layer without RoPE)"
    f = layer.frequencies(config, BLOCK)
    scaling = "no scaling" if not s.scaling else f"{_type(s.scaling)} scaling"
    return (
        f"{_LAYOUT_WORDS[layer.layout]} pairs, rotary width {f.rotary_dim} of head_dim {f.head_dim}"
        f"{' (trailing)' if s.rotary_features == 'trailing' else ''}, rope_theta {s.base:g}, {scaling}"
        + (f", attention factor {f.attention_factor:.6g}" if f.attention_factor != 1.0 else "")
    )


def _type(scaling: Mapping[str, Any]) -> str:
    return kind_of(scaling)


def judge(rotation: Rotation, layer: Layer, exp: Expected) -> Finding:
    """The finding of ``rotation`` against ``layer`` of the config."""
    base = Finding(rotation.name, rotation.kind, rotation.layer, "not verified", describe(layer, exp.config))
    if layer.settings.nope:
        return dataclasses.replace(
            base,
            status="failed",
            found="a rotation",
            difference=f"layer {layer.index} rotates, but the config gives it no RoPE (a NoPE layer)",
        )
    if rotation.matrices is None:
        return dataclasses.replace(base, difference=f"it could not be measured: {rotation.reason}")
    try:
        return _Judge(rotation, layer, exp, base).run()
    except ValueError as exc:
        return dataclasses.replace(base, difference=f"it could not be measured: {exc}", note=rotation.note)


class _Judge:
    def __init__(self, rotation: Rotation, layer: Layer, exp: Expected, base: Finding) -> None:
        self.rotation, self.layer, self.exp, self.base = rotation, layer, exp, base
        self.s = layer.settings
        self.eps = rotation.eps
        assert rotation.matrices is not None
        self.matrices = rotation.matrices
        self.notes = [rotation.order] if rotation.order else []
        freqs = layer.frequencies(exp.config, BLOCK)
        if rotation.cut and rotation.head_dim == freqs.rotary_dim < freqs.head_dim:
            self.matrices = _in_head(rotation.matrices, freqs.head_dim, self.s.rotary_features)
            self.notes.append(
                f"it rotates its {freqs.rotary_dim} rotary features alone (the model joins the other "
                f"{freqs.head_dim - freqs.rotary_dim} of the head to them outside it): measured there, in the "
                f"{self.s.rotary_features} features of the head the config places them in"
            )

    def run(self) -> Finding:
        first = np.arange(BLOCK, dtype=np.int64)
        m0 = self.matrices(first)
        found, difference = self._structure(m0)
        worst, where, probed, notes = 0.0, "", [], list(self.notes)
        for what, positions in self.exp.blocks(self.rotation.rows):
            if self.rotation.rows is not None and positions.max() >= self.rotation.rows:
                continue  # past the model's tables: said by the table length
            try:
                m = m0 if np.array_equal(positions, first) else self.matrices(positions)
            except Exception as exc:  # ONNX Runtime refuses the positions (a table indexed past its rows)
                said = " ".join(str(exc).split("Status Message:")[-1].split())
                said = said[said.rfind("] ") + 2 :] if "] " in said else said  # ONNX Runtime's own words
                difference = difference or (
                    f"it does not run at positions {int(positions.min())}..{int(positions.max())} ({what}), which "
                    f"the config reaches: {said}"
                )
                continue
            excess, err, at = self._compare(m, positions)
            probed += positions.tolist()
            if err > worst:
                worst, where = err, at
            if excess > 1 and not difference:
                difference = self._name(m, positions, what)
            if difference.startswith("attention factor") and self.s.scaling and self._unscaled(m, positions):
                difference = (
                    f"{_type(self.s.scaling)} scaling missing: cos and sin unscaled and rope_theta "
                    f"{self.s.base:g}'s unscaled frequencies"
                )
        mrope, said = mrope_finding(self) if not difference else ("", "")
        difference = difference or mrope
        notes += [said] if said else []
        past = self._past()
        notes += [past] if past else []
        notes += [self.rotation.note] if self.rotation.note else []
        status: Status = "failed" if difference else "verified"
        if status == "verified" and self.rotation.note:
            status = "not verified"  # the node itself could not be run: its tables agree, its use of them is unchecked
            difference = self.rotation.note
        return dataclasses.replace(
            self.base,
            status=status,
            found=found,
            difference=difference,
            max_error=worst,
            worst=where,
            positions=tuple(probed),
            note="; ".join(notes),
        )

    def _structure(self, m0: npt.NDArray[np.float64]) -> tuple[str, str]:
        """What the first positions show (layout, width, head dim, factor), and the first of these that differs."""
        d = m0.shape[-1]
        freqs = self.layer.frequencies(self.exp.config, BLOCK)
        pairs = pairs_of(m0[1:], max(self.eps, 2.0**-24))
        if pairs is None:
            return "no rotation (every pair keeps cos 1, sin 0)", "it rotates nothing at positions 1..7"
        if isinstance(pairs, str):
            return pairs, f"it is no RoPE rotation: {pairs}"
        features = "leading" if pairs.start == 0 else "trailing"
        factor = float(np.median(m0[0][pairs.pairs[: pairs.turning].ravel(), pairs.pairs[: pairs.turning].ravel()]))
        found = (
            f"{_LAYOUT_WORDS[pairs.layout]} pairs, rotary width {pairs.width} of head_dim {d}"
            f"{' (trailing)' if features == 'trailing' else ''}"
            + (f", attention factor {factor:.6g}" if abs(factor - 1) > 8 * self.eps else "")
        )
        fam = f"model type {self.s.model_type!r}" if self.s.model_type else "the config"
        if d != freqs.head_dim:  # first: a config of another model, whatever else differs
            return found, f"head_dim {d} found, {freqs.head_dim} expected"
        if pairs.layout != self.layer.layout:
            return found, (f"pairs {_LAYOUT_WORDS[pairs.layout]} where {fam} pairs {_LAYOUT_WORDS[self.layer.layout]}")
        if pairs.width != freqs.rotary_dim:
            prf = self.s.partial_rotary_factor or _stated(self.exp.config, "partial_rotary_factor")
            why = (
                f"partial_rotary_factor {prf:g}"
                if isinstance(prf, (int, float)) and freqs.rotary_dim != freqs.head_dim
                else f"rotary_dim {freqs.rotary_dim}"
                if freqs.rotary_dim != freqs.head_dim
                else "the whole head"
            )
            return found, f"rotary width {pairs.width} found, {freqs.rotary_dim} expected ({why})"
        if features != self.s.rotary_features:
            return found, f"the {features} features rotate, the {self.s.rotary_features} ones expected"
        if abs(factor - freqs.attention_factor) > 8 * self.eps * max(1.0, freqs.attention_factor):
            return found, (
                f"attention factor {factor:.6g} found, {freqs.attention_factor:.6g} expected "
                f"(cos and sin scaled as {freqs.rope_type} gives)"
            )
        rows, longest = self.rotation.rows, self.s.max_position_embeddings
        context = length_context(self.s)
        if rows is not None and context is not None and rows < context[1]:
            return found, (
                f"tables hold {rows} rows, {context[2]} needs {context[1]}: positions {rows}..{context[1] - 1} "
                "cannot be rotated"
            )
        if rows is not None and longest is not None and rows < longest:
            return found, (
                f"tables hold {rows} rows, max_position_embeddings {longest} needs {longest}: positions "
                f"{rows}..{longest - 1} cannot be rotated"
            )
        return found, ""

    def tolerance(self, freqs: RopeFrequencies, positions: npt.NDArray[np.int64], d: int) -> npt.NDArray[np.float64]:
        """Per matrix entry: the rounding of the model's tables and its float32 angles (growing with the angle)."""
        key = ("tolerance", id(freqs), self.eps, repr(self.s), positions.tobytes(), d)
        if key not in self.layer.cache:
            self.layer.cache[key] = (freqs, self._tolerance_of(freqs, positions, d))  # freqs kept: its id stays its
        found: npt.NDArray[np.float64] = self.layer.cache[key][1]
        return found

    def _tolerance_of(
        self, freqs: RopeFrequencies, positions: npt.NDArray[np.int64], d: int
    ) -> npt.NDArray[np.float64]:
        a = max(freqs.attention_factor, 1.0)
        r = freqs.rotary_dim
        theta = np.abs(np.asarray(freqs.inv_freq, np.float64)[: r // 2])
        per_pair = a * (4 * self.eps + _ANGLE_EPS * float(positions.max()) * theta) + 2.0**-20
        tol = np.full((positions.shape[-1], d, d), 4 * self.eps + 2.0**-20)
        first, second = pair_features(d, r, self.layer.layout, self.s.rotary_features)
        for i, j in ((first, first), (second, second), (first, second), (second, first)):
            tol[:, i, j] = per_pair
        return tol

    def _compare(self, m: npt.NDArray[np.float64], positions: npt.NDArray[np.int64]) -> tuple[float, float, str]:
        """``(excess, error, where)``: the worst ratio of error to tolerance, the largest error and where it is."""
        e = self.layer.matrices(self.exp.config, positions)
        if e.shape != m.shape:
            return math.inf, math.inf, f"{span_of(positions)} (head_dim {m.shape[-1]})"
        freqs = self.layer.frequencies(self.exp.config, int(positions.max()) + 1)
        err = np.abs(m - e)
        if not np.all(np.isfinite(err)):
            return math.inf, math.inf, f"{span_of(positions)} (NaN or infinity)"
        ratio = err / self.tolerance(freqs, positions, m.shape[-1])
        s, i, j = np.unravel_index(int(np.argmax(err)), err.shape)
        return float(ratio.max()), float(err.max()), f"position {positions[s]}, features ({min(i, j)}, {max(i, j)})"

    def _fits(self, m: npt.NDArray[np.float64], freqs: RopeFrequencies, positions: npt.NDArray[np.int64]) -> bool:
        e = rotation_matrices(freqs, positions, self.layer.layout, self.s.rotary_features)
        return e.shape == m.shape and bool(np.all(np.abs(m - e) <= self.tolerance(freqs, positions, m.shape[-1])))

    def _unscaled(self, m: npt.NDArray[np.float64], positions: npt.NDArray[np.int64]) -> bool:
        """Whether ``m`` is the rotation of the config's base without its scaling (nor its attention factor)."""
        freqs = self.layer.frequencies(self.exp.config, BLOCK)
        plain = rope_frequencies(freqs.head_dim, base=self.s.base, rotary_dim=freqs.rotary_dim)
        return int(positions.max()) >= BLOCK and self._fits(m, plain, positions)

    def _name(self, m: npt.NDArray[np.float64], positions: npt.NDArray[np.int64], what: str) -> str:
        """The first difference of the angles at ``positions``, in the config's terms."""
        s, span = self.s, span_of(positions)
        freqs = self.layer.frequencies(self.exp.config, int(positions.max()) + 1)
        kind = _type(s.scaling) if s.scaling else "default"
        context = length_context(s)
        if kind == "longrope" and context is not None:
            original = context[0]
            other = self.layer.frequencies(self.exp.config, original if positions.max() >= original else original + 1)
            if self._fits(m, other, positions):
                if positions.max() >= original:
                    return f"long factors never used past {original}: {span} turn by the short factors"
                return f"long factors used below {original}: {span} turn by the long factors"
        if (
            context is not None
            and positions.max() >= context[0]
            and self._fits(m, self.layer.frequencies(self.exp.config, context[0]), positions)
        ):
            return (
                f"{kind} frequencies fixed at one length: {span} turn by the frequencies of a call of {context[0]} "
                f"positions, where transformers computes them for the call's {int(positions.max()) + 1}"
            )
        if s.scaling and self._unscaled(m, positions):
            return f"{kind} scaling missing: {span} turn by rope_theta {s.base:g}'s unscaled frequencies"
        for variant, said in _variants(s.scaling):
            other = rope_frequencies(
                freqs.head_dim,
                base=s.base,
                rotary_dim=freqs.rotary_dim,
                scaling=variant,
                max_position_embeddings=s.max_position_embeddings,
                seq_len=int(positions.max()) + 1,
            )
            if self._fits(m, other, positions):
                return said
        named = self._identified(freqs)
        if named:
            return named
        e = self.layer.matrices(self.exp.config, positions)
        err = np.abs(m - e)
        k, i, j = np.unravel_index(int(np.argmax(err)), err.shape)
        return (
            f"the angles differ from the config's {kind} rotation at {span} ({what}): worst at position "
            f"{positions[k]}, features ({min(i, j)}, {max(i, j)}), by {float(err.max()):.3g}"
        )

    def _identified(self, freqs: RopeFrequencies) -> str:
        """The base or scaling :func:`identify_rope` finds where it differs from the config's, else ''."""
        s = self.s
        d = freqs.head_dim
        limit = min(x for x in (self.rotation.rows, s.max_position_embeddings, 1 << 20) if x is not None) - 1

        # the result in the precision of the model's tables: the probe's uncertainties follow the output dtype
        out = np_dtype("bfloat16" if self.eps >= 2.0**-8 else "float16" if self.eps >= 2.0**-11 else "float64")

        def fn(x: npt.NDArray[Any], positions: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
            y: npt.NDArray[Any] = np.einsum(
                "sij,...sj->...si", self.matrices(np.asarray(positions, np.int64)), np.asarray(x)
            ).astype(out)
            return y

        try:
            found = identify_rope(fn, head_dim=d, dtype="float32", max_position=max(limit, 32), max_offset=0)
        except ValueError:
            return ""
        if not found.matched:
            return ""
        if found.base is not None and not math.isclose(found.base, s.base, rel_tol=1e-6):
            return f"rope_theta {found.base:g} found, {s.base:g} expected"
        want, got = s.scaling, found.scaling
        if want and not got:
            return f"{_type(want)} scaling missing (the frequencies are rope_theta {found.base:g}'s, unscaled)"
        if got and not want:
            return f"{_type(got)} scaling found ({_params(got)}), none expected"
        if got and want and _type(got) != _type(want):
            return f"{_type(got)} scaling found ({_params(got)}), {_type(want)} expected"
        if got and want:
            for key, value in got.items():
                if key in want and key not in ("rope_type", "type") and not _same(want[key], value):
                    return f"{_type(want)} {key} {value} found, {want[key]} expected"
        return ""

    def _past(self) -> str:
        """What the rotation does just past its stored tables."""
        rows = self.rotation.rows
        if rows is None:
            return ""
        positions = np.arange(rows, rows + 2, dtype=np.int64)
        try:
            m = self.matrices(positions)
        except Exception as exc:
            return f"past its {rows} rows of tables it fails ({' '.join(str(exc).split())[:160]})"
        if not np.all(np.isfinite(m)):
            return f"past its {rows} rows of tables it gives NaN"
        return f"past its {rows} rows of tables it still runs (positions {rows}.. are not checked)"


def span_of(positions: npt.NDArray[np.int64]) -> str:
    """``positions a..b`` for a block of consecutive positions, else the first ones and the call's last."""
    if np.array_equal(positions, np.arange(positions[0], positions[0] + len(positions))):
        return f"positions {positions[0]}..{positions[-1]}"
    return f"positions {positions[0]}..{positions[-2]} in a call reaching position {positions[-1]}"


def _in_head(matrices: Matrices, head_dim: int, features: str) -> Matrices:
    """``matrices`` of a rotation on the rotary features alone, placed in a head of ``head_dim`` (the identity on
    the others) at the ``features`` end."""

    def placed(positions: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        m = matrices(positions)
        r = m.shape[-1]
        start = 0 if features == "leading" else head_dim - r
        out = np.broadcast_to(np.eye(head_dim), (positions.shape[-1], head_dim, head_dim)).copy()
        out[:, start : start + r, start : start + r] = m
        return out

    return placed


def _variants(scaling: Mapping[str, Any] | None) -> list[tuple[dict[str, Any], str]]:
    """Scalings that other implementations compute from the same dict, each with what it says when it matches."""
    if not scaling or _type(scaling) != "yarn":
        return []
    truncate = bool(scaling.get("truncate", True))
    rounded = "rounded to whole pairs" if truncate else "left unrounded"
    return [
        (
            {**scaling, "truncate": not truncate},
            f"yarn truncate {not truncate} found, {truncate} expected: the ramp between beta_fast and beta_slow has "
            f"its bounds {'left unrounded' if truncate else 'rounded to whole pairs'}, where transformers has them "
            f"{rounded}",
        )
    ]


def _stated(config: Mapping[str, Any], key: str) -> Any:
    """``key`` where a config states it: at its top level, in its rope dict, or in its text config's."""
    for where in (config, config.get("text_config")):
        if isinstance(where, Mapping):
            for d in (where, where.get("rope_parameters"), where.get("rope_scaling")):
                if isinstance(d, Mapping) and d.get(key) is not None:
                    return d[key]
    return None


def _params(scaling: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in scaling.items() if k not in ("rope_type", "type"))


def _same(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    except (TypeError, ValueError):
        return bool(a == b)
