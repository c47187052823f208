"""What torch.compile (Inductor) gives on openreg, side by side in one run.

- a training step (forward, backward, AdamW) compiled vs eager, on openreg;
- the compiled step on openreg vs the same compiled step on CPU (the same generated C++ kernels on
  the same host memory: the ratio is what openreg's wrapper, allocator and hooks add);
- the first compile (Dynamo, AOTAutograd, Inductor and the C++ build) on openreg vs CPU, each in
  a fresh process with an empty Inductor cache;
- the compiled step traced by openreg_lab (every op, and ops="kernels") vs untraced;
- what the compiled step on openreg still moves: fallback events and copies (the CNNs' convolutions,
  batch norms and pools are native, Note [openreg's device DNN library]: none).

.venv/bin/python benchmarks/bench_compile.py [--only NAME]   (NAME: mlp, transformer, cnn or resnet)
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A fresh Inductor cache (set before torch imports Inductor): nothing is reused from other runs.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_compile_")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _models import cnn_case, training_cases
from _timing import compare, fmt_time, print_table

import openreg_lab
from openreg_lab.examples.models import resnet


def _cases():
    """The shared training cases, the ResNet-style CNN and the ResNet-18-shaped model, wide enough
    (96 channels last) that Inductor's layout optimisation makes its graph channels-last."""
    yield from training_cases()
    yield cnn_case()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
    yield "resnet", resnet((8, 16, 32, 96)), x, y, torch.nn.functional.cross_entropy


def _step(model, x, y, loss_fn, compiled: bool):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    forward = torch.compile(model) if compiled else model

    def run():
        opt.zero_grad()
        loss_fn(forward(x), y).backward()
        opt.step()

    return run


def _first_compile(model, x, y, loss_fn) -> tuple[float, callable]:
    run = _step(model, x, y, loss_fn, compiled=True)
    start = time.perf_counter()
    run()
    return time.perf_counter() - start, run


def _first_compile_in_fresh_process(device: str, case: str) -> float:
    """Seconds of the first compiled step of ``case`` on ``device``, in a new process and cache."""
    out = subprocess.run(
        [sys.executable, __file__, "--first-compile", device, case],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return float(out.stdout.split()[-1])


def _first_compile_here(device: str, case: str) -> None:
    torch.set_num_threads(1)
    for name, model, x, y, loss_fn in _cases():
        if name == case:
            seconds, _ = _first_compile(model.to(device), x.to(device), y.to(device), loss_fn)
            print(f"{seconds:.3f}")


def _traced(run, **kwargs):
    def traced():
        with openreg_lab.trace(**kwargs):
            run()

    return traced


def main(only: str | None = None) -> None:
    torch.set_num_threads(1)
    speed, compile_rows, trace_rows, moved_rows = [], [], [], []
    for name, model, x, y, loss_fn in _cases():
        if only is not None and name != only:
            continue
        torch._dynamo.reset()
        dev = [t.openreg() for t in (x, y)]
        eager_dev = _step(copy.deepcopy(model).openreg(), *dev, loss_fn, compiled=False)
        _, compiled_dev = _first_compile(copy.deepcopy(model).openreg(), *dev, loss_fn)
        _, compiled_cpu = _first_compile(model, x, y, loss_fn)
        first_dev = _first_compile_in_fresh_process("openreg", name)
        first_cpu = _first_compile_in_fresh_process("cpu", name)
        t_eager, t_comp, t_cpu, t_all, t_kern = compare(
            [
                eager_dev,
                compiled_dev,
                compiled_cpu,
                _traced(compiled_dev),
                _traced(compiled_dev, ops="kernels"),
            ]
        )
        speed.append(
            [
                name,
                fmt_time(t_eager),
                fmt_time(t_comp),
                f"{t_eager / t_comp:.2f}x",
                fmt_time(t_cpu),
                f"{t_comp / t_cpu:.2f}x",
            ]
        )
        compile_rows.append(
            [name, f"{first_dev:.1f} s", f"{first_cpu:.1f} s", f"{first_dev / first_cpu:.2f}x"]
        )
        trace_rows.append([name, fmt_time(t_comp), f"{t_all / t_comp:.2f}x", f"{t_kern / t_comp:.2f}x"])
        with openreg_lab.trace() as t:
            compiled_dev()
        moved_rows.append(
            [name, str(len(t.fallbacks())), str(len(t.copies())), str(int(t.copies()["bytes"].sum()))]
        )
    print("training step (forward, backward, AdamW), one thread, medians of interleaved runs\n")
    print_table(
        [
            "model",
            "openreg eager",
            "openreg compiled",
            "eager/compiled",
            "cpu compiled",
            "openreg/cpu compiled",
        ],
        speed,
    )
    print("\nfirst compiled step (Dynamo + AOTAutograd + Inductor + C++ build; fresh process, empty cache)\n")
    print_table(["model", "openreg", "cpu", "openreg/cpu"], compile_rows)
    print("\ntracing a compiled step (trace open + step + close)\n")
    print_table(["model", "untraced", "trace()", 'trace(ops="kernels")'], trace_rows)
    print("\nwhat one compiled training step on openreg still moves\n")
    print_table(["model", "ops falling back", "copies", "bytes copied"], moved_rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--first-compile"]:
        _first_compile_here(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--only"]:
        main(sys.argv[2])
    else:
        main()
