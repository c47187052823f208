"""One training step (forward, backward, AdamW) on openreg against CPU, side by side in one run.

.venv/bin/python benchmarks/bench_training.py
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _models import training_cases
from _timing import compare, fmt_time, print_table

import openreg_lab  # noqa: F401


def _step_fn(model, x, y, loss_fn, foreach):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    return step


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    rows = []
    for name, model, x, y, loss_fn in training_cases():
        for foreach in (False, True):
            dev_model = copy.deepcopy(model).openreg()
            cpu_step = _step_fn(copy.deepcopy(model), x, y, loss_fn, foreach)
            dev_step = _step_fn(dev_model, x.openreg(), y.openreg(), loss_fn, foreach)
            t_cpu, t_dev = compare([cpu_step, dev_step], rounds=11)
            rows.append([name, str(foreach), fmt_time(t_cpu), fmt_time(t_dev), f"{t_dev / t_cpu:.2f}"])
    print_table(["model", "AdamW foreach", "cpu step", "openreg step", "openreg/cpu"], rows)


if __name__ == "__main__":
    main()
