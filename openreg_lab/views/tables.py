"""The tables the views draw, computed from ``Trace.events`` (pandas only: testable without a browser).

Every function takes the events table (and plain values) and returns a DataFrame or a dict; the
widgets, the static HTML and the report draw what these return and nothing else.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import analysis

KERNEL_KINDS = ("native", "fallback", "composite", "generic")
OP_COLUMNS = [
    "name",
    "device",
    "calls",
    "native",
    "fallback",
    "composite",
    "generic",
    "kernel",
    "total_ns",
    "self_ns",
    "bytes_copied",
    "path",
]
#: The Sankey's terminal nodes: what finally ran a call.
RAN = {k: f"ran {k}" for k in (*KERNEL_KINDS, "unknown")}
#: The Sankey's first node: every call, flowing into the dispatch key that received it.
ALL_CALLS = "all calls"


def op_table(events: pd.DataFrame) -> pd.DataFrame:
    """One row per op name and device: calls by kernel kind, the main ``kernel``, time, bytes copied
    (by the copies the op caused) and its most frequent dispatch ``path``; by total time."""
    is_op = (events["kind"] == "op").to_numpy()
    if not is_op.any():
        return pd.DataFrame(columns=OP_COLUMNS)
    self_ns = analysis.self_time(events)[is_op]
    is_copy = (events["kind"] == "copy").to_numpy()
    owner = analysis.nearest_op(events)[is_copy]
    copied = np.zeros(len(events), dtype=np.int64)
    np.add.at(copied, owner[owner >= 0], events["bytes"].to_numpy()[is_copy][owner >= 0])
    # Group with integer codes (factorize once per column): pandas' string groupby is the slow part.
    name_code, names = pd.factorize(events["name"].to_numpy()[is_op])
    dev_code, devs = pd.factorize(events["device"].to_numpy()[is_op], use_na_sentinel=False)
    kern_code, kerns = pd.factorize(events["kernel"].to_numpy()[is_op], use_na_sentinel=False)
    path_code, paths = pd.factorize(events["dispatch"].to_numpy()[is_op], use_na_sentinel=False)
    group = np.unique(name_code * len(devs) + dev_code, return_inverse=True)[1]
    ngroups = int(group.max()) + 1
    dur = np.maximum(events["dur_ns"].to_numpy()[is_op].astype(np.int64), 0)
    out = pd.DataFrame(
        {
            "calls": np.bincount(group, minlength=ngroups),
            "total_ns": np.bincount(group, weights=dur, minlength=ngroups).astype(np.int64),
            "self_ns": np.bincount(group, weights=self_ns, minlength=ngroups).astype(np.int64),
            "bytes_copied": np.bincount(group, weights=copied[is_op], minlength=ngroups).astype(np.int64),
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
    return out.sort_values(["total_ns", "name"], ascending=[False, True], ignore_index=True)[OP_COLUMNS]


def _mode(group: np.ndarray, code: np.ndarray, ngroups: int) -> np.ndarray:
    """Per group, the most frequent ``code``."""
    pair, counts = np.unique(group.astype(np.int64) * (int(code.max()) + 1) + code, return_counts=True)
    g, c = pair // (int(code.max()) + 1), pair % (int(code.max()) + 1)
    order = np.lexsort((-counts, g))
    first = order[np.r_[True, g[order][1:] != g[order][:-1]]]
    out = np.zeros(ngroups, dtype=np.int64)
    out[g[first]] = c[first]
    return out


def filter_ops(
    table: pd.DataFrame,
    *,
    name: str = "",
    kernel: str = "",
    device: str = "",
    flow: tuple[str, str] | None = None,
) -> pd.DataFrame:
    """The rows of ``op_table`` whose name contains ``name`` (case-insensitive; ``"=aten::mm"`` for
    exactly that name), that ran ``kernel`` at least once, ran on ``device``, and (``flow``) whose
    path passes along that Sankey link."""
    keep = np.ones(len(table), dtype=bool)
    if name.startswith("="):
        keep &= (table["name"] == name[1:]).to_numpy()
    elif name:
        keep &= table["name"].str.contains(name, case=False, regex=False).to_numpy()
    if kernel:
        keep &= (table[kernel] > 0).to_numpy() if kernel in table else np.zeros(len(table), bool)
    if device:
        keep &= (table["device"] == device).to_numpy()
    if flow is not None:
        keep &= np.array([_on_link(p, k, flow) for p, k in zip(table["path"], table["kernel"], strict=True)])
    return table[keep].reset_index(drop=True)


def _steps(path: str, kernel: str) -> list[str]:
    keys = [k for k in path.split(" > ") if k] if path else []
    return [*keys, RAN.get(kernel, RAN["unknown"])]


def _on_link(path: str, kernel: str, flow: tuple[str, str]) -> bool:
    steps = [ALL_CALLS, *_steps(path, kernel)]
    return any((a, b) == tuple(flow) for a, b in itertools.pairwise(steps))


def dispatch_flows(events: pd.DataFrame) -> pd.DataFrame:
    """The dispatch flow of every op call: links ``source`` -> ``target`` from ``all calls`` to the key
    that received the call, between consecutive dispatch keys of its path, and from its last key to
    what ran (``ran native`` ...), with ``calls`` and ``time_ns`` (the calls' total time). Each call
    leaves ``all calls`` once and crosses exactly one link into a ``ran`` node."""
    cols = ["source", "target", "calls", "time_ns"]
    is_op = (events["kind"] == "op").to_numpy()
    if not is_op.any():
        return pd.DataFrame(columns=cols)
    path_code, paths = pd.factorize(events["dispatch"].to_numpy()[is_op], use_na_sentinel=False)
    kern_code, kerns = pd.factorize(events["kernel"].to_numpy()[is_op], use_na_sentinel=False)
    dur = np.maximum(events["dur_ns"].to_numpy()[is_op].astype(np.int64), 0)
    pair, group = np.unique(path_code * len(kerns) + kern_code, return_inverse=True)
    per_path = pd.DataFrame(
        {
            "path": [p if isinstance(p, str) else "" for p in paths[pair // len(kerns)]],
            "kernel": [k if isinstance(k, str) else "unknown" for k in kerns[pair % len(kerns)]],
            "calls": np.bincount(group, minlength=len(pair)),
            "time_ns": np.bincount(group, weights=dur, minlength=len(pair)).astype(np.int64),
        }
    )
    links: dict[tuple[str, str], list[int]] = {}
    for row in per_path.itertuples(index=False):
        steps = [ALL_CALLS, *_steps(row.path, row.kernel)]
        for a, b in itertools.pairwise(steps):
            acc = links.setdefault((a, b), [0, 0])
            acc[0] += int(row.calls)
            acc[1] += int(row.time_ns)
    out = pd.DataFrame([(a, b, c, t) for (a, b), (c, t) in links.items()], columns=cols)
    return out.sort_values(["calls", "source", "target"], ascending=[False, True, True], ignore_index=True)


def sankey_nodes(flows: pd.DataFrame) -> list[str]:
    """The Sankey's nodes: dispatch keys in order of first appearance as a source, then what ran."""
    keys = list(dict.fromkeys([*flows["source"], *flows["target"]]))
    ran = [n for n in RAN.values() if n in keys]
    return [k for k in keys if k not in ran] + ran


def node_color(node: str) -> str:
    """A Sankey node's colour: the kernel kind's for ``ran ...`` nodes, grey for dispatch keys."""
    for kind, label in RAN.items():
        if node == label:
            return theme.kernel_color(kind)
    return "#5c677d"


def fallback_costs(events: pd.DataFrame) -> pd.DataFrame:
    """``Trace.fallbacks()`` with the three parts of each bar and its share of the traced time."""
    fb = analysis.fallbacks(events).copy()
    span = _span(events)
    fb["sources"] = [[cell_source(x) for x in s] for s in fb["sources"]]
    fb["share"] = fb["total_ns"] / span if span else 0.0
    return fb


def savings_sentence(fb: pd.DataFrame) -> str:
    """In words, what implementing the costliest fallback (of ``fallback_costs``) natively would save."""
    if fb.empty:
        return "No op fell back to the CPU: every call ran on openreg."
    top = fb.iloc[0]
    copies = int(top["copy_to_cpu_ns"] + top["copy_back_ns"])
    moved = int(top["bytes_to_cpu"] + top["bytes_back"])
    where = f" (called from {top['sources'][0]})" if len(top["sources"]) else ""
    return (
        f"Implementing {top['name']} natively would save up to {theme.format_ns(top['total_ns'])} "
        f"({top['share']:.1%} of the traced time) over its {int(top['calls'])} calls{where}: "
        f"{theme.format_ns(copies)} of copies moving {theme.format_bytes(moved)}, and the CPU compute of "
        f"{theme.format_ns(top['cpu_ns'])} would run on the device instead."
    )


def _span(events: pd.DataFrame) -> int:
    if events.empty:
        return 0
    end = events["start_ns"] + events["dur_ns"].clip(lower=0)
    return int(end.max() - events["start_ns"].min())


def copy_timeline(events: pd.DataFrame, buckets: int = 100) -> pd.DataFrame:
    """Bytes copied per time bucket and direction: columns ``t_ns`` (bucket start), H2D, D2H, D2D."""
    cp = events[events["kind"] == "copy"]
    span = max(_span(events), 1)
    width = span / buckets
    edges = np.arange(buckets) * width
    out = pd.DataFrame({"t_ns": edges})
    for d in theme.COPY_COLORS:
        mine = cp[cp["name"] == d]
        b = np.minimum((mine["start_ns"].to_numpy() // width).astype(np.int64), buckets - 1)
        out[d] = np.bincount(b, weights=mine["bytes"].to_numpy(), minlength=buckets).astype(np.int64)
    return out


def cast_table(events: pd.DataFrame) -> pd.DataFrame:
    """Autocast casts by op and dtype pair: ``casts``, ``bytes``, ``cache_hits`` (weight-cache hits,
    nothing copied) and ``time_ns``; by bytes."""
    cols = ["op", "from_dtype", "to_dtype", "casts", "bytes", "cache_hits", "time_ns"]
    ca = analysis.casts(events)
    if ca.empty:
        return pd.DataFrame(columns=cols)
    out = (
        ca.assign(dur=ca["dur_ns"].clip(lower=0))
        .groupby(["op", "from_dtype", "to_dtype"], sort=False)
        .agg(
            casts=("op", "size"),
            bytes=("bytes", "sum"),
            cache_hits=("cache_hit", "sum"),
            time_ns=("dur", "sum"),
        )
        .reset_index()
    )
    out["cache_hits"] = out["cache_hits"].astype(np.int64)
    return out.sort_values(["bytes", "op"], ascending=[False, True], ignore_index=True)[cols]


def memory_peaks(events: pd.DataFrame) -> pd.DataFrame:
    """Per device: the peak of allocated bytes during the trace, when it happened and the op that
    allocated at the peak (its nearest enclosing op)."""
    cols = ["device", "peak_bytes", "t_ns", "op", "event"]
    mem = events[events["kind"].isin(("alloc", "free"))]
    if mem.empty:
        return pd.DataFrame(columns=cols)
    owner = analysis.nearest_op(events)
    names = events["name"].to_numpy()
    rows = []
    for dev, grp in mem.groupby("device", sort=True):
        i = int(grp["total"].to_numpy().argmax())
        row = grp.iloc[i]
        op = int(owner[int(row["id"])])
        rows.append(
            (dev, int(row["total"]), int(row["start_ns"]), names[op] if op >= 0 else None, int(row["id"]))
        )
    return pd.DataFrame(rows, columns=cols)


def details(events: pd.DataFrame, event_id: int) -> dict[str, Any]:
    """Everything the details panel shows about one event: what it is, how it was dispatched, its
    children (sub-ops, fallback, copies, casts, allocations) and, for a backward node or an op it
    ran, the forward op that made the node and that op's source line."""
    row = events.iloc[int(event_id)]
    assert int(row["id"]) == int(event_id), "events are indexed by id"
    kids = events[events["parent"] == int(event_id)]
    children = [
        {
            "id": int(k.id),
            "kind": k.kind,
            "name": k.name,
            "kernel": _text(k.kernel),
            "dur_ns": int(k.dur_ns),
            "bytes": int(k.bytes),
        }
        for k in kids.itertuples(index=False)
    ]
    out: dict[str, Any] = {
        "id": int(row["id"]),
        "kind": row["kind"],
        "name": row["name"],
        "kernel": _text(row["kernel"]),
        "path": [k for k in (_text(row["dispatch"]) or "").split(" > ") if k],
        "dur_ns": int(row["dur_ns"]),
        "start_ns": int(row["start_ns"]),
        "device": _text(row["device"]),
        "bytes": int(row["bytes"]),
        "shapes": row["shapes"] if isinstance(row["shapes"], list) else None,
        "dtypes": row["dtypes"] if isinstance(row["dtypes"], list) else None,
        "source": cell_source(_text(row["source"])),
        "children": children,
        "forward": None,
        # torch.compile: the aten ops a generated kernel fused, Dynamo's reason for a (re)compile
        "fused": [op for op in (_text(row.get("fused")) or "").split(", ") if op],
        "reason": _text(row.get("reason")),
    }
    fwd = int(row["forward"])
    if fwd >= 0:
        f = events.iloc[fwd]
        out["forward"] = {"id": fwd, "name": f["name"], "source": cell_source(_text(f["source"]))}
    return out


def cell_source(source: str | None) -> str | None:
    """``file:line`` as the user knows it: a notebook cell's temporary file becomes ``In[7], line 3``
    (IPython keeps the map from those files to execution counts); anything else is unchanged."""
    if not source or "ipykernel_" not in source:
        return source
    path, _, line = source.rpartition(":")
    try:
        from IPython import get_ipython

        shell = get_ipython()
        number = shell.compile._filename_map.get(path) if shell is not None else None
    except (ImportError, AttributeError):
        number = None
    return f"In[{number}], line {line}" if number is not None else source


def _text(v: Any) -> str | None:
    """A string cell of the events table, None for a missing value (None or NaN)."""
    return v if isinstance(v, str) else None


def representative(events: pd.DataFrame, name: str, device: str | None = None) -> int:
    """The id of the longest op call named ``name`` (on ``device``), shown when a table row is picked."""
    ops = events[(events["kind"] == "op") & (events["name"] == name)]
    if device not in (None, "", "-"):
        ops = ops[ops["device"] == device]
    if ops.empty:
        raise KeyError(f"no op named {name!r} in this trace")
    return int(ops.loc[ops["dur_ns"].idxmax(), "id"])
