"""What the memory history and its snapshots cost: a training step with the history
recorded (stacks on) against the same step without, side by side in one run, beside trace(); the
stack walk per allocation against torch's own CapturedTraceback; and a snapshot of a million
entries written (time, file size, peak memory).

.venv/bin/python benchmarks/bench_memory.py [steps | stacks | snapshot]
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _models import training_cases, training_steps
from _timing import fmt_time, paired_ratios, print_table

import openreg_lab
import openreg_lab.memory
from openreg_lab import _C

STEPS = 5  # steps per timed call, as bench_trace.py


@contextlib.contextmanager
def _history(**kwargs):
    openreg_lab.memory._record_memory_history(**kwargs)
    try:
        yield
    finally:
        openreg_lab.memory._record_memory_history(enabled=None)


def _wrapped(run, make_ctx):
    def call():
        with make_ctx():
            run()

    return call


def steps_table(rounds: int = 41) -> None:
    """The training step with the history against without: median of paired ratios (each round runs
    every variant once, shuffled, CPU time: ``_timing.paired_ratios``)."""
    rows = []
    for name, model, x, y, loss_fn in training_cases():
        run = training_steps(model.openreg(), x.openreg(), y.openreg(), loss_fn, STEPS)
        with _history(), warnings_off():
            run()
            snap = openreg_lab.memory._snapshot()
        allocs = sum(e["action"] == "alloc" for t in snap["device_traces"] for e in t) // STEPS
        variants = [
            run,
            _wrapped(run, lambda: _history()),  # stacks on: every alloc and free (context="all")
            _wrapped(run, lambda: _history(context="alloc")),
            _wrapped(run, lambda: _history(context=None)),  # the ring alone
            _wrapped(run, lambda: openreg_lab.trace(host=False)),
        ]
        ratios = paired_ratios(variants, rounds=rounds)
        base = _seconds(run)
        rows.append([name, str(allocs), fmt_time(base / STEPS)] + [f"{r:.3f}" for r in ratios])
    print_table(
        ["model", "allocs/step", "step", "history (stacks)", "history (alloc stacks)", "history (no stacks)",
         "trace(host=False)"],
        rows,
    )  # fmt: skip


def _seconds(run, n: int = 20) -> float:
    start = time.process_time()
    for _ in range(n):
        run()
    return (time.process_time() - start) / n


@contextlib.contextmanager
def warnings_off():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def stacks_table() -> None:
    """One stack walk (the allocator's, from a thread that released the GIL), at a few depths,
    against torch's CapturedTraceback.gather(python=True) (what CUDA's history keeps per entry) and
    its symbolization (what CUDA's snapshot does per entry)."""
    _C._memory_bench_stacks(1000)  # the first walks intern the frames: not what a step pays
    _C._memory_bench_torch_tracebacks(1000)
    rows = []
    for depth in (1, 10, 30):
        ours = _nested(depth, lambda: _C._memory_bench_stacks(100_000) / 100_000)
        gather, symbolize = _nested(depth, _torch_traceback_ns)
        rows.append([str(depth + 1), f"{ours:.0f} ns", f"{gather:.0f} ns", f"{symbolize:.0f} ns"])
    print_table(["Python frames", "ours (walk + intern)", "torch gather", "torch symbolize (each)"], rows)


def _torch_traceback_ns() -> tuple[float, float]:
    gather, symbolize, frames = _C._memory_bench_torch_tracebacks(100_000)
    assert frames > 0, "torch's CapturedTraceback gathered no Python frames"
    return gather / 100_000, symbolize / 100_000


def _nested(depth: int, fn):
    if depth <= 0:
        return fn()
    return _nested(depth - 1, fn)


# A fresh process: a history of `n` entries (allocations and frees of tensors of a few sizes, from
# a few lines), then _dump_snapshot timed, its file's size and the memory it took (the peak of the
# process's resident set over what it had before, and tracemalloc's peak of Python's and numpy's).
_SNAPSHOT = """
import os, resource, sys, time, tracemalloc, warnings
import torch, openreg_lab, openreg_lab.memory as memory
n, path = int(sys.argv[1]), sys.argv[2]
memory._record_memory_history(max_entries=n)
sizes = [256, 1024, 4096, 40000]
def a(i): return torch.empty(sizes[i % 4], dtype=torch.uint8, device="openreg")
def b(i): return a(i) if i % 3 else torch.empty(sizes[i % 4] + 512, dtype=torch.uint8, device="openreg")
start = time.perf_counter()
for i in range(n // 2):
    x = b(i)
    del x
fill = time.perf_counter() - start
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
start = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    memory._dump_snapshot(path)
took = time.perf_counter() - start
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
entries = len(memory._snapshot()["device_traces"][0])
print(fill, took, os.path.getsize(path), peak, (rss1 - rss0) * 1024, entries)
"""


def snapshot_table(n: int = 1_000_000) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "snap.pickle")
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        out = subprocess.run([sys.executable, "-c", _SNAPSHOT, str(n), path], capture_output=True, text=True,
                             env=env, check=True).stdout.split()  # fmt: skip
    fill, took, size, peak, rss, entries = (float(v) for v in out)
    print_table(
        ["history entries", "snapshot entries", "recorded in", "_dump_snapshot", "file", "tracemalloc peak",
         "resident set grew"],
        [[f"{n:,}", f"{int(entries):,}", f"{fill:.1f} s", f"{took:.2f} s", f"{size / 1e6:.0f} MB",
          f"{peak / 1e6:.0f} MB", f"{rss / 1e6:.0f} MB"]],
    )  # fmt: skip


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    torch.set_num_threads(1)
    if what in ("all", "steps"):
        steps_table()
    if what in ("all", "stacks"):
        stacks_table()
    if what in ("all", "snapshot"):
        snapshot_table()


if __name__ == "__main__":
    main()
