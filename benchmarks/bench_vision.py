"""One training step (forward, backward, AdamW) of each example vision and diffusion model on openreg
against the CPU, side by side in one run: a ResNet-18-shaped CNN (also channels-last), a ConvNeXt, a
ViT and diffusers' UNet2DModel (openreg_lab.examples.models). Each side's step time is the median of
alternated rounds (_timing.compare, wall time); openreg/cpu is the median of the two steps' ratios
within each round (_timing.paired_ratios, CPU time), steadier on a shared machine. Then the fallback
events, host<->device copies and device copies (what the model asks for: .contiguous(), reshapes) of
one traced openreg step.

.venv/bin/python benchmarks/bench_vision.py [rounds]
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _models import vision_cases
from _timing import compare, fmt_time, paired_ratios, print_table

import openreg_lab
from openreg_lab.examples.models import TrainingCase


def _step_fn(case: TrainingCase, model: torch.nn.Module, device: str) -> Callable[[], None]:
    inputs = [x.to(device) for x in case.inputs]
    target = case.target.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        case.loss(model(*inputs), target).backward()
        opt.step()

    return step


def _variants(case: TrainingCase) -> list[tuple[str, TrainingCase]]:
    variants = [(case.name, case)]
    if case.name == "resnet":
        model = copy.deepcopy(case.model).to(memory_format=torch.channels_last)
        images = case.inputs[0].to(memory_format=torch.channels_last)
        variants.append(
            ("resnet channels-last", TrainingCase(case.name, model, (images,), case.target, case.loss))
        )
    return variants


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {rounds} rounds")
    rows = []
    for base in vision_cases():
        for name, case in _variants(base):
            cpu_step = _step_fn(case, copy.deepcopy(case.model), "cpu")
            dev_step = _step_fn(case, copy.deepcopy(case.model).to("openreg"), "openreg")
            dev_step()
            with openreg_lab.trace() as t:
                dev_step()
            t_cpu, t_dev = compare([cpu_step, dev_step], rounds=rounds)
            (ratio,) = paired_ratios([cpu_step, dev_step], rounds=2 * rounds + 1, target_s=0.2)
            fallbacks = int(t.fallbacks()["calls"].sum()) if not t.fallbacks().empty else 0
            direction = t.copies()["direction"]
            host, device = int((direction != "D2D").sum()), int((direction == "D2D").sum())
            row = [
                name,
                fmt_time(t_cpu),
                fmt_time(t_dev),
                f"{ratio:.3f}",
                str(fallbacks),
                str(host),
                str(device),
            ]
            rows.append(row)
    header = [
        "model",
        "cpu step",
        "openreg step",
        "openreg/cpu",
        "fallbacks",
        "host<->device copies",
        "device copies",
    ]
    print_table(header, rows)


if __name__ == "__main__":
    main()
