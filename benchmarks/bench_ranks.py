"""Merging a job's rank traces into the merged report: time and peak memory, 8 ranks of 250k events.

    .venv/bin/python benchmarks/bench_ranks.py            # 8 ranks x 250k events (the target)
    .venv/bin/python benchmarks/bench_ranks.py 4 100000   # ranks, events per rank

The traces come through the real recording path: two rank processes on 127.0.0.1 join one ogloo
group and record a training-like loop of small ops with an all_reduce every 200 iterations until
their trace holds the events asked for (rank 1 runs a few more ops per window: a straggler). The
generator then writes the ranks asked for from those two: rank ``r`` is a copy of the trace of real
rank ``r % 2`` with the job's rank set to ``r`` (the columns as recorded; collectives keep their
numbers, so each lines up across all ranks). Each size is merged by a fresh process
(``views.ranks(paths).to_html(...)``: load, check, merge, attribute, lay out, write) and its wall
time, CPU time and peak resident memory are printed beside the 20 s and 2 GB targets.
The merge runs on one thread: on a shared machine its CPU time is what it takes on an idle core,
its wall time includes the waits for a core (the load average is printed).
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import print_table

ROOT = Path(__file__).resolve().parents[1]


def _record(rank: int, port: int, events: int, folder: str) -> None:
    os.environ.setdefault("OPENREG_DEVICE_COUNT", "2")
    import torch
    import torch.distributed as dist

    import openreg_lab

    dist.init_process_group(
        "ogloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
        timeout=datetime.timedelta(seconds=120),
    )  # fmt: skip
    dev = torch.device("openreg", rank)
    x = torch.ones(16, device=dev)
    w = torch.ones(16, device=dev)
    with openreg_lab.trace(capacity=events + 5000) as t:
        i = 0
        while True:
            x = torch.relu(x * w + 1.0) - 1.0
            if rank == 1 and i % 200 < 20:
                x = x.abs()  # the straggler's extra ops
            i += 1
            if i % 200 == 0:
                dist.all_reduce(x)
                # both ranks stop together, once either has recorded enough
                full = torch.tensor([float(openreg_lab.recording.session.events_so_far() >= events - 600)])
                dist.all_reduce(full, op=dist.ReduceOp.MAX)
                if full.item():
                    break
    t.save(os.path.join(folder, f"real{rank}.trace"))
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def generate(folder: str, ranks: int, events: int) -> list[str]:
    """Record two real ranks, then write ``ranks`` rank traces from them (see the module doc)."""
    import openreg_lab
    from openreg_lab.recording.distributed import Job

    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_record, args=(r, port, events, folder)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
        if p.is_alive():
            p.kill()
            raise TimeoutError("a recording rank did not finish in 600 s")
    paths = []
    for r in range(ranks):
        t = openreg_lab.load_trace(os.path.join(folder, f"real{r % 2}.trace"))
        assert t.job is not None
        t.job = Job(t.job.run_id, r, ranks)
        path = os.path.join(folder, f"r{r}.trace")
        t.save(path)
        paths.append(path)
    return paths


MERGE = """
import sys, time, resource, openreg_lab
u0 = resource.getrusage(resource.RUSAGE_SELF)
start = time.perf_counter()
view = openreg_lab.views.ranks(sys.argv[2:])
view.to_html(sys.argv[1])
use = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - start, use.ru_maxrss, len(view.events), view.verdict.straggler,
      use.ru_utime + use.ru_stime - u0.ru_utime - u0.ru_stime)
"""


def main() -> None:
    ranks = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    events = int(sys.argv[2]) if len(sys.argv) > 2 else 250_000
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        paths = generate(folder, ranks, events)
        made = time.perf_counter() - t0
        rows = []
        for n in sorted({2, ranks}):
            out = os.path.join(folder, f"job{n}.html")
            proc = subprocess.run(
                [sys.executable, "-c", MERGE, out, *paths[:n]], capture_output=True, text=True, env=env,
                timeout=900,
            )  # fmt: skip
            if proc.returncode:
                raise SystemExit(proc.stderr[-3000:])
            wall, rss_kb, total, straggler, cpu = proc.stdout.split()
            rows.append(
                [
                    str(n), f"{int(total) // n:,}", f"{int(total):,}", f"{float(wall):.1f} s",
                    f"{float(cpu):.1f} s", f"{float(cpu) / 20:.2f}", f"{int(rss_kb) / 1024:,.0f} MB",
                    f"{int(rss_kb) / 1024 / 2048:.2f}",
                    f"{os.path.getsize(out) / 1e6:.1f} MB", straggler,
                ]
            )  # fmt: skip
    print(
        f"recorded 2 real ranks and wrote {ranks} rank traces in {made:.0f} s; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print_table(
        [
            "ranks",
            "events/rank",
            "events",
            "merge+report wall",
            "CPU",
            "CPU of 20 s",
            "peak RSS",
            "of 2 GB",
            "report",
            "straggler",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
