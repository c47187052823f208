"""What the memory snapshot's two sources (the history, ``snapshot.py``; a trace,
``trace_snapshot.py``) build alike: entries as PyTorch lists them, each entry's category, a
segment."""

from __future__ import annotations

from typing import Any

import numpy as np

from openreg_lab.recording._snapshot_pickle import ACTIONS, Entries, Stack

UNKNOWN = "unknown"
_LARGE = 1 << 20  # CUDA's segment_type: "large" from 1 MiB, as openreg's large pool


def expand(
    action: np.ndarray,
    address: np.ndarray,
    size: np.ndarray,
    time_us: np.ndarray,
    stack: np.ndarray,
    category: np.ndarray,
    skipped: frozenset[str] = frozenset(),
) -> Entries:
    """History actions as the snapshot's: a free is a free_requested then a free_completed."""
    code = np.array([0, 1, 3, 4, 5], dtype=np.int64)[action.astype(np.int64)]  # history -> ACTIONS
    times = np.where(code == 1, 2, 1)
    out = Entries(
        *(np.repeat(c, times) for c in (code, address, size, time_us, stack, category))  # type: ignore[arg-type]
    )
    halves = np.flatnonzero(out.action == 1)
    out.action[halves[1::2]] = 2  # the second of each pair completes the free
    dropped = [ACTIONS.index(a) for a in skipped if a in ("free_requested", "free_completed")]
    if dropped and len(dropped) < 2:  # both skipped: the recorder kept neither
        keep = out.action != dropped[0]
        out = Entries(
            *(c[keep] for c in (out.action, out.addr, out.size, out.time_us, out.stack, out.category))
        )
    return out


def entry_categories(
    is_alloc: np.ndarray,
    device: np.ndarray,
    address: np.ndarray,
    number: np.ndarray,
    found: dict[int, str],
    names: list[str],
) -> np.ndarray:
    """Per entry, the index in ``names`` of its allocation's category (0: unknown): an alloc's own
    (``found``, by ``number``), a free's that of the latest alloc at its address before it."""
    out = np.zeros(len(number), dtype=np.int64)
    if not found or not len(number):
        return out
    index = {name: i for i, name in enumerate(names)}
    mine = np.array([index.get(found.get(int(k), UNKNOWN), 0) for k in number], dtype=np.int64)
    owner = latest_alloc(is_alloc, device.astype(np.int64), address.astype(np.int64))
    return np.where(owner >= 0, mine[np.maximum(owner, 0)], 0)


def latest_alloc(is_alloc: np.ndarray, device: np.ndarray, address: np.ndarray) -> np.ndarray:
    """Per entry (in order), the position of the latest alloc at its device and address up to it."""
    n = len(is_alloc)
    order = np.lexsort((np.arange(n), address, device))
    d, a = device[order], address[order]
    group = np.cumsum(np.r_[True, (d[1:] != d[:-1]) | (a[1:] != a[:-1])]) - 1
    value = np.where(is_alloc[order], order, -1) + 1  # 0: none yet
    best = np.maximum.accumulate(group * (n + 1) + value) - group * (n + 1) - 1
    out = np.empty(n, dtype=np.int64)
    out[order] = best
    return out


def segment(
    device: int, address: int, size: int, requested: int, allocated: bool, stack: int, category: str
) -> dict[str, Any]:
    """One segment of one block, as CUDA's snapshot lists it."""
    used = size if allocated else 0
    frames = Stack(int(stack) if allocated else 0)
    block = {
        "address": int(address),
        "size": int(size),
        "requested_size": int(requested) if allocated else 0,
        "state": "active_allocated" if allocated else "inactive",
        "frames": frames,
        "category": category,
    }
    return {
        "device": int(device),
        "address": int(address),
        "total_size": int(size),
        "allocated_size": int(used),
        "active_size": int(used),
        "requested_size": int(requested) if allocated else 0,
        "stream": 0,
        "segment_type": "large" if size >= _LARGE else "small",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": frames,
        "blocks": [block],
    }
