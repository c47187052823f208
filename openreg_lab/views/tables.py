"""The tables the views draw, computed from ``Trace.events`` (pandas only: testable without a browser).

Every function takes the events table (and plain values) and returns a DataFrame or a dict; the
widgets, the static HTML and the report draw what these return and nothing else.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import analysis

KERNEL_KINDS = ("native", "fallback", "composite", "generic")
OP_COLUMNS = [
    "name", "device", "calls", "native", "fallback", "composite", "generic", "kernel", "total_ns",
    "self_ns", "bytes_copied", "path",
]  # fmt: skip
#: The Sankey's terminal nodes: what finally ran a call.
RAN = {k: f"ran {k}" for k in (*KERNEL_KINDS, "unknown")}


def op_table(events: pd.DataFrame) -> pd.DataFrame:
    """One row per op name and device: calls by kernel kind, the main ``kernel``, time, bytes copied
    (by the copies the op caused) and its most frequent dispatch ``path``; by total time."""
    ops = events[events["kind"] == "op"]
    if ops.empty:
        return pd.DataFrame(columns=OP_COLUMNS)
    self_ns = analysis.self_time(events)[ops.index]
    copies = events[events["kind"] == "copy"]
    owner = analysis.nearest_op(events)[copies.index]
    copied = np.zeros(len(events), dtype=np.int64)
    np.add.at(copied, owner[owner >= 0], copies["bytes"].to_numpy()[owner >= 0])
    frame = pd.DataFrame(
        {
            "name": ops["name"],
            "device": ops["device"].fillna("-"),
            "kernel": ops["kernel"].fillna("unknown"),
            "total_ns": ops["dur_ns"].clip(lower=0),
            "self_ns": self_ns,
            "bytes_copied": copied[ops.index],
            "path": ops["dispatch"].fillna(""),
        }
    )
    for k in KERNEL_KINDS:
        frame[k] = (frame["kernel"] == k).astype(np.int64)
    keys = ["name", "device"]
    out = frame.groupby(keys, sort=False).agg(
        calls=("name", "size"),
        **{k: (k, "sum") for k in KERNEL_KINDS},
        total_ns=("total_ns", "sum"),
        self_ns=("self_ns", "sum"),
        bytes_copied=("bytes_copied", "sum"),
    )
    out["kernel"] = frame.groupby(keys, sort=False)["kernel"].agg(_most_common)
    out["path"] = frame.groupby(keys, sort=False)["path"].agg(_most_common)
    out = out.reset_index()
    return out.sort_values(["total_ns", "name"], ascending=[False, True], ignore_index=True)[OP_COLUMNS]


def _most_common(s: pd.Series) -> str:
    return str(s.value_counts().index[0])


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
    steps = _steps(path, kernel)
    return any((a, b) == flow for a, b in zip(steps, steps[1:], strict=False)) or (
        flow[0] == flow[1] == steps[0]
    )


def dispatch_flows(events: pd.DataFrame) -> pd.DataFrame:
    """The dispatch flow of every op call: links ``source`` -> ``target`` between consecutive dispatch
    keys of a call's path, and from its last key to what ran (``ran native`` ...), with ``calls`` and
    ``time_ns`` (the calls' total time). Each call crosses exactly one link into a ``ran`` node."""
    ops = events[events["kind"] == "op"]
    cols = ["source", "target", "calls", "time_ns"]
    if ops.empty:
        return pd.DataFrame(columns=cols)
    per_path = (
        pd.DataFrame(
            {
                "path": ops["dispatch"].fillna(""),
                "kernel": ops["kernel"].fillna("unknown"),
                "dur": ops["dur_ns"].clip(lower=0),
            }
        )
        .groupby(["path", "kernel"], sort=False)
        .agg(calls=("dur", "size"), time_ns=("dur", "sum"))
        .reset_index()
    )
    links: dict[tuple[str, str], list[int]] = {}
    for row in per_path.itertuples(index=False):
        steps = _steps(row.path, row.kernel)
        if len(steps) == 1:  # no dispatch key recorded: the call enters at what ran
            steps = ["(no key)", *steps]
        for a, b in zip(steps, steps[1:], strict=False):
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
    fb = analysis.fallbacks(events)
    span = _span(events)
    fb = fb.copy()
    fb["share"] = fb["total_ns"] / span if span else 0.0
    return fb


def savings_sentence(events: pd.DataFrame) -> str:
    """In words, what implementing the costliest fallback natively would save."""
    fb = fallback_costs(events)
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
        rows.append((dev, int(row["total"]), int(row["start_ns"]), names[op] if op >= 0 else None, int(row["id"])))
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
        "source": _text(row["source"]),
        "children": children,
        "forward": None,
    }
    fwd = int(row["forward"])
    if fwd >= 0:
        f = events.iloc[fwd]
        out["forward"] = {"id": fwd, "name": f["name"], "source": _text(f["source"])}
    return out


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
