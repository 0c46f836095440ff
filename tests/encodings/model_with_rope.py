"""A PyTorch attention block holding a ``RotaryEmbedding``, as a model holds one: a module of its own so that
``torch.save`` of a whole instance finds its class (and so that importing the tests that pickle other objects
imports no PyTorch)."""

from __future__ import annotations

import torch

import arrayrope as ar


class Attention(torch.nn.Module):
    """A projection, then the rotation of its output (batch, heads, seq, 8) at ``offset``."""

    def __init__(self, scaling: dict | None = None, max_position_embeddings: int | None = None):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.rope = ar.RotaryEmbedding(8, scaling=scaling, max_position_embeddings=max_position_embeddings)

    def forward(self, x, offset=0):
        return self.rope(self.proj(x), offset=offset)
