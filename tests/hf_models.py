"""Small random Hugging Face transformers models of the RoPE families, and their ONNX exports.

Built from configs (no weights are downloaded): Llama (half-split), Qwen2
(half-split, grouped-query keys), GPT-NeoX (partial rotary), GPT-J
(interleaved partial rotary) and DeepSeek-V3 (MLA, interleaved q_pe/k_pe written
in half-split order, dense layers only), hidden size 64. Exported by ``torch.onnx.export``
with the dynamo exporter (opset 18 or 23) or the TorchScript exporter (opset 17),
with dynamic batch and sequence. Used by the tests and by ``bench/fusion.py``.
"""

from __future__ import annotations

import io
import warnings

import numpy as np

FAMILIES = ("llama", "qwen2", "neox", "gptj", "deepseek_v3")
EXPORTERS = {"dynamo-18": ("dynamo", 18), "dynamo-23": ("dynamo", 23), "torchscript-17": ("torchscript", 17)}
VOCAB = 128


def model(family: str, layers: int = 2, positions: bool = True):
    """A random model of ``family`` in eval mode, returning logits from (input_ids, attention_mask, position_ids),
    or, without ``positions``, from (input_ids, attention_mask) with positions 0..S-1 made inside."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    if family in ("llama", "qwen2"):
        kv = 4 if family == "llama" else 2
        config = (tf.LlamaConfig if family == "llama" else tf.Qwen2Config)(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=kv,
            max_position_embeddings=256,
            **common,
        )
        net = (tf.LlamaForCausalLM if family == "llama" else tf.Qwen2ForCausalLM)(config)
    elif family == "neox":
        config = tf.GPTNeoXConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,  # type: ignore[assignment]
            num_attention_heads=4,
            max_position_embeddings=256,
            rotary_pct=0.25,
            **common,
        )
        net = tf.GPTNeoXForCausalLM(config)  # type: ignore[assignment]
    elif family == "gptj":
        config = tf.GPTJConfig(n_embd=64, n_layer=layers, n_head=4, rotary_dim=8, n_positions=256, **common)  # type: ignore[assignment]
        net = tf.GPTJForCausalLM(config)  # type: ignore[assignment]
    elif family == "deepseek_v3":
        config = tf.DeepseekV3Config(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=4,
            q_lora_rank=None,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            first_k_dense_replace=layers,
            max_position_embeddings=256,
            rope_interleave=True,
            **common,
        )  # type: ignore[assignment]
        net = tf.DeepseekV3ForCausalLM(config)  # type: ignore[assignment]
    else:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net.eval()
            self.positions = positions

        def forward(self, input_ids, attention_mask, position_ids=None):
            return self.net(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).logits

    return Logits().eval()


def inputs(
    batch: int = 2, seq: int = 7, start: int = 0, seed: int = 0, positions: bool = True
) -> dict[str, np.ndarray]:
    """Token ids, a full mask and (with ``positions``) positions ``start .. start+seq-1``."""
    rng = np.random.default_rng(seed)
    feed = {"input_ids": rng.integers(0, VOCAB, (batch, seq)), "attention_mask": np.ones((batch, seq), dtype=np.int64)}
    if positions:
        feed["position_ids"] = np.tile(np.arange(start, start + seq), (batch, 1))
    return feed


def export(net, exporter: str):
    """The ONNX model of ``net`` from one of ``EXPORTERS`` (inputs input_ids, attention_mask[, position_ids])."""
    import onnx
    import torch

    kind, opset = EXPORTERS[exporter]
    feed = inputs(positions=net.positions)
    args = tuple(torch.from_numpy(v) for v in feed.values())
    names = list(feed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "torchscript":
            f = io.BytesIO()
            torch.onnx.export(
                net,
                args,
                f,
                dynamo=False,
                opset_version=opset,
                input_names=names,
                output_names=["logits"],
                dynamic_axes={n: {0: "batch", 1: "seq"} for n in names},
            )
            return onnx.load_from_string(f.getvalue())
        b, s = torch.export.Dim("batch"), torch.export.Dim("seq")
        program = torch.onnx.export(
            net, args, dynamo=True, opset_version=opset, verbose=False, dynamic_shapes={n: {0: b, 1: s} for n in names}
        )
    return program.model_proto  # type: ignore[union-attr]


def logits(net, feed: dict[str, np.ndarray]) -> np.ndarray:
    """Eager PyTorch logits for a feed of :func:`inputs`."""
    import torch

    with torch.no_grad():
        return net(*(torch.from_numpy(v) for v in feed.values())).numpy()
