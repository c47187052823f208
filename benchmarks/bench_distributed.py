"""All-reduce and all-gather bandwidth on openreg ("ogloo") beside Gloo on CPU tensors, 2 ranks.

    .venv/bin/python benchmarks/bench_distributed.py
    PYTHONPATH=. .venv/bin/python benchmarks/bench_distributed.py  # another checkout

Two rank processes on 127.0.0.1 run the same collectives on openreg tensors (through openreg's
backend: host views handed to Gloo, no copies) and on CPU tensors of the same size (Gloo itself,
the CPU part of the same group), interleaved round by round; the table shows the median time of
a call (each call timed on its own, so the scheduler's rare long pauses on a shared machine do not
move it) as bandwidth (bytes per rank / time) and openreg's share of Gloo's (1.0 = as fast). openreg is
measured twice: as it runs by default, with the ranks' agreement exchange beside each collective
(Note [Ranks agree before Gloo runs]: the timed loop repeats one call, so after its first call the
exchange runs alongside the data instead of before it), and with it off (OPENREG_DIST_CHECK=0),
each by its own pair of rank processes; each ratio is against Gloo measured by the same pair.

A second table is the cost of the lab's checked collectives alone (Note [Checked collectives] in
csrc/checked/CheckedBackend.h): all_reduce of CPU tensors on a bare Gloo group and on a
"checked_gloo" group (the same Gloo in the lab's layer), interleaved round by round, as the median
time of a call in microseconds. The loop repeats one call, as a training loop does, so after its
first call each call is the predicted one and runs ahead of the comparison.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import print_table

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
OPS = ("all_reduce", "all_gather")
ROUNDS = 7
LAYER_SIZES = [4 << 10, 64 << 10, 4 << 20]


def _iters(nbytes: int) -> int:
    return max(3, min(200, (32 << 20) // nbytes))


def _rank(rank: int, port: int, check: bool, out: Any) -> None:
    os.environ["OPENREG_DIST_CHECK"] = "1" if check else "0"
    import datetime

    import torch
    import torch.distributed as dist

    import openreg_lab  # noqa: F401

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's rename
    dist.init_process_group(
        "ogloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
        timeout=datetime.timedelta(seconds=120),
    )  # fmt: skip
    # CPU tensors of an "ogloo" group go through openreg's backend too (Note [One group for openreg
    # and CPU tensors]): the baseline is a plain Gloo group
    gloo = dist.new_group(backend="gloo")
    results: dict[tuple[str, int, str], float] = {}
    for nbytes in SIZES:
        n = nbytes // 4
        tensors = {}
        for device in ("cpu", f"openreg:{rank}"):
            x = torch.ones(n, device=device)
            gathered = torch.empty(2 * n, device=device)
            tensors[device] = (x, gathered)
        for op in OPS:
            samples: dict[str, list[float]] = {d: [] for d in tensors}
            iters = _iters(nbytes)
            for round_ in range(ROUNDS):
                order = list(tensors.items())
                for device, (x, gathered) in order[:: 1 if round_ % 2 else -1]:
                    dist.barrier()
                    group = gloo if device == "cpu" else None
                    for _ in range(iters):
                        start = time.perf_counter()
                        if op == "all_reduce":
                            dist.all_reduce(x, group=group)
                        else:
                            dist.all_gather_into_tensor(gathered, x, group=group)
                        samples[device].append(time.perf_counter() - start)
            for device, s in samples.items():
                results[(op, nbytes, "cpu" if device == "cpu" else "openreg")] = statistics.median(s)
    if check:
        results.update(_layer_cost(gloo))
    if rank == 0:
        out.put(results)
    dist.destroy_process_group()


def _layer_cost(gloo: Any) -> dict[tuple[str, int, str], float]:
    """Median seconds of an all_reduce of CPU tensors, bare Gloo ("gloo") and in the lab's checked
    collectives ("checked"), per size in LAYER_SIZES."""
    import torch
    import torch.distributed as dist

    groups = {"gloo": gloo, "checked": dist.new_group(backend="checked_gloo")}
    results = {}
    for nbytes in LAYER_SIZES:
        x = torch.ones(nbytes // 4)
        samples: dict[str, list[float]] = {name: [] for name in groups}
        for round_ in range(ROUNDS):
            for name, group in list(groups.items())[:: 1 if round_ % 2 else -1]:
                dist.barrier()
                for _ in range(_iters(nbytes)):
                    start = time.perf_counter()
                    dist.all_reduce(x, group=group)
                    samples[name].append(time.perf_counter() - start)
        for name, s in samples.items():
            results[("layer", nbytes, name)] = statistics.median(s)
    return results


def _run(check: bool) -> dict[tuple[str, int, str], float]:
    ctx = mp.get_context("spawn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, check, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 900
        while True:
            try:
                return out.get(timeout=1)
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise SystemExit(f"a rank failed (exit codes {dead}) or took over 900 s") from None
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def _gbs(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / 1e9:.3g}"


def main() -> None:
    checked = _run(check=True)
    unchecked = _run(check=False)
    rows = []
    for op in OPS:
        for nbytes in SIZES:
            gloo = checked[(op, nbytes, "cpu")]
            ours = checked[(op, nbytes, "openreg")]
            fast = unchecked[(op, nbytes, "openreg")]
            gloo2 = unchecked[(op, nbytes, "cpu")]
            rows.append([
                op, _size(nbytes), _gbs(nbytes, gloo), _gbs(nbytes, ours), f"{gloo / ours:.2f}x",
                _gbs(nbytes, fast), f"{gloo2 / fast:.2f}x",
            ])  # fmt: skip
    print("2 ranks on 127.0.0.1, GB/s = bytes per rank / median time of a call")
    print_table(["collective", "size", "gloo cpu", "openreg", "ratio", "openreg, no check", "ratio"], rows)
    layer = []
    for nbytes in LAYER_SIZES:
        bare, ours = checked[("layer", nbytes, "gloo")], checked[("layer", nbytes, "checked")]
        layer.append([_size(nbytes), f"{bare * 1e6:.0f}", f"{ours * 1e6:.0f}", f"{ours / bare:.2f}x"])
    print("\nall_reduce of CPU tensors, median microseconds per call: the lab's checked collectives")
    print_table(["size", "gloo", "checked_gloo", "ratio"], layer)


if __name__ == "__main__":
    main()
