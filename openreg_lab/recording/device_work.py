"""openreg's device work, as the Kineto export writes it (Note [openreg's work as Kineto's device
activity] in ``kineto.py``): kernel stretches of native ops, memcpys, communication kernels."""

from __future__ import annotations

import numpy as np
import pandas as pd

from openreg_lab.recording import analysis

COMPUTE_STREAM = 1
COLLECTIVE_STREAM = 2  # + the index of the collective's process group
_MEMCPY = {
    "H2D": "Memcpy HtoD (Host -> openreg)",
    "D2H": "Memcpy DtoH (openreg -> Host)",
    "D2D": "Memcpy DtoD (openreg -> openreg)",
}
WORK_COLUMNS = ["op", "name", "cat", "device", "stream", "start_ns", "end_ns", "bytes", "thread"]


def device_index(devices: pd.Series) -> np.ndarray:
    """Per event, its openreg device's index, -1 for the CPU or no device."""
    text = devices.to_numpy(dtype=object)
    out = np.full(len(text), -1, dtype=np.int64)
    for i, d in enumerate(text):
        if isinstance(d, str) and d.startswith("openreg:"):
            out[i] = int(d[8:])
    return out


def device_work(events: pd.DataFrame, collectives: pd.DataFrame | None = None) -> pd.DataFrame:
    """openreg's device work as the export writes it (Note [openreg's work as Kineto's device
    activity]): one row a kernel stretch, memcpy or collective (``WORK_COLUMNS``), by start.

    ``collectives`` (``Trace.collectives()``) adds a communication kernel per collective. ``op`` is
    the id of the event that launched the work (the op, the copy's nearest op, the op or autograd
    node that issued the collective), ``cat`` is ``kernel`` or ``gpu_memcpy``, times are in ns from
    the trace's start (``end_ns`` >= ``start_ns``).
    """
    n = len(events)
    kind = events["kind"].to_numpy(dtype=object)
    start = events["start_ns"].to_numpy().astype(np.int64)
    end = start + np.maximum(events["dur_ns"].to_numpy().astype(np.int64), 0)
    device = device_index(events["device"]) if n else np.zeros(0, dtype=np.int64)
    owner = analysis.nearest_op(events) if n else np.zeros(0, dtype=np.int64)
    kernel = events["kernel"].to_numpy(dtype=object)
    names = events["name"].to_numpy(dtype=object)
    thread = events["thread"].to_numpy().astype(np.int64)
    is_kernel_op = (kind == "op") & (device >= 0) & np.isin(kernel, ["native", "generic"])
    is_copy = kind == "copy"
    # The stretches of each kernel op: its span less its child ops' and its copies' spans.
    busy = np.flatnonzero(((kind == "op") | is_copy) & (owner >= 0))
    busy = busy[is_kernel_op[owner[busy]]]
    own = owner[busy]
    order = np.lexsort((start[busy], own))
    busy, own = busy[order], own[order]
    c_start = np.clip(start[busy], start[own], end[own])
    c_end = np.clip(end[busy], c_start, end[own])
    first = np.r_[True, own[1:] != own[:-1]] if len(own) else np.zeros(0, dtype=bool)
    last = np.r_[own[1:] != own[:-1], True] if len(own) else np.zeros(0, dtype=bool)
    gap_from = np.where(first, start[own], np.r_[np.int64(0), c_end[:-1]] if len(own) else c_end)
    # Inductor's generated kernels run no op (Note [Compiled code in the trace]): each is one kernel.
    generated = (kind == "compiled") & (device >= 0) & pd.notna(events["fused"].to_numpy(dtype=object))
    ops_alone = np.union1d(np.setdiff1d(np.flatnonzero(is_kernel_op), own), np.flatnonzero(generated))
    seg_op = np.concatenate([own, own[last], ops_alone])
    seg_start = np.concatenate([gap_from, c_end[last], start[ops_alone]])
    seg_end = np.concatenate([c_start, end[own[last]], end[ops_alone]])
    keep = seg_end > seg_start
    seg_op, seg_start, seg_end = seg_op[keep], seg_start[keep], seg_end[keep]
    parts = [
        pd.DataFrame(
            {
                "op": seg_op,
                "name": names[seg_op],
                "cat": "kernel",
                "device": device[seg_op],
                "stream": COMPUTE_STREAM,
                "start_ns": seg_start,
                "end_ns": seg_end,
                "bytes": 0,
                "thread": thread[seg_op],
            }
        )
    ]
    src = device_index(events["src"]) if n else device
    dst = device_index(events["dst"]) if n else device
    copies = np.flatnonzero(is_copy & ((src >= 0) | (dst >= 0)))
    parts.append(
        pd.DataFrame(
            {
                "op": np.where(owner[copies] >= 0, owner[copies], copies),
                "name": [_MEMCPY.get(str(x), f"Memcpy {x}") for x in names[copies]],
                "cat": "gpu_memcpy",
                "device": np.where(dst[copies] >= 0, dst[copies], src[copies]),
                "stream": COMPUTE_STREAM,
                "start_ns": start[copies],
                "end_ns": end[copies],
                "bytes": events["bytes"].to_numpy()[copies].astype(np.int64),
                "thread": thread[copies],
            }
        )
    )
    if collectives is not None:
        parts.append(_collective_work(collectives))
    out = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None
    if out is None:
        return pd.DataFrame(
            {c: pd.Series(dtype=object if c in ("name", "cat") else np.int64) for c in WORK_COLUMNS}
        )
    return out.sort_values(["start_ns", "end_ns"], kind="stable", ignore_index=True)[WORK_COLUMNS]


def _collective_work(collectives: pd.DataFrame) -> pd.DataFrame:
    """A communication kernel per collective on an openreg device (``Trace.collectives()``, waits
    apart), from its issue to its completion, on the stream of its process group."""
    on_device = collectives[collectives["device"].astype(str).str.startswith("openreg:")]
    groups = {g: i for i, g in enumerate(dict.fromkeys(on_device["group"].astype(str)))}
    start = on_device["start_ns"].to_numpy().astype(np.int64)
    parent = on_device["parent"].to_numpy().astype(np.int64)
    return pd.DataFrame(
        {
            "op": np.where(parent >= 0, parent, on_device["id"].to_numpy().astype(np.int64)),
            "name": [f"ncclKernel_{n} (ogloo)" for n in on_device["name"]],
            "cat": "kernel",
            "device": device_index(on_device["device"]),
            "stream": [COLLECTIVE_STREAM + groups[str(g)] for g in on_device["group"]],
            "start_ns": start,
            "end_ns": start + np.maximum(on_device["dur_ns"].to_numpy().astype(np.int64), 0),
            "bytes": on_device["bytes"].to_numpy().astype(np.int64),
            "thread": on_device["thread"].to_numpy().astype(np.int64),
        }
    )
