"""Tables computed from a trace's events. Each takes ``Trace.events`` and returns a DataFrame.

Time columns are nanoseconds. "Self" time is an event's duration minus that of its direct children.
An event still running when its trace ended has ``dur_ns == -1`` and counts as 0 here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

_EMPTY_SUMMARY = [
    "name", "calls", "native", "fallback", "composite", "generic", "total_ns", "self_ns", "bytes_copied",
]  # fmt: skip


def nearest_op(events: pd.DataFrame) -> np.ndarray:
    """For each event, the id of the closest enclosing op event (-1 if none)."""
    parent = events["parent"].to_numpy()
    is_op = (events["kind"] == "op").to_numpy()
    out = np.where((parent >= 0) & is_op[np.maximum(parent, 0)], parent, -1)
    todo = (out < 0) & (parent >= 0)
    up = parent.copy()
    while todo.any():
        up = np.where(todo, parent[np.maximum(up, 0)], up)
        todo &= up >= 0
        hit = todo & is_op[np.maximum(up, 0)]
        out[hit] = up[hit]
        todo &= ~hit
    return out


def self_time(events: pd.DataFrame) -> np.ndarray:
    """Each event's duration minus its direct children's (but for collectives: they run on after
    the op that issued them returns, Note [Collective events])."""
    dur = np.maximum(events["dur_ns"].to_numpy().astype(np.int64), 0)
    parent = events["parent"].to_numpy()
    children = np.zeros(len(events), dtype=np.int64)
    has = (parent >= 0) & (events["kind"].to_numpy() != "collective")
    np.add.at(children, parent[has], dur[has])
    return dur - children


def summary(events: pd.DataFrame) -> pd.DataFrame:
    """One row per op name: calls, how many ran native / fallback / composite / generic, time, bytes
    copied.

    ``bytes_copied`` counts the copies an op caused (those whose nearest enclosing op it is), so a
    fallen-back op is charged for moving its arguments to the CPU and its results back.
    """
    ops = events[events["kind"] == "op"]
    if ops.empty:
        return pd.DataFrame(columns=_EMPTY_SUMMARY)
    self_ns = pd.Series(self_time(events), index=events.index)
    copies = events[events["kind"] == "copy"]
    owner = pd.Series(nearest_op(events), index=events.index)[copies.index]
    copied = copies["bytes"].groupby(owner.to_numpy()).sum()
    frame = pd.DataFrame(
        {
            "name": ops["name"],
            "native": ops["kernel"] == "native",
            "fallback": ops["kernel"] == "fallback",
            "composite": ops["kernel"] == "composite",
            "generic": ops["kernel"] == "generic",
            "total_ns": ops["dur_ns"].clip(lower=0),
            "self_ns": self_ns[ops.index],
            "bytes_copied": ops["id"].map(copied).fillna(0).astype(np.int64),
        }
    )
    out = frame.groupby("name", sort=False).agg(
        calls=("name", "size"),
        native=("native", "sum"),
        fallback=("fallback", "sum"),
        composite=("composite", "sum"),
        generic=("generic", "sum"),
        total_ns=("total_ns", "sum"),
        self_ns=("self_ns", "sum"),
        bytes_copied=("bytes_copied", "sum"),
    )
    return out.sort_values("total_ns", ascending=False).reset_index()


def fallbacks(events: pd.DataFrame) -> pd.DataFrame:
    """Ops that ran on the CPU, ranked by time spent in the fallback including copies.

    Columns: ``name``, ``calls``, ``total_ns`` (the fallback's time: copies plus CPU compute),
    ``copy_to_cpu_ns``/``bytes_to_cpu`` (device to host), ``cpu_ns`` (the CPU kernel),
    ``copy_back_ns``/``bytes_back`` (host to device), ``op_ns`` (the whole op call), and
    ``sources``: the user code lines that led to these calls (with ``trace(stack=True)``).
    """
    cols = ["name", "calls", "total_ns", "copy_to_cpu_ns", "cpu_ns", "copy_back_ns", "bytes_to_cpu",
            "bytes_back", "op_ns", "sources"]  # fmt: skip
    fb = events[events["kind"] == "fallback"]
    if fb.empty:
        return pd.DataFrame(columns=cols)
    copies = events[(events["kind"] == "copy") & events["parent"].isin(fb["id"])]
    copies = copies.assign(dur_ns=copies["dur_ns"].clip(lower=0))  # -1: still running, counts as 0
    by_parent = copies.groupby(["parent", "name"])[["dur_ns", "bytes"]].sum().unstack("name", fill_value=0)

    def part(col: str, direction: str) -> pd.Series:
        if (col, direction) in by_parent.columns:
            return fb["id"].map(by_parent[(col, direction)]).fillna(0).astype(np.int64)
        return pd.Series(0, index=fb.index, dtype=np.int64)

    ids = events.set_index("id")
    op_ns = fb["parent"].map(ids["dur_ns"].clip(lower=0)).fillna(0).astype(np.int64)
    rows = pd.DataFrame(
        {
            "name": fb["name"],
            "total_ns": fb["dur_ns"].clip(lower=0),
            "copy_to_cpu_ns": part("dur_ns", "D2H"),
            "copy_back_ns": part("dur_ns", "H2D") + part("dur_ns", "D2D"),
            "bytes_to_cpu": part("bytes", "D2H"),
            "bytes_back": part("bytes", "H2D") + part("bytes", "D2D"),
            "op_ns": op_ns,
            "source": fb["source"],
        }
    )
    rows["cpu_ns"] = (rows["total_ns"] - rows["copy_to_cpu_ns"] - rows["copy_back_ns"]).clip(lower=0)
    out = rows.groupby("name", sort=False).agg(
        calls=("name", "size"),
        total_ns=("total_ns", "sum"),
        copy_to_cpu_ns=("copy_to_cpu_ns", "sum"),
        cpu_ns=("cpu_ns", "sum"),
        copy_back_ns=("copy_back_ns", "sum"),
        bytes_to_cpu=("bytes_to_cpu", "sum"),
        bytes_back=("bytes_back", "sum"),
        op_ns=("op_ns", "sum"),
        sources=("source", lambda s: sorted({x for x in s if isinstance(x, str)})),
    )
    return out.sort_values("total_ns", ascending=False).reset_index()[cols]


def copies(events: pd.DataFrame) -> pd.DataFrame:
    """Every copy: ``direction`` (H2D, D2H, D2D), ``bytes``, ``dur_ns``, ``src``, ``dst``, and the
    ``op`` (name and ``op_id``) that caused it, with ``in_fallback`` when the fallback made it."""
    cols = ["id", "direction", "bytes", "dur_ns", "src", "dst", "op", "op_id", "in_fallback", "source",
            "start_ns"]  # fmt: skip
    owner = pd.Series(nearest_op(events), index=events.index)
    cp = events[events["kind"] == "copy"]
    if cp.empty:
        return pd.DataFrame(columns=cols)
    names = events.set_index("id")["name"]
    kinds = events.set_index("id")["kind"]
    op_id = owner[cp.index]
    out = pd.DataFrame(
        {
            "id": cp["id"],
            "direction": cp["name"],
            "bytes": cp["bytes"],
            "dur_ns": cp["dur_ns"],
            "src": cp["src"],
            "dst": cp["dst"],
            "op": op_id.map(names).where(op_id >= 0, None),
            "op_id": op_id,
            "in_fallback": cp["parent"].map(kinds).eq("fallback"),
            "source": cp["source"],
            "start_ns": cp["start_ns"],
        }
    )
    return out.reset_index(drop=True)[cols]


def casts(events: pd.DataFrame) -> pd.DataFrame:
    """Every autocast cast: ``op``, ``argument``, ``from_dtype``, ``to_dtype``, ``bytes``,
    ``cache_hit`` (served by the weight cache: nothing copied), ``dur_ns`` and ``device``."""
    cols = ["id", "op", "argument", "from_dtype", "to_dtype", "bytes", "cache_hit", "dur_ns", "device",
            "source"]  # fmt: skip
    ca = events[events["kind"] == "cast"]
    if ca.empty:
        return pd.DataFrame(columns=cols)
    out = ca.rename(columns={"name": "op"})
    return out.reset_index(drop=True)[cols]
