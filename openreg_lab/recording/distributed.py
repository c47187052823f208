"""The collectives of ``torch.distributed`` runs on openreg, from one trace or from one per rank.

Each collective is a ``collective`` event (Note [Collective events] in ``csrc/trace/Collective.h``):
issued on the thread that called it, ended when it completed, and followed by a wait event when
someone blocked on its ``Work``. ``collectives`` makes one row of each; ``merge_ranks`` lines the
rows of several ranks' traces up on one clock (every rank of one machine reads the same monotonic
clock), collective by collective: who arrived last, how long the others waited for it, the bytes and
the bandwidth.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
import torch.distributed as dist

from openreg_lab.device import _distributed
from openreg_lab.recording import events as _events

if TYPE_CHECKING:
    from openreg_lab.recording.events import Columns


# Note [A run id for every trace]
# Merging is exact only if a trace says which job and rank recorded it. Each trace records, when it
# ends, ``Job``: its rank and world size (from torch.distributed while a group is up, else from the
# world group openreg's backend made, else from a launcher's RANK / WORLD_SIZE) and a run id shared
# by every rank of one job: the first rank to reach the job's store sets it (``compare_set`` from
# empty, device/_distributed.py), the others read it, so no rank waits for another. A process that
# joined no group has its own id (TORCHELASTIC_RUN_ID is no help: torchrun's default is "none").
# ``check_one_job`` refuses traces of different runs, one rank twice, a trace without a rank and
# ranks of different world sizes; ranks are labelled by their recorded rank, never by file order.
_PROCESS_RUN_ID = f"process-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class Job:
    """Which job and rank recorded a trace (Note [A run id for every trace])."""

    run_id: str
    rank: int | None = None
    world_size: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The trace file header's ``job``."""
        return {"run_id": self.run_id, "rank": self.rank, "world_size": self.world_size}


def current_job() -> Job:
    """This process's job now (Note [A run id for every trace])."""
    job = _distributed.JOB
    live = dist.is_available() and dist.is_initialized()
    if live and not job:  # a world group of another backend (gloo): agree through its store
        try:
            _distributed.remember_job(
                dist.distributed_c10d._get_default_store(), dist.get_rank(), dist.get_world_size()
            )
        except (RuntimeError, ValueError):
            pass
    if live:
        rank, world = dist.get_rank(), dist.get_world_size()
    elif job:
        rank, world = job["rank"], job["world_size"]
    else:
        rank, world = _launcher_rank()
    return Job(str(job.get("run_id", _PROCESS_RUN_ID)), rank, world)


def _launcher_rank() -> tuple[int | None, int | None]:
    """A launcher's ``RANK`` and ``WORLD_SIZE`` (None, None without both as integers)."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None, None  # (read without raising: a trace closes in tens of microseconds)
    try:
        return int(rank), int(world)
    except ValueError:
        return None, None


class _RankTrace(Protocol):
    """What merging reads of a Trace (session.py imports this module, not the reverse)."""

    _t0: int
    job: Job | None

    @property
    def events(self) -> pd.DataFrame: ...

    def collectives(self) -> pd.DataFrame: ...


def check_one_job(traces: Sequence[_RankTrace], names: Sequence[str]) -> None:
    """Refuse, in one line naming the files (``names``) and what differs, traces that are not the
    ranks of one job: a trace without a rank, different runs, different world sizes, a rank twice."""
    if len(traces) != len(names):
        raise ValueError("check_one_job: one name per trace")
    for t, n in zip(traces, names, strict=True):
        if t.job is None or t.job.rank is None:
            raise ValueError(
                f"{n} records no rank: it was not recorded by a rank of a torch.distributed job (or by "
                "an openreg-lab from before run ids); merge only the traces of one job's ranks"
            )
    jobs = [t.job for t in traces]
    assert all(j is not None for j in jobs)
    first = jobs[0]
    assert first is not None
    for j, n in zip(jobs[1:], names[1:], strict=True):
        assert j is not None
        if j.run_id != first.run_id:
            raise ValueError(
                f"{names[0]} and {n} are of different runs (run ids {_short_id(first.run_id)} and "
                f"{_short_id(j.run_id)}): merge the traces of one job's ranks"
            )
        if j.world_size != first.world_size:
            raise ValueError(
                f"{names[0]} and {n} disagree on the world size ({first.world_size} and {j.world_size}) "
                "within one run: these traces are damaged or edited"
            )
    seen: dict[int, str] = {}
    for j, n in zip(jobs, names, strict=True):
        assert j is not None and j.rank is not None
        if j.rank in seen:
            raise ValueError(
                f"{seen[j.rank]} and {n} are both rank {j.rank} of run {_short_id(first.run_id)}: "
                "give each rank's trace once"
            )
        seen[j.rank] = n


def _short_id(run_id: str) -> str:
    return run_id if len(run_id) <= 16 else run_id[:13] + "..."


COLLECTIVE = _events.KINDS.index("collective")
BACKWARD = _events.KINDS.index("backward")
P2P = ("send", "recv")

COLUMNS = [
    "id", "parent", "issued_by", "issued_in", "name", "group", "seq", "rank", "peer", "group_size", "bytes",
    "dtype", "device", "thread", "start_ns", "dur_ns", "wait_ns",
]  # fmt: skip


_TEXT = ("issued_by", "issued_in", "name", "group", "dtype", "device")


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
    if not len(rows):  # no collective: an empty table of the same columns
        return pd.DataFrame({c: pd.Series(dtype=object if c in _TEXT else np.int64) for c in COLUMNS})
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
        part["trace"] = index
        part["global_rank"] = _rank_of(t, index)
        parts.append(part)
    frame = pd.concat(parts, ignore_index=True)
    if frame.empty:
        return frame.assign(key=pd.Series(dtype=object), end_ns=pd.Series(dtype=np.int64),
                            late_ns=pd.Series(dtype=np.int64), last=pd.Series(dtype=bool),
                            gbytes_per_s=pd.Series(dtype=float))  # fmt: skip
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


#: The columns of ``job_collectives`` (``RanksView.collectives()``).
JOB_COLLECTIVE_COLUMNS = [
    "key", "name", "group", "issued_by", "issued_in", "bytes", "ranks", "start_ns", "dur_ns", "last_rank",
    "late_ns", "gbytes_per_s",
]  # fmt: skip


def job_collectives(merged: pd.DataFrame) -> pd.DataFrame:
    """One row per collective across ranks of a ``merge_ranks`` table (a send and its recv are one,
    ``send/recv``): name, group, bytes, ranks, start, the slowest rank's duration, the last rank to
    arrive and how late (``late_ns``), the bandwidth; in order of start (``JOB_COLLECTIVE_COLUMNS``)."""
    t = merged
    if t.empty:
        return pd.DataFrame(columns=JOB_COLLECTIVE_COLUMNS)
    g = t.groupby("key", sort=False)
    out = pd.DataFrame(
        {
            "name": g["name"].agg(lambda names: "/".join(sorted(set(names), reverse=True))),
            "group": g["group"].first(),
            "issued_by": g["issued_by"].first(),
            "issued_in": g["issued_in"].first(),
            "bytes": g["bytes"].max(),
            "ranks": g["global_rank"].nunique(),
            "start_ns": g["start_ns"].min(),
            "dur_ns": g["dur_ns"].max(),
            "late_ns": g["late_ns"].max(),
        }
    ).reset_index()
    last = t.loc[t["last"], ["key", "global_rank"]].rename(columns={"global_rank": "last_rank"})
    out = out.merge(last.drop_duplicates("key"), on="key", how="left")
    out["gbytes_per_s"] = out["bytes"] / out["dur_ns"].where(out["dur_ns"] > 0)
    return out.sort_values("start_ns").reset_index(drop=True)[JOB_COLLECTIVE_COLUMNS]


def _rank_of(t: _RankTrace, index: int) -> int:
    """The rank that recorded ``t`` (Note [A run id for every trace]); a trace of an older
    openreg-lab without one: its rank in the world group's collectives, else its position."""
    job = getattr(t, "job", None)
    if job is not None and job.rank is not None:
        return int(job.rank)
    c = t.collectives()
    world = c[c["group"] == "0"]
    return int(world["rank"].iloc[0]) if len(world) else index
