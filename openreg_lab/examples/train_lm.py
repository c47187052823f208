"""Train a tiny GPT-style language model on openreg for a few steps, with AdamW and bf16 autocast.

::

    python -m openreg_lab.examples.train_lm --steps 8
    openreg-lab run --html report.html -m openreg_lab.examples.train_lm --steps 8

The model is plain ``torch.nn`` (token and position embeddings, pre-norm blocks with hand-written
causal attention, a head tied to the embedding), learning to continue a repeating token pattern.
On openreg every op it runs has a native kernel, ``triu`` (which builds the causal mask) and
``linalg_vector_norm`` (which gradient clipping calls once per parameter) among them: nothing falls
back to the CPU. The forward pass runs under bf16 autocast; attention is its cast-heavy region (the
projections and matmuls cast to bfloat16, the softmax back to float32).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which a token sees only itself and the tokens before it."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(batch, seq, dim)`` -> the same shape."""
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """A pre-norm transformer block: attention then an MLP, each added to the residual stream."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(batch, seq, dim)`` -> the same shape."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """A GPT-style decoder: embeddings, ``layers`` blocks, a final norm and a tied head."""

    def __init__(
        self, vocab: int = 64, dim: int = 64, heads: int = 4, layers: int = 2, context: int = 64
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        for module in self.modules():  # GPT-2's initialization: small weights, zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens``: ``(batch, seq)`` -> next-token logits ``(batch, seq, vocab)``."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.embed.weight.t()


def batches(vocab: int, batch: int, seq: int, device: torch.device) -> torch.Tensor:
    """Sequences of a repeating pattern (period 7) at random offsets: ``(batch, seq + 1)`` tokens."""
    pattern = torch.arange(7) * 5 % vocab
    starts = torch.randint(0, 7, (batch, 1))
    return pattern[(starts + torch.arange(seq + 1)) % 7].to(device)


def train(
    steps: int = 8,
    batch: int = 8,
    seq: int = 32,
    device: str = "openreg",
    autocast: bool = True,
    seed: int = 0,
) -> list[float]:
    """Train ``TinyGPT`` for ``steps`` steps on ``device``; print and return the losses."""
    import openreg_lab  # noqa: F401  (registers the openreg device)

    torch.manual_seed(seed)
    dev = torch.device(device)
    model = TinyGPT(context=max(seq, 8)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    params = sum(p.numel() for p in model.parameters())
    print(f"TinyGPT: {params} parameters on {dev}, batch {batch} x {seq} tokens, bf16 autocast {autocast}")
    losses = []
    for step in range(steps):
        data = batches(64, batch, seq, dev)
        inputs, targets = data[:, :-1], data[:, 1:]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        print(f"step {step}: loss {losses[-1]:.4f}")
    return losses


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m openreg_lab.examples.train_lm [--steps N] ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m openreg_lab.examples.train_lm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--steps", type=int, default=8, help="training steps (default %(default)s)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (default %(default)s)")
    parser.add_argument("--seq", type=int, default=32, help="tokens per sequence (default %(default)s)")
    parser.add_argument("--device", default="openreg", help="where to train (default %(default)s; or cpu)")
    parser.add_argument("--no-autocast", action="store_true", help="train in float32")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default %(default)s)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.seq < 2:
        parser.error("--steps and --batch must be at least 1, --seq at least 2")
    start = time.perf_counter()
    losses = train(args.steps, args.batch, args.seq, args.device, not args.no_autocast, args.seed)
    took = time.perf_counter() - start
    print(f"trained {args.steps} steps in {took:.2f} s; loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
