"""A trace's memory events as PyTorch's memory snapshot (``snapshot.snapshot_of``).

The entries are the trace's alloc, free, segment and oom events in order (Note [Memory events] in
``csrc/trace/Event.h``). The segments are what those events leave at the trace's end: per block
address, its last event says whether the block is held by a tensor (an alloc), cached (a free,
or a segment taken) or gone (a segment given back); a block the trace never saw (allocated
before it and untouched) is not listed. A trace holds no Python stacks (the memory history
does): an entry's frames are the ops around it, innermost first (the op that allocated, the op
that called it, ...: the fallback, backward node or compiled graph it ran in too), each with the
user's line that called it (``trace(stack=True)``), else ``??``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from openreg_lab import _C
from openreg_lab.recording import events, history
from openreg_lab.recording._snapshot_parts import UNKNOWN, entry_categories, expand, segment
from openreg_lab.recording._snapshot_pickle import Parts

if TYPE_CHECKING:
    from openreg_lab.recording.session import Trace

ALLOC, FREE, SEGMENT, OOM = (events.KINDS.index(k) for k in ("alloc", "free", "segment", "oom"))


def parts(trace: Trace, found: dict[int, str]) -> Parts:
    """The snapshot of ``trace``; ``found``: categories by alloc event id (``snapshot.categories``)."""
    c = trace.columns
    f = c.fields
    kind = f["kind"]
    rows = np.flatnonzero(np.isin(kind, (ALLOC, FREE, SEGMENT, OOM)))
    k = kind[rows]
    address = events.addresses(f)[rows]
    if ((k == ALLOC) & (address <= 0)).any():
        raise ValueError(
            "this trace's allocations do not name their blocks (a trace file of format version 1, "
            "from before memory events did): record the trace again to make a memory snapshot of it"
        )
    strings = c.strings
    given_back = np.array([strings[int(n)] == "segment_free" for n in f["name"][rows]], dtype=bool)
    action = np.select(
        [k == ALLOC, k == FREE, (k == SEGMENT) & ~given_back, (k == SEGMENT) & given_back],
        [history.ALLOC, history.FREE, history.SEGMENT_ALLOC, history.SEGMENT_FREE],
        history.OOM,
    )
    address = np.where(k == OOM, 0, address)  # the trace does not know what was free
    device = f["device"][rows].astype(np.int64)
    frames, stacks, stack = _frames(f, rows, strings)
    names = [UNKNOWN, *sorted(set(found.values()) - {UNKNOWN})]
    category = entry_categories(k == ALLOC, device, address, f["id"][rows], found, names)
    size = f["bytes"][rows]
    count = int(device.max()) + 1 if len(device) else 1
    traces = []
    for d in range(count):
        on = device == d
        traces.append(expand(action[on], address[on].astype(np.uint64), size[on],
                                       f["start_ns"][rows][on] // 1000, stack[on], category[on]))  # fmt: skip
    segments = _segments(action, device, address, size, stack, category, names)
    return Parts(frames, stacks, names, segments, traces, {"dropped_entries": trace.dropped})


def _frames(
    f: dict[str, np.ndarray], rows: np.ndarray, strings: list[str]
) -> tuple[list[tuple[str, int, str]], list[list[int]], np.ndarray]:
    """The frames, the stacks and each event's stack (0: none) of the events ``rows``: the ops (or
    fallback, backward node, compiled graph) around each, innermost first, each with the user's
    line that called it."""
    parent = f["parent"]
    source = events.inherit(f["source"].astype(np.int64), parent)
    levels = []  # per depth: (source, name) of that ancestor of each event, 0 past the root
    at = parent[rows].astype(np.int64)
    while (at >= 0).any():
        inside = at >= 0
        here = np.maximum(at, 0)
        levels.append(np.where(inside, source[here], 0))
        levels.append(np.where(inside, f["name"][here].astype(np.int64), 0))
        at = np.where(inside, parent[here], -1)
    if not levels:
        return [("", 0, "")], [[]], np.zeros(len(rows), dtype=np.int64)
    chains, inverse = np.unique(np.stack(levels, axis=1), axis=0, return_inverse=True)
    frames: list[tuple[str, int, str]] = [("", 0, "")]
    frame_of: dict[tuple[int, int], int] = {}
    stacks: list[list[int]] = []
    for chain in chains.tolist():
        stack = []
        for s, name in zip(chain[0::2], chain[1::2], strict=True):
            if s == 0 and name == 0:
                break
            if (s, name) not in frame_of:
                frame_of[(s, name)] = len(frames)
                file, line = _file_line(strings[s]) if s else ("??", 0)
                frames.append((file, line, strings[name] if name else "??"))
            stack.append(frame_of[(s, name)])
        stacks.append(stack)
    return frames, stacks, inverse.reshape(-1)


def _file_line(source: str) -> tuple[str, int]:
    """``"train.py:12"`` -> ``("train.py", 12)``."""
    head, _, tail = source.rpartition(":")
    return (head, int(tail)) if head and tail.isdigit() else (source, 0)


def _segments(
    action: np.ndarray,
    device: np.ndarray,
    address: np.ndarray,
    size: np.ndarray,
    stack: np.ndarray,
    category: np.ndarray,
    names: list[str],
) -> list[dict[str, object]]:
    """The blocks the events leave at the end: per (device, address), its last event's state."""
    rows = np.flatnonzero(action != history.OOM)
    order = rows[np.lexsort((rows, address[rows], device[rows]))]
    d, a = device[order], address[order]
    last = order[np.r_[(d[1:] != d[:-1]) | (a[1:] != a[:-1]), True]] if len(order) else order
    out = []
    rounding = int(_C._memory_round_bytes)
    for i in sorted(last.tolist(), key=lambda i: (int(device[i]), int(address[i]))):
        what = int(action[i])
        if what == history.SEGMENT_FREE:
            continue
        held = what == history.ALLOC
        block = int(size[i]) if what == history.SEGMENT_ALLOC else -(-int(size[i]) // rounding) * rounding
        out.append(
            segment(
                int(device[i]),
                int(address[i]),
                block,
                int(size[i]),
                held,
                int(stack[i]),
                names[int(category[i])] if held else UNKNOWN,
            )
        )
    return out
