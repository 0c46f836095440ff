"""What :func:`~arrayrope.export.fuse_rotary` did: one :class:`Rotation` per rotary application found."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, NamedTuple

import onnx

from arrayrope._lib.verdicts import Report, Status


@dataclasses.dataclass(frozen=True)
class Rotation:
    """One rotary application of the model: fused, or left alone and why.

    Parameters
    ----------
    input : str
        The tensor rotated.
    output : str
        The rotated tensor (its consumers keep reading this name).
    fused : bool
        Whether one fused node now computes ``output``.
    node : str
        The fused node (``"RotaryEmbedding"`` or ``"com.microsoft.RotaryEmbedding"``).
    layout : str or None
        ``"half"`` or ``"interleaved"``, as measured.
    rotary_dim : int or None
        Rotating features, as measured.
    head_dim : int or None
        Features per head, as measured.
    heads : int or None
        Heads, as measured.
    base : float or None
        The base of the frequencies (None where they follow no known rule).
    scaling : dict or None
        The frequency scaling found (Hugging Face ``rope_scaling`` form).
    positions : str or None
        The integer tensor the fused node reads as position ids.
    tables : str
        ``"stored, N rows"`` (the core's float64 tables stored in the graph), ``"computed from the position
        ids"`` (the exact float32 method in the graph) or ``"the model's"``.
    error : float
        Largest difference between the fused and the original rotation in the
        check before it was kept, relative to the largest input (NaN if not run).
    reason : str
        Why it was left alone (empty when fused).

    Examples
    --------
    >>> from arrayrope.export import fuse_rotary, rotary_model
    >>> model = rotary_model(8, target="portable", max_positions=64)   # a rotation in standard ops
    >>> fused, report = fuse_rotary(model, max_positions=64, providers="cpu")
    >>> report.fused, report.status, report.rotations[0].layout, report.rotations[0].tables
    (1, 'verified', 'half', 'stored, 64 rows')
    """

    input: str
    output: str
    fused: bool
    node: str = ""
    layout: str | None = None
    rotary_dim: int | None = None
    head_dim: int | None = None
    heads: int | None = None
    base: float | None = None
    scaling: dict[str, Any] | None = None
    positions: str | None = None
    tables: str = ""
    error: float = math.nan
    reason: str = ""

    def __str__(self) -> str:
        if not self.fused:
            return f"left alone {self.output}: {self.reason}"
        scaling = "" if self.scaling is None else f", {self.scaling.get('rope_type')} scaling"
        base = "" if self.base is None else f", base {self.base:g}"
        return (
            f"fused {self.output} <- {self.input}: {self.node}, {self.layout}, rotary_dim {self.rotary_dim} of "
            f"{self.head_dim}, {self.heads} heads{base}{scaling}; positions {self.positions}; tables {self.tables}; "
            f"checked: differs by {self.error:.1e}"
        )


@dataclasses.dataclass(frozen=True)
class FusionReport:
    """Every rotary application found, the graph before and after, and the validation (when run).

    Parameters
    ----------
    rotations : tuple of Rotation
        One per rotary application found, fused or left alone.
    target : str
        The fused node asked for (``"onnx23"`` or ``"ort"``).
    tables : str
        Where the fused nodes' cos/sin come from (``"stored"``, ``"computed"`` or ``"model"``).
    nodes_before : int
        Nodes of the model's graph before.
    nodes_after : int
        Nodes after.
    opset_before : int
        The model's default-domain opset before.
    opset_after : int
        After (23 where ``target="onnx23"`` converted an older model).
    validation : Report, optional
        Both models run on ONNX Runtime and compared; None when ``validate=False``.
    data_folder : str, optional
        The folder of the external data files the model's initializers refer to, where
        it was read from a path with its weights in external data (they were not read);
        None where the model holds its weights.

    Examples
    --------
    >>> from arrayrope.export import fuse_rotary, rotary_model
    >>> model = rotary_model(8, target="portable", max_positions=64)   # a rotation in standard ops
    >>> fused, report = fuse_rotary(model, max_positions=64, providers="cpu")
    >>> report.fused, report.status, report.rotations[0].layout, report.rotations[0].tables
    (1, 'verified', 'half', 'stored, 64 rows')
    """

    rotations: tuple[Rotation, ...]
    target: str
    tables: str
    nodes_before: int
    nodes_after: int
    opset_before: int
    opset_after: int
    validation: Report | None = None
    data_folder: str | None = None

    @property
    def fused(self) -> int:
        """How many rotations one fused node now computes."""
        return sum(r.fused for r in self.rotations)

    @property
    def left_alone(self) -> tuple[Rotation, ...]:
        return tuple(r for r in self.rotations if not r.fused)

    @property
    def status(self) -> Status:
        """The validation's status; ``"not verified"`` when it did not run, or when no rotation found was fused
        (nothing was changed, so nothing was verified)."""
        if self.validation is None or (self.rotations and not self.fused):
            return "not verified"
        return self.validation.status

    @property
    def ok(self) -> bool:
        """Whether the fused model was compared with the original and agreed (``status == "verified"``)."""
        return self.status == "verified"

    def __str__(self) -> str:
        opsets = f"opset {self.opset_before}" + (
            f" -> {self.opset_after}" if self.opset_after != self.opset_before else ""
        )
        lines = [
            f"{len(self.rotations)} rotary application{'' if len(self.rotations) == 1 else 's'}, {self.fused} fused "
            f"(target {self.target}, tables "
            f"{self.tables}); nodes {self.nodes_before} -> {self.nodes_after}; {opsets}",
            *(f"  {r}" for r in self.rotations),
        ]
        if self.validation is not None:
            lines.append(str(self.validation))
        return "\n".join(lines)


class Fused(NamedTuple):
    """The result of :func:`~arrayrope.export.fuse_rotary`: the new model and the report.

    Parameters
    ----------
    model : onnx.ModelProto
        The model with its rotations fused (the original is not modified).
    report : FusionReport
        What happened to every rotation, and the validation.

    Examples
    --------
    >>> from arrayrope.export import fuse_rotary, rotary_model
    >>> model = rotary_model(8, target="portable", max_positions=64)   # a rotation in standard ops
    >>> fused, report = fuse_rotary(model, max_positions=64, providers="cpu")
    >>> report.fused, report.status, report.rotations[0].layout, report.rotations[0].tables
    (1, 'verified', 'half', 'stored, 64 rows')
    """

    model: onnx.ModelProto
    report: FusionReport

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the fused model to ``path``, whole.

        A model whose weights were left in external data files (``report.data_folder``)
        gets one data file beside ``path``, named ``path + ".data"``, its tensors copied
        one at a time from the original files; any other model is saved as ``onnx.save``
        saves it (with its tensors beside it beyond protobuf's 2 GiB).

        Parameters
        ----------
        path : str or os.PathLike
            The ``.onnx`` file to write.

        Examples
        --------
        >>> import os, tempfile
        >>> from arrayrope.export import fuse_rotary, rotary_model
        >>> model = rotary_model(8, target="portable", max_positions=64)
        >>> fused = fuse_rotary(model, max_positions=64, validate=False)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     fused.save(os.path.join(folder, "fused.onnx"))
        ...     os.listdir(folder)
        ['fused.onnx']
        """
        from .._external import save_whole

        save_whole(self.model, path, self.report.data_folder)
