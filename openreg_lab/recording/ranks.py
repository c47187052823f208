"""One job's ranks together: their events on one clock, who waited for whom and why, overlap.

Every table here is a DataFrame computed from the ranks' traces and ``distributed.merge_ranks``;
the merged report (``views.ranks``) only draws them.

- ``merged_events``: every rank's events in one table (a ``rank`` column, ids made unique, times on
  one clock), what the merged timeline and op explorer read.
- ``causes``: at each collective, the rank the others waited for and the ops that took longer on
  it than on the others since the previous collective (Note [Straggler attribution]).
- ``rank_table``: per rank, the time it waited for the others and held them up, its communication.
- ``overlap``: per rank, the fraction of its communication time overlapped by computation.
- ``job_verdict``: the job's verdict in words, from those tables.

Note [Straggler attribution]
At a collective, the others wait for the last rank to arrive. Why it arrived late is in what it
did since its previous collective: on each rank the window runs from the moment it was released
from its previous collective (the end of the op that issued it, in which a blocking collective
waits; its trace's start for the first) to the moment it issued this one (the start of the op that
issued it). The time a rank spends inside a collective, waiting for the others, is thus nobody's
cause: before, a rank that waited 300 ms at one collective carried that wait into the next window
as time outside ops, and was blamed for it. Each op's self time (Note
[Self time]) and each ``compile`` event is summed per name and source line in its window; the late
rank's sum minus the median of the other ranks' (0 on a rank that did not run it) is that op's
excess. Time in the window that no op and no wait on a collective explains (Python, sleeps, data
loading) is compared the same way, as one row, ``OUTSIDE``. Only positive excesses are kept, the
largest first: measured differences, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import analysis
from openreg_lab.recording.distributed import _RankTrace

#: The row of ``causes`` for time no recorded op explains (Note [Straggler attribution]).
OUTSIDE = "time outside recorded ops (Python, sleeps, data loading)"
#: How many causes ``causes`` keeps per collective.
TOP = 5
CAUSE_COLUMNS = [
    "key", "collective", "late_rank", "waited_ns", "op", "source", "rank_ns", "others_ns", "excess_ns",
    "calls", "others_calls",
]  # fmt: skip
RANK_COLUMNS = ["rank", "collectives", "waited_ns", "held_up_ns", "last_at", "blocked_ns", "comm_ns"]
OVERLAP_COLUMNS = ["rank", "comm_ns", "compute_ns", "overlapped_ns", "overlap"]


def offsets(traces: Sequence[_RankTrace]) -> list[int]:
    """Each trace's shift onto the merged clock (0 at the earliest trace's start)."""
    origin = min(t._t0 for t in traces)
    return [t._t0 - origin for t in traces]


def merged_events(traces: Sequence[_RankTrace], ranks: Sequence[int]) -> pd.DataFrame:
    """Every rank's events in one table: ``Trace.events``' columns and ``rank``; ``id``, ``parent``
    and ``forward`` renumbered so that ids stay row positions; times on the merged clock."""
    frames = [t.events for t in traces]
    if not frames:
        return pd.DataFrame()
    sizes = [len(e) for e in frames]
    base = np.repeat(np.cumsum([0, *sizes[:-1]]).astype(np.int64), sizes)
    shift = np.repeat(np.asarray(offsets(traces), dtype=np.int64), sizes)

    def joined(c: str) -> np.ndarray:
        return np.concatenate([e[c].to_numpy() for e in frames])

    columns: dict[str, pd.Series] = {}
    for c in frames[0].columns:  # column by column: strings stay object arrays, never re-inferred
        values = joined(c)
        if c == "id":
            values = values.astype(np.int64) + base
        elif c in ("parent", "forward"):
            values = np.where(values >= 0, values + base, -1)
        elif c == "start_ns":
            values = values + shift
        columns[c] = pd.Series(values, dtype=values.dtype, copy=False)
    columns["rank"] = pd.Series(np.repeat(np.asarray(ranks, dtype=np.int64), sizes), copy=False)
    return pd.DataFrame(columns)


def _spans(e: pd.DataFrame, shift: int, mine: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """When this rank issued each of its collectives (``mine``, by start) and when it was released
    from it: the op that issued it (``parent``; a blocking collective waits inside it) from start
    to end, else the collective's own start. Both never decrease (Note [Straggler attribution])."""
    at = mine["start_ns"].to_numpy().astype(np.int64)
    issue, release = at.copy(), at.copy()
    row = pd.Index(e["id"].to_numpy()).get_indexer(mine["parent"].to_numpy())
    has = row >= 0
    if has.any():
        p_start = e["start_ns"].to_numpy().astype(np.int64)[row[has]] + shift
        p_dur = e["dur_ns"].to_numpy().astype(np.int64)[row[has]]
        issue[has] = np.minimum(p_start, at[has])
        release[has] = np.where(p_dur >= 0, np.maximum(p_start + p_dur, at[has]), at[has])
    return np.maximum.accumulate(issue), np.maximum.accumulate(release)


def _windows(t: _RankTrace, shift: int, mine: pd.DataFrame, rank: int) -> pd.DataFrame:
    """One rank's op time per collective window, name and source (Note [Straggler attribution])."""
    e = t.events
    issue, release = _spans(e, shift, mine)
    keys = mine["key"].to_numpy()
    n = len(issue)
    begin = np.r_[shift, release[:-1]]  # window i: [release of i-1 (the trace's start), issue of i)
    kind = e["kind"].to_numpy()
    start = e["start_ns"].to_numpy().astype(np.int64) + shift
    which = np.searchsorted(issue, start, side="right")  # the first collective issued after it
    inside = which < n
    inside[inside] = start[inside] >= begin[which[inside]]  # not inside a collective's own span
    is_work = ((kind == "op") | (kind == "compile")) & inside
    self_ns = analysis.self_time(e)
    source = e["source"].to_numpy()
    frame = pd.DataFrame(
        {
            "w": which[is_work],
            "op": e["name"].to_numpy()[is_work],
            "source": np.where(pd.isna(source[is_work]), "", source[is_work]).astype(object),
            "ns": self_ns[is_work],
        }
    )
    work = frame.groupby(["w", "op", "source"], as_index=False, sort=False).agg(
        ns=("ns", "sum"), calls=("ns", "size")
    )
    is_wait = (kind == "collective") & inside
    is_wait[is_wait] = [str(n).startswith("wait ") for n in e["name"].to_numpy()[is_wait]]
    blocked = np.bincount(which[is_wait], weights=np.maximum(e["dur_ns"].to_numpy()[is_wait], 0), minlength=n)
    busy = np.bincount(frame["w"].to_numpy(), weights=frame["ns"].to_numpy(), minlength=n)
    wall = np.maximum(issue - begin, 0)
    outside = pd.DataFrame(
        {
            "w": np.arange(n),
            "op": OUTSIDE,
            "source": "",
            "ns": np.maximum(wall - busy - blocked, 0),
            "calls": 0,
        }
    )
    out = pd.concat([work, outside], ignore_index=True)
    out["key"] = keys[out["w"].to_numpy()] if n else []
    out["rank"] = rank
    return out.drop(columns="w")


def causes(traces: Sequence[_RankTrace], merged: pd.DataFrame, top: int = TOP) -> pd.DataFrame:
    """At each collective one rank arrived last at: the ops (``source``: their ``file:line`` when
    traced with ``stack=True``) that took longer on it than on the others since the previous
    collective, the largest ``top`` first (``CAUSE_COLUMNS``; Note [Straggler attribution]).
    ``waited_ns`` is how long the first rank to arrive waited for it."""
    if merged.empty or not merged["last"].any():
        return pd.DataFrame({c: pd.Series(dtype=object) for c in CAUSE_COLUMNS})
    parts = []
    for index, (t, shift) in enumerate(zip(traces, offsets(traces), strict=True)):
        mine = merged[merged["trace"] == index].sort_values("start_ns", kind="stable")
        if len(mine):
            parts.append(_windows(t, shift, mine, int(mine["global_rank"].iloc[0])))
    work = pd.concat(parts, ignore_index=True)
    sums = work.groupby(["key", "op", "source", "rank"], sort=False)[["ns", "calls"]].sum()
    ns = sums["ns"].unstack("rank")
    calls = sums["calls"].unstack("rank")
    late = merged[merged["last"]].drop_duplicates("key").set_index("key")
    members = merged.groupby("key")["global_rank"].agg(lambda r: sorted(set(r)))
    out = []
    key_level = ns.index.get_level_values(0)
    for key, row in late.iterrows():
        hit = key_level == key
        if not hit.any():
            continue
        lr = int(row["global_rank"])
        others = [r for r in members[key] if r != lr]
        block = ns[hit].reindex(columns=[lr, *others]).fillna(0)
        cblock = calls[hit].reindex(columns=[lr, *others]).fillna(0)
        mine, theirs = block[lr].to_numpy(), np.median(block[others].to_numpy(), axis=1)
        excess = mine - theirs
        keep = np.flatnonzero(excess > 0)
        keep = keep[np.argsort(-excess[keep], kind="stable")][:top]
        for k in keep:
            _, op, source = block.index[k]
            out.append(
                {
                    "key": key,
                    "collective": row["name"],
                    "late_rank": lr,
                    "waited_ns": int(row["late_ns"]),
                    "op": op,
                    "source": source or None,
                    "rank_ns": int(mine[k]),
                    "others_ns": int(theirs[k]),
                    "excess_ns": int(excess[k]),
                    "calls": int(cblock[lr].to_numpy()[k]),
                    "others_calls": float(np.median(cblock[others].to_numpy()[k])),
                }
            )
    return pd.DataFrame(out, columns=CAUSE_COLUMNS)


def rank_table(merged: pd.DataFrame, ranks: Sequence[int]) -> pd.DataFrame:
    """Per rank (``RANK_COLUMNS``): its collectives, the time it arrived before the last rank and
    so waited for the others (``waited_ns``), the time the others waited for it when it was last
    (``held_up_ns``, at ``last_at`` collectives), the time it blocked in ``wait()`` and its
    collectives' time from issue to completion (``comm_ns``)."""
    if merged.empty:
        zero = [0] * len(ranks)
        return pd.DataFrame(
            {"rank": list(ranks), "collectives": zero, "waited_ns": zero, "held_up_ns": zero,
             "last_at": zero, "blocked_ns": zero, "comm_ns": zero}, columns=RANK_COLUMNS
        )  # fmt: skip
    m = merged.assign(
        waited=merged.groupby("key")["start_ns"].transform("max") - merged["start_ns"],
        held=np.where(merged["last"], merged["late_ns"], 0),
        comm=merged["dur_ns"].clip(lower=0),
    )
    g = m.groupby("global_rank")
    out = pd.DataFrame(
        {
            "collectives": g.size(),
            "waited_ns": g["waited"].sum(),
            "held_up_ns": g["held"].sum(),
            "last_at": g["last"].sum(),
            "blocked_ns": g["wait_ns"].sum(),
            "comm_ns": g["comm"].sum(),
        }
    ).reindex(list(ranks), fill_value=0)
    out.index.name = "rank"
    return out.reset_index()[RANK_COLUMNS].astype(np.int64)


def overlap(events: pd.DataFrame, merged: pd.DataFrame, ranks: Sequence[int]) -> pd.DataFrame:
    """Per rank (``OVERLAP_COLUMNS``), as Holistic Trace Analysis computes it: the time its
    collectives were in flight (issue to completion, their union), the time it computed (top-level
    ops other than ``c10d::`` ones, their union), and the fraction of the first covered by the second."""
    rows = []
    kind = events["kind"].to_numpy() if len(events) else np.zeros(0, dtype=object)
    top = (kind == "op") & (analysis.nearest_op(events) < 0) if len(events) else kind.astype(bool)
    if len(events):
        codes, uniques = pd.factorize(events["name"].to_numpy())
        c10d = np.array([str(u).startswith("c10d::") for u in uniques], dtype=bool)
        top &= ~c10d[codes] if len(uniques) else top
    for r in ranks:
        c = merged[(merged["global_rank"] == r) & (merged["end_ns"] >= 0)] if len(merged) else merged
        comm = _union(c["start_ns"].to_numpy(np.int64), c["end_ns"].to_numpy(np.int64)) if len(c) else None
        mine = top & (events["rank"].to_numpy() == r) if len(events) else top
        s = events["start_ns"].to_numpy()[mine].astype(np.int64)
        d = np.maximum(events["dur_ns"].to_numpy()[mine].astype(np.int64), 0)
        comp = _union(s, s + d)
        comm_ns = int((comm[1] - comm[0]).sum()) if comm is not None else 0
        both = _covered(comm, comp) if comm is not None else 0
        rows.append(
            {
                "rank": int(r),
                "comm_ns": comm_ns,
                "compute_ns": int((comp[1] - comp[0]).sum()),
                "overlapped_ns": both,
                "overlap": both / comm_ns if comm_ns else float("nan"),
            }
        )
    return pd.DataFrame(rows, columns=OVERLAP_COLUMNS)


def _union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[s, e)`` as sorted disjoint intervals."""
    if not len(s):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _covered(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """The length of the intersection of two unions of disjoint sorted intervals."""
    bs, be = b
    if not len(bs) or not len(a[0]):
        return 0
    cum = np.r_[0, np.cumsum(be - bs)]

    def upto(x: np.ndarray) -> np.ndarray:  # covered length of b in (-inf, x]
        k = np.searchsorted(bs, x, side="right")
        tail = np.where(k > 0, np.maximum(be[np.maximum(k - 1, 0)] - x, 0), 0)
        return cum[k] - tail

    return int((upto(a[1]) - upto(a[0])).sum())


@dataclass(frozen=True)
class JobVerdict:
    """The job's verdict: who the others waited for, how long and why, and each rank's share."""

    ranks: list[int]
    world_size: int | None
    run_id: str | None
    span_ns: int
    collectives: int
    per_rank: pd.DataFrame  #: ``rank_table`` joined with ``overlap`` (its ``comm_ns`` as ``in_flight_ns``)
    causes: pd.DataFrame
    straggler: int | None = None
    held_up_ns: int = 0
    notes: list[str] = field(default_factory=list)
    #: The ranks' first collective, when it waited for a rank still starting up: the headline's
    #: causes leave it out (start-up differs from rank to rank by design).
    startup_key: str | None = None
    startup_ns: int = 0  #: how long the others waited there for the straggler

    def headline(self) -> str:
        """One sentence: the rank the others waited for most, how long, and its first cause."""
        n = len(self.ranks)
        if not self.collectives:
            return f"{n} ranks, no collective recorded: nothing to line up."
        if self.straggler is None:
            return f"{n} ranks kept pace over {self.collectives} collectives: no rank waited for another."
        at = self.per_rank.set_index("rank").loc[self.straggler, "last_at"]
        text = (
            f"The others waited {theme.format_ns(self.held_up_ns)} for rank {self.straggler}, last to "
            f"arrive at {int(at)} of {self.collectives} collectives"
        )
        if self.startup_ns:
            text += f" ({theme.format_ns(self.startup_ns)} of it at the first, while it started up)"
        mine = self.causes[self.causes["late_rank"] == self.straggler]
        if self.startup_key is not None and (mine["key"] != self.startup_key).any():
            mine = mine[mine["key"] != self.startup_key]
        if len(mine):  # ranked by the wait each explains (an excess beyond the wait delayed nobody)
            mine = mine.assign(explains=np.minimum(mine["excess_ns"], mine["waited_ns"]))
            outside = int(mine.loc[mine["op"] == OUTSIDE, "explains"].sum())
            ops = mine[mine["op"] != OUTSIDE]
            top = ops.groupby(["op", "source"], dropna=False)[["explains", "excess_ns"]].sum()
            top = top.sort_values("explains", ascending=False, kind="stable")
            if len(top):
                (op, source), ns = top.index[0], int(top["excess_ns"].iloc[0])
                where = f" at {source}" if isinstance(source, str) and source else ""
                text += (
                    f"; the op that made the most of it: {op}{where}, {theme.format_ns(ns)} longer than "
                    "on the others"
                )
            if outside:
                text += f"{',' if len(top) else ';'} and {theme.format_ns(outside)} of {OUTSIDE}"
        return text + "."

    def lines(self) -> list[str]:
        """The verdict as plain text lines (the command line prints them)."""
        out = [self.headline()]
        for r in self.per_rank.itertuples(index=False):
            ov = "" if pd.isna(r.overlap) else f", {r.overlap:.0%} of its communication overlapped"
            out.append(
                f"  rank {r.rank}: waited {theme.format_ns(r.waited_ns)} for the others, held them up "
                f"{theme.format_ns(r.held_up_ns)} (last at {r.last_at}){ov}"
            )
        out += [f"note: {x}" for x in self.notes]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _straggler(merged: pd.DataFrame, held: pd.Series, startup: str | None) -> int | None:
    """The rank the others waited for most (Note [Start-up is not a straggler])."""
    if not len(held) or held.max() <= 0:
        return None
    later = merged[merged["last"] & (merged["key"] != startup)]
    after = later.groupby("global_rank")["late_ns"].sum()
    if len(after) and after.max() > 0:
        return int(after.idxmax())
    return int(held.idxmax())


# Note [Start-up is not a straggler]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Ranks start at different times (process launch, imports, the rendezvous), so the first collective
# nearly always waits for someone, often for longer than every later collective together (106 ms
# against a few ms in a torchrun job of two ranks). Naming that rank would answer "who started up
# last", not "why is my job slow", and who it is varies from run to run. So the straggler is the
# rank the others waited for most at the collectives after the first one; only when nobody was late
# after start-up does the first collective decide. The per-rank table still counts every wait, the
# headline says how much of the straggler's was start-up, and a note says when another rank was the
# last to start.


def job_verdict(
    traces: Sequence[_RankTrace], merged: pd.DataFrame, events: pd.DataFrame, found: pd.DataFrame
) -> JobVerdict:
    """The ``JobVerdict`` of the ranks' traces, from the tables above (``found``: ``causes``)."""
    ranks = [int(r) for r in (t.job.rank if t.job is not None else i for i, t in enumerate(traces))]
    ranks_sorted = sorted(ranks)
    flight = overlap(events, merged, ranks_sorted).rename(columns={"comm_ns": "in_flight_ns"})
    per_rank = rank_table(merged, ranks_sorted).merge(flight, on="rank", how="left")
    span = int((events["start_ns"] + events["dur_ns"].clip(lower=0)).max()) if len(events) else 0
    n = int(merged["key"].nunique()) if len(merged) else 0
    held = per_rank.set_index("rank")["held_up_ns"]
    first = traces[0].job
    notes: list[Any] = []
    startup = None
    startup_last: int | None = None
    startup_ns = 0
    if n:
        key = merged.loc[merged["start_ns"].idxmin(), "key"]
        rows = merged[merged["key"] == key]
        if len(rows) == len(ranks) and rows["late_ns"].max() > 0:
            startup = str(key)
            last = rows[rows["last"]]
            startup_last = int(last["global_rank"].iloc[0]) if len(last) else None
            startup_ns = int(rows["late_ns"].max())
    straggler = _straggler(merged, held, startup)
    if straggler is not None and startup_last is not None and startup_last != straggler:
        notes.append(
            f"rank {startup_last} was last at the first collective ({theme.format_ns(startup_ns)} "
            "while the ranks started up); start-up is left out in naming the rank the others waited for"
        )
    world = first.world_size if first is not None else None
    if world is not None and len(ranks) < world:
        missing = sorted(set(range(world)) - set(ranks))
        notes.append(f"{len(ranks)} of {world} ranks merged: no trace of rank {', '.join(map(str, missing))}")
    return JobVerdict(
        ranks=ranks_sorted,
        world_size=world,
        run_id=first.run_id if first is not None else None,
        span_ns=span,
        collectives=n,
        per_rank=per_rank,
        causes=found,
        straggler=straggler,
        held_up_ns=int(held.loc[straggler]) if straggler is not None else 0,
        notes=notes,
        startup_key=startup,
        startup_ns=startup_ns if straggler is not None and startup_last == straggler else 0,
    )
