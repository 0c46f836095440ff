"""Small random Hugging Face transformers models of the RoPE families, and their ONNX exports.

Built from configs (no weights are downloaded): Llama (half-split), Qwen2
(half-split, grouped-query keys), GPT-NeoX (partial rotary), GPT-J
(interleaved partial rotary) and DeepSeek-V3 (MLA, interleaved q_pe/k_pe written
in half-split order, dense layers only), hidden size 64. Exported by ``torch.onnx.export``
with the dynamo exporter (opset 18 or 23) or the TorchScript exporter (opset 17),
with dynamic batch and sequence. Used by the tests and by ``bench/fusion.py``.

``MORE_FAMILIES`` export with some exporters only (the audit tests name which): Phi-3
(partial rotary; ``phi3_longrope`` with LongRoPE), Gemma 3 (sliding and full layers
with their own bases), GLM (interleaved partial rotary) and Llama 4 (NoPE layers; its
complex rotation in real arithmetic for export, :func:`real_llama4_rotation`).
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np

FAMILIES = ("llama", "qwen2", "neox", "gptj", "deepseek_v3")
MORE_FAMILIES = ("phi3", "phi3_longrope", "gemma3", "glm", "llama4", "llama_dynamic")
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
    elif family == "llama_dynamic":  # dynamic NTK: the base grows once a call passes 64 positions
        config = tf.LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            rope_parameters={"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0},
            **common,
        )
        net = tf.LlamaForCausalLM(config)
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
    elif family in ("phi3", "phi3_longrope"):
        rope: dict[str, object] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
        if family == "phi3_longrope":  # head_dim 16, rotary width 8: 4 factors of each regime
            rope.update(rope_type="longrope", short_factor=[1.0, 1.1, 1.3, 1.6], long_factor=[1.5, 2.5, 4.0, 6.0])
        config = tf.Phi3Config(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            original_max_position_embeddings=64,
            rope_parameters=rope,
            **common,
        )  # type: ignore[assignment]
        net = tf.Phi3ForCausalLM(config)  # type: ignore[assignment]
    elif family == "gemma3":  # sliding layers at base 10000, full ones at 1e6 with linear scaling by 8
        config = tf.Gemma3TextConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=256,
            sliding_window=16,
            layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
            },
            **common,
        )  # type: ignore[assignment]
        net = tf.Gemma3ForCausalLM(config)  # type: ignore[assignment]
    elif family == "glm":
        config = tf.GlmConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=256,
            **common,
        )  # type: ignore[assignment]
        net = tf.GlmForCausalLM(config)  # type: ignore[assignment]
    elif family == "llama4":  # every fourth layer without RoPE (no_rope_layers 0)
        config = tf.Llama4TextConfig(
            hidden_size=64,
            intermediate_size=128,
            intermediate_size_mlp=128,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            num_local_experts=2,
            max_position_embeddings=256,
            no_rope_layer_interval=4,
            **common,
        )  # type: ignore[assignment]
        net = tf.Llama4ForCausalLM(config)  # type: ignore[assignment]
    else:
        raise ValueError(f"family must be one of {FAMILIES + MORE_FAMILIES}, got {family!r}")

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


@contextlib.contextmanager
def real_llama4_rotation():
    """Llama 4's rotation in real arithmetic while in the block, as a converter writes it for ONNX: transformers
    multiplies complex numbers (``torch.polar``, ``view_as_complex``), which neither exporter converts. The same
    interleaved rotation: features ``(2i, 2i+1)`` are the real and imaginary parts turned by ``p * inv_freq[i]``."""
    import torch
    from transformers.models.llama4 import modeling_llama4 as m

    def rotary(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        cos_sin = torch.stack((torch.cos(freqs), torch.sin(freqs))) * self.attention_scaling  # (2, B, S, D/2)
        return torch.stack((cos_sin, cos_sin), dim=-1).flatten(-2)  # each angle on both features of its pair

    def apply(xq, xk, cos_sin):
        cos, sin = cos_sin[0][:, :, None, :], cos_sin[1][:, :, None, :]  # (B, S, 1, D): queries are (B, S, H, D)

        def turn(x):
            x = x.float()
            every_two = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)  # (-im, re) of each pair
            return x * cos + every_two * sin

        return turn(xq).type_as(xq), turn(xk).type_as(xk)

    saved = m.Llama4TextRotaryEmbedding.forward, m.apply_rotary_emb
    m.Llama4TextRotaryEmbedding.forward = rotary  # type: ignore[method-assign]
    m.apply_rotary_emb = apply
    try:
        yield
    finally:
        m.Llama4TextRotaryEmbedding.forward = saved[0]  # type: ignore[method-assign]
        m.apply_rotary_emb = saved[1]


def export(net, exporter: str):
    """The ONNX model of ``net`` from one of ``EXPORTERS`` (inputs input_ids, attention_mask[, position_ids]);
    Llama 4 with its rotation in real arithmetic (:func:`real_llama4_rotation`)."""
    kind, opset = EXPORTERS[exporter]
    patch = real_llama4_rotation() if type(net.net).__name__.startswith("Llama4") else contextlib.nullcontext()
    with patch:
        return _export(net, kind, opset)


def _export(net, kind: str, opset: int):
    import onnx
    import torch

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
