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

from openreg_lab.recording.events import Columns

MAGIC = "openreg-lab trace"
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


def save(
    path: str | os.PathLike[str],
    c: Columns,
    *,
    capacity: int,
    dropped: int,
    record_shapes: bool,
    stack: bool,
    t0: int,
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
    lengths = {len(v) for v in fields.values()}
    if len(lengths) > 1 or "id" not in fields:
        raise ValueError(f"{os.fspath(path)!r} is a damaged openreg-lab trace: its columns disagree")
    columns = Columns(fields, pool, header["strings"], {int(k): v for k, v in header["threads"].items()})
    return Saved(
        columns,
        capacity=header["capacity"],
        dropped=header["dropped"],
        record_shapes=header["record_shapes"],
        stack=header["stack"],
        t0=header["t0"],
    )


class _Version(Exception):
    def __init__(self, version: Any) -> None:
        super().__init__(version)
        self.version = version
