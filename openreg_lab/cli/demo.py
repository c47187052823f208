"""``openreg-lab demo``: train the example MLP on openreg and on CPU side by side (parity check)."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import torch

import openreg_lab  # noqa: F401  (registers the device)
from openreg_lab.cli._common import Parser, UsageError, positive_int
from openreg_lab.examples.models import mlp

EXAMPLES = """\
examples:
  openreg-lab demo
  openreg-lab demo --steps 20

Exit code 0 when every openreg loss matches CPU within 1e-5 relative, 1 otherwise.
"""


def add_parser(sub: Any) -> Parser:
    """Add the ``demo`` command to the subparsers ``sub``."""
    p: Parser = sub.add_parser(
        "demo",
        help="train the example MLP on openreg and on CPU side by side; check the losses match",
        description=__doc__,
        epilog=EXAMPLES,
    )
    p.add_argument(
        "--steps", type=positive_int, default=5, help="training steps (default %(default)s; e.g. --steps 20)"
    )
    p.set_defaults(handler=_handle)
    return p


def _handle(args: argparse.Namespace) -> int:
    return demo(steps=args.steps)


def demo(steps: int = 5) -> int:
    """Train the example MLP on openreg and on CPU side by side and print what happened.

    Returns 0 when the openreg losses match CPU within 1e-5 relative, 1 otherwise.
    """
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    torch.manual_seed(0)
    cpu_model = mlp()
    dev_model = copy.deepcopy(cpu_model).to("openreg")
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    xd, yd = x.to("openreg"), y.to("openreg")
    params = sum(p.numel() for p in dev_model.parameters())
    print(
        f"openreg: {torch.openreg.device_count()} simulated devices; accelerator = "
        f"{torch.accelerator.current_accelerator()}"
    )
    print(
        f"model: {type(dev_model).__name__} with {params} parameters moved to "
        f"{next(dev_model.parameters()).device}"
    )
    opt_cpu = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    opt_dev = torch.optim.AdamW(dev_model.parameters(), lr=1e-2)
    torch.openreg.reset_peak_memory_stats()
    worst = 0.0
    for step in range(steps):
        losses = []
        for model, opt, inp, tgt in ((cpu_model, opt_cpu, x, y), (dev_model, opt_dev, xd, yd)):
            opt.zero_grad()
            loss = torch.nn.functional.nll_loss(model(inp), tgt)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        rel = abs(losses[0] - losses[1]) / max(abs(losses[0]), 1e-12)
        worst = max(worst, rel)
        print(f"step {step}: loss cpu {losses[0]:.6f}  openreg {losses[1]:.6f}  rel diff {rel:.1e}")
    stats = torch.openreg.memory_stats()
    print(
        f"memory on openreg:0: {stats['allocated_bytes.all.current']} bytes allocated, "
        f"peak {stats['allocated_bytes.all.peak']}, reserved {stats['reserved_bytes.all.current']}, "
        f"{stats['allocation.all.allocated']} allocations"
    )
    ok = worst <= 1e-5
    print("parity with CPU:", "OK" if ok else f"FAILED (worst relative difference {worst:.1e})")
    return 0 if ok else 1
