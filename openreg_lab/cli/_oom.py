"""``run``'s out-of-memory snapshots: an ``OutOfMemoryError`` leaves PyTorch's memory
snapshot of that moment beside the trace, and its message names the file.

While the script runs, the memory history records the allocator's last :data:`ENTRIES` actions with
the Python stack of each allocation (``openreg_lab.memory._record_memory_history(context="alloc")``,
unless the script records one itself), and an observer of openreg's out-of-memory errors (Note [Out
of memory, observed] in ``csrc/runtime/DeviceAllocator.h``) writes the snapshot, what each block
held and the actions that led there, to ``<name>.oom.pickle``: ``<name>`` is the trace's path
without its extension (``--trace run.trace``: ``run.oom.pickle``), else the report's or the Chrome
trace's, else the script's or the module's name in the directory ``run`` started in. PyTorch's
viewer (pytorch.org/memory_viz) opens it, and ``torch.cuda._memory_viz`` reads it offline. A
script that catches the error and fails again overwrites it with the newer moment.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

from openreg_lab import _C
from openreg_lab.recording import history, snapshot

#: The entries the history keeps while ``run`` records it: the newest, 32 bytes each.
ENTRIES = 100_000


def path_for(ns: argparse.Namespace, rank: int | None) -> str:
    """Where ``run`` writes the snapshot of an out of memory (``ns``: its checked arguments)."""
    for given in (ns.trace, ns.html, ns.chrome):
        if given is not None:
            base = os.path.splitext(given)[0]
            break
    else:
        base = os.path.abspath(ns.module or os.path.splitext(os.path.basename(ns.script))[0])
    name = f"{base}.oom.pickle"
    if rank is not None:
        name = f"{base}.rank{rank}.oom.pickle"
    return name


@contextlib.contextmanager
def snapshots(path: str) -> Iterator[list[str]]:
    """While the block runs, each out of memory writes the snapshot to ``path`` and its message says
    so; yields the list of paths written (``path`` once it has been)."""
    written: list[str] = []
    ours = not history.recording()
    if ours:
        history.record_memory_history(context="alloc", stacks="python", max_entries=ENTRIES)

    def observe(device: int, requested: int) -> str:
        try:
            snapshot.write_snapshot(snapshot.history_parts(warn=False), path)
        except Exception as e:  # the OutOfMemoryError is raised whatever happens here
            return f" openreg-lab run could not write a memory snapshot to {path}: {type(e).__name__}: {e}"
        if path not in written:
            written.append(path)
        return (
            f" openreg-lab run wrote a memory snapshot of this moment to {path} (what each block held "
            "and the allocator's last actions, with their Python stacks): open it at "
            "https://pytorch.org/memory_viz or read it with torch.cuda._memory_viz."
        )

    _C._set_oom_observer(observe)
    try:
        yield written
    finally:
        _C._set_oom_observer(None)
        if ours and history.recording():
            history.record_memory_history(enabled=None)
