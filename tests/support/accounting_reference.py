"""The wall-time accounting as it was before its fast path: the plain version, which
paints every event of the trace however far from the window. tests/recording/test_trace_accounting.py
checks that ``recording.accounting.account`` gives exactly what this gives."""

from __future__ import annotations

import numpy as np
import pandas as pd

from openreg_lab.recording import host as _host
from openreg_lab.recording.accounting import (
    _OP_KINDS,
    OP_PARTS,
    TOP,
    Named,
    WallTime,
    _attribute,
    _covered,
    _top_python,
)


def account_reference(
    events: pd.DataFrame,
    samples: _host.Samples | None,
    t0: int,
    thread_index: dict[int, int],
    start: int,
    end: int,
    label: str,
    sampled: bool,
) -> WallTime:
    """``accounting.account`` before its fast path: every event of the trace painted."""
    kind = events["kind"].to_numpy()
    name = events["name"].to_numpy()
    s0 = events["start_ns"].to_numpy().astype(np.int64)
    dur = events["dur_ns"].to_numpy().astype(np.int64)
    e0 = np.where(dur < 0, end, s0 + np.maximum(dur, 0))  # still running at the end: to the end
    inside = (s0 < end) & (e0 > start)
    is_wait = kind == "collective"
    is_wait[is_wait] = [isinstance(n, str) and n.startswith("wait ") for n in name[is_wait]]
    layers: list[tuple[str, np.ndarray]] = [
        ("compilation", inside & (kind == "compile")),
        ("waiting", inside & is_wait),
        ("CPU fallbacks", inside & (kind == "fallback")),
        ("autocast casts", inside & (kind == "cast")),
        ("copies", inside & (kind == "copy")),
        ("other ops", inside & np.isin(kind, _OP_KINDS)),
    ]
    iv = _host.intervals(samples, t0) if samples is not None else None
    thread = _step_thread_reference(events, iv, thread_index)
    mine = None
    if iv is not None and thread is not None:
        m = np.flatnonzero((iv.thread == thread) & (iv.start >= start) & (iv.start < end))
        mine = m
    bounds = [np.array([start, end], dtype=np.int64)]
    for _, mask in layers:
        bounds += [np.clip(s0[mask], start, end), np.clip(e0[mask], start, end)]
    if mine is not None and len(mine):
        bounds += [np.clip(iv.start[mine], start, end), np.clip(iv.end[mine], start, end)]
    edges = np.unique(np.concatenate(bounds))
    seg = np.diff(edges)
    label_of = np.full(len(seg), -1, dtype=np.int64)  # index into layers, then 6: sampled
    for i, (_, mask) in enumerate(layers):
        covered = _covered(edges, s0[mask], e0[mask])
        label_of[(label_of < 0) & covered] = i
    ops = {k: int(seg[label_of == i].sum()) for i, (k, _) in enumerate(layers) if k in OP_PARTS}
    parts = {
        "device ops": sum(ops.values()),
        "compilation": int(seg[label_of == 0].sum()),
        "host Python": 0,
        "waiting": int(seg[label_of == 1].sum()),
    }
    waits: dict[tuple[str, str, str], int] = {}
    for i in np.flatnonzero((label_of == 1) & (seg > 0)):  # collective waits, by their name
        hit = np.flatnonzero(layers[1][1] & (s0 <= edges[i]) & (e0 > edges[i]))
        k = (str(name[hit[0]]) if len(hit) else "collective", "", "collective")
        waits[k] = waits.get(k, 0) + int(seg[i])
    python: dict[tuple[str, str, int], dict[int, int]] = {}
    free = np.flatnonzero((label_of < 0) & (seg > 0))
    if mine is not None and len(mine) and samples is not None and len(free):
        _attribute(samples, iv, mine, edges, seg, free, parts, python, waits)
    parts["not sampled"] = int(seg.sum()) - sum(parts.values())
    return WallTime(
        label,
        int(end - start),
        parts,
        ops,
        python=_top_python(python),
        waiting=[Named(w, where, ns, k) for (w, where, k), ns in sorted(waits.items(), key=lambda x: -x[1])][
            :TOP
        ],
        sampled=sampled,
    )


def _step_thread_reference(
    events: pd.DataFrame, iv: _host.Intervals | None, thread_index: dict[int, int]
) -> int | None:
    if iv is None or not len(iv):
        return None
    steps_ = events.loc[events["kind"] == "step", "thread"]
    if len(steps_):
        os_of = {i: os_id for os_id, i in thread_index.items()}
        t = os_of.get(int(steps_.iloc[-1]))
        if t is not None and (iv.thread == t).any():
            return t
    ids, counts = np.unique(iv.thread, return_counts=True)
    return int(ids[np.argmax(counts)])
