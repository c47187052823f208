"""Host time: the Python the traced threads run between and around device ops, sampled by
``sampler.py``'s thread (Note [Host samples]). ``Samples`` is what a trace keeps and saves;
``intervals``, ``slices`` and ``per_function`` turn it into tables (the timeline's Python lane,
``Trace.host()``, the verdict).
"""

from __future__ import annotations

import dis
import os
import sysconfig
import tempfile
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

import numpy as np
import pandas as pd

#: Time between two samples of the sampler, in ns (the shortest: Note [The sampler's budget]).
INTERVAL_NS = 1_000_000

#: The columns of ``slices``: one flame slice a row (consecutive samples in one function merged).
SLICE_COLUMNS = [
    "thread", "os_thread", "depth", "function", "file", "line", "start_ns", "dur_ns", "wait_ns", "parent",
]  # fmt: skip
#: The columns of ``per_function`` (``Trace.host()``).
HOST_COLUMNS = [
    "step", "function", "file", "line", "thread", "samples", "self_ns", "total_ns", "wait_ns",
]  # fmt: skip


@dataclass
class Samples:
    """The samples of one trace: per sample its time (monotonic ns), OS thread id, stack node, and the
    thread's cumulative ns on a CPU and in the run queue; per node its parent node (-1: a root), function,
    file and first line (indices into ``strings``, whose entry 0 is ``""``), the line it was running and
    the callee named at that line (``"time.sleep"``; 0 when unknown)."""

    time: np.ndarray
    thread: np.ndarray
    node: np.ndarray
    cpu: np.ndarray
    queue: np.ndarray
    parent: np.ndarray
    function: np.ndarray
    file: np.ndarray
    first_line: np.ndarray
    line: np.ndarray
    callee: np.ndarray
    strings: list[str] = field(default_factory=lambda: [""])
    interval_ns: int = INTERVAL_NS

    SAMPLE_FIELDS = ("time", "thread", "node", "cpu", "queue")
    NODE_FIELDS = ("parent", "function", "file", "first_line", "line", "callee")

    def __len__(self) -> int:
        return len(self.time)

    @classmethod
    def empty(cls) -> Samples:
        z = np.zeros(0, dtype=np.int64)
        return cls(*(z.copy() for _ in range(11)))

    def keep_threads(self, os_threads: set[int], since: int = 0, until: int = 2**63 - 1) -> Samples:
        """Only the samples of these OS threads taken from ``since`` to ``until`` (the nodes stay)."""
        keep = np.isin(self.thread, np.fromiter(os_threads, dtype=np.int64, count=len(os_threads)))
        keep &= (self.time >= since) & (self.time <= until)
        s = {f: getattr(self, f)[keep] for f in self.SAMPLE_FIELDS}
        n = {f: getattr(self, f) for f in self.NODE_FIELDS}
        return Samples(**s, **n, strings=self.strings, interval_ns=self.interval_ns)


def resolve(
    raw: tuple[list[tuple[int, int, int, int, int]], list[tuple[int, CodeType, int]], int],
) -> Samples:
    """``Sampler.stop_raw``'s rows and nodes as ``Samples``: names and lines read once per node."""
    return _samples(*raw)


def _samples(
    rows_: list[tuple[int, int, int, int, int]], node_list: list[tuple[int, CodeType, int]], interval_ns: int
) -> Samples:
    """The ``Samples`` of a sampler's rows and nodes: names and lines read once per node."""
    rows = np.array(rows_, dtype=np.int64).reshape(-1, 5)
    strings: dict[str, int] = {"": 0}

    def s(text: str) -> int:
        return strings.setdefault(text, len(strings))

    n = len(node_list)
    parent = np.empty(n, dtype=np.int64)
    function, file, first_line, line, callee = (np.zeros(n, dtype=np.int64) for _ in range(5))
    waiting = _waiting_nodes(rows)
    lines: dict[int, list[tuple[int, int, int | None]]] = {}
    for i, (p, code, lasti) in enumerate(node_list):
        parent[i] = p
        function[i] = s(code.co_qualname)
        file[i] = s(code.co_filename)
        first_line[i] = code.co_firstlineno
        line[i] = _line_at(code, lasti, lines)
        if i in waiting:
            callee[i] = s(_callee(code, lasti))
    return Samples(
        rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2].copy(), rows[:, 3].copy(), rows[:, 4].copy(),
        parent, function, file, first_line, line, callee, list(strings), interval_ns,
    )  # fmt: skip


def _waiting_nodes(rows: np.ndarray) -> set[int]:
    """The nodes of samples followed by a wait (their callee is worth naming)."""
    if not len(rows):
        return set()
    out: set[int] = set()
    for tid in np.unique(rows[:, 1]):
        r = rows[rows[:, 1] == tid]
        w = _wait(r[:, 0], r[:, 3], r[:, 4])
        out.update(r[:-1, 2][w[:-1] > 0].tolist())
    return out


def _wait(t: np.ndarray, cpu: np.ndarray, queue: np.ndarray) -> np.ndarray:
    """Per sample of one thread: the ns until its next sample that the thread neither ran nor waited
    for a CPU (0 for the last sample, or without a clock)."""
    out = np.zeros(len(t), dtype=np.int64)
    if len(t) < 2:
        return out
    wall = np.diff(t)
    busy = np.diff(cpu) + np.diff(queue)
    known = (cpu[:-1] >= 0) & (cpu[1:] >= 0)
    left = np.where(known, wall - busy, 0)
    # schedstat adds a wait in the run queue when the wait ends: a thread still queued when sampled
    # has its queueing counted in the next interval, whose ran+queued then exceeds its wall time.
    # That excess is the interval before's: it goes back, a step a pass (Note [Host samples]).
    for _ in range(4):
        late = np.minimum(left[1:], 0)
        if not late.any():
            break
        left[:-1] += late
        left[1:] -= late
    out[:-1] = np.clip(left, 0, wall)
    return out


def _line_at(code: CodeType, lasti: int, cache: dict[int, list[tuple[int, int, int | None]]]) -> int:
    ranges = cache.get(id(code))
    if ranges is None:
        ranges = cache[id(code)] = list(code.co_lines())
    for start, end, line in ranges:
        if start <= lasti < end:
            return line or code.co_firstlineno
    return code.co_firstlineno


def _callee(code: CodeType, lasti: int) -> str:
    """The dotted name of what the call at ``lasti`` calls (``time.sleep``), or ``""``.

    Python 3.11 starts a call by pushing NULL (``PUSH_NULL``, ``LOAD_GLOBAL (NULL + f)``) or by
    ``LOAD_METHOD``; each ``CALL`` ends the innermost started one. The callee at ``lasti`` is the one
    started last and not yet ended."""
    started: list[str] = []
    chain: list[str] = []
    pending = False  # a PUSH_NULL waits for the load of its callable
    for ins in dis.get_instructions(code):
        op = ins.opname
        if ins.offset >= lasti:
            if op == "CALL" and ins.offset == lasti and started:
                return started[-1]
            break
        if op in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF"):
            chain = [str(ins.argval)]
            if pending or (op == "LOAD_GLOBAL" and str(ins.argrepr).startswith("NULL + ")):
                started.append(chain[0])
                pending = False
        elif op == "LOAD_ATTR":
            chain.append(str(ins.argval))
            if started and len(chain) > 1 and started[-1] == ".".join(chain[:-1]):
                started[-1] = ".".join(chain)
        elif op == "LOAD_METHOD":
            started.append(".".join([*chain, str(ins.argval)]))
        elif op == "PUSH_NULL":
            pending = True
        elif op == "CALL" and started:
            started.pop()
    return ""


# -- tables -------------------------------------------------------------------------------------


@dataclass
class Intervals:
    """Each sample of each thread until that thread's next sample (the last of each thread dropped):
    arrays ``thread`` (OS id), ``start`` / ``end`` (ns from the trace's start), ``node``, ``wait``
    (ns of it off the CPU and not runnable), sorted by thread and time."""

    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    node: np.ndarray
    wait: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


def intervals(s: Samples, t0: int) -> Intervals:
    """The sample intervals of ``s`` (see ``Intervals``), times relative to ``t0``."""
    order = np.lexsort((s.time, s.thread))
    th, t, node = s.thread[order], s.time[order] - t0, s.node[order]
    cpu, queue = s.cpu[order], s.queue[order]
    parts = []
    for tid in np.unique(th):
        m = np.flatnonzero(th == tid)
        if len(m) < 2:
            continue
        w = _wait(t[m], cpu[m], queue[m])
        parts.append((th[m[:-1]], t[m[:-1]], t[m[1:]], node[m[:-1]], w[:-1]))
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return Intervals(z, z, z, z, z)
    return Intervals(*(np.concatenate([p[k] for p in parts]) for k in range(5)))


def frame_key(s: Samples) -> np.ndarray:
    """Per node, one code for its function (function, file, first line): equal codes, same function."""
    if not len(s.parent):
        return np.zeros(0, dtype=np.int64)
    stacked = np.stack([s.function, s.file, s.first_line], axis=1)
    return np.unique(stacked, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def paths(s: Samples) -> list[list[int]]:
    """Per node, its nodes from the root down to itself."""
    out: list[list[int]] = []
    for i, p in enumerate(s.parent.tolist()):
        out.append([*out[p], i] if p >= 0 else [i])
    return out


def slices(s: Samples, t0: int, thread_index: dict[int, int]) -> pd.DataFrame:
    """The flame of each thread: per depth, consecutive samples in the same function merged into one
    slice (``SLICE_COLUMNS``; ``thread`` is the recorder's index of the thread, -1 when it recorded no
    event; ``parent`` the row of the enclosing slice, -1 at depth 0; ``wait_ns`` the time the
    slice's function waited as the innermost frame)."""
    iv = intervals(s, t0)
    key = frame_key(s)
    path = paths(s)
    rows: list[list[int]] = []  # thread, depth, node, start, end, wait, parent
    for tid in np.unique(iv.thread).tolist():
        m = np.flatnonzero(iv.thread == tid)
        open_: list[int] = []  # row of the open slice at each depth
        prev = -2
        for i in m.tolist():
            node, a, b, w = int(iv.node[i]), int(iv.start[i]), int(iv.end[i]), int(iv.wait[i])
            p = path[node] if node >= 0 else []
            if node != prev:
                keep = 0
                while keep < len(open_) and keep < len(p) and rows[open_[keep]][2] >= 0:
                    r = rows[open_[keep]]
                    if key[r[2]] != key[p[keep]] or r[4] != a:
                        break
                    keep += 1
                del open_[keep:]
                for d in range(keep, len(p)):
                    parent = open_[d - 1] if d else -1
                    open_.append(len(rows))
                    rows.append([tid, d, p[d], a, a, 0, parent])
                prev = node
            for r in open_:
                rows[r][4] = b
            if w and open_:
                rows[open_[-1]][5] += w
    if not rows:
        return pd.DataFrame(columns=SLICE_COLUMNS)
    arr = np.array(rows, dtype=np.int64)
    node = arr[:, 2]
    strings = np.array(s.strings, dtype=object)
    return pd.DataFrame(
        {
            "thread": [thread_index.get(int(t), -1) for t in arr[:, 0]],
            "os_thread": arr[:, 0],
            "depth": arr[:, 1],
            "function": strings[s.function[node]],
            "file": strings[s.file[node]],
            "line": s.first_line[node],
            "start_ns": arr[:, 3],
            "dur_ns": arr[:, 4] - arr[:, 3],
            "wait_ns": arr[:, 5],
            "parent": arr[:, 6],
        },
        columns=SLICE_COLUMNS,
    )


def step_of(times: np.ndarray, step_table: pd.DataFrame) -> np.ndarray:
    """The step each time (ns from the trace's start) falls in (``steps.table``); -1 without steps."""
    if step_table.empty:
        return np.full(len(times), -1, dtype=np.int64)
    ends = (step_table["start_ns"] + step_table["dur_ns"]).to_numpy().astype(np.int64)
    which = np.minimum(np.searchsorted(ends, times, side="right"), len(ends) - 1)
    return step_table["step"].to_numpy().astype(np.int64)[which]


def per_function(s: Samples, t0: int, step_table: pd.DataFrame, thread_index: dict[int, int]) -> pd.DataFrame:
    """``Trace.host()``: per step, function and thread, the samples, the time it was the innermost
    frame (``self_ns``), on the stack (``total_ns``) and waited as the innermost frame (``wait_ns``);
    by self time in each step."""
    iv = intervals(s, t0)
    if not len(iv):
        return pd.DataFrame(columns=HOST_COLUMNS)
    key = frame_key(s)
    path = paths(s)
    step = step_of(iv.start, step_table)
    dur = iv.end - iv.start
    acc: dict[tuple[int, int, int], list[int]] = {}
    for i in range(len(iv)):
        node = int(iv.node[i])
        if node < 0:
            continue
        seen = set()
        for d, n in enumerate(path[node]):
            k = (int(step[i]), int(key[n]), int(iv.thread[i]))
            if k in seen:
                continue  # a recursive function counts its time once
            seen.add(k)
            a = acc.setdefault(k, [n, 0, 0, 0, 0])
            a[3] += int(dur[i])
            if d == len(path[node]) - 1:
                a[1] += 1
                a[2] += int(dur[i])
                a[4] += int(iv.wait[i])
    strings = np.array(s.strings, dtype=object)
    rows = []
    for (st, _, tid), (n, count, self_ns, total, wait) in acc.items():
        rows.append(
            (st, strings[s.function[n]], strings[s.file[n]], int(s.first_line[n]),
             thread_index.get(tid, -1), count, self_ns, total, wait)
        )  # fmt: skip
    out = pd.DataFrame(rows, columns=HOST_COLUMNS)
    return out.sort_values(["step", "self_ns", "total_ns"], ascending=[True, False, False], ignore_index=True)


#: Where torch.compile's Inductor writes the Python it generates, when TORCHINDUCTOR_CACHE_DIR does
#: not say (``torchinductor_<user>`` in the temporary directory): a prefix matching any user's.
INDUCTOR_CACHE = os.path.join(tempfile.gettempdir(), "torchinductor_")


def library_prefixes() -> tuple[str, ...]:
    """Files that are not the user's code: the standard library, installed packages, openreg_lab,
    and the Python torch.compile generated (Inductor's cache directory)."""
    paths_ = sysconfig.get_paths()
    out = {os.path.dirname(os.__file__) + os.sep}
    for k in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths_.get(k):
            out.add(paths_[k] + os.sep)
    out.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)
    out.add(INDUCTOR_CACHE)
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        out.add(os.path.abspath(os.environ["TORCHINDUCTOR_CACHE_DIR"]) + os.sep)
    return tuple(sorted(out))


def user_node(s: Samples, node: int, prefixes: tuple[str, ...], path: list[list[int]]) -> int:
    """The innermost node of ``node``'s stack in the user's code (not a library's); else ``node``."""
    for n in reversed(path[node]):
        f = s.strings[int(s.file[n])]
        if not f.startswith(prefixes) and not f.startswith("<frozen"):
            return n
    return node


#: The columns of the events that the timeline reads (its level of detail, hover texts, step bands
#: and opening): what ``with_events`` copies beside the host slices. Copying all of them cost
#: 0.5 s of the 1M-op dashboard's 2.6 s (bench_views.py --host); the timeline's outputs are the
#: same either way (tests/views/test_views_timeline.py).
DRAWN_COLUMNS = (
    "id", "parent", "kind", "name", "kernel", "dispatch", "device", "thread", "start_ns", "dur_ns",
    "bytes", "shapes", "dtypes", "source", "seq", "total", "reason", "rank",
)  # fmt: skip


def with_events(events: pd.DataFrame, host_slices: pd.DataFrame | None) -> pd.DataFrame:
    """``events``' ``DRAWN_COLUMNS`` followed by the host slices as rows of kind ``host`` (ids
    after the events', a parent the enclosing host slice; ``name`` the function, ``source`` its
    ``file:line``; ``reason`` ``"waiting"`` for a slice whose function waited through most of it),
    for the timeline to draw as a Python lane per thread, after the op lanes. ``events`` itself
    when there is no host slice. The host rows take each column's type from the events (an
    integer column they have no value for, such as ``seq``, holds -1; a string column, a missing
    value), so joining the two copies the events' columns as they are (a 1M-op trace's integer
    columns turned into Python objects took longer than the copy itself)."""
    if host_slices is None or host_slices.empty:
        return events
    events = events[[c for c in DRAWN_COLUMNS if c in events.columns]]
    n = len(events)
    h = host_slices
    k = len(h)
    parent = h["parent"].to_numpy().astype(np.int64)
    given = {
        "id": np.arange(n, n + k, dtype=np.int64),
        "parent": np.where(parent >= 0, parent + n, -1),
        "kind": ["host"] * k,
        "name": h["function"].to_numpy(),
        "thread": h["thread"].to_numpy(),
        "start_ns": h["start_ns"].to_numpy().astype(np.int64),
        "dur_ns": h["dur_ns"].to_numpy().astype(np.int64),
        "bytes": np.zeros(k, dtype=np.int64),
        # A folded import (Note [Folding host frames]) has no file.
        "source": [f"{f}:{line}" if f else None for f, line in zip(h["file"], h["line"], strict=True)],
        "reason": np.where(h["wait_ns"].to_numpy() * 2 > h["dur_ns"].to_numpy(), "waiting", None),
    }
    rows = pd.DataFrame({col: _host_column(given.get(col), events[col].dtype, k) for col in events.columns})
    return pd.concat([events, rows], ignore_index=True)


def _host_column(values: Any, dtype: Any, k: int) -> Any:
    """The host rows' ``values`` of one column (None: they have none) as an array of ``dtype``,
    the events' type of that column: missing values are -1 in an integer column, NA in a
    string one, None in any other."""
    if pd.api.types.is_integer_dtype(dtype):
        return np.full(k, -1, dtype=dtype) if values is None else np.asarray(values).astype(dtype)
    if isinstance(dtype, pd.StringDtype):
        return pd.array([None] * k if values is None else list(values), dtype=dtype)
    return pd.Series([None] * k if values is None else list(values), dtype=object)
