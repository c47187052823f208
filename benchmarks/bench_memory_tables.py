"""What ``Trace.memory()`` costs on a big trace: a million allocations (and their frees) recorded in
a loop of small ops inside modules, a backward and optimizer steps every thousand, then the time
each table takes to build, and the memory view's (the dashboard's figure, the report's section).

.venv/bin/python benchmarks/bench_memory_tables.py [allocations]
"""

from __future__ import annotations

import resource
import sys
import time
import warnings

import torch
from torch import nn

import openreg_lab
from openreg_lab.views import memory_view


def record(allocations: int) -> openreg_lab.Trace:
    """A trace of about ``allocations`` allocations: forward passes of a small model, each step
    backward and an SGD step with momentum."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)).to("openreg")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(4, 8, device="openreg")
    made = 0
    with openreg_lab.trace(capacity=12 * allocations + 1_000_000, host=False) as t:
        while made < allocations:
            for _ in range(100):  # 100 forwards without grad: 5 allocations each
                with torch.no_grad():
                    model(x)
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            made += 312  # measured: 3 a forward, 12 a training step
    return t


def main() -> None:
    warnings.simplefilter("ignore")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    start = time.perf_counter()
    t = record(n)
    took = time.perf_counter() - start
    events = len(t.columns)  # merged now, not timed below
    assert not t.dropped, "the trace dropped events: raise its capacity"
    import plotly.graph_objects  # noqa: F401 (imported before the clock: the view's rows time building)
    from plotly.subplots import make_subplots  # noqa: F401

    rows = []
    start = time.perf_counter()
    m = t.memory()
    rows.append(("Trace.memory() (pairs, explains, categories)", time.perf_counter() - start))
    tables = {
        "allocations()": m.allocations,
        "peak()": m.peak,
        "peaks()": m.peaks,
        "sites()": m.sites,
        "steps()": m.steps,
        "leaks()": m.leaks,
        "timeline(buckets=2000)": lambda: m.timeline(buckets=2000),
        "timeline() (every change)": m.timeline,
        # The memory view (views/memory_view.py) from the tables: the dashboard's figure, and the
        # report's section (its chart and the 20 largest allocations live at each moment drawn).
        "memory view: figure (1500 moments)": lambda: memory_view.figure(memory_view.tables(m)).data[0].x,
        "memory view: report section (600 moments)": lambda: memory_view.report_section(
            m, memory_view.tables(m, memory_view.REPORT_MOMENTS)
        ),
    }
    sizes = {}
    for name, build in tables.items():
        start = time.perf_counter()
        sizes[name] = len(build())
        rows.append((name, time.perf_counter() - start))
    allocs = len(m.allocations())
    print(
        f"torch {torch.__version__}; recorded {events:,} events, {allocs:,} allocations in {took:.1f} s; "
        f"complete: {m.complete}"
    )
    for name, seconds in rows:
        print(f"  {name:48s} {seconds:6.2f} s  {sizes.get(name, ''):>10}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"the process's peak RSS, recording included: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
