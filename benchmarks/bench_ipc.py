"""What sharing costs: a new openreg block, the same block moved to shared memory, and CPU's move.

    .venv/bin/python benchmarks/bench_ipc.py
    PYTHONPATH=. .venv/bin/python benchmarks/bench_ipc.py  # another checkout than the installed one

Note [Sharing device memory across processes] (csrc/runtime/DeviceAllocator.cpp) moves a block
into a shared segment the first time it is sent, rather than allocating every block as one. Each
row times a fresh block (the cache emptied each time) of one size three ways, side by side:

- ``new``: allocate and free an openreg tensor that is never sent (malloc, the allocator's path);
- ``segment``: the floor of a shared segment per block, with no copy and no page touched
  (``os.memfd_create``, ``ftruncate``, ``mmap``, ``munmap``, ``close`` from Python): what every new
  block would add if each were a segment from the start;
- ``new + share``: a new block sent once (memfd, mmap, the copy; freed by munmap): what a first send
  costs with the lazy move;
- ``CPU share``: torch's own first send of a CPU tensor (``_share_fd_cpu_``), the reference.

The send is timed without pickling (``_C._share_storage``, what the reducer calls), so no file
descriptor is left waiting for a receiver.

A second table times the allocator's own path for a tensor never sent, which every op takes:

- ``cached``: allocate and free a block the cache already holds (the steady state of a loop);
- ``fresh``: the same with the cache emptied each time (a block taken from the host and returned);
- ``fresh + write``: a fresh block whose every byte is then written (``fill_``, on one thread: two
  OpenMP threads on a busy machine time the waits at their barrier), so the time of the host's
  first touch of its pages counts too.

    .venv/bin/python benchmarks/bench_ipc.py [share|alloc]   # one table; both by default
"""

from __future__ import annotations

import functools
import mmap
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import compare, fmt_time, print_table

import openreg_lab
from openreg_lab import _C

SIZES = {"4 KiB": 4 << 10, "64 KiB": 64 << 10, "4 MiB": 4 << 20}
ALLOC_SIZES = {"512 B": 512, "4 KiB": 4 << 10, "64 KiB": 64 << 10, "1 MiB": 1 << 20, "16 MiB": 16 << 20}


def _new(nbytes: int) -> None:
    torch.empty(nbytes, dtype=torch.uint8, device="openreg")
    torch.openreg.empty_cache()


def _segment(nbytes: int) -> None:
    fd = os.memfd_create("bench", os.MFD_CLOEXEC)
    os.ftruncate(fd, nbytes)
    mmap.mmap(fd, nbytes).close()
    os.close(fd)


def _new_and_share(nbytes: int) -> None:
    t = torch.empty(nbytes, dtype=torch.uint8, device="openreg")
    _C._share_storage(t.untyped_storage())
    del t
    torch.openreg.empty_cache()


def _cpu_share(nbytes: int) -> None:
    torch.empty(nbytes, dtype=torch.uint8).untyped_storage()._share_fd_cpu_()


def _cached(nbytes: int) -> None:
    torch.empty(nbytes, dtype=torch.uint8, device="openreg")


def _fresh_and_write(nbytes: int) -> None:
    torch.empty(nbytes, dtype=torch.uint8, device="openreg").fill_(1)
    torch.openreg.empty_cache()


def share_table() -> None:
    rows = []
    for label, n in SIZES.items():
        fns = [functools.partial(f, n) for f in (_new, _segment, _new_and_share, _cpu_share)]
        new, segment, shared, cpu = compare(fns)
        times = [fmt_time(t) for t in (new, segment, shared, cpu)]
        rows.append([label, *times, f"{segment / new:.1f}x", f"{shared / cpu:.2f}x"])
    header = ["block", "new", "segment", "new + share", "CPU share", "segment / new", "share / CPU share"]
    print_table(header, rows)


def alloc_table() -> None:
    torch.set_num_threads(1)
    rows = []
    for label, n in ALLOC_SIZES.items():
        fns = [functools.partial(f, n) for f in (_cached, _new, _fresh_and_write)]
        rows.append([label, *(fmt_time(t) for t in compare(fns))])
    print_table(["block", "cached", "fresh", "fresh + write"], rows)


def main() -> None:
    print(f"openreg_lab {openreg_lab.__file__}, torch {torch.__version__}")
    which = sys.argv[1:2] or ["share", "alloc"]
    if "share" in which:
        share_table()
    if "alloc" in which:
        alloc_table()


if __name__ == "__main__":
    main()
