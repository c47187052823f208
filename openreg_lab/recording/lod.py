"""Level of detail for the timeline: what to draw of a trace at a given zoom, in bounded size.

Note [Timeline level of detail]
A million events cannot go to the browser. As Perfetto does, the timeline is a pyramid computed
once in Python: level 0 is every slice; each coarser level cuts time into buckets four times wider
and keeps, per row (a thread's nesting depth, or a copy / cast lane) and bucket, the longest slice
together with the number of slices it stands for. A query for a window and a width in pixels takes
the coarsest level whose buckets are at most half a pixel wide (about two items per pixel) and the
items overlapping the window; when the window holds few enough real slices it sends them all. The
``count`` column keeps every slice accounted for: the counts of a query's items sum to the number
of slices in the window, at every level. Counters (device memory) keep min / max / last per bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording.kinds import Kinds

#: Buckets of the coarsest level (the whole trace at about two items per pixel of a wide plot).
TOP_BUCKETS = 2048
#: A window with at most this many real slices is sent as it is, whatever the zoom.
RAW_LIMIT = 12_000
#: Colour codes of the slices: index into ``PALETTE``.
COLOR_KEYS = (
    "native",
    "fallback",
    "composite",
    "generic",
    "other",
    "backward",
    "H2D",
    "D2H",
    "D2D",
    "cast",
    "compiled",
    "compile",
    "collective",
    "collective wait",
    "python",
    "python waiting",
)
PALETTE = [
    *(theme.KERNEL_COLORS[k] for k in ("native", "fallback", "composite", "generic")),
    theme.OTHER_COLOR,
    theme.BACKWARD_COLOR,
    *(theme.COPY_COLORS[d] for d in ("H2D", "D2H", "D2D")),
    theme.CAST_COLOR,
    theme.COMPILED_COLOR,
    theme.COMPILE_COLOR,
    theme.COLLECTIVE_COLOR,
    theme.COLLECTIVE_WAIT_COLOR,
    theme.HOST_COLOR,
    theme.HOST_WAIT_COLOR,
]
_SLICE_KINDS = ("op", "backward", "fallback", "compiled", "compile")


@dataclass(frozen=True)
class Row:
    """One row of the timeline: a nesting depth of a thread's lane, or a copy / cast lane."""

    lane: str  #: "thread 0", "python 0" (its sampled Python), "copies H2D", "casts"
    depth: int


@dataclass
class Level:
    """One level of the pyramid: items sorted by (row, start), with per-row offsets."""

    bucket_ns: float  #: 0 for level 0 (every slice)
    start: np.ndarray  #: int64 ns from the trace's start
    dur: np.ndarray  #: int64 ns
    row: np.ndarray  #: int32
    event: np.ndarray  #: int64 event id of the item (the longest slice of its bucket)
    count: np.ndarray  #: int64 slices the item stands for
    offsets: np.ndarray  #: offsets[r]:offsets[r + 1] are row r's items
    max_dur: np.ndarray  #: per row, the longest item (to find items that began before a window)

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class Counter:
    """A counter lane: device memory allocated over time."""

    device: str
    time: np.ndarray  #: int64 ns
    value: np.ndarray  #: int64 bytes
    event: np.ndarray  #: int64 event id of each change (an alloc or free)


@dataclass
class Query:
    """What a window shows: items (possibly aggregated), counters and how they were chosen."""

    t0: float
    t1: float
    level: int  #: -1: real slices; otherwise the pyramid level
    bucket_ns: float
    start: np.ndarray
    dur: np.ndarray
    row: np.ndarray
    event: np.ndarray
    count: np.ndarray
    counters: list[dict[str, np.ndarray | str]]

    @property
    def aggregated(self) -> bool:
        """True when some items stand for more than one slice."""
        return bool(len(self.count) and int(self.count.max()) > 1)


class Pyramid:
    """The timeline's rows, slices, counters and marks of one events table, with its LOD levels."""

    def __init__(self, events: pd.DataFrame, *, kinds: Kinds | None = None) -> None:
        """``kinds``: the events' kinds when the caller read them already (Note [Kinds read once]):
        the names and kernels it has hashed are shared with the tables that read them too."""
        # Compare small integer codes, not strings: a million string comparisons cost ~30 ms each.
        kinds = Kinds.of(events, kinds)
        kind = _Codes(kinds.codes, kinds.labels())
        names = _Codes(*kinds.strings(events, "name"))
        n = len(events)
        start = events["start_ns"].to_numpy().astype(np.int64)
        dur = events["dur_ns"].to_numpy().astype(np.int64)
        self.span = int((start + np.maximum(dur, 0)).max()) if n else 0
        # A slice still running when the trace ended (dur -1) is drawn to the end of the trace.
        dur = np.where(dur < 0, np.maximum(self.span - start, 0), dur)
        parent = events["parent"].to_numpy().astype(np.int64)
        is_slice = kind.isin(_SLICE_KINDS)
        depth = _depth(parent, is_slice)
        thread = events["thread"].to_numpy().astype(np.int64)
        rows: list[Row] = []
        row_of = np.full(n, -1, dtype=np.int64)
        # Several ranks' events (recording.ranks.merged_events, a ``rank`` column): a lane group a rank.
        rank = events["rank"].to_numpy() if "rank" in events.columns else None
        groups = [None] if rank is None else sorted({int(r) for r in np.unique(rank)})
        # Host slices (kind "host", recording/host.with_events) nest among themselves: a flame of
        # the thread's sampled Python in rows of its own, after every op lane.
        is_host = kind.eq("host")
        host_depth = _depth(parent, is_host, among=is_host) if is_host.any() else depth  # host rows' only
        is_copy = kind.eq("copy")
        is_cast = kind.eq("cast")
        # A collective runs on after the op that issued it returns (Note [Collective events]), so
        # it has a lane of its own instead of nesting under that op; a wait on one is drawn there too.
        is_collective = kind.eq("collective")
        for g in groups:
            ours = np.ones(n, dtype=bool) if g is None else rank == g
            prefix = "" if g is None else f"rank {g} · "
            for t in np.unique(thread[is_slice & ours]):
                mine = is_slice & ours & (thread == t)
                for d in range(int(depth[mine].max()) + 1 if mine.any() else 0):
                    row_of[mine & (depth == d)] = len(rows)
                    rows.append(Row(f"{prefix}thread {int(t)}", d))
            for direction in ("H2D", "D2H", "D2D"):
                mine = is_copy & ours & names.eq(direction)
                if mine.any():
                    row_of[mine] = len(rows)
                    rows.append(Row(f"{prefix}copies {direction}", 0))
            if (is_cast & ours).any():
                row_of[is_cast & ours] = len(rows)
                rows.append(Row(f"{prefix}casts", 0))
            if (is_collective & ours).any():
                row_of[is_collective & ours] = len(rows)
                rows.append(Row(f"{prefix}collectives", 0))
        # The host lanes come after every op lane (Note [The timeline opens on the steps]): the
        # rows before ``host_row`` are the same whatever host slices are drawn.
        self.host_row = len(rows)
        for g in groups:
            ours = np.ones(n, dtype=bool) if g is None else rank == g
            prefix = "" if g is None else f"rank {g} · "
            for t in np.unique(thread[is_host & ours]):
                mine = is_host & ours & (thread == t)
                for d in range(int(host_depth[mine].max()) + 1):
                    row_of[mine & (host_depth == d)] = len(rows)
                    rows.append(Row(f"{prefix}python {int(t)}" if t >= 0 else f"{prefix}python", d))
        self.rows = rows
        self.color = _colors(kind, _Codes(*kinds.strings(events, "kernel")), names)
        if is_host.any():
            waiting = (events["reason"].to_numpy() == "waiting") & is_host
            self.color[is_host] = COLOR_KEYS.index("python")
            self.color[waiting] = COLOR_KEYS.index("python waiting")
        drawn = np.flatnonzero(row_of >= 0)
        order = drawn[_by_row_then_start(row_of[drawn], start[drawn], len(rows))]
        self.slice_count = len(order)
        self.levels = [
            _level(
                0.0, start[order], dur[order], row_of[order], order, np.ones(len(order), np.int64), len(rows)
            )
        ]
        self._build_levels(len(rows))
        self.counters = _counters(events, kinds)
        is_mark = kind.eq("mark")
        self.marks = list(
            zip(start[is_mark].tolist(), events["name"].to_numpy()[is_mark].tolist(), strict=True)
        )

    def _build_levels(self, nrows: int) -> None:
        raw = self.levels[0]
        if len(raw) <= RAW_LIMIT or self.span <= 0:
            return
        top = self.span / TOP_BUCKETS
        levels_needed = max(1, int(np.ceil(np.log(len(raw) / TOP_BUCKETS) / np.log(4))) + 1)
        bucket = max(top / 4 ** (levels_needed - 1), 1.0)
        prev = raw
        while True:
            lvl = _coarsen(prev, bucket, nrows)
            if len(lvl) < len(prev):
                self.levels.append(lvl)
                prev = lvl
            if bucket >= top:
                return
            bucket *= 4

    def query(self, t0: float, t1: float, px: int) -> Query:
        """The items to draw for the window ``[t0, t1)`` ns at ``px`` pixels of width."""
        t1 = max(t1, t0 + 1)
        px = max(int(px), 50)
        target = (t1 - t0) / (2 * px)
        raw = self.levels[0]
        choice = 0
        if _in_window_count(raw, t0, t1) > RAW_LIMIT:
            for i, lvl in enumerate(self.levels[1:], start=1):
                if lvl.bucket_ns <= target:
                    choice = i
            if choice == 0 and len(self.levels) > 1:
                choice = 1  # zoomed in further than the finest level, but too many slices: keep bounded
        return self.query_level(choice, t0, t1, px)

    def query_level(self, level: int, t0: float, t1: float, px: int = 1000) -> Query:
        """The items of pyramid level ``level`` (0: every slice) overlapping ``[t0, t1)``."""
        lvl = self.levels[level]
        idx = _window(lvl, t0, t1)
        return Query(
            t0,
            t1,
            -1 if level == 0 else level,
            lvl.bucket_ns,
            lvl.start[idx],
            lvl.dur[idx],
            lvl.row[idx],
            lvl.event[idx],
            lvl.count[idx],
            [_counter_window(c, t0, t1, px) for c in self.counters],
        )

    def slices_in(self, t0: float, t1: float) -> int:
        """The number of real slices overlapping ``[t0, t1)``."""
        return _in_window_count(self.levels[0], t0, t1)


def _depth(parent: np.ndarray, is_slice: np.ndarray, among: np.ndarray | None = None) -> np.ndarray:
    """Each event's number of slice ancestors (an op inside an op is one deeper); with ``among``
    (a mask), of those events only (0 for the others)."""
    depth = np.zeros(len(parent), dtype=np.int64)
    climbing = parent >= 0 if among is None else (parent >= 0) & among
    rows = np.flatnonzero(climbing)  # the events still climbing, one ancestor a pass
    up = parent[rows]
    while len(rows):
        depth[rows] += is_slice[up]
        up = parent[up]
        climbing = up >= 0
        rows, up = rows[climbing], up[climbing]
    return depth


def _by_row_then_start(row: np.ndarray, start: np.ndarray, nrows: int) -> np.ndarray:
    """The order of items by row, then start, ties in table order (``np.lexsort((start, row))``).
    Events come ordered by start time, and so do the host slices after them within each of their
    rows (``host.with_events``): when every row's items are in start order in the table, a stable
    sort by row alone gives it (a radix sort of small integers, a fifth of lexsort's time on a
    million items); other tables are lexsorted."""
    if nrows < 2**15:
        order = np.argsort(row.astype(np.int16), kind="stable")
        if bool((start[1:] >= start[:-1]).all()):
            return order
        s, r = start[order], row[order]
        if bool(((s[1:] >= s[:-1]) | (r[1:] != r[:-1])).all()):
            return order
    return np.lexsort((start, row))


class _Codes:
    """A column of labels as integer codes, for fast equality tests."""

    def __init__(self, codes: np.ndarray, labels: Sequence[object]) -> None:
        self.codes = codes
        self.index = {u: i for i, u in enumerate(labels) if isinstance(u, str)}

    def eq(self, label: str) -> np.ndarray:
        """A mask of the rows equal to ``label``."""
        code = self.index.get(label)
        return self.codes == code if code is not None else np.zeros(len(self.codes), dtype=bool)

    def startswith(self, prefix: str) -> np.ndarray:
        """A mask of the rows whose label starts with ``prefix``."""
        hits = [code for label, code in self.index.items() if str(label).startswith(prefix)]
        return np.isin(self.codes, hits)

    def isin(self, labels: tuple[str, ...]) -> np.ndarray:
        """A mask of the rows equal to any of ``labels``."""
        return np.isin(self.codes, [self.index[x] for x in labels if x in self.index])


def _colors(kind: _Codes, kernel: _Codes, names: _Codes) -> np.ndarray:
    code = {k: i for i, k in enumerate(COLOR_KEYS)}
    out = np.full(len(kind.codes), code["other"], dtype=np.uint8)
    is_op = kind.eq("op")
    for k in ("native", "fallback", "composite", "generic"):
        out[is_op & kernel.eq(k)] = code[k]
    out[kind.eq("fallback")] = code["fallback"]
    out[kind.eq("backward")] = code["backward"]
    is_copy = kind.eq("copy")
    for d in ("H2D", "D2H", "D2D"):
        out[is_copy & names.eq(d)] = code[d]
    out[kind.eq("cast")] = code["cast"]
    out[kind.eq("compiled")] = code["compiled"]
    out[kind.eq("compile")] = code["compile"]
    is_collective = kind.eq("collective")
    out[is_collective] = code["collective"]
    out[is_collective & names.startswith("wait ")] = code["collective wait"]
    return out


def _level(
    bucket: float,
    start: np.ndarray,
    dur: np.ndarray,
    row: np.ndarray,
    event: np.ndarray,
    count: np.ndarray,
    nrows: int,
) -> Level:
    offsets = np.searchsorted(row, np.arange(nrows + 1), side="left")
    max_dur = np.zeros(nrows, dtype=np.int64)
    if len(dur):
        np.maximum.at(max_dur, row, dur)
    return Level(bucket, start, dur, row.astype(np.int32), event, count, offsets, max_dur)


def _coarsen(prev: Level, bucket: float, nrows: int) -> Level:
    """Per row and bucket of width ``bucket``, the longest item of ``prev``, counting what it absorbs."""
    b = (prev.start // bucket).astype(np.int64)
    key_change = np.ones(len(b), dtype=bool)
    key_change[1:] = (b[1:] != b[:-1]) | (prev.row[1:] != prev.row[:-1])
    group = np.cumsum(key_change) - 1
    first = np.flatnonzero(key_change)
    # Longest item of each group (a run of consecutive items: prev is sorted by row, then start),
    # the last of equally long ones: its maximum, then the last item reaching it (no sort).
    longest = np.maximum.reduceat(prev.dur, first) if len(first) else prev.dur[:0]
    at_max = np.flatnonzero(prev.dur == longest[group])
    pick = at_max[np.r_[group[at_max][1:] != group[at_max][:-1], True]]
    counts = np.add.reduceat(prev.count, first)
    return _level(bucket, prev.start[pick], prev.dur[pick], prev.row[pick], prev.event[pick], counts, nrows)


def _window(lvl: Level, t0: float, t1: float) -> np.ndarray:
    """Indices of ``lvl``'s items overlapping ``[t0, t1)``."""
    parts = []
    for r in range(len(lvl.offsets) - 1):
        a, b = int(lvl.offsets[r]), int(lvl.offsets[r + 1])
        if a == b:
            continue
        s = lvl.start[a:b]
        lo = a + int(np.searchsorted(s, t0 - lvl.max_dur[r], side="left"))
        hi = a + int(np.searchsorted(s, t1, side="left"))
        if hi > lo:
            cand = np.arange(lo, hi)
            keep = lvl.start[cand] + np.maximum(lvl.dur[cand], 1) > t0
            parts.append(cand[keep])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _in_window_count(lvl: Level, t0: float, t1: float) -> int:
    return int(lvl.count[_window(lvl, t0, t1)].sum())


def _counters(events: pd.DataFrame, kinds: Kinds) -> list[Counter]:
    """One counter a device (of several ranks' events, a ``rank`` column: a rank and device)."""
    mem = np.flatnonzero(kinds.mask("alloc", "free"))
    codes, uniques = kinds.strings(events, "device", mem)  # no device: a label that is no string
    keep = np.array([isinstance(u, str) for u in uniques], dtype=bool)[codes]
    ranks = events["rank"].to_numpy()[mem].astype(np.int64) if "rank" in events.columns else None
    key = codes.astype(np.int64) if ranks is None else ranks * (len(uniques) + 1) + codes
    groups = []
    for k in np.unique(key[keep]).tolist():
        code = k if ranks is None else k % (len(uniques) + 1)
        label = str(uniques[code]) if ranks is None else f"rank {k // (len(uniques) + 1)} · {uniques[code]}"
        groups.append(((label if ranks is None else (k // (len(uniques) + 1), str(uniques[code]))), label, k))
    out = []
    for _, label, k in sorted(groups, key=lambda g: g[0]):
        idx = mem[key == k]
        out.append(
            Counter(
                label,
                events["start_ns"].to_numpy()[idx].astype(np.int64),
                events["total"].to_numpy()[idx].astype(np.int64),
                idx.astype(np.int64),
            )
        )
    return out


def _counter_window(c: Counter, t0: float, t1: float, px: int) -> dict[str, np.ndarray | str]:
    """The counter's points in the window (from the last change before it), min/max/last per bucket
    when there are more than two per pixel."""
    lo = max(int(np.searchsorted(c.time, t0, side="right")) - 1, 0)
    hi = int(np.searchsorted(c.time, t1, side="right"))
    t, v, ev = c.time[lo:hi], c.value[lo:hi], c.event[lo:hi]
    if len(t) <= 2 * px:
        return {"device": c.device, "t": t, "min": v, "max": v, "last": v, "event": ev}
    width = (t1 - t0) / (2 * px)
    # The change before the window (its value when the window opens) joins the first bucket.
    b = np.clip((t - t0) // width, 0, 2 * px - 1).astype(np.int64)
    first = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    last = np.r_[first[1:] - 1, len(b) - 1]
    return {
        "device": c.device,
        "t": t[first],
        "min": np.minimum.reduceat(v, first),
        "max": np.maximum.reduceat(v, first),
        "last": v[last],
        "event": ev[last],
    }
