"""The Kineto export: a trace in the JSON schema of torch.profiler's traces, for Holistic Trace Analysis.

``Trace.to_kineto(path)`` writes it; ``openreg-lab run --kineto DIR`` writes one file per rank.
Holistic Trace Analysis (HTA), and any tool written for torch.profiler's traces, reads it as it
reads a CUDA job's: the host's ops, openreg's device work as kernels on a stream, copies as
memcpys, collectives as communication kernels, ``ProfilerStep#N`` spans and the rank.

Note [openreg's work as Kineto's device activity]
openreg computes on the host, inside the op that asked for the work: there is no queue, and a
kernel's time is the time its op spends in its own code. So the device's work is:
* a kernel per stretch of a native or generic op's self time (Note [Self time] in analysis.py) on
  an openreg device: the op's span less its child ops and the copies it made, one kernel event a
  stretch (an op that allocates its output first has two: before and after the allocation). The
  stretches of one op share its name; composite ops (they only call other ops) and fallbacks (the
  CPU computes them) run no kernel;
* a kernel per call of a kernel Inductor generated (a ``compiled`` event with its fused ops);
* a memcpy per copy to, from or within an openreg device (``Memcpy HtoD``, ``DtoH``, ``DtoD``);
* a communication kernel per collective, from its issue to its completion, on a stream of its
  process group.
Compute kernels and copies are on stream 1 of their device (HTA reads stream 0 as "not a device
event"), collectives on stream 2 + the index of their group. Each has a correlation id, shared
with a launch event on the thread of the op that asked for it (a zero-length ``cuda_runtime``
event at the work's start) and with the ``ac2g`` flow from that launch to the work; both carry
the op's ``External id``. HTA knows kernels and launches by CUDA's names only: a communication
kernel is one whose name matches ``^nccl.*Kernel``, a memory kernel one starting ``Memcpy``, and
its launch statistics read launches named ``cudaLaunchKernel`` and ``cudaMemcpyAsync``; so the
export uses those names (a collective is ``ncclKernel_<name> (ogloo)``), and says openreg in the
device's properties and the process names.
Times are integer microseconds of the monotonic clock every process of a machine reads (so ranks
line up), each start and end rounded to the nearest microsecond (rounding keeps nesting and the
order of a stream's work; a float time would be rounded by HTA, start up and end down, a
systematic loss of up to 2 us a kernel). The totals HTA computes agree with the lab's to within
the rounding: under 1 us a kernel, in either direction.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
from collections import namedtuple
from typing import Any

import numpy as np
import pandas as pd

from openreg_lab.recording import atomic, steps
from openreg_lab.recording.device_work import WORK_COLUMNS, device_work
from openreg_lab.recording.device_work import device_index as _device_index
from openreg_lab.recording.text import visible

#: File name endings HTA reads (a ``.gz`` file is written gzip-compressed).
SUFFIXES = (".json", ".gz")
#: Autocast casts overlap the aten::to op beside them: they get a track of their own (as in chrome.py).
CAST_TID = 1_000_001
DEVICE_TYPE_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, as Kineto's memory events name it


def check_path(path: str | os.PathLike[str]) -> None:
    """Refuse a file name HTA would not read (it reads ``.json`` and ``.gz`` files only); a
    character device or a FIFO (``/dev/stdout``) is written whatever its name."""
    name = os.fspath(path)
    if name.lower().endswith(SUFFIXES):
        return
    try:
        mode = os.stat(name).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            return
    except (OSError, ValueError):
        pass
    raise ValueError(
        f"a Kineto trace's file name ends with .json or .json.gz (Holistic Trace Analysis reads no "
        f"other): got {name!r}; e.g. {os.path.splitext(os.path.basename(name))[0] or 'trace'}.json"
    )


def write(
    path: str | os.PathLike[str],
    events: pd.DataFrame,
    *,
    threads: dict[int, int],
    t0: int,
    collectives: pd.DataFrame | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    dropped: int = 0,
    capacity: int | None = None,
    skipped: str | None = None,
) -> None:
    """Write ``events`` (``Trace.events``) as a Kineto trace (torch.profiler's JSON schema) at ``path``,
    whole or not at all (Note [Where an output may go]); a name ending ``.gz`` is gzip-compressed.

    ``threads`` maps the trace's thread indices to OS thread ids, ``t0`` is the trace's start on the
    monotonic clock, ``collectives`` (``Trace.collectives()``) adds the communication kernels,
    ``rank`` and ``world_size`` go to ``distributedInfo`` (rank 0 of 1 when None). ``dropped`` events
    (of a trace full at ``capacity``) are said in the file's ``openreg`` metadata, as is ``skipped``.
    """
    check_path(path)
    pid = os.getpid()
    work = device_work(events, collectives)
    devices = devices_of(events, work)
    head: dict[str, Any] = {
        "schemaVersion": 1,
        "distributedInfo": {
            "backend": "ogloo",
            "rank": 0 if rank is None else int(rank),
            "world_size": 1 if world_size is None else int(world_size),
        },
        "deviceProperties": [device_properties(d) for d in devices],
        "openreg": metadata(dropped, capacity, skipped),
        "displayTimeUnit": "ms",
        "traceName": visible(os.path.basename(os.fspath(path))),
    }
    # One encoding of the whole list (the C encoder, started once); the header first, a key a line:
    # HTA finds the rank in the first line that names one.
    encode = json.JSONEncoder(ensure_ascii=True, allow_nan=False).encode
    text = "{\n" + "".join(f"  {json.dumps(k)}: {encode(v)},\n" for k, v in head.items())
    text += '  "traceEvents": ' + encode(_events_of(events, work, threads, t0, pid, devices)) + "\n}\n"
    if os.fspath(path).lower().endswith(".gz"):
        with atomic.replacing(path, "wb") as f:  # Note [Where an output may go]
            f.write(gzip.compress(text.encode("ascii"), mtime=0))
    else:
        with atomic.replacing(path, "w", encoding="ascii") as f:  # Note [Where an output may go]
            f.write(text)


def devices_of(events: pd.DataFrame, work: pd.DataFrame) -> list[int]:
    """The openreg devices of a trace's events and device work (``device_work``), by index."""
    return sorted(set(work["device"].tolist()) | set(_device_index(events["device"]).tolist()) - {-1})


def metadata(dropped: int, capacity: int | None, skipped: str | None) -> dict[str, Any]:
    """The file's ``openreg`` metadata: what the trace holds and what it lost."""
    out: dict[str, Any] = {
        "dropped_events": int(dropped),
        "capacity": None if capacity is None else int(capacity),
    }
    if dropped:
        out["warning"] = (
            f"{int(dropped):,} events were dropped: the trace holds at most {int(capacity or 0):,}; the "
            "totals miss them. Trace again with a larger capacity"
        )
    if skipped:
        out["steps"] = visible(skipped)
    return out


def device_properties(device: int) -> dict[str, Any]:
    """An openreg device's entry of ``deviceProperties``: its memory is the host's."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    return {"id": device, "name": "openreg (simulated on the host)", "totalGlobalMem": int(memory)}


def _us(ns: np.ndarray | int) -> Any:
    """Monotonic ns to the nearest integer microsecond (Note [openreg's work as Kineto's device activity])."""
    return (np.asarray(ns, dtype=np.int64) + 500) // 1000


def _events_of(
    events: pd.DataFrame, work: pd.DataFrame, threads: dict[int, int], t0: int, pid: int, devices: list[int]
) -> list[dict[str, Any]]:
    """The ``traceEvents``: processes and threads named, the host's events, the steps, the device's
    work with its launches and flows."""
    out: list[dict[str, Any]] = [
        {
            "name": "process_name",
            "ph": "M",
            "ts": 0,
            "pid": pid,
            "tid": 0,
            "args": {"name": "python (openreg-lab)"},
        }
    ]
    for thread in sorted(threads):
        out.append(_meta("thread_name", pid, int(threads[thread]), f"openreg thread {thread}"))
    if (events["kind"] == "cast").any():
        out.append(_meta("thread_name", pid, CAST_TID, "autocast casts"))
    for d in devices:
        out.append(
            {"name": "process_name", "ph": "M", "ts": 0, "pid": d, "tid": 0, "args": {"name": f"openreg {d}"}}
        )
        out.append(
            {
                "name": "process_labels",
                "ph": "M",
                "ts": 0,
                "pid": d,
                "tid": 0,
                "args": {"labels": f"openreg:{d}"},
            }
        )
        for stream in sorted(set(work.loc[work["device"] == d, "stream"].tolist())):
            out.append(_meta("thread_name", d, int(stream), f"stream {stream}"))
    tid_of = {int(i): int(os_id) for i, os_id in threads.items()}
    start = _us(t0 + events["start_ns"].to_numpy().astype(np.int64))
    end = _us(
        t0 + events["start_ns"].to_numpy().astype(np.int64) + np.maximum(events["dur_ns"].to_numpy(), 0)
    )
    shown: dict[str, str] = {}  # each distinct string escaped once (visible), for millions of events

    def text(value: str) -> str:
        out = shown.get(value)
        if out is None:
            out = shown[value] = visible(value)
        return out

    # Plain lists, zipped: pandas' row iteration costs more than the export itself.
    columns = [events[c].to_numpy(dtype=object).tolist() if events[c].dtype == object else events[c].tolist()
               for c in _ROW_FIELDS]  # fmt: skip
    for i, values in enumerate(zip(*columns, strict=True)):
        row = _Row(*values)
        tid = tid_of.get(int(row.thread), int(row.thread))
        ts = int(start[i])
        if row.kind in ("alloc", "free"):
            sign = 1 if row.kind == "alloc" else -1
            out.append(
                {
                    "name": "[memory]",
                    "cat": "cpu_instant_event",
                    "ph": "i",
                    "s": "t",
                    "ts": ts,
                    "pid": pid,
                    "tid": tid,
                    "args": {
                        "Device Type": DEVICE_TYPE_PRIVATEUSE1
                        if isinstance(row.device, str) and row.device.startswith("openreg")
                        else 0,
                        "Device Id": _device_id(row.device),
                        "Addr": int(row.address),
                        "Bytes": sign * int(row.bytes),
                        "Total Allocated": int(row.total),
                    },
                }
            )
            continue
        if row.kind in ("segment", "step", "copy") or (
            row.kind == "collective" and not str(row.name).startswith("wait ")
        ):
            continue  # the allocator's reserve; steps: ProfilerStep spans; copies, collectives: device work
        if row.kind in ("mark", "oom"):
            name = f"out of memory: {row.bytes} bytes asked" if row.kind == "oom" else row.name
            out.append(
                {
                    "name": text(str(name)),
                    "cat": row.kind,
                    "ph": "i",
                    "s": "t",
                    "ts": ts,
                    "pid": pid,
                    "tid": tid,
                }
            )
            continue
        cat = {"module": "python_function", "cast": "cast"}.get(row.kind, "cpu_op")
        if row.kind == "cast":
            tid = CAST_TID
        args: dict[str, Any] = {"External id": int(row.id) + 1, "Ev Idx": int(row.id)}
        if row.seq >= 0:
            args["Sequence number"] = int(row.seq)
        if isinstance(row.shapes, list):
            args["Input Dims"] = row.shapes
            args["Input type"] = [text(str(d)) for d in row.dtypes]
        for key in _STRING_ARGS:
            value = getattr(row, key)
            if isinstance(value, str):
                args[key] = text(value)
        if row.dur_ns < 0:
            args["still running"] = True
        out.append(
            {
                "ph": "X",
                "cat": cat,
                "name": text(str(row.name)),
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": int(end[i] - start[i]),
                "args": args,
            }
        )
    out += _step_spans(events, t0, pid, tid_of.get(0, 0))
    out += _work_events(work, t0, pid, tid_of)
    return out


_STRING_ARGS = ("kernel", "dispatch", "device", "source", "argument", "fused", "graph", "reason")
_ROW_FIELDS = ("id", "kind", "name", "thread", "dur_ns", "bytes", "seq", "shapes", "dtypes", "total",
               "address", *_STRING_ARGS)  # fmt: skip
_Row = namedtuple("_Row", _ROW_FIELDS)
_WorkRow = namedtuple("_WorkRow", WORK_COLUMNS)


def _device_id(device: object) -> int:
    if isinstance(device, str) and device.startswith("openreg:"):
        return int(device[8:])
    return -1


def _step_spans(events: pd.DataFrame, t0: int, pid: int, tid: int) -> list[dict[str, Any]]:
    """A ``ProfilerStep#N`` span a complete step of the lab's (``steps.table``)."""
    table = steps.table(events)
    out = []
    for row in table.itertuples(index=False):
        if not row.complete:
            continue
        ts, end = _us(t0 + int(row.start_ns)), _us(t0 + int(row.start_ns) + int(row.dur_ns))
        out.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{int(row.step)}",
                "pid": pid,
                "tid": tid,
                "ts": int(ts),
                "dur": int(end - ts),
                "args": {"External id": 0},
            }
        )
    return out


def _work_events(work: pd.DataFrame, t0: int, pid: int, tid_of: dict[int, int]) -> list[dict[str, Any]]:
    """The device's work (``device_work``): each a kernel or memcpy, its launch on the launching
    thread and the ``ac2g`` flow between them, joined by one correlation id."""
    out: list[dict[str, Any]] = []
    start = _us(t0 + work["start_ns"].to_numpy().astype(np.int64))
    end = _us(t0 + work["end_ns"].to_numpy().astype(np.int64))
    columns = [work[c].tolist() for c in WORK_COLUMNS]
    for i, values in enumerate(zip(*columns, strict=True)):
        row = _WorkRow(*values)
        correlation = i + 1
        ts, dur = int(start[i]), int(end[i] - start[i])
        tid = tid_of.get(int(row.thread), int(row.thread))
        external = int(row.op) + 1
        memcpy = row.cat == "gpu_memcpy"
        args: dict[str, Any] = {
            "External id": external,
            "device": int(row.device),
            "stream": int(row.stream),
            "correlation": correlation,
        }
        if memcpy:
            args["bytes"] = int(row.bytes)
            args["memory bandwidth (GB/s)"] = (
                round(row.bytes / (row.end_ns - row.start_ns), 3) if row.end_ns > row.start_ns else 0.0
            )
        out.append(
            {
                "ph": "X",
                "cat": row.cat,
                "name": visible(str(row.name)),
                "pid": int(row.device),
                "tid": int(row.stream),
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )
        launch = "cudaMemcpyAsync" if memcpy else "cudaLaunchKernel"
        out.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": launch,
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": 0,
                "args": {"External id": external, "correlation": correlation},
            }
        )
        out.append(
            {"ph": "s", "id": correlation, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"}
        )
        out.append(
            {
                "ph": "f",
                "id": correlation,
                "pid": int(row.device),
                "tid": int(row.stream),
                "ts": ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
    return out


def _meta(what: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": what, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": name}}
