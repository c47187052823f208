"""The memory of one job's ranks side by side: each rank's peak, what was live then, on one clock.

``peaks_by_rank`` is the merged ranks report's per-rank peak row (``Memory.peaks()`` of each rank's
trace, a ``rank`` column first, ``t_ns`` on the merged clock as ``ranks.merged_events``);
``peak_by_rank`` the rows of each rank's ``Memory.peak()``. Ranks are labelled by the rank each
trace recorded (Note [A run id for every trace]); a rank whose tables are incomplete says so in
the ``complete`` column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from openreg_lab.recording import ranks
from openreg_lab.recording.distributed import _rank_of
from openreg_lab.recording.memory import LIVE_COLUMNS, PEAK_COLUMNS

RANK_PEAK_COLUMNS = ["rank", *PEAK_COLUMNS, "complete"]
RANK_LIVE_COLUMNS = ["rank", *LIVE_COLUMNS]


def peaks_by_rank(traces: Sequence[Any]) -> pd.DataFrame:
    """One row per rank and device (``RANK_PEAK_COLUMNS``), by rank: its peak, when on the merged
    clock, the step, the bytes at its trace's start and end, the peak per category, and whether
    that rank's memory tables are complete."""
    if not traces:
        raise ValueError("peaks_by_rank needs at least one trace (one per rank)")
    frames = []
    for index, (t, shift) in enumerate(zip(traces, ranks.offsets(traces), strict=True)):
        memory = t.memory()
        f = memory.peaks()
        f.insert(0, "rank", _rank_of(t, index))
        f["t_ns"] = f["t_ns"] + shift
        f["complete"] = memory.complete
        frames.append(f)
    out = pd.concat(frames, ignore_index=True).sort_values(["rank", "device"], kind="stable")
    return out.reset_index(drop=True)[RANK_PEAK_COLUMNS]


def peak_by_rank(traces: Sequence[Any]) -> pd.DataFrame:
    """What was live at each rank's peak (``RANK_LIVE_COLUMNS``: ``Memory.peak()`` with a ``rank``
    column), by rank; ``start_ns`` on the merged clock (-1: made before that rank's trace)."""
    if not traces:
        raise ValueError("peak_by_rank needs at least one trace (one per rank)")
    frames = []
    for index, (t, shift) in enumerate(zip(traces, ranks.offsets(traces), strict=True)):
        f = t.memory().peak()
        f.insert(0, "rank", _rank_of(t, index))
        f["start_ns"] = f["start_ns"].where(f["start_ns"] < 0, f["start_ns"] + shift)
        frames.append(f)
    out = pd.concat(frames, ignore_index=True).sort_values("rank", kind="stable")
    return out.reset_index(drop=True)[RANK_LIVE_COLUMNS]
