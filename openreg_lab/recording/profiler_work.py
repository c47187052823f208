"""openreg's device work in torch.profiler's own trace: what ``csrc/trace/KinetoProfiler.cpp`` hands
Kineto when a ``torch.profiler.profile(activities=[..., ProfilerActivity.PrivateUse1])`` stops
(Note [openreg's work in torch.profiler's trace] there).

The work is ``device_work``'s, the computation of the lab's own Kineto export (Note [openreg's work
as Kineto's device activity] in ``kineto.py``): the same kernel stretches, names, streams, memcpys
and communication kernels, and the same ``deviceProperties``, ``openreg`` and ``distributedInfo``
metadata. The C++ side makes the activities and links each to the op torch.profiler recorded.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from openreg_lab.recording import _strings, distributed, kineto
from openreg_lab.recording import events as _events
from openreg_lab.recording.device_work import device_work
from openreg_lab.recording.frame import to_frame
from openreg_lab.recording.text import visible


def for_profiler(raw: dict[str, Any]) -> dict[str, Any]:
    """The device work of a Kineto session's events (``raw``: ``_C._trace_close``'s dict), as
    columns the C++ session reads, one value a kernel or memcpy (times on the recorder's clock).

    ``thread`` and ``position`` name the event that launched each (``events.merge_with_positions``);
    ``kernel`` and ``dispatch`` say how a kernel's op ran ("native", its dispatch path; "" for the rest);
    ``device_properties`` are JSON objects, ``metadata`` JSON values by key. ``distributedInfo`` is
    there only when no process group is initialized: torch.profiler writes its own otherwise.
    """
    count = _strings.interned_count()
    columns, _, position = _events.merge_with_positions(raw, _strings.strings[:count])
    frame = to_frame(columns, 0)
    work = device_work(frame, distributed.collectives(columns, 0))
    op = work["op"].to_numpy(dtype=np.int64)
    # How a kernel's op ran on openreg (native, generic) and its dispatch path, for the kernel's args.
    is_kernel = (work["cat"] == "kernel").to_numpy() & (frame["kind"].to_numpy(dtype=object)[op] == "op")
    kernel = np.where(is_kernel, frame["kernel"].to_numpy(dtype=object)[op], None)
    dispatch = np.where(is_kernel, frame["dispatch"].to_numpy(dtype=object)[op], None)
    devices = kineto.devices_of(frame, work)
    meta: dict[str, Any] = {"openreg": kineto.metadata(int(raw["dropped"]), int(raw["capacity"]), None)}
    if not _process_group():
        job = distributed.current_job()
        meta["distributedInfo"] = {
            "backend": "ogloo",
            "rank": 0 if job.rank is None else int(job.rank),
            "world_size": 1 if job.world_size is None else int(job.world_size),
        }
    return {
        "name": [visible(str(n)) for n in work["name"]],
        "kernel": ["" if k is None else str(k) for k in kernel],
        "dispatch": ["" if d is None else visible(str(d)) for d in dispatch],
        "memcpy": (work["cat"] == "gpu_memcpy").to_numpy(dtype=np.int64),
        "device": work["device"].to_numpy(dtype=np.int64),
        "stream": work["stream"].to_numpy(dtype=np.int64),
        "start_ns": work["start_ns"].to_numpy(dtype=np.int64),
        "end_ns": work["end_ns"].to_numpy(dtype=np.int64),
        "bytes": work["bytes"].to_numpy(dtype=np.int64),
        "thread": columns.fields["thread"][op].astype(np.int64),
        "position": position[op].astype(np.int64),
        "device_properties": [json.dumps(kineto.device_properties(d)) for d in devices],
        "metadata": {key: json.dumps(value, ensure_ascii=True) for key, value in meta.items()},
    }


def _process_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()
