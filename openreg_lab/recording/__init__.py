"""The recording layer (``csrc/trace`` seen from Python): ``trace()``, ``Trace`` and its tables.

- ``session``: ``trace()``, ``Trace``, ``mark()``, ``load_trace()``
- ``steps``: ``step()`` (and the optimizer hook calling it), the per-step table
- ``host``: the host sampler (the traced threads' Python), ``Trace.host()``, the Python flame
- ``verdict``, ``accounting``: the verdict, and where a step's wall time went
- ``memory``: ``Trace.memory()``, where the device memory went (``allocations`` gives each
  allocation its category, ``observations`` watches parameters, gradients, optimizer state and
  inputs while a trace runs, ``memory_text`` explains an out-of-memory, ``memory_ranks`` puts ranks
  side by side)
- ``events``: the recorder's fixed-size records as numpy arrays; merging thread buffers
- ``analysis``: the per-op summary (the one every view shows), fallbacks, copies, casts
- ``breakdown``: fallback costs, copies over time, casts by op, memory peaks
- ``flows``: the dispatch flows of the op calls; ``lookup``: one event's details, source lines
- ``files``: the ``.trace`` file format; ``chrome``: the Chrome Trace Event export
- ``history``: the memory history (``openreg_lab.memory._record_memory_history``); ``snapshot``,
  ``trace_snapshot``: PyTorch's memory snapshot of it, or of a trace (``_snapshot_pickle`` writes it)

Nothing here imports the views (Note [Views are plugged in] in ``session``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openreg_lab.recording.session import (
        Trace,
        TraceDroppedEventsWarning,
        TraceForkedWarning,
        load_trace,
        mark,
        trace,
    )
    from openreg_lab.recording.steps import step

# The names load on first use: the device's registration with Inductor imports this package's
# ``compiled`` (Note [The lab's seam in Python]), and pandas and the tables would cost it half a
# second in every process that compiles, traced or not.
_LAZY = {
    "Trace": "openreg_lab.recording.session",
    "TraceDroppedEventsWarning": "openreg_lab.recording.session",
    "TraceForkedWarning": "openreg_lab.recording.session",
    "load_trace": "openreg_lab.recording.session",
    "mark": "openreg_lab.recording.session",
    "trace": "openreg_lab.recording.session",
    "step": "openreg_lab.recording.steps",
}


def __getattr__(name: str) -> Any:
    """Load ``trace``, ``Trace`` and the other public names on first use."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Trace",
    "TraceDroppedEventsWarning",
    "TraceForkedWarning",
    "load_trace",
    "mark",
    "step",
    "trace",
]
