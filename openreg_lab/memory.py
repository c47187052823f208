"""Device memory in PyTorch's own terms: what ``torch.cuda.memory`` offers for memory debugging, for
openreg.

::

    import openreg_lab.memory
    openreg_lab.memory._record_memory_history(max_entries=100_000)  # every allocation, with its stack
    train_step()
    openreg_lab.memory._dump_snapshot("snap.pickle")                # open at pytorch.org/memory_viz
    openreg_lab.memory._record_memory_history(enabled=None)         # stop (and forget)

``_snapshot()`` returns the dict ``torch.cuda.memory._snapshot()`` documents, which
``torch.cuda._memory_viz`` reads (its ``trace``, ``segments``, ``memory``, ``compare``, ``segsum``,
``trace_plot`` and ``segment_plot``), with a ``category`` on each entry and block;
``snapshot_of(trace)`` makes one from an ``openreg_lab.trace()``. Under ``openreg_lab.from_cuda()``
(``run --from-cuda``) ``torch.cuda.memory``'s functions of the same names are these.
The names keep torch's leading underscore, so that a script's calls read the same on both.
"""

from __future__ import annotations

from openreg_lab.device._allocator_settings import set_allocator_settings as _set_allocator_settings
from openreg_lab.recording.history import record_memory_history as _record_memory_history
from openreg_lab.recording.snapshot import SnapshotWarning, snapshot_of
from openreg_lab.recording.snapshot import dump_snapshot as _dump_snapshot
from openreg_lab.recording.snapshot import snapshot as _snapshot

__all__ = [
    "SnapshotWarning",
    "_dump_snapshot",
    "_record_memory_history",
    "_set_allocator_settings",
    "_snapshot",
    "snapshot_of",
]
