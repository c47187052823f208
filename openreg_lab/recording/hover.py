"""What the timeline's items say: each drawn event's name and hover text (kernel, dispatch path,
argument shapes, bytes, source line), as indices into one table of strings.

Note [Hover texts by value]
A timeline payload holds up to tens of thousands of items (Note [Timeline level of detail] in
``lod``), each with a hover text of up to five lines. Built one item at a time (a Python string an
item, from numpy scalars), the first payload of a 1M-op trace's dashboard spent 0.37 s on them. The
lines' values repeat: a trace has a few kernels, dispatch paths, byte counts and source lines. So
each column of the items is factorized (a hash of a few thousand values) and its line formatted
once per distinct value; only the argument shapes, one list per op call, are formatted an item at a
time. A value that is no string is formatted from the item's own value (factorizing merges None
with NaN, and 1 with 1.0, which may format apart; a kernel or dispatch path that is no string,
None or NaN, is unknown: no line). The strings table is the items' names and texts interleaved
(name, text, name, text ...) and numbered in order of first appearance, the order in which the
browser has always received them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import lookup

#: The events' columns the hover text reads.
COLUMNS = ("kernel", "dispatch", "shapes", "dtypes", "bytes", "source")


def item_strings(events: pd.DataFrame, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """For the events ``ids`` (a timeline's items): the index of each one's name and of its hover
    text (``hover_text``) in a table of strings, and that table, each string once, in order of first
    appearance along name, text, name, text ... (Note [Hover texts by value])."""
    ids = np.asarray(ids, dtype=np.int64)
    names = _by_value(events["name"].to_numpy()[ids], str)
    inter = np.empty(2 * len(ids), dtype=object)
    inter[0::2] = names
    inter[1::2] = hover_texts(events, ids)
    codes, uniques = pd.factorize(inter)
    codes = codes.astype(np.int32, copy=False)
    return codes[0::2].copy(), codes[1::2].copy(), uniques.tolist()


def hover_texts(events: pd.DataFrame, ids: np.ndarray) -> np.ndarray:
    """The hover text of each of the events ``ids``, an object array of strings: what
    ``hover_text`` gives for each, a column's line formatted once per distinct value."""
    ids = np.asarray(ids, dtype=np.int64)
    col = {c: events[c].to_numpy()[ids] for c in COLUMNS}
    parts = [
        _by_value(col["kernel"], lambda v: f"kernel: {v}" if isinstance(v, str) and v else ""),
        _by_value(col["dispatch"], lambda v: f"dispatch: {v}" if isinstance(v, str) and v else ""),
        [_args(s, d) for s, d in zip(col["shapes"], col["dtypes"], strict=True)],
        _by_value(col["bytes"], lambda v: f"bytes: {theme.format_bytes(int(v))}" if v else ""),
        _by_value(col["source"], _source_line),
    ]
    out = np.empty(len(ids), dtype=object)
    out[:] = ["\n".join(filter(None, lines)) for lines in zip(*parts, strict=True)]
    return out


def hover_text(events: pd.DataFrame, event_id: int) -> str:
    """One event's hover text: its kernel, dispatch path, arguments (dtype and shape each), bytes
    and source line, one a line, each when the event has one."""
    return str(hover_texts(events, np.array([event_id]))[0])


def _by_value(values: np.ndarray, fn: Callable[[Any], str]) -> np.ndarray:
    """``fn`` of each value as an object array, called once per distinct value. In an object array,
    the values that are no string are formatted apart (factorizing merges ``1`` and ``1.0``, None
    and NaN, which ``fn`` may tell apart): None once, a float type's NaN once, any other once a row."""
    codes, uniques = pd.factorize(values)
    table = np.empty(len(uniques) + 1, dtype=object)
    table[: len(uniques)] = [fn(u) for u in uniques]
    out = table[codes]  # a missing value's code (-1) picks the last entry, set below
    if values.dtype != object:
        return out
    rows = np.flatnonzero(np.array([not isinstance(u, str) for u in uniques] + [True], dtype=bool)[codes])
    if not len(rows):
        return out
    sub = values[rows]
    types = np.frompyfunc(type, 1, 1)(sub)
    for t in pd.unique(types):
        at = types == t
        rest = rows[at]
        if t is type(None):
            out[rest] = fn(None)
            continue
        if issubclass(t, float):
            nan = np.isnan(sub[at].astype(np.float64))
            if nan.any():
                out[rest[nan]] = fn(sub[at][nan][0])  # every NaN of a type formats alike
            rest = rest[~nan]
        for i in rest.tolist():
            out[i] = fn(values[i])
    return out


def _args(shapes: Any, dtypes: Any) -> str:
    if shapes is None:
        return ""
    return "args: " + ", ".join([f"{d}{list(s)}" for s, d in zip(shapes, dtypes, strict=True)])


def _source_line(source: Any) -> str:
    return f"source: {lookup.cell_source(source)}" if isinstance(source, str) else ""
