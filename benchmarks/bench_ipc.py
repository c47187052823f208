"""What sharing costs: a new openreg block, the same block moved to shared memory, and CPU's move.

    .venv/bin/python benchmarks/bench_ipc.py
    PYTHONPATH=. .venv/bin/python benchmarks/bench_ipc.py  # another checkout than the installed one

Note [Sharing device memory across processes] (csrc/runtime/DeviceAllocator.cpp) moves a block
into a shared segment the first time it is sent, rather than allocating every block as one. Each
row times a fresh block (the cache emptied each time) of one size three ways, side by side:

- ``new``: allocate and free an openreg tensor that is never sent (malloc, the allocator's path);
- ``new + share``: the same, sent once (memfd, mmap, copy; freed by munmap): what every new block
  would cost if each were a shared segment from the start;
- ``CPU share``: torch's own first send of a CPU tensor (``_share_fd_cpu_``), the reference.

The send is timed without pickling (``_C._share_storage``, what the reducer calls), so no file
descriptor is left waiting for a receiver.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import compare, fmt_time, print_table

import openreg_lab
from openreg_lab import _C

SIZES = {"4 KiB": 4 << 10, "64 KiB": 64 << 10, "4 MiB": 4 << 20}


def _new(nbytes: int) -> None:
    torch.empty(nbytes, dtype=torch.uint8, device="openreg")
    torch.openreg.empty_cache()


def _new_and_share(nbytes: int) -> None:
    t = torch.empty(nbytes, dtype=torch.uint8, device="openreg")
    _C._share_storage(t.untyped_storage())
    del t
    torch.openreg.empty_cache()


def _cpu_share(nbytes: int) -> None:
    torch.empty(nbytes, dtype=torch.uint8).untyped_storage()._share_fd_cpu_()


def main() -> None:
    print(f"openreg_lab {openreg_lab.__file__}, torch {torch.__version__}")
    rows = []
    for label, n in SIZES.items():
        fns = [lambda n=n: _new(n), lambda n=n: _new_and_share(n), lambda n=n: _cpu_share(n)]
        new, shared, cpu = compare(fns)
        times = [fmt_time(new), fmt_time(shared), fmt_time(cpu)]
        rows.append([label, *times, f"{shared / new:.1f}x", f"{shared / cpu:.2f}x"])
    print_table(["block", "new", "new + share", "CPU share", "share / new", "share / CPU share"], rows)


if __name__ == "__main__":
    main()
