"""The training cases the benchmarks share: the example MLP and transformer block with their data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from openreg_lab.examples.models import mlp, transformer_block


def _lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def training_cases() -> Iterator[tuple[str, torch.nn.Module, torch.Tensor, torch.Tensor, Any]]:
    """Yield (name, CPU model, input, target, loss function), the same every time (seeded)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
    yield "mlp", mlp(), x, y, torch.nn.functional.nll_loss
    tokens = torch.randint(0, 100, (8, 33), generator=g)
    yield "transformer", transformer_block(), tokens[:, :-1], tokens[:, 1:], _lm_loss
