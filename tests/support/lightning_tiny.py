"""A tiny LightningModule and its data, for the Lightning tests: in the test process and in the
ranks torchrun starts (``python -m tests.support.lightning_tiny ...``, which prints one result line).

The data are 16 rows of a regression; each step takes 8 of them in order (one process), or 4 on each
of two ranks (rank r the rows ``8k + 4r`` to ``8k + 4r + 3`` of step k), so that DDP's averaged
gradient is the one process's gradient of its whole batch.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn

ROWS, BATCH, STEPS = 16, 8, 2


class Tiny(pl.LightningModule):
    """Linear, ReLU, Linear, with the MSE loss; records each step's loss and where it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.losses: list[float] = []
        self.seen: list[tuple[str, str, str]] = []  # batch device, weight device, the model's wrapper

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        wrapper = type(self.trainer.strategy.model).__name__
        self.seen.append((str(x.device), str(self.net[0].weight.device), wrapper))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def data(rank: int = 0, world: int = 1) -> torch.utils.data.DataLoader:
    """This rank's rows, in order (Lightning's sampler is not used: it shuffles across ranks)."""
    x = torch.randn(ROWS, 4, generator=torch.Generator().manual_seed(0))
    y = x.sum(1, keepdim=True) - 0.5
    per = BATCH // world
    rows = [i for i in range(ROWS) if (i % BATCH) // per == rank]
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[rows], y[rows]), batch_size=per)


def fit(model: pl.LightningModule | None = None, **trainer: Any) -> tuple[pl.Trainer, pl.LightningModule]:
    """Train ``model`` (a new :class:`Tiny`, seeded) for :data:`STEPS` steps with a quiet Trainer."""
    torch.manual_seed(0)
    model = Tiny() if model is None else model
    quiet = dict(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    t = pl.Trainer(max_steps=STEPS, use_distributed_sampler=False, **quiet, **trainer)
    with warnings.catch_warnings():
        # Lightning's own chatter about a tiny job: one worker, few batches, its pytree deprecation.
        warnings.filterwarnings("ignore", message=r".*(does not have many workers|LeafSpec)")
        t.fit(model, data(t.global_rank, t.world_size))
    return t, model


def weight_sum(model: nn.Module) -> float:
    return sum(p.detach().double().sum().item() for p in model.parameters())


def main(argv: list[str]) -> None:
    """``accelerator devices strategy``: fit and write one line (one write: ranks share a pipe)."""
    accelerator, devices, strategy = argv
    t, model = fit(accelerator=accelerator, devices=int(devices), strategy=strategy)
    backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else "none"
    sys.stdout.write(
        f"rank {t.global_rank} of {t.world_size}: {type(t.strategy).__name__}, {backend}, seen "
        f"{sorted(set(model.seen))}, losses {model.losses}, weight sum {weight_sum(model):.8f}\n"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
