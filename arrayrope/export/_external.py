"""Writing a model whose weights stay in external data files: one tensor at a time, never all in memory."""

from __future__ import annotations

import os
from typing import BinaryIO

import onnx
from onnx import StringStringEntryProto, TensorProto, external_data_helper

from ._graph import inner_tensors

#: Bytes copied at a time from an original data file to the new one.
CHUNK = 64 << 20
#: Offsets of the tensors in the new data file are multiples of this (the allocation granularity ONNX
#: Runtime needs to map a tensor from the file instead of reading it into memory).
ALIGN = 1 << 16


def save_whole(model: onnx.ModelProto, path: str | os.PathLike[str], folder: str | None) -> None:
    """Write a rewritten model to ``path``, whole: its tensors left in external data files in ``folder`` copied
    to one data file beside it (:func:`save_with_data`); a model holding its tensors saved as ``onnx.save``
    saves it (with its tensors beside it beyond protobuf's 2 GiB)."""
    if folder is None:
        onnx.save(model, path, save_as_external_data=model.ByteSize() >= 2**31 - 1)  # protobuf's limit
    else:
        save_with_data(model, path, folder)


def save_with_data(model: onnx.ModelProto, path: str | os.PathLike[str], folder: str) -> str:
    """Write ``model`` to ``path`` and its external tensors, read from ``folder``, to ``path + ".data"``.

    Each tensor is copied from its original file by offset and length, a chunk at a
    time (chunks of zeros become holes of a sparse file), so that memory holds one
    chunk besides the graph; tensors held in the model stay in it. Returns the path
    of the data file. ``model`` is not modified.
    """
    path = os.fspath(path)
    name = os.path.basename(path) + ".data"
    target = os.path.join(os.path.dirname(os.path.abspath(path)), name)
    out = onnx.ModelProto()
    out.CopyFrom(model)  # the graph alone: external tensors hold no data here
    tensors = [t for t in _tensors(out) if external_data_helper.uses_external_data(t)]
    sources = [_source(t, folder) for t in tensors]
    for file in {s for s, _, _ in sources}:
        for written, what in ((path, "it"), (target, f"its data file {target!r}")):
            if os.path.exists(written) and os.path.samefile(file, written):
                raise ValueError(
                    f"output={path!r}: {what} is a weight file of the model read, which writing would overwrite "
                    "while it is read; write the new model elsewhere"
                )
    with open(target, "wb") as sink:
        for t, (file, offset, length) in zip(tensors, sources, strict=True):
            start = -(-sink.tell() // ALIGN) * ALIGN
            sink.seek(start)
            _copy(file, offset, length, sink)
            del t.external_data[:]
            t.external_data.extend(
                StringStringEntryProto(key=k, value=v)
                for k, v in (("location", name), ("offset", str(start)), ("length", str(length)))
            )
        sink.truncate(sink.tell())  # a trailing hole still counts in the size
    onnx.save(out, path)  # writes no tensor data: none is held in the external ones
    return target


def _tensors(model: onnx.ModelProto) -> list[TensorProto]:
    return [*model.graph.initializer, *inner_tensors(model.graph)]


def _source(tensor: TensorProto, folder: str) -> tuple[str, int, int]:
    """The file, offset and length of an external tensor's bytes (ValueError for locations outside ``folder``)."""
    info = external_data_helper.ExternalDataInfo(tensor)
    location = str(info.location)
    if not location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        raise ValueError(
            f"initializer {tensor.name!r}: its external data location {location!r} is not a file name "
            f"relative to the model's folder {folder!r}"
        )
    file = os.path.join(folder, location)
    offset = int(info.offset or 0)
    size = os.path.getsize(file)
    length = size - offset if info.length is None else int(info.length)
    if offset + length > size:
        raise ValueError(
            f"initializer {tensor.name!r}: its external data ({length} bytes at offset {offset}) lies beyond "
            f"the end of {file!r} ({size} bytes)"
        )
    return file, offset, length


def _copy(file: str, offset: int, length: int, sink: BinaryIO) -> None:
    """``length`` bytes of ``file`` from ``offset`` appended to ``sink``, a chunk at a time; zeros are skipped."""
    with open(file, "rb") as src:
        src.seek(offset)
        left = length
        while left:
            chunk = src.read(min(CHUNK, left))
            if not chunk:
                raise ValueError(f"{file!r} ended {left} bytes before the tensor read from offset {offset}")
            if chunk.count(0) == len(chunk):
                sink.seek(len(chunk), os.SEEK_CUR)
            else:
                sink.write(chunk)
            left -= len(chunk)
