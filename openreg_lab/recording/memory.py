"""Where the device memory went: ``Trace.memory()``, tables of every allocation of a trace.

::

    with openreg_lab.trace(stack=True) as t:
        train_step()
    m = t.memory()
    m.peak()          # what was live at the peak: size, category, op, module, line, age in steps
    m.sites()         # the lines that held the most of it
    m.timeline()      # bytes live over time, by category and device (what the memory view stacks)
    m.steps()         # per training step: the bytes at its start, its peak and its end
    m.leaks()         # made in a step and never freed, step after step: with its line
    m.live_many(ts, "openreg:0", top=20)  # the largest live at many moments (the report's view)

Each allocation has a category in PyTorch's terms (Note [Memory categories] in ``allocations``):
``parameter``, ``gradient``, ``optimizer_state``, ``input``, ``activation`` (saved for backward),
``autograd_detail``, ``temporary`` or ``unknown``. The memory held when the trace began is listed
too, so what is live at any moment sums to the allocator's count (``torch.openreg.memory_allocated``)
then, and the peak to ``torch.openreg.max_memory_allocated`` after ``reset_peak_memory_stats``.

A trace that dropped events, or whose allocations do not add up to the allocator's count, makes
incomplete tables: ``Memory.complete`` is False, ``Memory.problems`` says why, and every table
carries the same in its ``attrs`` (``df.attrs["complete"]``, ``df.attrs["problems"]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from openreg_lab.recording import _live_many
from openreg_lab.recording import allocations as _alloc
from openreg_lab.recording.events import KINDS, Columns, device_name
from openreg_lab.recording.observations import CATEGORIES, GRADIENT, OPTIMIZER_STATE, PARAMETER, Observed

#: The columns of ``Memory.allocations()``, one row an allocation.
ALLOCATION_COLUMNS = [
    "id", "free_id", "device", "address", "bytes", "block_bytes", "start_ns", "end_ns", "thread", "op",
    "op_id", "module", "source", "category", "step",
]  # fmt: skip
#: The columns of ``Memory.peak()`` and ``Memory.live()``: the allocations live at a moment.
LIVE_COLUMNS = [
    "device", "id", "bytes", "block_bytes", "category", "op", "module", "source", "step", "age_steps",
    "start_ns", "address",
]  # fmt: skip
#: The columns of ``Memory.live_many()``'s rows and its totals (one row a moment).
LIVE_MANY_COLUMNS = ["moment", *LIVE_COLUMNS]
LIVE_TOTAL_COLUMNS = ["moment", "t_ns", "step", "allocations", "bytes"]
TIMELINE_COLUMNS = ["t_ns", "device", "category", "bytes"]
SITE_COLUMNS = ["device", "source", "module", "op", "category", "allocations", "bytes", "share"]
STEP_COLUMNS = [
    "step", "device", "start_ns", "end_ns", "start_bytes", "peak_bytes", "peak_ns", "end_bytes",
    "growth_bytes", "complete", *CATEGORIES,
]  # fmt: skip
STEP_END_COLUMNS = ["step", "end_ns"]
PEAK_COLUMNS = ["device", "peak_bytes", "t_ns", "event", "step", "start_bytes", "end_bytes", *CATEGORIES]
LEAK_COLUMNS = [
    "device", "source", "module", "op", "category", "steps", "first_step", "last_step", "allocations",
    "bytes",
]  # fmt: skip
OOM_COLUMNS = ["device", "t_ns", "event", "requested", "allocated", "step", *CATEGORIES]
_OOM = KINDS.index("oom")
_DEVICE_NAMES = np.array([device_name(d) for d in range(-2, 16)], dtype=object)  # by code + 2
_STEP = KINDS.index("step")


class Memory:
    """The memory tables of one trace (``Trace.memory()``); see the module docstring."""

    def __init__(
        self,
        columns: Columns,
        t0: int,
        observed: Observed | None,
        *,
        dropped: int = 0,
        capacity: int | None = None,
    ) -> None:
        self._c = columns
        self._t0 = t0
        self._a = _alloc.build(columns, observed)
        self._strings = np.array([None, *columns.strings[1:]], dtype=object)  # 0: no string
        problems = list(self._a.problems)
        if dropped:
            problems.insert(
                0,
                f"{dropped:,} events were dropped (the trace holds at most {capacity or 0:,}): allocations "
                "and frees among them are missing, so the tables may miss memory or keep freed memory live",
            )
        #: Why the tables may not add up (empty when they are complete).
        self.problems: list[str] = problems
        #: False when events were dropped or the allocations do not add up to the allocator's count.
        self.complete: bool = not problems
        #: True when the trace observed no parameter, gradient or optimizer state (a file written
        #: before observations were saved): those show as other categories.
        self.unobserved: bool = observed is None

    # -- helpers ---------------------------------------------------------------
    def _frame(self, columns: list[str], data: dict[str, Any]) -> pd.DataFrame:
        df = pd.DataFrame(data, columns=columns)
        df.attrs["complete"] = self.complete
        df.attrs["problems"] = list(self.problems)
        return df

    def _rel(self, raw: np.ndarray) -> np.ndarray:
        return raw.astype(np.int64) - self._t0

    def _time_of(self, events: np.ndarray) -> np.ndarray:
        """Trace-relative start of each event id (-1: none)."""
        start = self._c.fields["start_ns"]
        return np.where(events >= 0, self._rel(start[np.maximum(events, 0)]) if len(start) else 0, -1)

    def _rows(self, index: np.ndarray, columns: list[str], *, step_now: int | None = None) -> pd.DataFrame:
        """The allocations ``index`` as rows of ``columns`` (``LIVE_COLUMNS`` or ``ALLOCATION_COLUMNS``)."""
        a, s = self._a, self._strings
        data: dict[str, Any] = {
            "id": a.id[index],
            "free_id": a.free_id[index],
            "device": _DEVICE_NAMES[a.device[index] + 2],
            "address": a.address[index],
            "bytes": a.bytes[index],
            "block_bytes": a.block[index],
            "start_ns": self._time_of(a.id[index]),
            "end_ns": self._time_of(a.free_id[index]),
            "thread": a.thread[index],
            "op": s[a.op[index]],
            "op_id": a.op_id[index],
            "module": s[a.module[index]],
            "source": s[a.source[index]],
            "category": np.array(CATEGORIES, dtype=object)[a.category[index]],
            "step": a.step[index],
        }
        if step_now is not None:
            data["age_steps"] = step_now - a.step[index]
        return self._frame(columns, data)

    def _devices(self, device: str | int | None) -> list[int]:
        known = sorted(self._a.totals)
        if device is None:
            return known
        d = _device_index(device)
        if d not in known:
            names = ", ".join(device_name(k) or "" for k in known) or "none"
            raise ValueError(
                f"no memory event on {device_name(d)} in this trace (devices with memory events: {names})"
            )
        return [d]

    def _live_index(self, device: int, position: int) -> np.ndarray:
        """The allocations on ``device`` live just after event ``position`` (-1: the trace's start)."""
        a = self._a
        return np.flatnonzero((a.device == device) & (a.start <= position) & (a.end > position))

    def _step_at(self, position: int) -> int:
        """The training step event ``position`` ran in (0 without steps; -1 before the trace)."""
        if position < 0:
            return -1
        return int(_alloc._steps_of(self._c.fields, np.asarray([position]))[0])

    def _by_category(self, device: int, at: np.ndarray) -> np.ndarray:
        """Bytes live per category (columns, ``CATEGORIES`` order) on ``device`` just after each of
        its memory events at indices ``at`` into ``totals[device]`` (-1: the trace's start)."""
        a = self._a
        mine = a.totals[device][0]
        where = np.full(len(self._c), -1, dtype=np.int64)
        where[mine] = np.arange(len(mine))
        on = a.device == device
        up = on & (a.start >= 0)
        down = on & (a.end != _alloc.NEVER)
        up_at, up_cat, up_block = where[a.start[up]], a.category[up], a.block[up]
        down_at, down_cat, down_block = where[a.end[down]], a.category[down], a.block[down]
        out = np.zeros((len(at), len(CATEGORIES)), dtype=np.int64)
        for k in range(len(CATEGORIES)):
            start0 = int(a.block[on & (a.start < 0) & (a.category == k)].sum())
            if not len(mine):
                out[:, k] = start0
                continue
            u, dn = up_cat == k, down_cat == k
            # float weights (an empty bincount is int64 whatever its weights: astype, not -=)
            delta = np.bincount(up_at[u], weights=up_block[u], minlength=len(mine)).astype(np.float64)
            delta -= np.bincount(down_at[dn], weights=down_block[dn], minlength=len(mine))
            running = start0 + np.cumsum(np.rint(delta).astype(np.int64))
            out[:, k] = np.where(at >= 0, running[np.maximum(at, 0)], start0)
        return out

    def _peak(self, device: int) -> tuple[int, int]:
        """(index into ``totals[device]`` of the first event at the peak, -1: the start; the peak)."""
        total = self._a.totals[device][1]
        start = self._a.initial[device]
        if not len(total) or int(total.max()) <= start:
            return -1, start
        i = int(np.argmax(total))
        return i, int(total[i])

    # -- tables ---------------------------------------------------------------
    def allocations(self) -> pd.DataFrame:
        """Every allocation, one row each (``ALLOCATION_COLUMNS``), in the order they were made.

        ``id`` and ``free_id`` are the alloc and free events (-1: made before the trace, not freed
        in it); ``bytes`` is the request and ``block_bytes`` the allocator's block (the request
        rounded up to 512: a block is its own segment in openreg), what the allocator counts;
        ``start_ns`` and ``end_ns`` are trace-relative (-1: before the trace, never freed).
        ``op`` is the op that made it (``op_id`` its event): its nearest enclosing op, or that op's
        caller when it only allocates (``aten::empty`` inside ``aten::addmm``); ``module`` the
        innermost module running (``Model.layers.3.attn``); ``source`` the user's line
        (``trace(stack=True)``). Made in backward, both are the forward op's that autograd runs
        backward. ``step`` is the training step it was made in (-1: before the trace)."""
        a = self._a
        order = np.lexsort((a.id, a.start))
        return self._rows(order, ALLOCATION_COLUMNS)

    def live(self, t_ns: int, device: str | int | None = None) -> pd.DataFrame:
        """The allocations live at ``t_ns`` (trace-relative, as the events' ``start_ns``): every
        event starting at or before it has happened. One row each (``LIVE_COLUMNS``), largest first;
        ``age_steps`` counts the training steps since each was made. On every device, or one."""
        starts = self._c.fields["start_ns"]
        position = int(np.searchsorted(starts, int(t_ns) + self._t0, side="right")) - 1
        return self._live_at(position, self._devices(device))

    def live_many(self, t_ns: Any, device: str | int, top: int = 20) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``live(t, device).head(top)`` at each moment of ``t_ns`` at once, for views that embed
        what was live at many moments (the report's memory view). Returns the rows
        (``LIVE_MANY_COLUMNS``: ``moment``, the index into ``t_ns``, then ``LIVE_COLUMNS``) and one
        row a moment (``LIVE_TOTAL_COLUMNS``): its step (what ``age_steps`` counts from) and how many
        allocations and bytes (blocks) were live then in all, so a view says what its ``top`` rows
        leave out."""
        if isinstance(top, bool) or not isinstance(top, int) or top < 0:
            raise ValueError(f"live_many(top=...) takes a number of rows (0 or more), got {top!r}")
        (d,) = self._devices(device)
        a = self._a
        times = np.asarray(t_ns, dtype=np.int64).reshape(-1)
        starts = self._c.fields["start_ns"]
        pos = np.searchsorted(starts, times + self._t0, side="right").astype(np.int64) - 1
        mine = np.flatnonzero(a.device == d)
        mine = mine[np.lexsort((a.id[mine], -a.block[mine]))]  # live()'s order: largest first
        lo, hi = np.sort(a.start[mine]), np.sort(a.end[mine])
        count = np.searchsorted(lo, pos, side="right") - np.searchsorted(hi, pos, side="right")
        by_start, by_end = np.argsort(a.start[mine], kind="stable"), np.argsort(a.end[mine], kind="stable")
        up = np.r_[0, np.cumsum(a.block[mine][by_start])]
        down = np.r_[0, np.cumsum(a.block[mine][by_end])]
        nbytes = up[np.searchsorted(lo, pos, side="right")] - down[np.searchsorted(hi, pos, side="right")]
        m, index = _live_many.first_live(a.start, a.end, mine, pos, top)
        rows = self._rows(index, LIVE_COLUMNS, step_now=0)
        now = np.where(pos >= 0, _alloc._steps_of(self._c.fields, np.maximum(pos, 0)), 0)
        rows["age_steps"] = now[m] - a.step[index]
        rows.insert(0, "moment", m)
        data = {
            "moment": np.arange(len(pos)),
            "t_ns": times,
            "step": now,
            "allocations": count,
            "bytes": nbytes,
        }
        totals = self._frame(LIVE_TOTAL_COLUMNS, data)
        return rows, totals

    def _live_at(self, position: int, devices: list[int]) -> pd.DataFrame:
        index = (
            np.concatenate([self._live_index(d, position) for d in devices]) if devices else np.zeros(0, int)
        )
        index = index[np.lexsort((self._a.id[index], -self._a.block[index]))]
        return self._rows(index, LIVE_COLUMNS, step_now=max(self._step_at(position), 0))

    def peak(self, device: str | int | None = None) -> pd.DataFrame:
        """What was live at the peak of each device (or of ``device``): one row an allocation
        (``LIVE_COLUMNS``), largest first, summing (``block_bytes``) to the allocator's peak, the
        most bytes allocated at once during the trace (the memory held when it began included).
        The moment is the first event that reached it; ``peaks()`` says when."""
        frames = []
        for d in self._devices(device):
            i, _ = self._peak(d)
            position = int(self._a.totals[d][0][i]) if i >= 0 else -1
            frames.append(self._live_at(position, [d]))
        if not frames:
            return self._frame(LIVE_COLUMNS, {})
        out = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        out.attrs.update(complete=self.complete, problems=list(self.problems))
        return out

    def peaks(self) -> pd.DataFrame:
        """One row a device (``PEAK_COLUMNS``): its peak (``peak_bytes``), when (``t_ns``; 0 when
        the memory held at the trace's start was the most), the event that reached it, the step,
        the bytes allocated at the trace's start and end, and the peak's bytes per category."""
        rows: dict[str, list[Any]] = {c: [] for c in PEAK_COLUMNS}
        for d in self._devices(None):
            mine, total = self._a.totals[d]
            i, peak = self._peak(d)
            position = int(mine[i]) if i >= 0 else -1
            cats = self._by_category(d, np.asarray([i]))[0]
            values = [device_name(d), peak, int(self._time_of(np.asarray([position]))[0]) if i >= 0 else 0,
                      position, self._step_at(position), self._a.initial[d],
                      int(total[-1]) if len(total) else self._a.initial[d], *cats.tolist()]  # fmt: skip
            for c, v in zip(PEAK_COLUMNS, values, strict=True):
                rows[c].append(v)
        return self._frame(PEAK_COLUMNS, rows)

    def sites(self, top: int = 20) -> pd.DataFrame:
        """The ``top`` allocation sites by bytes live at the peak (``SITE_COLUMNS``): per device, user
        line, module, op and category, the allocations and bytes (blocks) live then, and the share
        of the device's peak."""
        peak = self.peak()
        if peak.empty:
            return self._frame(SITE_COLUMNS, {})
        keys = ["device", "source", "module", "op", "category"]
        g = peak.groupby(keys, dropna=False, sort=False).agg(
            allocations=("id", "size"), bytes=("block_bytes", "sum")
        )
        g = g.reset_index()
        g["share"] = g["bytes"] / g.groupby("device")["bytes"].transform("sum")
        g = g.sort_values(["bytes", "allocations"], ascending=False, kind="stable").head(top)
        return self._frame(SITE_COLUMNS, {c: g[c].to_numpy() for c in SITE_COLUMNS})

    def timeline(self, buckets: int | None = None) -> pd.DataFrame:
        """Bytes live over time by device and category (``TIMELINE_COLUMNS``), long form: a row per
        moment, device and category (the categories that device ever held), from ``t_ns`` 0 (the
        trace's start) then after each allocation and free; at each moment the rows of a device sum
        to the allocator's count. ``buckets``: at most that many moments a device, evenly over the
        trace's time, each the moment of its bucket's highest total (the peak always among them),
        for traces of millions of allocations. Step boundaries are ``steps()``' ``start_ns``.
        ``device`` and ``category`` are categoricals (``CATEGORIES`` in order)."""
        if buckets is not None and (isinstance(buckets, bool) or not isinstance(buckets, int) or buckets < 1):
            raise ValueError(
                f"timeline(buckets=...) takes a positive number of moments or None, got {buckets!r}"
            )
        parts = []
        times = self._rel(self._c.fields["start_ns"])
        for d in self._devices(None):
            mine, total = self._a.totals[d]
            at = np.arange(len(mine))
            if buckets is not None and len(mine) > buckets:
                t = times[mine]
                width = max(int(t.max()) + 1, 1) / buckets
                bucket = np.clip((t / width).astype(np.int64), 0, buckets - 1)
                order = np.lexsort((at, -total, bucket))
                first = np.r_[True, bucket[order][1:] != bucket[order][:-1]]
                at = np.sort(order[first])
            at = np.r_[-1, at]
            cats = self._by_category(d, at)
            # The categories the device ever held, whichever moments are kept: every moment of a
            # coarse timeline has the same rows as the full one's (a category live only between
            # two kept moments is a row of 0 bytes, not a missing row).
            present = np.unique(self._a.category[self._a.device == d]).astype(np.int64)
            if not len(present):
                present = np.asarray([0])
            t_ns = np.where(at >= 0, times[mine[np.maximum(at, 0)]] if len(mine) else 0, 0)
            k = len(present)
            parts.append(
                {
                    "t_ns": np.repeat(t_ns, k),
                    "device": np.full(len(at) * k, d, dtype=np.int8),
                    "category": np.tile(present.astype(np.int8), len(at)),
                    "bytes": cats[:, present].reshape(-1),
                }
            )
        data = {c: np.concatenate([p[c] for p in parts]) for c in TIMELINE_COLUMNS} if parts else {}
        if parts:  # codes as categoricals: millions of rows, built without a string each
            devices = self._devices(None)
            data["device"] = pd.Categorical.from_codes(
                np.searchsorted(devices, data["device"]), [device_name(d) for d in devices]
            )
            data["category"] = pd.Categorical.from_codes(data["category"], list(CATEGORIES))
        return self._frame(TIMELINE_COLUMNS, data)

    def steps(self) -> pd.DataFrame:
        """Per training step and device (``STEP_COLUMNS``): when it ran (``start_ns`` to ``end_ns``,
        as ``Trace.steps()``), the bytes allocated at its start, its peak and when, at its end, the
        growth (end minus start) and the peak's bytes per category. Steps end at each
        ``optimizer.step()`` and ``openreg_lab.step()``; memory events after the last one make one
        more row, ``complete`` False. Empty when no step ended in the trace."""
        f = self._c.fields
        is_step = np.flatnonzero(f["kind"] == _STEP)
        if not len(is_step):
            return self._frame(STEP_COLUMNS, {})
        ends = self._rel(f["start_ns"][is_step])
        numbers = f["seq"][is_step].astype(np.int64)
        times = self._rel(f["start_ns"])
        parts = []
        for d in self._devices(None):
            mine, total = self._a.totals[d]
            initial = self._a.initial[d]
            which = np.searchsorted(ends, times[mine], side="left")  # as steps.table counts
            n = len(ends) + int((which == len(ends)).any())
            lo = np.searchsorted(which, np.arange(n), side="left")
            hi = np.searchsorted(which, np.arange(n), side="right")
            start = np.where(lo > 0, total[np.maximum(lo - 1, 0)] if len(total) else 0, initial)
            order = np.lexsort((np.arange(len(mine)), -total, which))  # per step, its highest first
            first = order[np.r_[True, which[order][1:] != which[order][:-1]]] if len(order) else order
            best = np.full(n, -1, dtype=np.int64)
            best[which[first]] = first
            peak_at = np.where((best >= 0) & (total[np.maximum(best, 0)] > start), best, lo - 1)
            peak = np.where(peak_at >= 0, total[np.maximum(peak_at, 0)] if len(total) else 0, initial)
            end = np.where(hi > lo, total[np.maximum(hi - 1, 0)] if len(total) else 0, start)
            begin = np.r_[0, ends][:n]
            finish = np.r_[ends, times[mine[-1]] if len(mine) else 0][:n]
            cats = self._by_category(d, peak_at)
            part = {
                "step": np.r_[numbers, numbers[-1] + 1][:n],
                "device": np.full(n, device_name(d), dtype=object),
                "start_ns": begin,
                "end_ns": finish,
                "start_bytes": start,
                "peak_bytes": peak,
                "peak_ns": np.where(
                    peak_at >= lo, times[mine[np.maximum(peak_at, 0)]] if len(mine) else 0, begin
                ),
                "end_bytes": end,
                "growth_bytes": end - start,
                "complete": np.arange(n) < len(ends),
            }
            part.update({c: cats[:, k] for k, c in enumerate(CATEGORIES)})
            parts.append(part)
        data = {c: np.concatenate([p[c] for p in parts]) for c in STEP_COLUMNS} if parts else {}
        return self._frame(STEP_COLUMNS, data)

    def step_ends(self) -> pd.DataFrame:
        """When each training step ended (``STEP_END_COLUMNS``: its number and trace-relative
        ``end_ns``, as ``steps()``), without the per-step peaks: what a view draws as boundaries."""
        f = self._c.fields
        is_step = np.flatnonzero(f["kind"] == _STEP)
        data = {"step": f["seq"][is_step].astype(np.int64), "end_ns": self._rel(f["start_ns"][is_step])}
        return self._frame(STEP_END_COLUMNS, data)

    def leaks(self) -> pd.DataFrame:
        """Leak candidates (``LEAK_COLUMNS``): sites (device, line, module, op, category) whose
        allocations were never freed in the trace, made in two training steps or more, and neither
        parameters, gradients nor optimizer state: memory that grows step after step (a list that
        keeps each step's loss on the device, say). Most bytes first."""
        a = self._a
        keep = (a.end == _alloc.NEVER) & (a.start >= 0)
        keep &= ~np.isin(a.category, (PARAMETER, GRADIENT, OPTIMIZER_STATE))
        rows = self._rows(np.flatnonzero(keep), ALLOCATION_COLUMNS)
        if rows.empty:
            return self._frame(LEAK_COLUMNS, {})
        keys = ["device", "source", "module", "op", "category"]
        g = rows.groupby(keys, dropna=False, sort=False).agg(
            steps=("step", "nunique"),
            first_step=("step", "min"),
            last_step=("step", "max"),
            allocations=("id", "size"),
            bytes=("block_bytes", "sum"),
        )
        g = g[g["steps"] >= 2].reset_index().sort_values("bytes", ascending=False, kind="stable")
        return self._frame(LEAK_COLUMNS, {c: g[c].to_numpy() for c in LEAK_COLUMNS})

    def ooms(self) -> pd.DataFrame:
        """Every allocation that failed (``OOM_COLUMNS``): device, when, its event, the bytes it asked
        for, the bytes allocated then, the step, and what was live then per category (the rows of
        ``oom_live``). Empty when none failed."""
        f = self._c.fields
        rows: dict[str, list[Any]] = {c: [] for c in OOM_COLUMNS}
        for e in np.flatnonzero(f["kind"] == _OOM).tolist():
            d = int(f["device"][e])
            mine = self._a.totals.get(d, (np.zeros(0, np.int64), None))[0]
            i = int(np.searchsorted(mine, e, side="right")) - 1
            cats = (
                self._by_category(d, np.asarray([i]))[0] if d in self._a.totals else np.zeros(len(CATEGORIES))
            )
            values = [device_name(d), int(self._rel(f["start_ns"][e : e + 1])[0]), e, int(f["bytes"][e]),
                      int(f["seq"][e]), self._step_at(e), *[int(v) for v in cats]]  # fmt: skip
            for c, v in zip(OOM_COLUMNS, values, strict=True):
                rows[c].append(v)
        return self._frame(OOM_COLUMNS, rows)

    def oom_live(self, event: int) -> pd.DataFrame:
        """What was live on its device when the allocation of the ``oom`` event ``event`` failed
        (``LIVE_COLUMNS``, largest first)."""
        f = self._c.fields
        if not 0 <= event < len(self._c) or f["kind"][event] != _OOM:
            raise ValueError(f"event {event} is not an out-of-memory event of this trace (see Memory.ooms())")
        return self._live_at(int(event), [int(f["device"][event])])


def _device_index(device: str | int) -> int:
    """0 for ``0``, ``"openreg:0"`` or ``"openreg"``; ValueError for anything else."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str):
        name, _, index = device.partition(":")
        if name == "openreg" and (index.isdigit() or not index):
            return int(index or 0)
    raise ValueError(f"device must be an openreg device: 0, 'openreg:0' or 'openreg'; got {device!r}")


def live_at(trace: Any, t_ns: int, device: str | int | None = None) -> pd.DataFrame:
    """What was live at ``t_ns`` (trace-relative) on ``device`` (every device: None) in ``trace``:
    ``trace.memory().live(t_ns, device)``."""
    return trace.memory().live(t_ns, device)
