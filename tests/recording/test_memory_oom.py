"""Every out-of-memory inside a trace explained: the verdict (and so the report, the dashboard and
``openreg-lab run``'s summary) opens with what was live when the allocation failed, by category and
by line, summing to the allocator's own count at that moment; module names reach the page escaped."""

from __future__ import annotations

import html
import io

import pytest
import torch
from torch import nn

import openreg_lab
from openreg_lab import _C
from openreg_lab.cli import _outputs

WIDE = 64  # features; a batch of 4096 rows makes each activation 1 MiB


def _line(text: str) -> str:
    with open(__file__) as f:
        return f"test_memory_oom.py:{next(i for i, x in enumerate(f, 1) if text in x and '_line(' not in x)}"


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(WIDE, WIDE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x))  # tanh saves its output for backward: 1 MiB a layer


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x)


class Net(nn.Module):
    def __init__(self, name: str = "blocks") -> None:
        super().__init__()
        self.name = name
        self.add_module(name, nn.ModuleList(Block() for _ in range(8)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in getattr(self, self.name):
            x = block(x)
        return x.sum()


TANH_LINE = _line("return torch.tanh(self.proj(x))")


def _oom(net: Net, budget: int, backward: bool = False):
    """Run ``net`` in a trace with ``budget`` bytes of room on openreg:0 until an allocation fails;
    return the trace and the allocator's count when it failed (read by an out-of-memory observer)."""
    seen: list[int] = []
    x = torch.randn(4096, WIDE).to("openreg")
    torch.openreg.empty_cache()
    torch.openreg.set_memory_limit(torch.openreg.memory_allocated() + budget)
    _C._set_oom_observer(lambda device, requested: seen.append(torch.openreg.memory_allocated(device)) or "")
    try:
        with pytest.raises(torch.OutOfMemoryError), openreg_lab.trace(stack=True) as t:
            loss = net(x)
            if backward:
                loss.backward()
    finally:
        _C._set_oom_observer(None)
        torch.openreg.set_memory_limit(None)
    return t, seen[0]


def test_an_out_of_memory_in_forward_opens_the_verdict_with_what_was_live():
    net = Net().to("openreg")
    # Room for three activations, the fourth layer's Linear output and half of its tanh's.
    t, allocated = _oom(net, budget=(4 << 20) + (512 << 10))
    oom = t.memory().ooms()
    assert len(oom) == 1 and (oom["requested"].iloc[0], oom["allocated"].iloc[0]) == (1 << 20, allocated)
    live = t.memory().oom_live(int(oom["event"].iloc[0]))
    assert int(live["block_bytes"].sum()) == allocated
    v = t.verdict()
    assert v.headline().startswith(
        f"Out of memory on openreg:0 asking 1.0 MiB with {allocated / 2**20:.1f} MiB allocated: "
        f"4.0 MiB activations (3.0 MiB saved by `blocks.*.attn` at {TANH_LINE}), "
    )
    lines = v.lines()
    assert lines[0] == v.headline() and lines[1] == "  live then, by line:"
    assert lines[2] == f"    {TANH_LINE} aten::tanh in `blocks.*.attn`: 3.0 MiB activations"
    assert v.fallbacks_headline() in lines  # the rest of the verdict follows
    out = io.StringIO()
    _outputs.print_summary(t, 5, out)  # what `openreg-lab run` prints
    assert out.getvalue().startswith(v.headline() + "\n  live then, by line:\n")


def test_an_out_of_memory_in_backward_still_names_the_activations_it_needed():
    net = Net().to("openreg")
    x = torch.randn(4096, WIDE).to("openreg")
    torch.openreg.empty_cache()
    base = torch.openreg.memory_allocated()
    torch.openreg.reset_peak_memory_stats()
    loss = net(x)
    forward = torch.openreg.max_memory_allocated() - base
    torch.openreg.reset_peak_memory_stats()
    loss.backward()
    backward = torch.openreg.max_memory_allocated() - base
    del x, loss
    assert backward > forward + 1024
    # Room for the forward pass, not for the backward's peak.
    t, allocated = _oom(net, budget=(forward + backward) // 2, backward=True)
    ooms = t.memory().ooms()
    assert int(ooms["allocated"].iloc[0]) == allocated
    assert (t.events["kind"] == "backward").any()  # it failed in backward
    head = t.verdict().headline()
    assert f"activations saved by `blocks.*.attn` at {TANH_LINE}" in head, head
    assert int(t.memory().oom_live(int(ooms["event"].iloc[0]))["block_bytes"].sum()) == allocated


def test_module_names_in_the_explanation_reach_the_report_escaped(tmp_path):
    hostile = "<img src=x onerror=alert(1)>"
    net = Net(name=hostile).to("openreg")
    t, _ = _oom(net, budget=(2 << 20) + (512 << 10))
    head = t.verdict().headline()
    assert f"saved by `{hostile}.*.attn`" in head
    t.to_html(tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert html.escape(head) in page and hostile not in page


def test_a_trace_without_an_out_of_memory_keeps_its_verdict():
    x = torch.randn(8, device="openreg")
    with openreg_lab.trace() as t:
        (x * 2).sum()
    v = t.verdict()
    assert v.oom == [] and v.headline() == v.fallbacks_headline()
    assert t.memory().ooms().empty
    with pytest.raises(ValueError, match="is not an out-of-memory event of this trace"):
        t.memory().oom_live(0)
