"""Where the wall time of a step went: device ops, compilation, host Python, waiting.

Note [Accounting for the wall time]
A step's wall time is painted, nanosecond by nanosecond, with the first of these that covers it:
compilation (a ``compile`` event, on any thread), waiting on a collective (a ``wait ...``
collective event), device ops (an op, backward, fallback, copy, cast or compiled event on any
thread: within them CPU fallbacks first, then autocast casts, then copies, then the other ops),
and last the host samples of the thread that ends the steps: time it waited (off the CPU and not
runnable, Note [Host samples]) is waiting, the rest host Python. What no event and no sample covers
is said as not sampled. A sample speaks for its thread only until the next sample and only inside
the window it was taken in: a late sample after a step's end (a loaded machine delays the sampler)
must not carry the last step's function into the next one; the gap before the window's first sample
is not sampled. Every part is measured; the parts add up to the wall time. Host Python is
named by the innermost frame of the user's code (not torch's, the standard library's or an installed
package's) with its hottest line; waiting by the name called at the waiting line (``time.sleep``)
and the frame it waited in, as data loading when ``torch.utils.data`` is on the stack.

Note [Accounting a window of a big trace]
The painting is done on the events the window sees only (those that start before its end and end
after its start): an event outside it would be clipped to the window's start or end, edges the
window has already, and cover no segment, so leaving it out changes nothing, and a step of a
2M-event trace paints its few thousand events instead of every one (painting the whole
trace for each window, with a string compare of every row per kind, took 2.6 s of the verdict's
3.8 s). Outside the window only the start and end columns are read, as numbers; the kinds are
read once per table (Note [Kinds read once]) and the samples' intervals once per verdict.
tests/recording/test_trace_accounting.py checks that the parts and names are exactly those of the
plain painting (tests/support/accounting_reference.py) on windows that cut events and samples.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import host as _host
from openreg_lab.recording.host_fold import IMPORT, Folded
from openreg_lab.recording.kinds import Kinds

#: How many host functions and waits a part names.
TOP = 3
_OP_KINDS = ("op", "backward", "fallback", "copy", "cast", "compiled")
#: The labels of the parts, in the order they are said.
PARTS = ("device ops", "compilation", "host Python", "waiting", "not sampled")
OP_PARTS = ("CPU fallbacks", "autocast casts", "copies", "other ops")
_DATA = os.sep + os.path.join("torch", "utils", "data") + os.sep


@dataclass(frozen=True)
class Named:
    """One named cause inside a part: ``what`` (``busy``, ``time.sleep in load``), ``where``
    (``file:line``), ``kind`` (for a wait: sleep, data loading, collective, wait; ``import`` for host
    Python an import took, ``what`` then saying the line that caused it) and its time."""

    what: str
    where: str
    ns: int
    kind: str = ""

    def text(self) -> str:
        if self.kind == "import":  # what already says where: "`AdamW()` at train.py:88 imported x"
            return f"{self.what}: {theme.format_ns(self.ns)}"
        where = f" ({self.where})" if self.where else ""
        kind = f" [{self.kind}]" if self.kind else ""
        return f"{self.what}{where} {theme.format_ns(self.ns)}{kind}"


@dataclass(frozen=True)
class WallTime:
    """The wall time of one step (or of the whole trace) split into ``PARTS``; ``ops`` splits the
    device ops into ``OP_PARTS``; ``python`` and ``waiting`` name their top causes."""

    label: str
    wall_ns: int
    parts: dict[str, int]
    ops: dict[str, int]
    python: list[Named] = field(default_factory=list)
    waiting: list[Named] = field(default_factory=list)
    sampled: bool = True

    def share(self, part: str) -> float:
        return self.parts.get(part, 0) / self.wall_ns if self.wall_ns else 0.0

    def summary(self) -> str:
        """One line: the wall time and each part's share."""
        out = []
        for p in PARTS:
            ns = self.parts.get(p, 0)
            if p == "not sampled" and not ns:
                continue
            text = f"{p} {theme.format_ns(ns)} ({self.share(p):.0%})"
            if p == "device ops" and ns:
                inner = ", ".join(f"{k} {theme.format_ns(v)}" for k, v in self.ops.items() if v)
                text += f" [{inner}]"
            if p == "not sampled" and not self.sampled:
                text += " [trace(host=False): the host was not sampled]"
            out.append(text)
        return f"{self.label} took {theme.format_ns(self.wall_ns)}: " + ", ".join(out)

    def lines(self) -> list[str]:
        out = [self.summary()]
        if self.python:
            out.append("  host Python: " + "; ".join(n.text() for n in self.python))
        if self.waiting:
            out.append("  waiting: " + "; ".join(n.text() for n in self.waiting))
        return out


def account(
    events: pd.DataFrame,
    samples: _host.Samples | None,
    t0: int,
    thread_index: dict[int, int],
    start: int,
    end: int,
    label: str,
    sampled: bool,
    *,
    kinds: Kinds | None = None,
    iv: _host.Intervals | None = None,
    folded: Folded | None = None,
) -> WallTime:
    """Split ``[start, end)`` (ns from the trace's start) as Note [Accounting for the wall time] says.
    ``kinds`` and ``iv``: the events' kinds and the samples' intervals when the caller read them
    already (the verdict accounts two steps of one trace); Note [Accounting a window of a big trace].
    ``folded``: ``samples`` folded (Note [Folding host frames]): host Python is named by the folded
    frame, an import by the user's line that caused it; without it, by ``host.user_node``."""
    kinds = Kinds.of(events, kinds)
    s0_all = events["start_ns"].to_numpy().astype(np.int64, copy=False)
    dur_all = events["dur_ns"].to_numpy().astype(np.int64, copy=False)
    e0_all = np.where(dur_all < 0, end, s0_all + np.maximum(dur_all, 0))  # still running: to the end
    rows = np.flatnonzero((s0_all < end) & (e0_all > start))  # the events the window sees
    win = kinds.take(rows)
    s0, e0 = s0_all[rows], e0_all[rows]
    name = events["name"].to_numpy()[rows]
    is_wait = win.mask("collective")
    is_wait[is_wait] = [isinstance(n, str) and n.startswith("wait ") for n in name[is_wait]]
    layers: list[tuple[str, np.ndarray]] = [
        ("compilation", win.mask("compile")),
        ("waiting", is_wait),
        ("CPU fallbacks", win.mask("fallback")),
        ("autocast casts", win.mask("cast")),
        ("copies", win.mask("copy")),
        ("other ops", win.mask(*_OP_KINDS)),
    ]
    if iv is None and samples is not None:
        iv = _host.intervals(samples, t0)
    thread = _step_thread(events, iv, thread_index, kinds)
    mine = None
    if iv is not None and thread is not None:
        m = np.flatnonzero((iv.thread == thread) & (iv.start >= start) & (iv.start < end))
        mine = m
    bounds = [np.array([start, end], dtype=np.int64)]
    for _, mask in layers:
        bounds += [np.clip(s0[mask], start, end), np.clip(e0[mask], start, end)]
    if mine is not None and len(mine):
        bounds += [np.clip(iv.start[mine], start, end), np.clip(iv.end[mine], start, end)]
    edges = np.unique(np.concatenate(bounds))
    seg = np.diff(edges)
    label_of = np.full(len(seg), -1, dtype=np.int64)  # index into layers, then 6: sampled
    for i, (_, mask) in enumerate(layers):
        covered = _covered(edges, s0[mask], e0[mask])
        label_of[(label_of < 0) & covered] = i
    ops = {k: int(seg[label_of == i].sum()) for i, (k, _) in enumerate(layers) if k in OP_PARTS}
    parts = {
        "device ops": sum(ops.values()),
        "compilation": int(seg[label_of == 0].sum()),
        "host Python": 0,
        "waiting": int(seg[label_of == 1].sum()),
    }
    waits: dict[tuple[str, str, str], int] = {}
    for i in np.flatnonzero((label_of == 1) & (seg > 0)):  # collective waits, by their name
        hit = np.flatnonzero(layers[1][1] & (s0 <= edges[i]) & (e0 > edges[i]))
        k = (str(name[hit[0]]) if len(hit) else "collective", "", "collective")
        waits[k] = waits.get(k, 0) + int(seg[i])
    python: dict[tuple[str, str, int], dict[int, int]] = {}
    free = np.flatnonzero((label_of < 0) & (seg > 0))
    if mine is not None and len(mine) and samples is not None and len(free):
        _attribute(samples, iv, mine, edges, seg, free, parts, python, waits, folded)
    parts["not sampled"] = int(seg.sum()) - sum(parts.values())
    return WallTime(
        label,
        int(end - start),
        parts,
        ops,
        python=_top_python(python),
        waiting=[Named(w, where, ns, k) for (w, where, k), ns in sorted(waits.items(), key=lambda x: -x[1])][
            :TOP
        ],
        sampled=sampled,
    )


def _covered(edges: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per segment between ``edges``, whether an interval ``[s, e)`` covers it."""
    n = len(edges) - 1
    if n <= 0 or not len(s):
        return np.zeros(max(n, 0), dtype=bool)
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, np.clip(np.searchsorted(edges, s, side="left"), 0, n), 1)
    np.add.at(diff, np.clip(np.searchsorted(edges, e, side="left"), 0, n), -1)
    return np.cumsum(diff[:n]) > 0


def _step_thread(
    events: pd.DataFrame, iv: _host.Intervals | None, thread_index: dict[int, int], kinds: Kinds
) -> int | None:
    """The OS thread whose samples count: the one that ends the steps, else the most sampled one."""
    if iv is None or not len(iv):
        return None
    steps_ = np.flatnonzero(kinds.mask("step"))
    if len(steps_):
        os_of = {i: os_id for os_id, i in thread_index.items()}
        t = os_of.get(int(events["thread"].to_numpy()[steps_[-1]]))
        if t is not None and (iv.thread == t).any():
            return t
    ids, counts = np.unique(iv.thread, return_counts=True)
    return int(ids[np.argmax(counts)])


def _attribute(
    samples: _host.Samples,
    iv: _host.Intervals,
    mine: np.ndarray,
    edges: np.ndarray,
    seg: np.ndarray,
    free: np.ndarray,
    parts: dict[str, int],
    python: dict[tuple[str, str, int], dict[int, int]],
    waits: dict[tuple[str, str, str], int],
    folded: Folded | None = None,
) -> None:
    """Give the segments no event covers to the sample interval covering them: waiting when the
    thread waited through most of the interval, host Python otherwise. With ``folded``, host Python
    and the waits of an import (reading its files) are named by the import (``_folded_key``)."""
    fpath = _host.paths(folded.samples) if folded is not None else []
    starts = iv.start[mine]
    at = np.searchsorted(starts, edges[free], side="right") - 1
    ok = (at >= 0) & (edges[free] < iv.end[mine][np.maximum(at, 0)])
    prefixes = _host.library_prefixes()
    path = _host.paths(samples)
    text = samples.strings
    per = np.bincount(at[ok], weights=seg[free[ok]], minlength=len(mine)).astype(np.int64)
    for a in np.flatnonzero(per).tolist():
        k = int(mine[a])
        node = int(iv.node[k])
        if node < 0:
            continue
        ns = int(per[a])
        span = int(iv.end[k] - iv.start[k])
        if span and iv.wait[k] * 2 > span:
            leaf = node
            callee = text[int(samples.callee[leaf])]
            in_data = any(_DATA in text[int(samples.file[n])] for n in path[node])
            how = "data loading" if in_data else "sleep" if callee.endswith("sleep") else "wait"
            func = text[int(samples.function[leaf])]
            what = f"{callee} in {func}" if callee else func
            where = _where(text[int(samples.file[leaf])], int(samples.line[leaf]))
            if folded is not None and how == "wait":  # a wait inside an import: the import's
                key, _ = _folded_key(folded.samples, fpath, int(folded.node[node]), folded.library)
                if key[2] == -1:
                    what, where, how = key[0], "", "import"
            waits[(what, where, how)] = waits.get((what, where, how), 0) + ns
            parts["waiting"] += ns
        else:
            if folded is not None:
                key, line = _folded_key(folded.samples, fpath, int(folded.node[node]), folded.library)
            else:
                u = _host.user_node(samples, node, prefixes, path)
                key = (text[int(samples.function[u])], text[int(samples.file[u])], int(samples.first_line[u]))
                line = int(samples.line[u])
            lines = python.setdefault(key, {})
            lines[line] = lines.get(line, 0) + ns
            parts["host Python"] += ns


def _folded_key(
    fs: _host.Samples, fpath: list[list[int]], f: int, library: bool
) -> tuple[tuple[str, str, int], int]:
    """The name of a folded stack's host time: its outermost import frame, as the user's line that
    caused it (``("`AdamW()` at train.py:88 imported torch._dynamo", "", -1)``); else (or with
    library frames kept) its innermost frame (function, file, first line) and the line it ran."""
    text = fs.strings
    imports = [] if library else [k for k in fpath[f] if text[int(fs.function[k])].startswith(IMPORT)]
    imp = imports[0] if imports else None
    if imp is None:
        return (text[int(fs.function[f])], text[int(fs.file[f])], int(fs.first_line[f])), int(fs.line[f])
    module = text[int(fs.function[imp])][len(IMPORT) :]
    p = int(fs.parent[imp])
    where = _where(text[int(fs.file[p])], int(fs.line[p])) if p >= 0 else ""
    call = text[int(fs.callee[imp])]
    what = f"`{call}` at {where}" if call and where else where or "library code"  # no user line above
    return (f"{what} imported {module}", "", -1), 0


def _where(file: str, line: int) -> str:
    """``file:line``; nothing for a frozen module (``<frozen runpy>``: no file to open) or a frame
    with no file (a folded ``import`` frame: Note [Folding host frames])."""
    return "" if not file or file.startswith("<frozen ") else f"{file}:{line}"


def _top_python(python: dict[tuple[str, str, int], dict[int, int]]) -> list[Named]:
    rows = []
    for (func, file, first), lines in python.items():
        if first == -1:  # an import, named by the line that caused it (_folded_key)
            rows.append(Named(func, "", sum(lines.values()), "import"))
            continue
        hot = max(lines.items(), key=lambda x: x[1])[0]
        rows.append(Named(func, _where(file, hot), sum(lines.values())))
    return sorted(rows, key=lambda n: -n.ns)[:TOP]
