"""A model with some tensors computed by new nodes: repeated nodes and initializers made once, nodes no longer
needed dropped, the rest in topological order."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import onnx
from onnx import NodeProto, TensorProto, helper

from .._graph import ir_version_for, reads, topological
from ..build._spec import MS_DOMAIN

__all__ = ["rewritten"]


def rewritten(
    model: onnx.ModelProto, nodes: Sequence[NodeProto], inits: Sequence[TensorProto], replaced: set[str], contrib: bool
) -> onnx.ModelProto:
    """A copy of ``model`` where ``nodes`` compute the ``replaced`` tensors; nodes no longer needed are dropped."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    if not (replaced or nodes or inits):
        return out
    kept = [n for n in g.node if not set(n.output) & replaced]
    new_inits, renamed = _distinct(list(g.initializer), inits)
    nodes = _shared(nodes, renamed, replaced)
    live = _live(kept + nodes, {o.name for o in g.output})
    everything = [n for n in kept + nodes if id(n) in live]
    available = {i.name for i in g.input} | {t.name for t in new_inits}
    ordered = topological(everything, available)
    read = {i for n in ordered for i in reads(n)} | {o.name for o in g.output}
    del g.node[:]
    g.node.extend(ordered)
    del g.initializer[:]
    g.initializer.extend(t for t in new_inits if t.name in read)
    if contrib and not any(o.domain == MS_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    out.ir_version = max(out.ir_version, ir_version_for(out.opset_import))
    return out


def _shared(nodes: Sequence[NodeProto], renamed: dict[str, str], keep: set[str]) -> list[NodeProto]:
    """``nodes`` reading ``renamed`` tensors by their new names, each repeated computation made once."""
    seen: dict[tuple[Any, ...], NodeProto] = {}
    out = []
    for n in nodes:  # builders emit producers before consumers
        n.input[:] = [renamed.get(i, i) for i in n.input]
        key = (n.domain, n.op_type, tuple(n.input), tuple(a.SerializeToString() for a in n.attribute))
        first = seen.get(key)
        if first is not None and not set(n.output) & keep and len(first.output) == len(n.output):
            renamed.update(zip(n.output, first.output, strict=True))
            continue
        seen[key] = n
        out.append(n)
    return out


def _live(nodes: Sequence[NodeProto], outputs: set[str]) -> set[int]:
    """Ids of the nodes that the graph outputs need."""
    producer = {o: n for n in nodes for o in n.output if o}
    live: set[int] = set()
    stack = list(outputs)
    while stack:
        node = producer.get(stack.pop())
        if node is None or id(node) in live:
            continue
        live.add(id(node))
        stack.extend(reads(node))
    return live


def _distinct(existing: list[TensorProto], added: Sequence[TensorProto]) -> tuple[list[TensorProto], dict[str, str]]:
    """``existing`` and those of ``added`` with new contents; each repeated one renamed to its first copy."""

    def key(t: TensorProto) -> tuple[Any, ...]:
        return t.data_type, tuple(t.dims), hashlib.sha256(onnx.numpy_helper.to_array(t).tobytes()).hexdigest()

    first: dict[tuple[Any, ...], str] = {}
    out, renamed = list(existing), {}
    for t in added:
        k = key(t)
        if k in first:
            renamed[t.name] = first[k]
        else:
            first[k] = t.name
            out.append(t)
    return out, renamed
