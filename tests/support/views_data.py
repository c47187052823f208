"""Traces for the views' tests (and benchmarks/bench_views.py): a real training step on openreg, and
that step's events repeated to any size (ids, parents, forward links and times shifted), with its
host samples repeated alike."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

import openreg_lab
from openreg_lab.examples.models import transformer_block
from openreg_lab.recording.host import Samples


def training_trace(
    steps: int = 2, autocast: bool = True, profile: str | None = None, samples: int = 0
) -> openreg_lab.Trace:
    """``steps`` traced steps of the example transformer block with AdamW: autocast casts, copies, a
    CPU fallback (logcumsumexp), allocations on two threads (forward and autograd), and one mark a step.
    ``samples``: after the steps, the trace stays open (this thread busy in Python, no op run, at most
    10 s) until the host sampler has sampled this thread that many times: on a loaded machine the
    sampler's thread may wait for a core through the whole of two short steps."""
    torch.manual_seed(0)
    model = transformer_block().openreg()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 100, (4, 16), device="openreg")
    me, deadline = threading.get_native_id(), time.monotonic() + 10
    with openreg_lab.use_profile(profile), openreg_lab.trace(record_shapes=True, stack=True) as t:
        for step in range(steps):
            openreg_lab.mark(f"step {step}")
            with torch.autocast("openreg", dtype=torch.bfloat16, enabled=autocast):
                out = model(tokens)
                loss = out.float().logsumexp(-1).mean()
            loss.backward()
            torch.logcumsumexp(out.detach()[0, 0].float(), 0)
            opt.step()
            opt.zero_grad()
        while _sampled(t, me) < samples and time.monotonic() < deadline:
            sum(range(10_000))
    return t


def _sampled(t: openreg_lab.Trace, thread: int) -> int:
    """How many of the open trace's host samples so far are of ``thread`` (its native id)."""
    sampler = t._sampler
    return 0 if sampler is None else sum(1 for row in list(sampler._rows) if row[1] == thread)


def tile(events: pd.DataFrame, copies: int) -> pd.DataFrame:
    """``events`` repeated ``copies`` times one after another, as one consistent events table."""
    n = len(events)
    span = tile_span(events)
    parts = []
    for k in range(copies):
        part = events.copy()
        shift = k * n
        part["id"] = events["id"].to_numpy() + shift
        for col in ("parent", "forward"):
            v = events[col].to_numpy()
            part[col] = np.where(v >= 0, v + shift, -1)
        part["start_ns"] = events["start_ns"].to_numpy() + k * span
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def mlp_step_trace(steps: int = 2) -> openreg_lab.Trace:
    """A 2-layer MLP trained ``steps`` steps with Adam, traced with modules and lines (the memory
    view's tests: parameters, gradients, optimizer state, activations, temporaries)."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("openreg")
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 16, device="openreg")
    with openreg_lab.trace(stack=True) as t:
        for _ in range(steps):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    return t


def tile_samples(samples: Samples, copies: int, span_ns: int) -> Samples:
    """``samples`` repeated ``copies`` times, each copy ``span_ns`` after the last (as ``tile`` shifts
    the events: pass it the same span), the threads' CPU and run-queue clocks kept increasing."""
    n = len(samples)
    k = np.repeat(np.arange(copies, dtype=np.int64), n)
    clock = max(int(np.ptp(samples.cpu)), int(np.ptp(samples.queue))) + 1 if n else 0
    return replace(
        samples,
        time=np.tile(samples.time, copies) + k * span_ns,
        thread=np.tile(samples.thread, copies),
        node=np.tile(samples.node, copies),
        cpu=np.tile(samples.cpu, copies) + k * clock,
        queue=np.tile(samples.queue, copies) + k * clock,
    )


def tile_span(events: pd.DataFrame) -> int:
    """The time ``tile`` shifts each copy of ``events`` by (ns)."""
    return int((events["start_ns"] + events["dur_ns"].clip(lower=0)).max()) + 1
