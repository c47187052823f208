"""Dispatch flows: which dispatch keys the op calls went through and what finally ran them.

``dispatch_flows`` gives the links of the Sankey the views draw; ``filter_ops`` narrows the op
summary (``analysis.summary``) the way the dashboard's table filters do.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from openreg_lab.recording.analysis import KERNEL_KINDS
from openreg_lab.recording.kinds import Kinds, unique_keys

#: The Sankey's terminal nodes: what finally ran a call.
RAN = {k: f"ran {k}" for k in (*KERNEL_KINDS, "unknown")}
#: The Sankey's first node: every call, flowing into the dispatch key that received it.
ALL_CALLS = "all calls"


def filter_ops(
    table: pd.DataFrame,
    *,
    name: str = "",
    kernel: str = "",
    device: str = "",
    flow: tuple[str, str] | None = None,
) -> pd.DataFrame:
    """The rows of ``analysis.summary`` whose name contains ``name`` (case-insensitive; ``"=aten::mm"`` for
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


def dispatch_flows(events: pd.DataFrame, *, kinds: Kinds | None = None) -> pd.DataFrame:
    """The dispatch flow of every op call: links ``source`` -> ``target`` from ``all calls`` to the key
    that received the call, between consecutive dispatch keys of its path, and from its last key to
    what ran (``ran native`` ...), with ``calls`` and ``time_ns`` (the calls' total time). Each call
    leaves ``all calls`` once and crosses exactly one link into a ``ran`` node. ``kinds``: Note
    [Kinds read once]."""
    cols = ["source", "target", "calls", "time_ns"]
    kinds = Kinds.of(events, kinds)
    is_op = kinds.mask("op")
    if not is_op.any():
        return pd.DataFrame(columns=cols)
    path_code, paths = kinds.strings(events, "dispatch", is_op)
    kern_code, kerns = kinds.strings(events, "kernel", is_op)
    dur = np.maximum(events["dur_ns"].to_numpy()[is_op].astype(np.int64), 0)
    pair, group = unique_keys(path_code * len(kerns) + kern_code)
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
