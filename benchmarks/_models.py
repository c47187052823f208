"""The training cases the benchmarks share: the example MLP and transformer block with their data, a
small ResNet-style CNN (bench_compile.py), and the example vision and diffusion models (bench_vision.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from openreg_lab.examples.models import VISION_MODELS, TrainingCase, mlp, transformer_block, vision_case


def _lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def training_steps(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Any, steps: int) -> Any:
    """A call that runs ``steps`` AdamW training steps of ``model`` on ``(x, y)`` (the timed unit of
    bench_trace.py and bench_memory.py)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

    def run() -> None:
        for _ in range(steps):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

    return run


def training_cases() -> Iterator[tuple[str, torch.nn.Module, torch.Tensor, torch.Tensor, Any]]:
    """Yield (name, CPU model, input, target, loss function), the same every time (seeded)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
    yield "mlp", mlp(), x, y, torch.nn.functional.nll_loss
    tokens = torch.randint(0, 100, (8, 33), generator=g)
    yield "transformer", transformer_block(), tokens[:, :-1], tokens[:, 1:], _lm_loss


class _Residual(nn.Module):
    """conv-bn-relu-conv-bn plus the input, then relu: a ResNet basic block."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


def cnn_case() -> tuple[str, nn.Module, torch.Tensor, torch.Tensor, Any]:
    """A ResNet-style CNN on 8 RGB 32x32 images, 10 classes: (name, CPU model, input, target, loss)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        _Residual(16),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        _Residual(32),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
    return "cnn", model, x, y, nn.functional.cross_entropy


def vision_cases() -> Iterator[TrainingCase]:
    """The example ResNet, ConvNeXt, ViT and diffusers UNet (openreg_lab.examples.models), each with its
    seeded batch: ``case.loss(case.model(*case.inputs), case.target)`` is one step's loss. The UNet is
    left out, with a note, when diffusers is not installed."""
    for name in VISION_MODELS:
        try:
            yield vision_case(name)
        except ImportError as e:
            print(f"{name}: skipped ({e})")
