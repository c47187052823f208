"""One event in full (the details panel's data), a notebook cell's source lines, and the op call
that stands for a row of the op summary."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def details(events: pd.DataFrame, event_id: int) -> dict[str, Any]:
    """Everything the details panel shows about one event: what it is, how it was dispatched, its
    children (sub-ops, fallback, copies, casts, allocations) and, for a backward node or an op it
    ran, the forward op that made the node and that op's source line."""
    row = events.iloc[int(event_id)]
    assert int(row["id"]) == int(event_id), "events are indexed by id"
    # Column arrays, not a filtered frame: the panel is built once per op in a report.
    kids = np.flatnonzero(events["parent"].to_numpy() == int(event_id))
    col = {c: events[c].to_numpy() for c in ("id", "kind", "name", "kernel", "dur_ns", "bytes")}
    children = [
        {
            "id": int(col["id"][k]),
            "kind": col["kind"][k],
            "name": col["name"][k],
            "kernel": _text(col["kernel"][k]),
            "dur_ns": int(col["dur_ns"][k]),
            "bytes": int(col["bytes"][k]),
        }
        for k in kids
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
