"""Trace files: what ``Trace.save`` writes and ``load_trace`` reads back (lossless).

The saved format is a zip of uncompressed numpy arrays (``numpy.savez``): one array per event
field, the shapes pool, and a JSON header with a magic string and version. It stores the recorder's
columns as they are (64 bytes an event), so a million events write and read in about a second.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from openreg_lab.recording.events import EVENT_DTYPE, KERNELS, KINDS, Columns

MAGIC = "openreg-lab trace"
OPS = ("all", "kernels")  # trace(ops=...): where the op events came from
VERSION = 1


@dataclass(frozen=True)
class Saved:
    """What a trace file holds: the columns and the settings of the trace that recorded them."""

    columns: Columns
    capacity: int
    dropped: int
    record_shapes: bool
    stack: bool
    t0: int
    ops: str = "all"
    skipped: str | None = None  # trace(steps=...): what was not recorded
    profile: str | None = None  # the coverage profile active when recording began


def save(
    path: str | os.PathLike[str],
    c: Columns,
    *,
    capacity: int,
    dropped: int,
    record_shapes: bool,
    stack: bool,
    t0: int,
    ops: str = "all",
    skipped: str | None = None,
    profile: str | None = None,
) -> None:
    """Write the columns ``c`` of a trace and its settings to ``path`` (conventionally ``*.trace``)."""
    header = {
        "magic": MAGIC,
        "version": VERSION,
        "capacity": capacity,
        "dropped": dropped,
        "record_shapes": record_shapes,
        "stack": stack,
        "t0": t0,
        "ops": ops,
        "skipped": skipped,
        "profile": profile,
        "threads": {str(k): v for k, v in c.threads.items()},
        "strings": c.strings,
    }
    arrays = {f"f_{name}": values for name, values in c.fields.items()}
    arrays["pool"] = c.pool
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def read(path: str | os.PathLike[str]) -> Saved:
    """Read a file written by ``save``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not an openreg-lab trace, is of a newer version, or is damaged.
    """
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
    problem = _damage(header, fields, pool)
    if problem is not None:
        raise ValueError(
            f"{os.fspath(path)!r} is a damaged openreg-lab trace: {problem}. Trace files are written by "
            "Trace.save(); save the trace again"
        )
    columns = Columns(fields, pool, header["strings"], {int(k): v for k, v in header["threads"].items()})
    return Saved(
        columns,
        capacity=header["capacity"],
        dropped=header["dropped"],
        record_shapes=header["record_shapes"],
        stack=header["stack"],
        t0=header["t0"],
        ops=header.get("ops", "all"),  # files from before trace(ops=...) recorded every op
        skipped=header.get("skipped") if isinstance(header.get("skipped"), str) else None,
        profile=header.get("profile") if isinstance(header.get("profile"), str) else None,
    )


_FIELDS = (*EVENT_DTYPE.names, "id", "thread")
_HEADER = {"strings": list, "threads": dict, "capacity": int, "dropped": int, "record_shapes": bool,
           "stack": bool, "t0": int}  # fmt: skip


def _damage(header: dict[str, Any], fields: dict[str, np.ndarray], pool: np.ndarray) -> str | None:
    """What makes the file's contents inconsistent (None: nothing): every index into the string
    table, the event kinds, parents and shape offsets must point inside what the file holds."""
    for key, kind in _HEADER.items():
        if not isinstance(header.get(key), kind):
            return f"its header lacks {key!r}"
    if header.get("ops", "all") not in OPS:
        return f"its header's ops is {header.get('ops')!r}, not one of {', '.join(OPS)}"
    missing = [f for f in _FIELDS if f not in fields]
    if missing:
        return f"it lacks the columns {', '.join(missing)}"
    n = len(fields["id"])
    if any(len(v) != n for v in fields.values()):
        return "its columns disagree in length"
    if not np.array_equal(fields["id"], np.arange(n)):
        return "its event ids are not 0..n-1"
    strings = header["strings"]
    if not all(isinstance(x, str) for x in strings):
        return "its string table holds something other than strings"
    for col in ("name", "dispatch", "source"):
        if n and int(fields[col].max()) >= len(strings):
            return f"its {col} column points past its string table ({len(strings)} strings)"
    if n and not (0 <= int(fields["kind"].min()) and int(fields["kind"].max()) < len(KINDS)):
        return "an event has an unknown kind"
    if n and not (0 <= int(fields["kernel"].min()) and int(fields["kernel"].max()) < len(KERNELS)):
        return "an event has an unknown kernel"
    parent = fields["parent"]
    if n and ((parent < -1) | (parent >= n)).any():
        return "an event's parent is not an event of the file"
    shapes = fields["shapes"]
    has = shapes >= 0
    if has.any():
        offsets = shapes[has].astype(np.int64)
        if int(offsets.max()) >= len(pool) or (shapes < -1).any():
            return "a shapes offset points past the shapes pool"
        if (pool[offsets] < 0).any() or (offsets + 1 + 2 * pool[offsets] > len(pool)).any():
            return "the shapes pool is truncated"
    return None


class _Version(Exception):
    def __init__(self, version: Any) -> None:
        super().__init__(version)
        self.version = version
