"""The recording layer (``csrc/trace`` seen from Python): ``trace()``, ``Trace`` and its tables.

- ``session``: ``trace()``, ``Trace``, ``mark()``, ``load_trace()``
- ``steps``: ``step()`` (and the optimizer hook calling it), the per-step table
- ``host``: the host sampler (the traced threads' Python), ``Trace.host()``, the Python flame
- ``verdict``, ``accounting``: the verdict, and where a step's wall time went
- ``events``: the recorder's fixed-size records as numpy arrays; merging thread buffers
- ``analysis``: the per-op summary (the one every view shows), fallbacks, copies, casts
- ``breakdown``: fallback costs, copies over time, casts by op, memory peaks
- ``flows``: the dispatch flows of the op calls; ``lookup``: one event's details, source lines
- ``files``: the ``.trace`` file format; ``chrome``: the Chrome Trace Event export

Nothing here imports the views (Note [Views are plugged in] in ``session``).
"""

from openreg_lab.recording.session import (
    Trace,
    TraceDroppedEventsWarning,
    TraceForkedWarning,
    load_trace,
    mark,
    trace,
)
from openreg_lab.recording.steps import step

__all__ = [
    "Trace",
    "TraceDroppedEventsWarning",
    "TraceForkedWarning",
    "load_trace",
    "mark",
    "step",
    "trace",
]
