"""Graph helpers shared by building, fusing and validation: loading models, IR versions, node order, providers."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias

import onnx
from onnx import GraphProto, NodeProto, OperatorSetIdProto, TensorProto, external_data_helper, helper

from arrayrope._lib.files import open_regular_file

#: The largest serialized model protobuf can hold (2 GiB); tables beyond it cannot be exported.
PROTOBUF_LIMIT = (1 << 31) - 1

PROVIDER_NAMES = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}
"""Short names of ONNX Runtime's execution providers."""

ModelSource: TypeAlias = onnx.ModelProto | str | os.PathLike[str]
"""A model, or the path of a ``.onnx`` file."""


def ir_version_for(opset_imports: Iterable[OperatorSetIdProto]) -> int:
    """The oldest IR version that can hold these opsets.

    ``onnx.helper.make_model`` writes the newest IR version the installed onnx
    knows, which ONNX Runtime releases older than that onnx refuse; the oldest
    sufficient one is accepted by every runtime that implements the opsets.
    """
    return helper.find_min_ir_version_for(list(opset_imports), ignore_unknown=True)


def load_model(model: object, argument: str = "model", *, keep_external: bool = False) -> onnx.ModelProto:
    """``model`` as a ModelProto: itself, or loaded from a path (errors name ``argument``).

    With ``keep_external``, the main graph's initializers stored in external data files
    stay references to them (nothing of theirs is read; :func:`data_folder` says where
    they are); other external tensors (Constant nodes', subgraphs') are read.
    """
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, bytes, os.PathLike)):
        path = os.fsdecode(model)
        where = f"{argument}={path!r}"
        with open_regular_file(path, where, PROTOBUF_LIMIT):  # refuses FIFOs, devices, folders, huge files
            pass
        try:
            out = onnx.load(path, load_external_data=not keep_external)
            if keep_external:
                folder = os.path.dirname(os.path.abspath(path))
                for t in inner_tensors(out.graph):
                    if external_data_helper.uses_external_data(t):
                        external_data_helper.load_external_data_for_tensor(t, folder)
        except Exception as exc:  # onnx raises several types for unreadable files
            first = " ".join(str(exc).split())[:200]
            raise ValueError(f"{where} does not load as an ONNX model: {first}") from None
        if not out.HasField("graph"):  # protobuf reads any empty (or all-unknown) bytes as an empty message
            empty = "the file is empty" if os.path.getsize(path) == 0 else "it holds no graph"
            raise ValueError(f"{where} does not load as an ONNX model: {empty}")
        return out
    raise TypeError(f"{argument} must be an onnx.ModelProto or a path to a .onnx file, got {type(model).__name__}")


def data_folder(model: object, loaded: onnx.ModelProto) -> str | None:
    """The folder of the external data files that ``loaded`` (``model`` read by :func:`load_model` with
    ``keep_external``) refers to: that of the path ``model``, or None where no initializer is external."""
    if isinstance(model, onnx.ModelProto) or not any(
        external_data_helper.uses_external_data(t) for t in loaded.graph.initializer
    ):
        return None
    return os.path.dirname(os.path.abspath(os.fsdecode(model)))  # type: ignore[arg-type]


def inlined(tensor: TensorProto, folder: str | None) -> TensorProto:
    """``tensor`` itself, or where it is stored in an external data file of ``folder``, a copy holding its data."""
    if folder is None or not external_data_helper.uses_external_data(tensor):
        return tensor
    out = TensorProto()
    out.CopyFrom(tensor)
    external_data_helper.load_external_data_for_tensor(out, folder)
    return out


def inner_tensors(graph: GraphProto, own: bool = False) -> Iterator[TensorProto]:
    """The tensors of node attributes (Constant's) and the initializers of subgraphs; with ``own``, ``graph``'s
    initializers too."""
    if own:
        yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            yield from a.tensors
        for g in subgraphs(node):
            yield from inner_tensors(g, own=True)


def subgraphs(node: NodeProto) -> list[GraphProto]:
    out: list[GraphProto] = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def reads(node: NodeProto) -> set[str]:
    """Names a node reads, including those its subgraphs (If, Loop, Scan bodies) take from outer scopes."""
    names = {i for i in node.input if i}
    for g in subgraphs(node):
        for inner in g.node:
            names |= reads(inner)
    return names


def topological(nodes: list[NodeProto], available: set[str]) -> list[NodeProto]:
    """Nodes ordered so that each comes after its producers (stable for already ordered parts)."""
    produced = {o for n in nodes for o in n.output if o}
    done = set(available)
    pending = [(n, reads(n) & produced) for n in nodes]
    ordered: list[NodeProto] = []
    while pending:
        rest = []
        for node, needs in pending:
            if needs <= done:
                ordered.append(node)
                done.update(node.output)
            else:
                rest.append((node, needs))
        if len(rest) == len(pending):  # a cycle: keep the remaining order
            ordered.extend(n for n, _ in rest)
            break
        pending = rest
    return ordered


def providers_named(providers: Sequence[str] | str | None) -> list[str]:
    import onnxruntime as ort

    if providers is None:
        avail = ort.get_available_providers()
        return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in avail or p.startswith("CPU")]
    if isinstance(providers, str):
        providers = [providers]
    if not isinstance(providers, Sequence):
        raise TypeError(f"providers must be a name such as 'cpu' or 'cuda', or a list of names, got {providers!r}")
    out = []
    for p in providers:
        if not isinstance(p, str):  # a runtime check for callers without type checking
            raise TypeError(f"providers must be names such as 'cuda', 'cpu' or 'CUDAExecutionProvider', got {p!r}")
        full = PROVIDER_NAMES.get(p.lower(), p)
        if not full.endswith("ExecutionProvider"):
            raise ValueError(f"providers: unknown provider {p!r}; use 'cuda', 'cpu' or a full ONNX Runtime name")
        out.append(full)
    return out
