"""What tracing costs: a training step traced by openreg_lab (every op, and ops="kernels"), by
torch.profiler and by an empty TorchDispatchMode, against the same step untraced, side by side in
one run, with the floor of any RecordFunction-based recorder (our callback installed but recording
nothing) and a trace with no op events at all (only the backend's own hooks record); a trace around a single
step (open + step + close); the cost per recorded event; and how long a million-event trace takes to
save and load.

.venv/bin/python benchmarks/bench_trace.py [host | sampler | ops [ROUNDS]]
    host: only the host sampling table; sampler: the sampler's share alone, CPU time, paired ratios;
    ops: the recorder's per-op cost alone (paired ratios, CPU and wall time; docs/benchmarks.md)
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _models import training_cases, training_steps
from _timing import compare, fmt_time, paired_ratios, print_table

import openreg_lab
from openreg_lab import _C
from openreg_lab.recording.events import Columns

STEPS = 5  # steps per timed call, so opening and closing a trace is amortised as in real use


class EmptyMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _cases():
    for name, model, x, y, loss_fn in training_cases():
        yield name, model.openreg(), x.openreg(), y.openreg(), loss_fn


def _wrapped(run, make_ctx):
    def call():
        with make_ctx():
            run()

    return call


@contextlib.contextmanager
def _empty_callbacks():
    """A trace whose RecordFunction callback is installed but returns at once: what RecordFunction
    itself costs the step (the floor of any RecordFunction-based recorder; backend hooks still record)."""
    _C._trace_bench_empty_callbacks(True)
    try:
        with openreg_lab.trace():
            yield
    finally:
        _C._trace_bench_empty_callbacks(False)


@contextlib.contextmanager
def _hooks_only():
    """A trace with no RecordFunction callback: only the backend's own hooks record (copies, casts,
    allocations, fallbacks), no Op or Backward events. What a recorder that took op events from
    the backend instead of RecordFunction would start from."""
    _C._trace_bench_no_op_observer(True)
    try:
        with openreg_lab.trace(record_shapes=True):
            yield
    finally:
        _C._trace_bench_no_op_observer(False)


def overhead_table() -> None:
    rows = []
    for name, model, x, y, loss_fn in _cases():
        run = training_steps(model, x, y, loss_fn, STEPS)
        with openreg_lab.trace(record_shapes=True, stack=True) as t:
            run()
        per_step = len(t) // STEPS
        variants = [
            run,
            _wrapped(run, lambda: openreg_lab.trace(record_shapes=True)),
            _wrapped(run, lambda: openreg_lab.trace(record_shapes=True, stack=True)),
            _wrapped(run, lambda: openreg_lab.trace()),
            _wrapped(run, lambda: openreg_lab.trace(record_shapes=True, ops="kernels")),
            _wrapped(run, _empty_callbacks),
            _wrapped(run, _hooks_only),
            _wrapped(run, lambda: torch.profiler.profile(record_shapes=True)),
            _wrapped(run, EmptyMode),
        ]
        # 31 rounds: ten variants, and the differences that matter here are a few percent.
        times = compare(variants, rounds=31, target_s=0.15)
        base = times[0]
        rows.append([name, str(per_step), fmt_time(base / STEPS)] + [f"{t / base:.2f}" for t in times[1:]])
    print_table(
        ["model", "events/step", "untraced step", "trace(shapes)", "trace(shapes,stack)", "trace()",
         "trace(shapes, ops=kernels)", "RecordFunction floor", "backend hooks only", "torch.profiler",
         "empty TorchDispatchMode"],
        rows,
    )  # fmt: skip


def _anchors() -> dict[str, object]:
    """The well-kept samplers measured beside ours, where installed (``pip install --target DIR
    pyinstrument py-spy`` and ``OPENREG_LAB_ANCHORS=DIR``: they are not dependencies)."""
    extra = os.environ.get("OPENREG_LAB_ANCHORS")
    if extra and extra not in sys.path:
        sys.path.append(extra)
    out: dict[str, object] = {}
    try:
        from pyinstrument import Profiler

        out["pyinstrument"] = Profiler
    except ImportError:
        pass
    spy = os.path.join(extra, "bin", "py-spy") if extra else None
    if spy and os.path.exists(spy):
        out["py-spy"] = spy
    return out


@contextlib.contextmanager
def _sampler_alone():
    """Our host sampler with no trace open: what sampling the host's Python costs by itself."""
    from openreg_lab.recording.sampler import Sampler

    s = Sampler()
    s.start()
    try:
        yield
    finally:
        s.stop_raw()  # as a trace does: the samples are named when first read


def _sampler_own_share(run, calls: int = 200) -> float:
    """The host sampler's own thread's CPU time over the process's, across ``calls`` calls of
    ``run`` each under a fresh sampler (as ``trace()`` opens one): read from the thread's clock,
    untouched by the other processes' noise on the step's times."""
    from openreg_lab.recording.sampler import Sampler

    samplers, process = [], 0
    for _ in range(calls):
        s = Sampler()
        c = time.process_time_ns()
        s.start()
        run()
        s.stop_raw()
        process += time.process_time_ns() - c
        samplers.append(s)
    deadline = time.monotonic() + 1.0
    while any(s.own_cpu_ns < 0 for s in samplers) and time.monotonic() < deadline:
        time.sleep(0.02)  # each thread ends at its next wake-up
    return sum(max(s.own_cpu_ns, 0) for s in samplers) / process


def _pyinstrument(profiler_class):
    @contextlib.contextmanager
    def ctx():
        p = profiler_class(interval=0.001)
        p.start()
        try:
            yield
        finally:
            p.stop()

    return ctx


def _py_spy_ratio(spy: str, run, rounds: int = 5) -> float:
    """py-spy runs in its own process: the step's median with it attached over without, in
    alternating windows (it cannot be attached per call)."""

    def timed(n: int = 20) -> float:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    ratios = []
    for _ in range(rounds):
        base = timed()
        proc = subprocess.Popen(
            [spy, "record", "--pid", str(os.getpid()), "--rate", "1000", "--nonblocking", "--format", "raw",
             "-o", os.devnull],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            time.sleep(0.5)
            if proc.poll() is not None:
                return float("nan")  # not allowed to read this process (ptrace)
            ratios.append(timed() / base)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return statistics.median(ratios)


def host_table() -> None:
    """Host sampling: the default trace with and without it, ops="kernels" with it, our sampler
    alone, and the anchors (pyinstrument, py-spy, torch.profiler's Python tracer); each ratio the
    median of 41 paired ones (``_timing.paired_ratios``)."""
    anchors = _anchors()
    rows = []
    for name, model, x, y, loss_fn in _cases():
        run = training_steps(model, x, y, loss_fn, STEPS)
        variants = [
            run,
            _wrapped(run, lambda: openreg_lab.trace(host=False)),
            _wrapped(run, lambda: openreg_lab.trace()),
            _wrapped(run, lambda: openreg_lab.trace(ops="kernels", host=False)),
            _wrapped(run, lambda: openreg_lab.trace(ops="kernels")),
            _wrapped(run, _sampler_alone),
            _wrapped(run, lambda: torch.profiler.profile(with_stack=True)),
        ]
        if "pyinstrument" in anchors:
            variants.append(_wrapped(run, _pyinstrument(anchors["pyinstrument"])))
        for clock_name, clock in (("wall", time.perf_counter), ("CPU", time.process_time)):
            base = compare([run], rounds=5, target_s=0.15, clock=clock)[0]
            ratios = [f"{r:.2f}" for r in paired_ratios(variants, rounds=41, target_s=0.1, clock=clock)]
            if "pyinstrument" not in anchors:
                ratios.append("not installed")
            if clock_name == "wall":
                spy = _py_spy_ratio(str(anchors["py-spy"]), run) if "py-spy" in anchors else None
                ratios.append("not installed" if spy is None else f"{spy:.2f}")
            else:
                ratios.append("(its own process)")
            rows.append([name, clock_name, fmt_time(base / STEPS), *ratios])
        own = _sampler_own_share(run)
        rows.append([name, "sampler's own thread", "", "", "", "", "", f"{own:.1%} of CPU", "", "", ""])
    print_table(
        ["model", "clock", "untraced step", "trace(host=False)", "trace() (host on)",
         "ops=kernels, host=False", "ops=kernels (host on)", "host sampler alone",
         "torch.profiler(with_stack)", "pyinstrument 1 ms", "py-spy 1 kHz (own process)"],
        rows,
    )  # fmt: skip


def ops_table(rounds: int = 15) -> None:
    """The recorder's per-op cost on the mlp step alone: every op with shapes and ops="kernels",
    each with and without host sampling, the RecordFunction floor (host sampling off) with the
    call's inputs boxed, as the recorder asks, and without, and a trace with no op events at all
    (what the floor and ops="kernels" add their op costs to: the trace's own), as the
    median of ``rounds`` paired ratios in CPU and in wall time (``_timing.paired_ratios``), for a
    trace around 5 steps (``STEPS``, as the other tables) and around 20 (a trace's opening and
    closing spread over more steps, as in the issue that set the targets); the load average is
    printed, since a loaded machine moves these by several per cent."""
    rows = []
    for steps in (STEPS, 20):
        rows += _ops_rows(rounds, steps)
    print_table(
        ["model", "steps a trace", "clock", "trace(shapes)", "host=False", "ops=kernels",
         "ops=kernels, host=False", "RecordFunction floor", "floor, no inputs", "no op events"],
        rows,
    )  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}")


def _ops_rows(rounds: int, steps: int) -> list[list[str]]:
    """``ops_table``'s rows (CPU and wall time) for a trace around ``steps`` steps."""
    name, model, x, y, loss_fn = next(_cases())
    run = training_steps(model, x, y, loss_fn, steps)

    @contextlib.contextmanager
    def floor():
        _C._trace_bench_empty_callbacks(True)
        try:
            with openreg_lab.trace(host=False):
                yield
        finally:
            _C._trace_bench_empty_callbacks(False)

    @contextlib.contextmanager
    def no_op_events():
        _C._trace_bench_no_op_observer(True)
        try:
            with openreg_lab.trace(record_shapes=True, host=False):
                yield
        finally:
            _C._trace_bench_no_op_observer(False)

    @contextlib.contextmanager
    def floor_without_inputs():
        _C._trace_bench_callbacks_without_inputs(True)
        try:
            with floor():
                yield
        finally:
            _C._trace_bench_callbacks_without_inputs(False)

    variants = [
        run,
        _wrapped(run, lambda: openreg_lab.trace(record_shapes=True)),
        _wrapped(run, lambda: openreg_lab.trace(record_shapes=True, host=False)),
        _wrapped(run, lambda: openreg_lab.trace(record_shapes=True, ops="kernels")),
        _wrapped(run, lambda: openreg_lab.trace(record_shapes=True, ops="kernels", host=False)),
        _wrapped(run, floor),
        _wrapped(run, floor_without_inputs),
        _wrapped(run, no_op_events),
    ]
    rows = []
    for clock_name, clock in (("CPU", time.process_time), ("wall", time.perf_counter)):
        ratios = paired_ratios(variants, rounds=rounds, target_s=0.1, clock=clock)
        rows.append([name, str(steps), clock_name, *(f"{r:.3f}" for r in ratios)])
    return rows


def sampler_table(runs: int = 3) -> None:
    """The host sampler's share on its own, finer than ``host_table``: CPU time only, the median of
    101 paired ratios (each call beside an untraced one, ``_timing.paired_ratios``), ``runs`` times
    per model, the sampler alone and ``ops="kernels"`` with and without it (the figures behind the
    README's paragraph on host time; a single run still moves by a per cent or two, so read the
    medians of the runs, printed last)."""
    rows = []
    for name, model, x, y, loss_fn in _cases():
        run = training_steps(model, x, y, loss_fn, STEPS)
        variants = [
            run,
            _wrapped(run, _sampler_alone),
            _wrapped(run, lambda: openreg_lab.trace(ops="kernels", host=False)),
            _wrapped(run, lambda: openreg_lab.trace(ops="kernels")),
        ]
        start = time.process_time()
        run()
        step = (time.process_time() - start) / STEPS
        per_run = [paired_ratios(variants) for _ in range(runs)]
        for i, ratios in enumerate(per_run):
            rows.append([name, str(i + 1), fmt_time(step), *(f"{r:.3f}" for r in ratios)])
        medians = [statistics.median(column) for column in zip(*per_run, strict=True)]
        rows.append([name, "median", "", *(f"{r:.3f}" for r in medians)])
    print_table(
        ["model", "run", "untraced step (CPU)", "host sampler alone", "ops=kernels, host=False",
         "ops=kernels (host on)"],
        rows,
    )  # fmt: skip


def one_step_table() -> None:
    """A trace around a single step: opening and closing it are not amortised."""
    rows = []
    for name, model, x, y, loss_fn in _cases():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)

        def step(model=model, x=x, y=y, loss_fn=loss_fn, opt=opt) -> None:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

        traced = _wrapped(step, lambda: openreg_lab.trace(record_shapes=True))
        kernels = _wrapped(step, lambda: openreg_lab.trace(record_shapes=True, ops="kernels"))
        base, one, one_k = compare([step, traced, kernels], rounds=15, target_s=0.15)
        ratios = [f"{one / base:.2f}", fmt_time(one_k), f"{one_k / base:.2f}"]
        rows.append([name, fmt_time(base), fmt_time(one), *ratios])
    # Inside a long recording, a short trace nested in it costs its own window, not the recording.
    x = torch.ones(4, 3, device="openreg")

    def op() -> None:
        x.add_(1)

    with openreg_lab.trace(record_shapes=True, capacity=10_000_000):
        for _ in range(100_000):
            op()
        base, one = compare([op, _wrapped(op, lambda: openreg_lab.trace(record_shapes=True))], rounds=15)
    label = "x.add_(1) in a 100k-op trace (base: that trace only)"
    rows.append([label, fmt_time(base), fmt_time(one), f"{one / base:.2f}", "", ""])
    print_table(
        ["model", "untraced step", "open + step + close, trace(shapes)", "ratio", "same, ops=kernels",
         "ratio"],
        rows,
    )  # fmt: skip


def per_event_cost() -> None:
    x = torch.ones(4, device="openreg")

    def ops():
        for _ in range(200):
            x.add_(1)

    with openreg_lab.trace(record_shapes=True) as t:
        ops()
    events = len(t)
    traced = _wrapped(ops, lambda: openreg_lab.trace())
    shaped = _wrapped(ops, lambda: openreg_lab.trace(record_shapes=True))
    kernels = _wrapped(ops, lambda: openreg_lab.trace(ops="kernels"))
    kernels_shaped = _wrapped(ops, lambda: openreg_lab.trace(record_shapes=True, ops="kernels"))
    variants = [ops, traced, shaped, kernels, kernels_shaped]
    plain, traced, shaped, kernels, kernels_shaped = compare(variants, rounds=15)
    off_ns = _C._trace_bench_hook(1_000_000) / 1_000_000  # no trace open: the relaxed load only
    for _ in range(3):  # the last of three, once the recorder's memory is mapped
        with openreg_lab.trace(capacity=200_001):
            hook_ns = _C._trace_bench_hook(200_000) / 200_000
    print_table(
        ["micro-benchmark", "untraced / call", "events / call", "cost per event", "with shapes"],
        [["200 x.add_(1): op events (RecordFunction)", fmt_time(plain), str(events),
          fmt_time((traced - plain) / events), fmt_time((shaped - plain) / events)],
         ["200 x.add_(1): op events from the kernels (ops=kernels)", fmt_time(plain), str(events),
          fmt_time((kernels - plain) / events), fmt_time((kernels_shaped - plain) / events)],
         ["backend hook (alloc event, no allocation)", f"{off_ns:.1f} ns (no trace open)", "1",
          f"{hook_ns:.0f} ns", ""]],
    )  # fmt: skip


# One fresh process: two untraced warm-up steps (torch's own first-call costs), then, timed, an
# untraced step, the first traced step (the recorder meets every op for the first time: it reads
# each operator's dispatch table) and a later traced step. Each traced step opens and closes its
# trace. Prints the three times and the number of distinct operators the step records.
_FRESH = """
import json, sys, time, torch
sys.path.insert(0, {bench!r})
from _models import training_cases
import openreg_lab
name, model, x, y, loss_fn = [c for c in training_cases() if c[0] == "transformer"][0]
model, x, y = model.openreg(), x.openreg(), y.openreg()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
def step():
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
    torch.openreg.synchronize()
def timed(traced):
    s = time.perf_counter()
    if traced:
        with openreg_lab.trace(record_shapes=True) as t:
            step()
    else:
        step()
    return time.perf_counter() - s, (t if traced else None)
step(); step()
untraced, _ = timed(False)
first, t = timed(True)
later, _ = timed(True)
print(json.dumps([untraced, first, later, int(t.events["name"].nunique())]))
"""


def first_sight_table(processes: int = 7) -> None:
    code = _FRESH.format(bench=str(Path(__file__).resolve().parent))
    runs = []
    for _ in range(processes):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    untraced, first, later, ops = (float(np.median([r[i] for r in runs])) for i in range(4))
    print_table(
        ["fresh process, transformer step", "untraced step", "later traced step", "first traced step",
         "first / later", "distinct ops", "first sight per op"],
        [["open + step + close, shapes on", fmt_time(untraced), f"{later / untraced:.2f}x untraced",
          f"{first / untraced:.2f}x untraced", f"{first / later:.2f}", f"{ops:.0f}",
          fmt_time(max(first - later, 0.0) / ops)]],
    )  # fmt: skip
    print(f"medians of {processes} fresh processes")


def file_table() -> None:
    x = torch.randn(16, device="openreg")
    with openreg_lab.trace(record_shapes=True, stack=True) as t:
        for _ in range(50):
            torch.logcumsumexp(x + 1, 0)  # a native op and a fallback
    reps = 1_000_000 // len(t) + 1
    c = t.columns
    fields = {k: np.tile(v, reps)[:1_000_000] for k, v in c.fields.items()}
    fields["id"] = np.arange(1_000_000)
    fields["parent"] = np.full(1_000_000, -1)
    big = openreg_lab.Trace(columns=Columns(fields, c.pool, c.strings, c.threads))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.trace")
        s = time.perf_counter()
        big.save(path)
        save_s = time.perf_counter() - s
        s = time.perf_counter()
        back = openreg_lab.load_trace(path)
        load_s = time.perf_counter() - s
        size = os.path.getsize(path)
    assert len(back) == 1_000_000
    print_table(
        ["file", "events", "size", "save", "load"],
        [["Trace.save / load_trace", "1000000", f"{size / 2**20:.0f} MiB", fmt_time(save_s),
          fmt_time(load_s)]],
    )  # fmt: skip


def main() -> None:
    warnings.simplefilter("ignore")  # torch.profiler's warnings on a CPU-only build
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ratios are traced / untraced")
    if sys.argv[1:] == ["host"]:
        host_table()
        return
    if sys.argv[1:] == ["sampler"]:
        sampler_table()
        return
    if sys.argv[1:2] == ["ops"]:
        ops_table(*(int(a) for a in sys.argv[2:3]))
        return
    host_table()
    print()
    overhead_table()
    print()
    one_step_table()
    print()
    per_event_cost()
    print()
    first_sight_table()
    print()
    file_table()


if __name__ == "__main__":
    main()
