"""``openreg-lab run`` of a script that runs out of device memory: the summary it prints opens with
what was live when the allocation failed, by category, module and line."""

from __future__ import annotations

from tests.support.cli_helpers import openreg_lab

OUT_OF_MEMORY = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(8))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))  # each tanh output is saved for backward: 1 MiB a layer
        return x


net = Net().to("openreg")
x = torch.randn(4096, 64).to("openreg")  # 1 MiB
torch.openreg.set_memory_limit(torch.openreg.memory_allocated() + (3 << 20) + (512 << 10))
net(x).sum().backward()
"""


def test_run_opens_its_summary_with_what_filled_the_memory(tmp_path):
    script = tmp_path / "oom.py"
    script.write_text(OUT_OF_MEMORY)
    p = openreg_lab("run", "--stack", "--trace", "oom.trace", script, cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert "torch.OutOfMemoryError: openreg:0 out of memory" in p.stderr
    lines = p.stderr.splitlines()
    ran = next(i for i, line in enumerate(lines) if "oom.py raised OutOfMemoryError (exit code 1)" in line)
    head = lines[ran + 1]
    assert head.startswith("Out of memory on openreg:0 asking 1.0 MiB with "), head
    # Two tanh outputs saved, and the third layer's output that its tanh was to read.
    assert "3.0 MiB activations (2.0 MiB saved by `Net` at oom.py:12), 1.0 MiB inputs at oom.py:17" in head
    assert lines[ran + 2] == "  live then, by line:"
    assert lines[ran + 3] == "    oom.py:12 aten::tanh in `Net`: 2.0 MiB activations"
