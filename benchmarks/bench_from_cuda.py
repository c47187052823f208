"""What ``--from-cuda`` costs a small-op training step: the same step written for CUDA and run inside
``from_cuda()``, against it written for openreg and run without it, side by side in one run.

.venv/bin/python benchmarks/bench_from_cuda.py

The step is an MLP with LayerNorm and AdamW (small ops: Python and dispatch dominate, so any per-op
cost shows). Each timed call runs ``STEPS`` steps inside one ``from_cuda()`` block, so the block's
own entry and exit (a few dozen patches, printed apart) is counted too. The last column is the
approach ``from_cuda()`` replaced: a ``TorchFunctionMode`` that translates devices on every torch call
(the cost measured when it was replaced), kept here as the baseline.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import compare, fmt_time, print_table

import openreg_lab

STEPS = 20


def _make_steps(device: str) -> Callable[[], None]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(64, 128),
        nn.LayerNorm(128),
        nn.GELU(),
        nn.Linear(128, 64),
        nn.LayerNorm(64),
        nn.Linear(64, 10),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device=device)
    y = torch.randint(0, 10, (32,), device=device)

    def steps() -> None:
        for _ in range(STEPS):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

    return steps


_IS_CUDA = torch._C.TensorBase.__dict__["is_cuda"]
_TO_FUNCS = (torch._C.TensorBase.to, torch._C._nn._parse_to)


def _map(value: Any) -> Any:
    if isinstance(value, torch.device):
        return torch.device("openreg", value.index) if value.type == "cuda" else value
    if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
        return _map(torch.device(value))
    return value


class _PerCallTranslation(TorchFunctionMode):
    """The replaced approach (from_cuda's earlier translation): every torch call runs this."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__self__", None) is _IS_CUDA and getattr(func, "__name__", "") == "__get__":
            return args[0].device.type == "openreg"
        if any(func is f for f in _TO_FUNCS) or any(type(a) is torch.device for a in args):
            args = tuple(_map(a) for a in args)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": _map(kwargs["device"])}
        if "device_type" in kwargs:
            kwargs = {
                **kwargs,
                "device_type": "openreg" if kwargs["device_type"] == "cuda" else kwargs["device_type"],
            }
        return func(*args, **kwargs)


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {STEPS} steps a call")
    native = _make_steps("openreg")
    with openreg_lab.from_cuda():
        ported = _make_steps("cuda")
    with openreg_lab.from_cuda(), _PerCallTranslation():
        per_call = _make_steps("cuda")

    def under_from_cuda() -> None:
        with openreg_lab.from_cuda():
            ported()

    def under_mode() -> None:
        with openreg_lab.from_cuda(), _PerCallTranslation():
            per_call()

    t_native, t_ported, t_mode = compare([native, under_from_cuda, under_mode], rounds=15)
    rows = [
        [
            "MLP + LayerNorm + AdamW",
            fmt_time(t_native / STEPS),
            fmt_time(t_ported / STEPS),
            f"{t_ported / t_native:.3f}",
            f"{t_mode / t_native:.2f}",
        ]
    ]
    print_table(
        ["step", "openreg step", "--from-cuda step", "--from-cuda/openreg", "per-call mode/openreg (before)"],
        rows,
    )
    start = time.perf_counter()
    for _ in range(50):
        with openreg_lab.from_cuda():
            pass
    print(f"entering and leaving from_cuda(): {fmt_time((time.perf_counter() - start) / 50)}")


if __name__ == "__main__":
    main()
