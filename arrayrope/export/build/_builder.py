"""The graph builder: unique names, constants and nodes, collected for a graph or a function."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from onnx import NodeProto, TensorProto, helper, numpy_helper

AttributeValue: TypeAlias = int | float | str | Sequence[int] | TensorProto
"""A node attribute as :func:`onnx.helper.make_node` takes it."""


class Builder:
    """Collects nodes and constants under a name prefix (constants become Constant nodes in functions).

    Parameters
    ----------
    prefix : str
        Put before every name the builder makes.
    function : bool
        Constants as ``Constant`` nodes (a function has no initializers) instead of initializers.
    taken : iterable of str
        Names already used in the graph; the builder makes none of them.
    shared : dict, optional
        Constants made under a key, by name, shared with the other builders given it.
    """

    def __init__(
        self,
        prefix: str = "",
        *,
        function: bool = False,
        taken: Iterable[str] = (),
        shared: dict[Any, str] | None = None,
    ) -> None:
        self.prefix = prefix
        self.function = function
        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.taken = set(taken)
        self.shared = shared
        self._count = 0

    def name(self, hint: str) -> str:
        """A new name: the prefix, the hint and a number."""
        while True:
            self._count += 1
            name = f"{self.prefix}{hint}_{self._count}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def const(self, value: npt.NDArray[Any], hint: str = "c", *, key: Any = None) -> str:
        """A constant tensor's name. With a ``key``, builders given the same ``shared`` dict make it once (the
        first one holds it; large tables are then not copied per rotation)."""
        if key is not None and self.shared is not None and key in self.shared:
            return self.shared[key]
        name = self.name(hint)
        tensor = numpy_helper.from_array(np.asarray(value), name)
        if self.function:
            self.nodes.append(helper.make_node("Constant", [], [name], name=name, value=tensor))
        else:
            self.initializers.append(tensor)
        if key is not None and self.shared is not None:
            self.shared[key] = name
        return name

    def ints(self, values: Sequence[int], hint: str = "i") -> str:
        """A constant int64 vector."""
        return self.const(np.array(values, dtype=np.int64), hint)

    def scalar(self, value: int, hint: str = "s") -> str:
        """A constant int64 scalar."""
        return self.const(np.array(value, dtype=np.int64), hint)

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        out: str | None = None,
        domain: str = "",
        **attrs: AttributeValue | None,
    ) -> str:
        """A node with one output (named ``out`` or a new name); attributes that are None are left out."""
        return self.ops(op_type, inputs, outputs=1, out=out, domain=domain, **attrs)[0]

    def ops(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        outputs: int,
        out: str | None = None,
        domain: str = "",
        **attrs: AttributeValue | None,
    ) -> list[str]:
        """A node with ``outputs`` outputs; their names."""
        names = [out] if out is not None else [self.name(op_type.lower()) for _ in range(outputs)]
        node_name = self.name(op_type)
        node = helper.make_node(op_type, inputs, names, name=node_name, domain=domain or None)
        node.attribute.extend(helper.make_attribute(k, v) for k, v in sorted(attrs.items()) if v is not None)
        self.nodes.append(node)
        return names

    def positions(self, x: str, seq_axis: int, *, batch: bool) -> str:
        """Positions ``0..S-1`` along axis ``seq_axis`` of ``x``: ``(S,)`` int64, or ``(B, S)`` with ``batch``."""
        shape = self.op("Shape", [x])
        n = self.op("Gather", [shape, self.scalar(seq_axis, "seq_axis")], axis=0)
        pos = self.op("Range", [self.scalar(0, "zero"), n, self.scalar(1, "one")])
        if batch:
            bs = self.op("Gather", [shape, self.ints([0, seq_axis], "bs_axes")], axis=0)
            pos = self.op("Expand", [pos, bs])
        return pos
