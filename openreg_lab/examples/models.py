"""Small example models used by the demo, the tests and the benchmarks.

They are plain ``torch.nn`` modules, so they run unchanged on any device.
"""

from __future__ import annotations

import torch
from torch import nn


def mlp(in_features: int = 64, hidden: int = 128, classes: int = 10) -> nn.Module:
    """A three-layer perceptron (GELU, ReLU) ending in log-probabilities."""
    return nn.Sequential(
        nn.Linear(in_features, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
        nn.LogSoftmax(dim=-1),
    )


class TransformerBlock(nn.Module):
    """A pre-norm transformer block (embedding, self-attention, MLP) predicting the next token."""

    def __init__(self, vocab: int = 100, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Return next-token logits of shape ``(batch, seq, vocab)``."""
        x = self.embed(tokens)
        h = self.norm1(x)
        attn, _ = self.attn(h, h, h, need_weights=False)
        x = x + attn
        x = x + self.ff(self.norm2(x))
        return self.head(x)


def transformer_block(vocab: int = 100, dim: int = 32, heads: int = 4) -> nn.Module:
    """A :class:`TransformerBlock` with the given sizes."""
    return TransformerBlock(vocab, dim, heads)
