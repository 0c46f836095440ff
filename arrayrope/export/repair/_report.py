"""What a repair did to each rotation, and the audit of the repaired model."""

from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple

import onnx

from arrayrope._lib.verdicts import Status

from ..audit._report import AuditReport


class Change(NamedTuple):
    """One rotation of a repaired model: what the audit found, and what took its place.

    Parameters
    ----------
    name : str
        The node (or tensor) of the rotation.
    kind : str
        Its form, as the audit says it.
    layer : int or None
        Its layer, from its node names.
    before : str
        How it differed from the config (empty where it matched).
    after : str
        What rotates in its place (empty where it was kept).
    repaired : bool
        Whether it was rewritten.
    reason : str
        Why it was kept: it matches the config, or why it could not be rewritten.
    """

    name: str
    kind: str
    layer: int | None
    before: str
    after: str
    repaired: bool = False
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class RepairReport:
    """Each rotation of a model before and after a repair, and the audit of the repaired model.

    Parameters
    ----------
    changes : tuple of Change
        One per rotation the audit found, in graph order.
    before : AuditReport
        The audit of the model as it was.
    after : AuditReport
        The audit of the repaired model: its status is the repair's.
    data_folder : str or None
        Where the weights kept in external data files are (None: inside the model).

    Examples
    --------
    >>> from arrayrope.export import repair_rotary, rotary_model
    >>> model = rotary_model(16, target="portable", max_positions=64)
    >>> config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    >>> report = repair_rotary(model, config).report
    >>> report.repaired, report.changes[0].reason, report.exit_status
    (0, 'it matches the config', 0)
    """

    changes: tuple[Change, ...]
    before: AuditReport
    after: AuditReport
    data_folder: str | None = None

    @property
    def repaired(self) -> int:
        """How many rotations were rewritten."""
        return sum(c.repaired for c in self.changes)

    @property
    def status(self) -> Status:
        """The status of the audit of the repaired model."""
        return self.after.status

    @property
    def exit_status(self) -> int:
        """0 verified, 1 failed, 3 not verified: that of the audit of the repaired model."""
        return self.after.exit_status

    def verdict(self) -> str:
        """One line: what was rewritten, and the verdict of the audit of the repaired model."""
        n = len(self.changes)
        return f"{self.after.verdict()} ({self.repaired} of {n} rotation{'s' if n != 1 else ''} rewritten)"

    def __str__(self) -> str:
        lines = [f"repair of {self.before.model} against {self.before.config}"]
        for c in self.changes:
            at = f"layer {c.layer}" if c.layer is not None else "layer ?"
            if c.repaired:
                lines.append(f"  {at}: {c.name} [{c.kind}]: rewritten")
                lines.append(f"    before: {c.before}")
                lines.append(f"    after:  {c.after}")
            else:
                lines.append(f"  {at}: {c.name} [{c.kind}]: kept: {c.reason}")
        rewritten = any(c.repaired for c in self.changes)
        lines.append("the repaired model, audited again:" if rewritten else "nothing rewritten; the model's audit:")
        lines += ["  " + line for line in str(self.after).splitlines()[1:]]
        return "\n".join(lines)


class Repaired(NamedTuple):
    """The result of :func:`~arrayrope.export.repair_rotary`: the repaired model and the report.

    Parameters
    ----------
    model : onnx.ModelProto
        The repaired model (the original is not modified).
    report : RepairReport
        Each rotation before and after, and the audit of the repaired model.

    Examples
    --------
    >>> import os, tempfile
    >>> from arrayrope.export import repair_rotary, rotary_model
    >>> model = rotary_model(16, target="portable", max_positions=64, base=500.0)
    >>> config = {"head_dim": 16, "num_hidden_layers": 1, "rope_theta": 10000.0, "max_position_embeddings": 64}
    >>> repaired = repair_rotary(model, config)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     repaired.save(os.path.join(folder, "repaired.onnx"))
    ...     os.listdir(folder)
    ['repaired.onnx']
    """

    model: onnx.ModelProto
    report: RepairReport

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the repaired model to ``path``, whole (as :meth:`Fused.save` writes a fused one)."""
        from .._external import save_whole

        save_whole(self.model, path, self.report.data_folder)
