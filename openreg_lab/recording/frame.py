"""A trace's columns as one pandas DataFrame, ``Trace.events``: codes turned into names, times
made relative to the trace's start (``EVENT_COLUMNS``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from openreg_lab.recording import events as _events

if TYPE_CHECKING:
    from openreg_lab.recording.events import Columns

EVENT_COLUMNS = [
    "id", "parent", "kind", "name", "kernel", "dispatch", "device", "thread", "start_ns", "dur_ns",
    "bytes", "src", "dst", "from_dtype", "to_dtype", "shapes", "dtypes", "source",
    "seq", "forward", "argument", "cache_hit", "total", "address", "fused", "graph", "reason",
]  # fmt: skip


def to_frame(c: Columns, t0: int) -> pd.DataFrame:
    """The events of ``c`` as a DataFrame of ``EVENT_COLUMNS``, times from ``t0``."""
    f = c.fields
    n = len(c)
    strings = np.array(c.strings, dtype=object)
    kind = np.array(_events.KINDS, dtype=object)[f["kind"]]
    is_op = f["kind"] == 0
    kernels = np.array([None, *_events.KERNELS[1:]], dtype=object)
    # Codes to names by indexing a table (file codes are validated on load: files._CODES).
    device_names = np.array(
        [_events.device_name(code) for code in range(_events.NO_DEVICE, _events.MAX_DEVICES)], dtype=object
    )
    dtype_names = np.array(
        [_events.dtype_name(code) for code in range(-1, _events.MAX_DTYPE + 1)], dtype=object
    )

    def dev(codes: np.ndarray) -> np.ndarray:
        return device_names[codes.astype(np.int64) - _events.NO_DEVICE]

    def dt(codes: np.ndarray) -> np.ndarray:
        return dtype_names[codes.astype(np.int64) + 1]

    is_cast = f["kind"] == 4
    is_mem = np.isin(f["kind"], _events.MEMORY_KINDS)
    is_collective = f["kind"] == _events.KINDS.index("collective")  # src/dst hold ranks
    shapes = np.full(n, None, dtype=object)
    arg_dtypes = np.full(n, None, dtype=object)
    for i in np.flatnonzero(f["shapes"] >= 0):
        shapes[i], arg_dtypes[i] = _events.decode_shapes(c.pool, int(f["shapes"][i]))
    source = _events.inherit(f["source"].astype(np.int64), f["parent"])
    frame = pd.DataFrame(
        {
            "id": f["id"],
            "parent": f["parent"],
            "kind": kind,
            "name": strings[f["name"]],
            "kernel": kernels[f["kernel"]],
            "dispatch": np.where(is_op, strings[np.where(is_op, f["dispatch"], 0)], None),
            "device": dev(f["device"]) if n else [],
            "thread": f["thread"],
            "start_ns": f["start_ns"] - t0,
            "dur_ns": f["dur_ns"],
            "bytes": f["bytes"],
            "src": np.where(is_collective, None, dev(f["src"])) if n else [],
            "dst": np.where(is_collective, None, dev(f["dst"])) if n else [],
            "from_dtype": dt(f["from_dtype"]) if n else [],
            "to_dtype": dt(f["to_dtype"]) if n else [],
            "shapes": shapes,
            "dtypes": arg_dtypes,
            "source": np.where(source > 0, strings[source], None),
            "seq": np.where(((f["kind"] <= 1) | (f["kind"] == _events.STEP)) & (f["seq"] >= 0), f["seq"], -1),
            "forward": _events.forward_links(f),
            "argument": np.where(is_cast, strings[np.where(is_cast, f["dispatch"], 0)], None),
            "cache_hit": np.where(is_cast, (f["flags"] & _events.CACHE_HIT) != 0, False),
            "total": np.where(is_mem, f["seq"], -1),
            "address": _events.addresses(f),
            **_compiled_columns(f, strings),
        },
        columns=EVENT_COLUMNS,
    )
    return frame


def _compiled_columns(f: dict[str, np.ndarray], strings: np.ndarray) -> dict[str, np.ndarray]:
    """``fused``, ``graph`` and ``reason`` (``events.compiled_codes``) as text, None where absent."""
    codes = _events.compiled_codes(f)
    return {k: np.where(v > 0, strings[v], None) for k, v in codes.items()}
