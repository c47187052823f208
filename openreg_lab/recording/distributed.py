"""The collectives of ``torch.distributed`` runs on openreg, from one trace or from one per rank.

Each collective is a ``collective`` event (Note [Collective events] in ``csrc/trace/Collective.h``):
issued on the thread that called it, ended when it completed, and followed by a wait event when
someone blocked on its ``Work``. ``collectives`` makes one row of each; ``merge_ranks`` lines the
rows of several ranks' traces up on one clock (every rank of one machine reads the same monotonic
clock), collective by collective: who arrived last, how long the others waited for it, the bytes and
the bandwidth.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from openreg_lab.recording import events as _events

if TYPE_CHECKING:
    from openreg_lab.recording.events import Columns


class _RankTrace(Protocol):
    """What merge_ranks reads of a Trace (session.py imports this module, not the reverse)."""

    _t0: int

    def collectives(self) -> pd.DataFrame: ...


COLLECTIVE = _events.KINDS.index("collective")
BACKWARD = _events.KINDS.index("backward")
P2P = ("send", "recv")

COLUMNS = [
    "id", "parent", "issued_by", "issued_in", "name", "group", "seq", "rank", "peer", "group_size", "bytes",
    "dtype", "device", "thread", "start_ns", "dur_ns", "wait_ns",
]  # fmt: skip


def collectives(columns: Columns, t0: int) -> pd.DataFrame:
    """One row per collective of one trace (``COLUMNS``), ordered by start; times from ``t0``.

    ``peer`` is the other rank of a send or recv and the root of broadcast, reduce, gather and
    scatter (-1 otherwise); ``issued_by`` the name of the op or autograd node it ran inside;
    ``issued_in`` the autograd node it was issued in, however deep (DDP's bucket all-reduces:
    ``torch::autograd::AccumulateGrad``, whose post hook issues them; Note [A backward node ends with
    its hooks] in ``csrc/trace/OpObserver.cpp``), None outside backward and with ``ops="kernels"``;
    ``dur_ns`` runs from issue to completion (-1: it had not completed when the trace ended);
    ``wait_ns`` is the time callers blocked in ``wait()`` on it (0: nobody waited).
    """
    f = columns.fields
    strings = np.array(columns.strings, dtype=object)
    is_collective = f["kind"] == COLLECTIVE
    is_wait = (f["flags"] & _events.WAIT) != 0
    rows = np.flatnonzero(is_collective & ~is_wait)
    parent = f["parent"][rows]
    node = _nearest_backward(f["kind"], f["parent"], rows)
    frame = pd.DataFrame(
        {
            "id": f["id"][rows],
            "parent": parent,
            "issued_by": np.where(parent >= 0, strings[f["name"][np.maximum(parent, 0)]], None)
            if len(rows)
            else [],
            "issued_in": np.where(node >= 0, strings[f["name"][np.maximum(node, 0)]], None)
            if len(rows)
            else [],
            "name": strings[f["name"][rows]],
            "group": strings[f["dispatch"][rows]],
            "seq": f["seq"][rows],
            "rank": f["src"][rows].astype(np.int64),
            "peer": f["dst"][rows].astype(np.int64),
            "group_size": f["reserved"][rows].astype(np.int64),
            "bytes": f["bytes"][rows],
            "dtype": [_events.dtype_name(int(d)) for d in f["from_dtype"][rows]],
            "device": [_events.device_name(int(d)) for d in f["device"][rows]],
            "thread": f["thread"][rows],
            "start_ns": f["start_ns"][rows] - t0,
            "dur_ns": f["dur_ns"][rows],
        },
        columns=COLUMNS[:-1],
    )
    waits = np.flatnonzero(is_collective & is_wait)
    key = ["name", "group", "seq", "peer"]
    waited = pd.DataFrame(
        {
            "name": [str(n).removeprefix("wait ") for n in strings[f["name"][waits]]],
            "group": strings[f["dispatch"][waits]],
            "seq": f["seq"][waits],
            "peer": f["dst"][waits].astype(np.int64),
            "wait_ns": f["dur_ns"][waits],
        }
    )
    waited = waited.groupby(key, as_index=False)["wait_ns"].sum()
    frame = frame.merge(waited, on=key, how="left")
    frame["wait_ns"] = frame["wait_ns"].fillna(0).astype(np.int64)
    return frame.reset_index(drop=True)[COLUMNS]


def _nearest_backward(kind: np.ndarray, parent: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each event of ``rows``, the index of its nearest ``backward`` ancestor (-1: none)."""
    out = np.full(len(rows), -1, dtype=np.int64)
    up = parent[rows].astype(np.int64)
    todo = up >= 0
    while todo.any():
        hit = todo & (kind[np.maximum(up, 0)] == BACKWARD)
        out[hit] = up[hit]
        todo &= ~hit
        up = np.where(todo, parent[np.maximum(up, 0)], up)
        todo &= up >= 0
    return out


def merge_ranks(traces: Sequence[_RankTrace]) -> pd.DataFrame:
    """The collectives of one trace per rank, lined up: one row per collective and rank.

    Rows of one collective share ``key`` (its group and number; a send and the recv that meets it
    share one too). Times (``start_ns``, ``end_ns``) are on one clock, from the earliest trace's
    start. ``late_ns`` is how long after the first rank this rank arrived; the last to arrive has
    ``last`` set, and the others waited for it. ``gbytes_per_s`` is bytes over duration.
    """
    if not traces:
        raise ValueError("merge_ranks needs at least one trace (one per rank)")
    origin = min(t._t0 for t in traces)
    parts = []
    for index, t in enumerate(traces):
        part = t.collectives()
        part["start_ns"] = part["start_ns"] + (t._t0 - origin)
        world = part[part["group"] == "0"]
        part["trace"] = index
        part["global_rank"] = int(world["rank"].iloc[0]) if len(world) else index
        parts.append(part)
    frame = pd.concat(parts, ignore_index=True)
    p2p = frame["name"].isin(P2P)
    low = np.minimum(frame["rank"], frame["peer"])
    high = np.maximum(frame["rank"], frame["peer"])
    sender = np.where(frame["name"] == "send", frame["rank"], frame["peer"])
    frame["key"] = np.where(
        p2p,
        "p2p "
        + frame["group"]
        + " "
        + low.astype(str)
        + "-"
        + high.astype(str)
        + " from "
        + pd.Series(sender).astype(str)
        + " #"
        + frame["seq"].astype(str),
        frame["group"] + " #" + frame["seq"].astype(str),
    )
    frame["end_ns"] = np.where(frame["dur_ns"] >= 0, frame["start_ns"] + frame["dur_ns"], -1)
    first = frame.groupby("key")["start_ns"].transform("min")
    frame["late_ns"] = frame["start_ns"] - first
    frame["last"] = frame["start_ns"] == frame.groupby("key")["start_ns"].transform("max")
    frame["last"] &= frame.groupby("key")["start_ns"].transform("size") > 1
    dur = frame["dur_ns"].where(frame["dur_ns"] > 0)
    frame["gbytes_per_s"] = frame["bytes"] / dur
    frame = frame.sort_values(["start_ns", "global_rank"], kind="stable").reset_index(drop=True)
    return frame
