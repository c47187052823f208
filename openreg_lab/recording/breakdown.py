"""Where the traced time and bytes went: fallback costs, copies over time, casts, memory peaks.

Each function takes ``Trace.events`` and returns a DataFrame (or a sentence); the views draw them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import analysis
from openreg_lab.recording.kinds import Kinds
from openreg_lab.recording.lookup import cell_source

#: The copy directions, as the recorder names them.
DIRECTIONS = ("H2D", "D2H", "D2D")


def fallback_costs(events: pd.DataFrame, *, kinds: Kinds | None = None) -> pd.DataFrame:
    """``Trace.fallbacks()`` with the three parts of each bar and its share of the traced time
    (``kinds``: Note [Kinds read once])."""
    fb = analysis.fallbacks(events, kinds=kinds).copy()
    span = analysis.span(events)
    fb["sources"] = [[cell_source(x) for x in s] for s in fb["sources"]]
    fb["share"] = fb["total_ns"] / span if span else 0.0
    return fb


def savings_sentence(fb: pd.DataFrame) -> str:
    """In words, what implementing the costliest fallback (of ``fallback_costs``) natively would save."""
    if fb.empty:
        return "No op fell back to the CPU: every call ran on openreg."
    top = fb.iloc[0]
    copies = int(top["copy_to_cpu_ns"] + top["copy_back_ns"])
    moved = int(top["bytes_to_cpu"] + top["bytes_back"])
    where = f" (called from {top['sources'][0]})" if len(top["sources"]) else ""
    return (
        f"Implementing {top['name']} natively would save up to {theme.format_ns(top['total_ns'])} "
        f"({top['share']:.1%} of the traced time) over its {int(top['calls'])} calls{where}: "
        f"{theme.format_ns(copies)} of copies moving {theme.format_bytes(moved)}, and the CPU compute of "
        f"{theme.format_ns(top['cpu_ns'])} would run on the device instead."
    )


def copy_timeline(events: pd.DataFrame, buckets: int = 100) -> pd.DataFrame:
    """Bytes copied per time bucket and direction: columns ``t_ns`` (bucket start), H2D, D2H, D2D."""
    cp = events[events["kind"] == "copy"]
    span = max(analysis.span(events), 1)
    width = span / buckets
    edges = np.arange(buckets) * width
    out = pd.DataFrame({"t_ns": edges})
    for d in DIRECTIONS:
        mine = cp[cp["name"] == d]
        b = np.minimum((mine["start_ns"].to_numpy() // width).astype(np.int64), buckets - 1)
        out[d] = np.bincount(b, weights=mine["bytes"].to_numpy(), minlength=buckets).astype(np.int64)
    return out


def cast_table(events: pd.DataFrame) -> pd.DataFrame:
    """Autocast casts by op and dtype pair: ``casts``, ``bytes``, ``cache_hits`` (weight-cache hits,
    nothing copied) and ``time_ns``; by bytes."""
    cols = ["op", "from_dtype", "to_dtype", "casts", "bytes", "cache_hits", "time_ns"]
    ca = analysis.casts(events)
    if ca.empty:
        return pd.DataFrame(columns=cols)
    out = (
        ca.assign(dur=ca["dur_ns"].clip(lower=0))
        .groupby(["op", "from_dtype", "to_dtype"], sort=False)
        .agg(
            casts=("op", "size"),
            bytes=("bytes", "sum"),
            cache_hits=("cache_hit", "sum"),
            time_ns=("dur", "sum"),
        )
        .reset_index()
    )
    out["cache_hits"] = out["cache_hits"].astype(np.int64)
    return out.sort_values(["bytes", "op"], ascending=[False, True], ignore_index=True)[cols]


def memory_peaks(events: pd.DataFrame) -> pd.DataFrame:
    """Per device: the peak of allocated bytes during the trace, when it happened and the op that
    allocated at the peak (its nearest enclosing op)."""
    cols = ["device", "peak_bytes", "t_ns", "op", "event"]
    mem = events[events["kind"].isin(("alloc", "free"))]
    if mem.empty:
        return pd.DataFrame(columns=cols)
    owner = analysis.nearest_op(events)
    names = events["name"].to_numpy()
    rows = []
    for dev, grp in mem.groupby("device", sort=True):
        i = int(grp["total"].to_numpy().argmax())
        row = grp.iloc[i]
        op = int(owner[int(row["id"])])
        rows.append(
            (dev, int(row["total"]), int(row["start_ns"]), names[op] if op >= 0 else None, int(row["id"]))
        )
    return pd.DataFrame(rows, columns=cols)
