"""What the merged view of a job's ranks shows beside its collectives, as tables (``views.ranks``
draws them): each rank's top-level ops and backward nodes on the merged clock (``activity``), the
training steps across ranks (``job_steps``) and each rank's own verdict numbers (``rank_verdicts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from openreg_lab.recording import steps
from openreg_lab.recording.distributed import _RankTrace
from openreg_lab.recording.ranks import offsets

#: The columns of ``job_steps``.
JOB_STEP_COLUMNS = ["step", "start_ns", "end_ns", "complete"]


def activity(traces: Sequence[_RankTrace], merged: pd.DataFrame) -> pd.DataFrame:
    """Each rank's top-level ops and backward nodes on the merged clock (``ranks.offsets``): rank,
    kind, name, start, duration (the context the collectives ran in). ``merged`` is the ranks'
    ``merge_ranks`` table: a trace's rank is the global rank it recorded there (else its index)."""
    parts = []
    for index, (t, shift) in enumerate(zip(traces, offsets(traces), strict=True)):
        e = t.events
        top = e[(e["parent"] < 0) & e["kind"].isin(["op", "backward"]) & (e["dur_ns"] > 0)]
        ranks = merged.loc[merged["trace"] == index, "global_rank"]
        parts.append(
            pd.DataFrame(
                {
                    "rank": int(ranks.iloc[0]) if len(ranks) else index,
                    "kind": top["kind"].to_numpy(),
                    "name": top["name"].to_numpy(),
                    "start_ns": top["start_ns"].to_numpy() + shift,
                    "dur_ns": top["dur_ns"].to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def job_steps(traces: Sequence[_RankTrace]) -> pd.DataFrame:
    """The training steps across ranks (``JOB_STEP_COLUMNS``, by step): step n from the earliest
    rank's start to the latest rank's end on the merged clock, complete when it is on every rank
    that ran it."""
    parts = []
    for t, shift in zip(traces, offsets(traces), strict=True):
        table = steps.table(t.events)  # each rank's own, then on the merged clock
        start = table["start_ns"] + shift
        parts.append(table.assign(start_ns=start, end_ns=start + table["dur_ns"]))
    all_steps = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if all_steps.empty:
        return pd.DataFrame(columns=JOB_STEP_COLUMNS)
    g = all_steps.groupby("step")
    out = pd.DataFrame(
        {"start_ns": g["start_ns"].min(), "end_ns": g["end_ns"].max(), "complete": g["complete"].all()}
    )
    return out.reset_index()[JOB_STEP_COLUMNS]


def rank_verdicts(traces: Sequence[Any], ranks: Sequence[int], per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per rank, its own verdict's numbers (``Trace.verdict()``, the single-rank verdict:
    ``span_ns``, complete ``steps``, the ``median_step_ns`` after the first, the ``fallback_share``,
    ``host_python`` its top host cause per part of the wall time, the ``headline``) beside its waits
    and overlap (``per_rank``, ``JobVerdict.per_rank``)."""
    rows = []
    for r, t in zip(ranks, traces, strict=True):
        v = t.verdict()
        table = t.steps()
        done = table[table["complete"]] if len(table) else table
        rows.append(
            {
                "rank": r,
                "span_ns": v.span_ns,
                "steps": len(done),
                "median_step_ns": float(done["dur_ns"].iloc[1:].median()) if len(done) > 1 else None,
                "fallback_share": v.shares[0].share if v.shares else None,
                "host_python": host_line(v),
                "headline": v.headline(),
            }
        )
    return pd.DataFrame(rows).merge(per_rank, on="rank", how="left")


def host_line(v: Any) -> str:
    """A rank's host time as its verdict names it (Note [Folding host frames]): per part of the wall
    time it accounts (step 0, the median step), its top host Python cause."""
    return "; ".join(f"{w.label}: {w.python[0].text()}" for w in v.time if w.python)
