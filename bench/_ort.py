"""ONNX Runtime's fused RotaryEmbedding kernel on the bench's data: a one-node model built here.

Standard op ``RotaryEmbedding`` (opset 23): inputs X (B, N, S, H), cos and sin
caches (B, S, rotary_dim/2) without position ids; attributes ``interleaved`` and
``rotary_embedding_dim``. ONNX Runtime 1.31 refuses the IR version onnx 1.23
writes by default, so the model declares IR 11 (the first with opset 23).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def available() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def fused_rotary(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, *, layout: str, threads: int | None = 1
) -> Callable[[], Any]:
    """A callable running ORT's fused kernel on x (B, N, S, H) with tables (S, h) or (B, 1, S, h).

    ``threads`` pins the intra-op pool (inter-op to 1); None leaves ORT's defaults, as users meet them.
    """
    import onnxruntime as ort
    from onnx import TensorProto, helper

    etype = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}[x.dtype]
    b, _, s, _ = x.shape
    h = cos.shape[-1]
    cos3 = np.ascontiguousarray(np.broadcast_to(cos.reshape(-1, s, h), (b, s, h)), dtype=x.dtype)
    sin3 = np.ascontiguousarray(np.broadcast_to(sin.reshape(-1, s, h), (b, s, h)), dtype=x.dtype)
    inputs = [
        helper.make_tensor_value_info("X", etype, list(x.shape)),
        helper.make_tensor_value_info("cos", etype, [b, s, h]),
        helper.make_tensor_value_info("sin", etype, [b, s, h]),
    ]
    output = helper.make_tensor_value_info("Y", etype, list(x.shape))
    node = helper.make_node(
        "RotaryEmbedding",
        ["X", "cos", "sin"],
        ["Y"],
        interleaved=int(layout == "interleaved"),
        rotary_embedding_dim=2 * h,
    )
    model = helper.make_model(
        helper.make_graph([node], "rotary", inputs, [output]), opset_imports=[helper.make_opsetid("", 23)]
    )
    model.ir_version = 11
    opts = ort.SessionOptions()
    if threads is not None:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = {"X": x, "cos": cos3, "sin": sin3}
    return lambda: sess.run(None, feed)[0]
