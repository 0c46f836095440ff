"""What :func:`~arrayrope.export.audit_rotary` found: one :class:`Finding` per rotation, and the layers without one."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from arrayrope._lib.verdicts import EXIT_STATUS, Status

from ._judge import Finding


@dataclasses.dataclass(frozen=True)
class AuditReport:
    """Every rotation of a model compared with the rotation its config describes, layer by layer.

    Parameters
    ----------
    model : str
        The model audited (its path, or ``"<ModelProto>"``).
    config : str
        The config (its path, or ``"<dict>"``).
    model_type : str or None
        The config's model type.
    findings : tuple of Finding
        One per rotation found, in graph order.
    missing : tuple of (int, str)
        ``(layer, what)`` for layers the config gives RoPE where no rotation was found.
    unplaced : tuple of str
        What could not be told of rotations whose node names do not say their layer.
    seconds : float
        How long the audit took.

    Notes
    -----
    ``status`` concludes, with the words of every verdict of arrayrope: ``"failed"`` when
    a rotation differs from its layer's in the config; else ``"not verified"`` when a
    rotation could not be measured, or a layer the config gives RoPE has none found
    (an audit never verifies what it did not compare); else ``"verified"``.

    Examples
    --------
    >>> from arrayrope.export import audit_rotary, rotary_model
    >>> model = rotary_model(16, target="portable", max_positions=64, base=10000.0)
    >>> config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    >>> report = audit_rotary(model, config)
    >>> report.status, report.exit_status
    ('verified', 0)
    """

    model: str
    config: str
    model_type: str | None
    findings: tuple[Finding, ...]
    missing: tuple[tuple[int, str], ...] = ()
    unplaced: tuple[str, ...] = ()
    seconds: float = math.nan

    @property
    def status(self) -> Status:
        """``"failed"``, ``"not verified"`` or ``"verified"`` (see Notes)."""
        if any(f.status == "failed" for f in self.findings):
            return "failed"
        if self.missing or self.unplaced or not self.findings or any(f.status != "verified" for f in self.findings):
            return "not verified"
        return "verified"

    @property
    def ok(self) -> bool:
        """Whether every rotation was measured and matches (``status == "verified"``)."""
        return self.status == "verified"

    @property
    def exit_status(self) -> int:
        """0 verified, 1 failed, 3 not verified."""
        return EXIT_STATUS[self.status]

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == "failed")

    def verdict(self) -> str:
        """One line: the status, what was compared, and the first difference or what was not verified."""
        n = len(self.findings)
        where = sorted({f.layer for f in self.findings if f.layer is not None})
        layers = f" in {len(where)} layer{'s' if len(where) != 1 else ''}" if where else ""
        if self.status == "failed":
            first = self.failures[0]
            at = f"layer {first.layer}" if first.layer is not None else first.name
            return f"failed: {len(self.failures)} of {n} rotations differ from the config; {at}: {first.difference}"
        unchecked = [f for f in self.findings if f.status != "verified"]
        if self.status == "not verified":
            parts = []
            if not self.findings:
                parts.append("no rotation was found in the model")
            if self.missing:
                parts.append(
                    f"no rotation found in layer{'s' if len(self.missing) > 1 else ''} "
                    + ", ".join(str(i) for i, _ in self.missing[:8])
                    + ("..." if len(self.missing) > 8 else "")
                    + " where the config gives RoPE"
                )
            parts += list(self.unplaced)
            if unchecked:
                f = unchecked[0]
                parts.append(f"{len(unchecked)} of {n} rotations not verified ({f.name}: {f.difference})")
            return "not verified: " + "; ".join(parts)
        worst = max(self.findings, key=lambda f: f.max_error)
        return (
            f"verified: {n} rotation{'s' if n != 1 else ''}{layers} match the config at every position probed "
            f"(largest difference {worst.max_error:.2g}, at {worst.worst})"
        )

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (what ``--json`` prints)."""
        return {
            "model": self.model,
            "config": self.config,
            "model_type": self.model_type,
            "status": self.status,
            "exit_status": self.exit_status,
            "verdict": self.verdict(),
            "rotations": [f.as_dict() for f in self.findings],
            "missing": [{"layer": i, "what": what} for i, what in self.missing],
            "unplaced": list(self.unplaced),
            "seconds": None if math.isnan(self.seconds) else round(self.seconds, 3),
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def __str__(self) -> str:
        lines = [f"audit of {self.model} against {self.config} (model type {self.model_type})"]
        for f in self.findings:
            at = f"layer {f.layer}" if f.layer is not None else "layer ?"
            lines.append(f"  {at}: {f.name} [{f.kind}]: {f.status}")
            lines.append(f"    expected: {f.expected}")
            if f.found:
                lines.append(f"    found:    {f.found}")
            if f.difference:
                lines.append(f"    {'differs' if f.status == 'failed' else 'why'}:  {f.difference}")
            if not math.isnan(f.max_error):
                span = f" over {len(f.positions)} positions up to {max(f.positions)}" if f.positions else ""
                lines.append(f"    largest difference {f.max_error:.3g} at {f.worst}{span}")
            if f.note:
                lines.append(f"    note: {f.note}")
        for i, what in self.missing:
            lines.append(f"  layer {i}: no rotation found ({what})")
        lines += [f"  {what}" for what in self.unplaced]
        return "\n".join(lines)
