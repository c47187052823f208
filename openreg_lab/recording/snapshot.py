"""PyTorch's memory snapshot, of openreg: what ``torch.cuda.memory._snapshot()`` returns on CUDA.

``snapshot()`` and ``dump_snapshot()`` read the memory history (``history.py``) and the blocks each
device holds now; ``snapshot_of(trace)`` makes one from a trace's memory events. Both give the dict
``torch.cuda.memory._snapshot`` documents, which ``torch.cuda._memory_viz`` and PyTorch's viewer
(pytorch.org/memory_viz) read:

- ``segments``: one per block the allocator holds (openreg never splits one, so each segment is one
  block), each with its ``blocks`` (state ``active_allocated`` or ``inactive``: cached), the
  block's ``frames`` and a ``category`` (ours);
- ``device_traces``: per device, the allocator's actions in order (``alloc``, ``free_requested`` and
  ``free_completed``, ``segment_alloc``, ``segment_free``, ``oom``), each with ``addr`` (an oom:
  ``device_free``), ``size``, ``stream`` 0, ``time_us``, Python ``frames`` (innermost first) and a
  ``category`` (ours);
- ``dropped_entries`` (ours): entries the history's ring dropped, its oldest (for a trace: the events
  the trace could not keep, its newest).
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from openreg_lab import _C
from openreg_lab.recording import atomic, history, trace_snapshot
from openreg_lab.recording._snapshot_parts import UNKNOWN, entry_categories, expand, segment
from openreg_lab.recording._snapshot_pickle import Parts, write

if TYPE_CHECKING:
    from openreg_lab.recording.session import Trace


class SnapshotWarning(UserWarning):
    """A snapshot lacks what was asked of it: no memory history recorded, or entries dropped."""


def categories(source: Trace | history.History) -> dict[int, str]:
    """The category of each allocation of ``source``, in PyTorch's terms (``parameter``,
    ``gradient``, ``optimizer_state``, ``activation``, ``temporary``, ``input``,
    ``autograd_detail``); an allocation it leaves out is ``unknown``.

    Keyed by allocation, not by address (an address is reused by allocation after allocation): for
    a ``Trace``, the alloc event's id (``t.events["id"]``), with the category ``t.memory()`` gives
    it (Note [Memory categories]). A free takes its allocation's category, and so does the live
    block it leaves or holds. A ``History`` records the allocator's actions only, not the modules,
    optimizers and autograd a category is found from: its allocations are ``unknown`` (a snapshot
    with categories is a trace's, :func:`snapshot_of`).
    """
    if isinstance(source, history.History):
        return {}
    a = source.memory().allocations()
    made = a["id"].to_numpy() >= 0  # the blocks held before the trace have no alloc event
    return dict(zip(a["id"].to_numpy()[made].tolist(), a["category"].to_numpy()[made].tolist(), strict=True))


def snapshot(device: Any = None) -> dict[str, Any]:
    """The memory snapshot of every openreg device now: ``torch.cuda.memory._snapshot()``'s dict,
    from the memory history and the allocator's blocks. ``device`` is ignored, as on CUDA.

    Without a memory history (``openreg_lab.memory._record_memory_history()``) it lists the blocks
    only, and a ``SnapshotWarning`` says how to start one."""
    buffer = io.BytesIO()
    write(history_parts(), buffer)
    return pickle.loads(buffer.getvalue())


def dump_snapshot(filename: str | os.PathLike[str] = "dump_snapshot.pickle") -> None:
    """Write :func:`snapshot` pickled to ``filename`` (``torch.cuda.memory._dump_snapshot``), whole
    or not at all (Note [Where an output may go]); a ``SnapshotWarning`` says how many entries the
    history's ring dropped, if any."""
    parts = history_parts()
    dropped = parts.extra["dropped_entries"]
    if dropped:
        warnings.warn(
            f"the memory history kept its newest {parts.extra['max_entries']:,} entries and dropped "
            f"{dropped:,} older ones (the snapshot's 'dropped_entries'): raise max_entries in "
            "_record_memory_history to keep more",
            SnapshotWarning,
            stacklevel=2,
        )
    with atomic.replacing(filename) as f:  # Note [Where an output may go]
        write(parts, f)


def write_snapshot(snap: Parts, path: str | os.PathLike[str]) -> None:
    """Write the snapshot ``snap`` to ``path`` as a pickle (Note [Where an output may go])."""
    with atomic.replacing(path) as f:
        write(snap, f)


# Note [A snapshot's blocks and entries agree]
# PyTorch's viewer replays the entries backwards from the blocks (an alloc undone removes its
# block, a free undone brings it back): an entry newer than the blocks would undo a block they do
# not hold. Each device's blocks are read under its allocator lock, which its entries are appended
# under, together with the number of entries appended then; the history is read after, and a
# device's entries from that number on are left out.
def history_parts(warn: bool = True) -> Parts:
    """What :func:`snapshot` and :func:`dump_snapshot` write (``write_snapshot`` writes it to a file);
    ``warn``: a ``SnapshotWarning`` when no history is recorded."""
    count = torch_device_count()
    states = [_C._memory_state(d) for d in range(count)]  # (blocks, entries appended then)
    h = history.read()
    if warn and not h.enabled and h.appended == 0:
        warnings.warn(
            "no memory history is recorded: the snapshot lists the blocks each openreg device holds "
            "now, without entries or stacks. Start one first with "
            "openreg_lab.memory._record_memory_history() (torch.cuda.memory._record_memory_history() "
            "under --from-cuda)",
            SnapshotWarning,
            stacklevel=3,
        )
    found = categories(h)
    names = [UNKNOWN, *sorted(set(found.values()) - {UNKNOWN})]
    first = h.appended - len(h.entries)
    number = np.arange(first, h.appended, dtype=np.int64)
    e = h.entries
    category = entry_categories(e["action"] == history.ALLOC, e["device"], e["address"], number, found, names)
    traces = []
    for d in range(count):
        keep = (e["device"] == d) & (number < states[d][1])
        columns = (e[k][keep] for k in ("action", "address", "size"))
        traces.append(
            expand(*columns, e["time_ns"][keep] // 1000, e["stack"][keep], category[keep], h.skipped)
        )
    segments = []
    for d, (blocks, _) in enumerate(states):
        for address, size, requested, allocated, stack in blocks:
            segments.append(segment(d, address, size, requested, allocated, stack, UNKNOWN))
    frames = [(h.strings[int(f["file"])], int(f["line"]), h.strings[int(f["name"])]) for f in h.frames]
    ours = _lab_files()
    shown = np.array([file not in ours for file, _, _ in frames], dtype=bool)
    stacks = []
    for a, b in zip(h.offsets[:-1], h.offsets[1:], strict=True):
        members = h.members[int(a) : int(b)]
        stacks.append(members[shown[members]])
    extra = {"dropped_entries": h.dropped, "max_entries": h.max_entries}
    return Parts(frames, stacks, names, segments, traces, extra)


def _lab_files() -> set[str]:
    """The lab's own files a script's stack passes through: ``from_cuda()``'s wrappers around torch's
    functions and ``openreg-lab run``'s frames around the script. On CUDA, or run by Python, they
    would not be there, so a snapshot leaves them out."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    names = ("device/from_cuda.py", "device/_cuda_entries.py", "device/_cuda_module.py", "cli/run.py",
             "cli/_script.py", "cli/__init__.py", "__main__.py")  # fmt: skip
    return {os.path.join(package, *name.split("/")) for name in names}


def torch_device_count() -> int:
    import torch

    return int(torch.openreg.device_count())


def snapshot_of(trace: Trace) -> dict[str, Any]:
    """The memory snapshot of ``trace``: its memory events as ``device_traces`` and, as
    ``segments``, the blocks its events leave held at its end (those it never saw are not listed).

    An entry's frames are the ops around it, innermost first, each with the user's line that
    called it (``trace(stack=True)``), else ``??`` (``trace_snapshot.py``); ``dropped_entries`` is
    ``trace.dropped``."""
    buffer = io.BytesIO()
    write(trace_parts(trace), buffer)
    return pickle.loads(buffer.getvalue())


def trace_parts(trace: Trace) -> Parts:
    """What :func:`snapshot_of` writes (``write_snapshot`` writes it to a file)."""
    return trace_snapshot.parts(trace, categories(trace))
