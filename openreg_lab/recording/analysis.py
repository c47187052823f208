"""Tables computed from a trace's events. Each takes ``Trace.events`` and returns a DataFrame.

Time columns are nanoseconds. An event still running when its trace ended has ``dur_ns == -1`` and
counts as 0 here. ``summary`` is the one per-op aggregate: ``Trace.summary()``, the dashboard, the
report and the command line all show it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from openreg_lab.recording.kinds import Kinds, unique_keys

KERNEL_KINDS = ("native", "fallback", "composite", "generic")

#: The columns of ``summary``: the one per-op aggregate every table, view, report and command shows.
SUMMARY_COLUMNS = [
    "name", "device", "calls", "native", "fallback", "composite", "generic", "kernel", "total_ns",
    "self_ns", "bytes_copied", "path",
]  # fmt: skip


def nearest_op(events: pd.DataFrame, *, kinds: Kinds | None = None) -> np.ndarray:
    """For each event, the id of the closest enclosing op event (-1 if none). ``kinds``: the
    events' kinds when the caller read them already (Note [Kinds read once]), as for every table here."""
    parent = events["parent"].to_numpy()
    is_op = Kinds.of(events, kinds).mask("op")
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


# Note [Self time]
# An op's self time is its duration minus the durations of its child ops: the ops whose nearest
# enclosing op it is. Casts, fallbacks and copies under an op are the op's own time, not
# children: an autocast cast event is recorded beside the aten::to op that made the cast (both
# are children of aten::linear, and they overlap), so subtracting every child event would count
# the cast twice and make aten::linear's self time negative. Child ops of one op never overlap
# (one thread runs them one after the other), so self time plus the children's total time is the
# op's total time, and self time is never negative. An op still running when the trace ended has
# no duration (-1, counted as 0) and self time 0. Backward events are not ops: an op inside an autograd
# node (a post hook's too, Note [A backward node ends with its hooks] in csrc/trace/OpObserver.cpp) is a
# child of its nearest enclosing op, if any, and the node's duration is nobody's self time.
def self_time(
    events: pd.DataFrame, *, kinds: Kinds | None = None, owner: np.ndarray | None = None
) -> np.ndarray:
    """Each op's duration minus its child ops' (Note [Self time]); other events: their duration.
    ``owner``: ``nearest_op(events)`` when the caller has it."""
    kinds = Kinds.of(events, kinds)
    dur = np.maximum(events["dur_ns"].to_numpy().astype(np.int64), 0)
    owner = nearest_op(events, kinds=kinds) if owner is None else owner
    is_child_op = kinds.mask("op") & (owner >= 0)
    children = np.zeros(len(events), dtype=np.int64)
    np.add.at(children, owner[is_child_op], dur[is_child_op])
    return np.maximum(dur - children, 0)


def summary(events: pd.DataFrame, *, kinds: Kinds | None = None) -> pd.DataFrame:
    """One row per op name and device (``SUMMARY_COLUMNS``), by total time: calls, how many ran
    native / fallback / composite / generic, the ``kernel`` kind most calls ran, ``total_ns``,
    ``self_ns`` (Note [Self time]), ``bytes_copied`` and the most frequent dispatch ``path``.

    ``bytes_copied`` counts the copies an op caused (those whose nearest enclosing op it is), so a
    fallen-back op is charged for moving its arguments to the CPU and its results back. ``device``
    is ``"-"`` for an op with no device.
    """
    kinds = Kinds.of(events, kinds)
    is_op = kinds.mask("op")
    if not is_op.any():
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    nearest = nearest_op(events, kinds=kinds)
    self_ns = self_time(events, kinds=kinds, owner=nearest)[is_op]
    is_copy = kinds.mask("copy")
    owner = nearest[is_copy]
    copied = np.zeros(len(events), dtype=np.int64)
    np.add.at(copied, owner[owner >= 0], events["bytes"].to_numpy()[is_copy][owner >= 0])
    # Group with integer codes, each column hashed once for every table (Note [Kinds read once]):
    # pandas' string groupby is the slow part.
    name_code, names = kinds.strings(events, "name", is_op)
    dev_code, devs = kinds.strings(events, "device", is_op)
    kern_code, kerns = kinds.strings(events, "kernel", is_op)
    path_code, paths = kinds.strings(events, "dispatch", is_op)
    group = unique_keys(name_code * len(devs) + dev_code)[1]
    ngroups = int(group.max()) + 1
    dur = np.maximum(events["dur_ns"].to_numpy()[is_op].astype(np.int64), 0)
    out = pd.DataFrame(
        {
            "calls": np.bincount(group, minlength=ngroups),
            "total_ns": _sum_by(group, dur, ngroups),
            "self_ns": _sum_by(group, self_ns, ngroups),
            "bytes_copied": _sum_by(group, copied[is_op], ngroups),
        }
    )
    kern_names = [k if isinstance(k, str) else "unknown" for k in kerns]
    per_kernel = np.zeros((ngroups, len(kerns)), dtype=np.int64)
    np.add.at(per_kernel, (group, kern_code), 1)
    for k in KERNEL_KINDS:
        out[k] = per_kernel[:, kern_names.index(k)] if k in kern_names else 0
    out["kernel"] = np.array(kern_names, dtype=object)[per_kernel.argmax(axis=1)]
    out["path"] = [p if isinstance(p, str) else "" for p in paths[_mode(group, path_code, ngroups)]]
    rep = np.zeros(ngroups, dtype=np.int64)
    rep[group] = np.arange(len(group))  # any member of each group names it
    out["name"] = names[name_code[rep]]
    out["device"] = [d if isinstance(d, str) else "-" for d in devs[dev_code[rep]]]
    return out.sort_values(["total_ns", "name"], ascending=[False, True], ignore_index=True)[SUMMARY_COLUMNS]


def _sum_by(group: np.ndarray, values: np.ndarray, ngroups: int) -> np.ndarray:
    """Per group, the exact int64 sum of ``values`` (bincount's float weights would round)."""
    out = np.zeros(ngroups, dtype=np.int64)
    np.add.at(out, group, values.astype(np.int64))
    return out


def _mode(group: np.ndarray, code: np.ndarray, ngroups: int) -> np.ndarray:
    """Per group, the most frequent ``code``."""
    pair, _, counts = unique_keys(group.astype(np.int64) * (int(code.max()) + 1) + code, counts=True)
    g, c = pair // (int(code.max()) + 1), pair % (int(code.max()) + 1)
    order = np.lexsort((-counts, g))
    first = order[np.r_[True, g[order][1:] != g[order][:-1]]]
    out = np.zeros(ngroups, dtype=np.int64)
    out[g[first]] = c[first]
    return out


def span(events: pd.DataFrame) -> int:
    """The traced time: from the first event's start to the last one's end (ns; 0 for no events)."""
    if events.empty:
        return 0
    start = events["start_ns"].to_numpy()
    end = start + np.maximum(events["dur_ns"].to_numpy(), 0)
    return int(end.max() - start.min())


def fallbacks(events: pd.DataFrame, *, kinds: Kinds | None = None) -> pd.DataFrame:
    """Ops that ran on the CPU, ranked by time spent in the fallback including copies.

    Columns: ``name``, ``calls``, ``total_ns`` (the fallback's time: copies plus CPU compute),
    ``copy_to_cpu_ns``/``bytes_to_cpu`` (device to host), ``cpu_ns`` (the CPU kernel),
    ``copy_back_ns``/``bytes_back`` (host to device), ``op_ns`` (the whole op call), and
    ``sources``: the user code lines that led to these calls (with ``trace(stack=True)``).
    ``kinds``: the events' kinds when the caller read them already (Note [Kinds read once]).
    """
    cols = ["name", "calls", "total_ns", "copy_to_cpu_ns", "cpu_ns", "copy_back_ns", "bytes_to_cpu",
            "bytes_back", "op_ns", "sources"]  # fmt: skip
    kinds = Kinds.of(events, kinds)
    fb = events.iloc[np.flatnonzero(kinds.mask("fallback"))]
    if fb.empty:
        return pd.DataFrame(columns=cols)
    ids, parent = events["id"].to_numpy(), events["parent"].to_numpy()
    cp = np.flatnonzero(kinds.mask("copy"))
    copies = events.iloc[cp[np.isin(parent[cp], fb["id"].to_numpy())]]
    copies = copies.assign(dur_ns=copies["dur_ns"].clip(lower=0))  # -1: still running, counts as 0
    by_parent = copies.groupby(["parent", "name"])[["dur_ns", "bytes"]].sum().unstack("name", fill_value=0)

    def part(col: str, direction: str) -> pd.Series:
        if (col, direction) in by_parent.columns:
            return fb["id"].map(by_parent[(col, direction)]).fillna(0).astype(np.int64)
        return pd.Series(0, index=fb.index, dtype=np.int64)

    ops = np.flatnonzero(np.isin(ids, fb["parent"].to_numpy()))  # the ops that fell back, by id
    op_dur = pd.Series(events["dur_ns"].to_numpy()[ops], index=ids[ops]).clip(lower=0)
    op_ns = fb["parent"].map(op_dur).fillna(0).astype(np.int64)
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
