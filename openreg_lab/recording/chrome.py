"""The Chrome Trace Event export (JSON), for Perfetto (ui.perfetto.dev) or chrome://tracing.

It reads the events table only: ops, backward nodes and fallbacks are complete ("X") events on
their thread's track, copies and casts have a track each, device memory is a counter per device.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import atomic

# Tracks of the Chrome trace: ops on their thread's track, copies, casts and memory on their own,
# the sampled Python of each thread (host slices) on a lane of its own.
_COPY_TRACK = 1_000_000
_CAST_TRACK = 1_000_001
_PYTHON_TRACK = 2_000_000


def write(
    path: str | os.PathLike[str],
    ev: pd.DataFrame,
    threads: dict[int, int],
    host: pd.DataFrame | None = None,
    *,
    dropped: int = 0,
    capacity: int | None = None,
) -> None:
    """Write the events ``ev`` (``Trace.events``) in the Trace Event format (JSON).

    ``threads`` maps the trace's thread indices to OS thread ids (``Trace.columns.threads``);
    ``host`` (``Trace.host_events``) adds the sampled Python of each thread as a lane of its own.
    The format's metadata (``otherData``) says how many events the trace ``dropped`` (0: none).

    Ops, backward nodes and fallbacks are complete ("X") events on their thread's track; copies
    and casts have a track each; device memory is a counter per device. Each event's ``args`` carry
    its kernel, dispatch path, bytes, shapes and dtypes.
    """
    pid = os.getpid()
    out: list[dict[str, Any]] = []
    for thread in sorted(threads):
        out.append(_meta(pid, thread, f"openreg thread {thread} (tid {threads[thread]})"))
    out.append(_meta(pid, _COPY_TRACK, "copies"))
    out.append(_meta(pid, _CAST_TRACK, "autocast casts"))
    for row in ev.itertuples(index=False):
        ts = row.start_ns / 1000.0
        if row.kind in ("alloc", "free"):
            out.append(
                {"name": f"memory {row.device}", "ph": "C", "ts": ts, "pid": pid,
                 "args": {"allocated bytes": int(row.total)}}
            )  # fmt: skip
            continue
        if row.kind == "segment":  # the allocator's reserve (Note [Memory events]): the counter is enough
            continue
        if row.kind in ("mark", "step", "oom"):
            name = {"step": f"end of step {row.seq}", "oom": f"out of memory: {row.bytes} bytes asked"}.get(
                row.kind, row.name
            )
            out.append({"name": name, "ph": "i", "s": "g", "ts": ts, "pid": pid, "tid": row.thread})
            continue
        tid = {"copy": _COPY_TRACK, "cast": _CAST_TRACK}.get(row.kind, int(row.thread))
        colour = _cname(row.kind, row.kernel, row.name)
        args: dict[str, Any] = {"id": int(row.id), "parent": int(row.parent)}
        for key in ("kernel", "dispatch", "device", "src", "dst", "from_dtype", "to_dtype", "source",
                    "argument", "fused", "graph", "reason"):  # fmt: skip
            value = getattr(row, key)
            if isinstance(value, str):  # a missing value is None or NaN: left out, never written as NaN
                args[key] = value
        if row.bytes:
            args["bytes"] = int(row.bytes)
        if isinstance(row.shapes, list):
            args["shapes"] = row.shapes
            args["dtypes"] = row.dtypes
        if row.dur_ns < 0:
            args["still running"] = True  # when the trace ended: drawn with no length
        if row.seq >= 0:
            args["seq"] = int(row.seq)
        out.append(
            {"name": row.name, "cat": row.kind, "ph": "X", "ts": ts, "dur": max(row.dur_ns, 0) / 1000.0,
             "pid": pid, "tid": tid, "args": args, **({"cname": colour} if colour else {})}
        )  # fmt: skip
    if host is not None and len(host):
        out += _host_events(host, threads, pid)
    with atomic.replacing(path, "w", encoding="utf-8") as f:
        # Strict JSON (no NaN / Infinity): Perfetto and chrome://tracing reject anything else.
        other: dict[str, Any] = {"openreg dropped events": int(dropped)}
        if dropped:
            other["openreg warning"] = (
                f"{int(dropped):,} events were dropped: the trace holds at most {int(capacity or 0):,}; "
                "the totals miss them. Trace again with a larger capacity"
            )
        json.dump({"traceEvents": out, "displayTimeUnit": "ns", "otherData": other}, f, allow_nan=False)


def _host_events(host: pd.DataFrame, threads: dict[int, int], pid: int) -> list[dict[str, Any]]:
    """The host slices as complete events on a Python lane per OS thread, named after its thread."""
    index = {int(os_id): int(i) for i, os_id in threads.items()}
    lanes: dict[int, int] = {}
    out: list[dict[str, Any]] = []
    for i, os_thread in enumerate(sorted({int(t) for t in host["os_thread"]})):
        lanes[os_thread] = _PYTHON_TRACK + i
        thread = index.get(os_thread)
        label = f"Python (tid {os_thread})" if thread is None else f"Python (openreg thread {thread})"
        out.append(_meta(pid, _PYTHON_TRACK + i, label))
    for row in host.itertuples(index=False):
        waiting = row.wait_ns * 2 > row.dur_ns
        args: dict[str, Any] = {"source": f"{row.file}:{row.line}" if row.file else ""}  # an import: no file
        if row.wait_ns > 0:
            args["wait_ns"] = int(row.wait_ns)
        out.append(
            {"name": row.function, "cat": "host", "ph": "X", "ts": row.start_ns / 1000.0,
             "dur": max(int(row.dur_ns), 0) / 1000.0, "pid": pid, "tid": lanes[int(row.os_thread)],
             "args": args, "cname": theme.CHROME_CNAMES["host wait" if waiting else "host"]}
        )  # fmt: skip
    return out


def _meta(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _cname(kind: str, kernel: object, name: str) -> str | None:
    """The Chrome colour name of an event, from the one theme (``openreg_lab.theme``)."""
    if kind == "copy":
        return theme.CHROME_CNAMES.get(name)
    if kind in ("cast", "backward", "compiled", "compile"):
        return theme.CHROME_CNAMES[kind]
    if kind == "collective":
        return theme.CHROME_CNAMES["collective wait" if name.startswith("wait ") else "collective"]
    if kind == "fallback":
        return theme.CHROME_CNAMES["fallback"]
    return theme.CHROME_CNAMES.get(kernel) if isinstance(kernel, str) else None
