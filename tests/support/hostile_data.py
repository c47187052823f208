"""Traces whose every string is hostile markup, for the views' and the report's tests:
a mark, op names, dispatch keys, source lines and the cast argument all carry ``PAYLOAD``."""

from __future__ import annotations

import functools

import torch

import openreg_lab
from openreg_lab.recording.events import Columns

#: Ends a <script>, opens another, and tries every other way markup runs code or breaks out of an
#: attribute, a comment or a plotly template. Opening a page that shows it must run none of it.
PAYLOAD = (
    "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    "<svg onload=alert(3)>'\"><!--<b>bold</b>%{x}\u2028&amp;"
)


@functools.cache
def small_trace() -> openreg_lab.Trace:
    """A small real trace: a mark, native ops, a CPU fallback (logcumsumexp) with its copies, autocast
    casts, allocations, shapes and source lines."""
    torch.manual_seed(0)
    with openreg_lab.trace(record_shapes=True, stack=True) as t:
        openreg_lab.mark(PAYLOAD)
        x = torch.randn(8, 8, device="openreg")
        with torch.autocast("openreg", dtype=torch.bfloat16):
            y = x @ x
        torch.logcumsumexp(y.float(), 0).sum().item()
    return t


@functools.cache
def hostile_trace(suffix: str = PAYLOAD) -> openreg_lab.Trace:
    """``small_trace()`` with ``suffix`` appended to every string of its string table: op names,
    dispatch keys, sources and cast arguments (as a trace file anyone sends may hold).
    ``hostile_trace("_x")`` is the same trace with harmless strings, to compare pages with."""
    c = small_trace().columns
    strings = [s if i == 0 else s + suffix for i, s in enumerate(c.strings)]
    t = openreg_lab.Trace(
        record_shapes=True, stack=True, columns=Columns(c.fields, c.pool, strings, c.threads)
    )
    t._t0 = small_trace()._t0
    return t


@functools.cache
def memory_trace() -> openreg_lab.Trace:
    """A small real training step of a module (``trace(stack=True)``): allocations named with ops,
    modules and source lines, for the memory view's hostile strings."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).to("openreg")
    x = torch.randn(4, 8, device="openreg")
    with openreg_lab.trace(stack=True) as t:
        model(x).sum().backward()
    return t


@functools.cache
def hostile_memory_trace(suffix: str = PAYLOAD) -> openreg_lab.Trace:
    """``memory_trace()`` with ``suffix`` appended to every string: its modules' names and its
    source file's name hold it too. ``hostile_memory_trace("_x")``: harmless, to compare with."""
    c = memory_trace().columns
    strings = [s if i == 0 else s + suffix for i, s in enumerate(c.strings)]
    t = openreg_lab.Trace(stack=True, columns=Columns(c.fields, c.pool, strings, c.threads))
    t._t0 = memory_trace()._t0
    return t
