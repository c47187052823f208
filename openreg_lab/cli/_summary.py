"""What ``run`` and ``report`` print about a trace, and the facts they give the HTML report."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from openreg_lab.cli._common import format_table, ms
from openreg_lab.theme import format_bytes


def event_counts(events: pd.DataFrame) -> str:
    """``"1234 (op 1000, copy 200, cast 34)"``: the number of events, by kind, most frequent first."""
    if events.empty:
        return "0"
    kinds = events["kind"].value_counts()
    return f"{len(events)} (" + ", ".join(f"{k} {n}" for k, n in kinds.items()) + ")"


def autocast_seen(events: pd.DataFrame) -> str:
    """What the trace's cast events say about autocast: the dtypes cast to, or that there were none."""
    casts = events[events["kind"] == "cast"]
    if casts.empty:
        return "no autocast casts recorded"
    dtypes = casts["to_dtype"].value_counts()
    return f"{len(casts)} casts (" + ", ".join(f"to {d} {n}" for d, n in dtypes.items()) + ")"


def trace_facts(trace: Any) -> dict[str, str]:
    """The report header's facts that come from the trace itself."""
    events = trace.events
    recorded = [name for name, on in (("shapes", trace.record_shapes), ("stack", trace.stack)) if on]
    return {
        "events": event_counts(events),
        "dropped events": str(trace.dropped)
        + ("" if not trace.dropped else f" (the trace holds at most {trace.capacity})"),
        "autocast": autocast_seen(events),
        "recorded": ", ".join(["events", *recorded]),
    }


def totals_table(trace: Any) -> str:
    """Calls, time and bytes of the ops, fallbacks, copies and casts of ``trace``, as a table."""
    ev = trace.events
    # top level: called by the user's code, or by compiled code (torch.compile's graph calls, and
    # compilations, are not ops: the ops inside them count as top level)
    parent_kind = ev["kind"].to_numpy()[ev["parent"].clip(lower=0).to_numpy()]
    in_compiled = (ev["parent"] >= 0).to_numpy() & np.isin(parent_kind, ("compiled", "compile"))
    ops = ev[(ev["kind"] == "op") & ((ev["parent"] == -1) | in_compiled)]
    kernels = ev[(ev["kind"] == "compiled") & ev["fused"].notna()]
    fb = ev[ev["kind"] == "fallback"]
    copies = ev[ev["kind"] == "copy"]
    casts = ev[ev["kind"] == "cast"]

    def row(label: str, frame: pd.DataFrame, with_bytes: bool) -> list[object]:
        time = frame["dur_ns"].clip(lower=0).sum()
        moved = format_bytes(int(frame["bytes"].sum())) if with_bytes else ""
        return [label, len(frame), ms(time), moved]

    rows = [
        row("ops (top level)", ops, False),
        *([row("compiled kernels", kernels, False)] if len(kernels) else []),
        row("fallbacks", fb, False),
        row("copies", copies, True),
        row("autocast casts", casts, True),
    ]
    table = format_table(["", "calls", "time ms", "bytes"], rows, [False, True, True, True])
    dropped = f", {trace.dropped} dropped" if trace.dropped else ", none dropped"
    kernels_only = ""
    if trace.ops == "kernels":
        kernels_only = "\nop events: openreg's kernels only (--ops kernels): no composites, no backward nodes"
    return f"{table}\nevents: {event_counts(ev)}{dropped}{kernels_only}"


def fallbacks_table(trace: Any, top: int) -> str:
    """The ``top`` ops that fell back the most (by time), with their calls, copies and source lines."""
    fb = trace.fallbacks()
    if fb.empty:
        return "no op fell back to the CPU"
    rows = []
    for r in fb.head(top).itertuples(index=False):
        sources = [_short(s) for s in r.sources]
        where = sources[0] + (f" (+{len(sources) - 1} more)" if len(sources) > 1 else "") if sources else ""
        rows.append(
            [r.name, r.calls, ms(r.total_ns), format_bytes(r.bytes_to_cpu), format_bytes(r.bytes_back), where]
        )
    headers = ["op", "calls", "time ms", "to cpu", "back", "source"]
    title = f"top fallbacks ({min(top, len(fb))} of {len(fb)} ops, by time including copies)"
    return title + "\n" + format_table(headers, rows, [False, True, True, True, True, False])


def _short(source: str) -> str:
    """``/long/path/train.py:12`` -> ``train.py:12`` (the table is for a terminal)."""
    path, sep, line = source.rpartition(":")
    return f"{os.path.basename(path)}{sep}{line}" if sep else source
