"""Trace files: ``Trace.save`` / ``load_trace`` (lossless), and the Chrome Trace Event export.

The saved format is a zip of uncompressed numpy arrays (``numpy.savez``): one array per event
field, the shapes pool, and a JSON header with a magic string and version. It stores the recorder's
columns as they are (64 bytes an event), so a million events write and read in about a second.
"""

from __future__ import annotations

import json
import os
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np

from openreg_lab._events import Columns

if TYPE_CHECKING:
    from openreg_lab.trace import Trace

MAGIC = "openreg-lab trace"
VERSION = 1


def save(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` to ``path`` (conventionally ``*.trace``)."""
    c = trace.columns
    header = {
        "magic": MAGIC,
        "version": VERSION,
        "capacity": trace.capacity,
        "dropped": trace.dropped,
        "record_shapes": trace.record_shapes,
        "stack": trace.stack,
        "t0": trace._t0,
        "threads": {str(k): v for k, v in c.threads.items()},
        "strings": c.strings,
    }
    arrays = {f"f_{name}": values for name, values in c.fields.items()}
    arrays["pool"] = c.pool
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace written by ``Trace.save``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not an openreg-lab trace, is of a newer version, or is damaged.
    """
    from openreg_lab.trace import Trace

    try:
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as data:
            if "header" not in data.files:
                raise ValueError("no header")
            header = json.loads(bytes(data["header"]).decode())
            if header.get("magic") != MAGIC:
                raise ValueError("wrong magic")
            if header.get("version") != VERSION:
                raise _Version(header.get("version"))
            fields = {name[2:]: data[name] for name in data.files if name.startswith("f_")}
            pool = data["pool"]
    except FileNotFoundError:
        raise
    except _Version as v:
        raise ValueError(
            f"{os.fspath(path)!r} is an openreg-lab trace of format version {v.version}; this "
            f"openreg-lab reads version {VERSION}: upgrade openreg-lab to read it"
        ) from None
    except (ValueError, OSError, zipfile.BadZipFile, KeyError, json.JSONDecodeError, EOFError) as e:
        raise ValueError(
            f"{os.fspath(path)!r} is not a readable openreg-lab trace ({type(e).__name__}: {e}). "
            "Trace files are written by Trace.save(); the file may be truncated or of another kind"
        ) from None
    lengths = {len(v) for v in fields.values()}
    if len(lengths) > 1 or "id" not in fields:
        raise ValueError(f"{os.fspath(path)!r} is a damaged openreg-lab trace: its columns disagree")
    columns = Columns(fields, pool, header["strings"], {int(k): v for k, v in header["threads"].items()})
    t = Trace(
        record_shapes=header["record_shapes"],
        stack=header["stack"],
        capacity=header["capacity"],
        columns=columns,
        dropped=header["dropped"],
    )
    t._t0 = header["t0"]
    return t


class _Version(Exception):
    def __init__(self, version: Any) -> None:
        super().__init__(version)
        self.version = version


# Tracks of the Chrome trace: ops on their thread's track, copies, casts and memory on their own.
_COPY_TRACK = 1_000_000
_CAST_TRACK = 1_000_001


def chrome_trace(trace: Trace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` in the Trace Event format (JSON) for Perfetto or chrome://tracing.

    Ops, backward nodes and fallbacks are complete ("X") events on their thread's track; copies
    and casts have a track each; device memory is a counter per device. Each event's ``args`` carry
    its kernel, dispatch path, bytes, shapes and dtypes.
    """
    ev = trace.events
    pid = os.getpid()
    out: list[dict[str, Any]] = []
    for thread in sorted(trace.columns.threads):
        out.append(_meta(pid, thread, f"openreg thread {thread} (tid {trace.columns.threads[thread]})"))
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
        if row.kind == "mark":
            out.append({"name": row.name, "ph": "i", "s": "g", "ts": ts, "pid": pid, "tid": row.thread})
            continue
        tid = {"copy": _COPY_TRACK, "cast": _CAST_TRACK}.get(row.kind, int(row.thread))
        args: dict[str, Any] = {"id": int(row.id), "parent": int(row.parent)}
        for key in ("kernel", "dispatch", "device", "src", "dst", "from_dtype", "to_dtype", "source",
                    "argument"):  # fmt: skip
            value = getattr(row, key)
            if value is not None:
                args[key] = value
        if row.bytes:
            args["bytes"] = int(row.bytes)
        if row.shapes is not None:
            args["shapes"] = row.shapes
            args["dtypes"] = row.dtypes
        if row.seq >= 0:
            args["seq"] = int(row.seq)
        out.append(
            {"name": row.name, "cat": row.kind, "ph": "X", "ts": ts, "dur": row.dur_ns / 1000.0,
             "pid": pid, "tid": tid, "args": args}
        )  # fmt: skip
    with open(path, "w") as f:
        json.dump({"traceEvents": out, "displayTimeUnit": "ns"}, f)


def _meta(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
