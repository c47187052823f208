"""The Perfetto export in Perfetto's own protobuf format (``.pftrace``), for traces of millions of events.

Note [Perfetto's protobuf, written in columns]
The Chrome JSON export (``chrome.py``) builds one dict per event: 3M events took 63 s and made an
807 MB file. This one writes Perfetto's ``Trace`` message (TracePacket / TrackEvent, the format
the Perfetto UI and trace processor read natively) from the recorder's columns (``Trace.columns``,
never the events DataFrame, whose object columns cost more than the export): numpy makes one row
per packet (its time, type, track, interned name and category, and its event's row for the
arguments), and ``csrc/trace/PerfettoWriter.cpp`` writes their bytes (``_C._trace_perfetto_packets``),
a loop numpy could only express as byte masks over stacked varint matrices (that version took
39 s for 3M events; this one 4 s of CPU, the perfetto package's TraceProtoBuilder ~50 s and the
JSON 95 s: benchmarks/bench_export.py). Strings are interned once (event names,
argument names and values, the categories) in the first packet of the one sequence, each distinct
string code looked up once, so a slice costs about 80 bytes. A slice is a begin and an end packet,
sorted so that slices nest on their track at equal timestamps (``_packet_order``). The arguments
are those of ``Trace.events``' columns, derived from the same codes (``events.inherit``,
``events.compiled_codes``); tests/recording/test_trace_perfetto.py reads every one back against it.

Tracks are those of the Chrome export: ops, backward nodes, fallbacks, compiled code and
collectives on their thread's track, copies and casts on a track each, device memory a counter per
device, marks and step ends instants. Each slice's category is its theme key (``native``,
``fallback``, ``H2D``, ... the keys of ``theme.CHROME_CNAMES``): Perfetto colours slices by name,
so the category and the ``colour`` argument carry the theme. The host slices (``Trace.host_events``)
are a Python lane per thread under its thread's track, with their ``file:line``. Strings are
written as UTF-8, a lone surrogate as its escape ``\\udcXX`` (``text.visible``); protobuf needs no
escaping.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from openreg_lab import _C, theme
from openreg_lab.recording import atomic
from openreg_lab.recording import events as _events
from openreg_lab.recording.events import Columns
from openreg_lab.recording.text import visible

#: File name endings that select this format in ``Trace.export_chrome_trace``.
SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")

_SEQUENCE = 1  # trusted_packet_sequence_id of every packet
_PROCESS_TRACK, _COPY_TRACK, _CAST_TRACK, _MEMORY_TRACK, _THREAD_TRACK = 1, 2, 3, 16, 1024
_PYTHON_TRACK = 1 << 20  # the Python lanes (host samples), one per OS thread
_BEGIN, _END, _INSTANT, _COUNTER = 1, 2, 3, 4  # TrackEvent.Type
_CLEARED, _NEEDS_STATE = 1, 2  # TracePacket.SequenceFlags
_SLICE_KINDS = ("op", "backward", "fallback", "compiled", "compile", "collective", "copy", "cast")
_STRING_ARGS = ("kernel", "dispatch", "device", "src", "dst", "from_dtype", "to_dtype", "source",
                "argument", "fused", "graph", "reason", "shapes", "dtypes")  # fmt: skip
_CHUNK = 1 << 19  # packets encoded at once (bounds the memory of the bytes in flight)


def _varint(value: int) -> bytes:
    """The protobuf varint of a non-negative ``value``."""
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _message(fields: Iterable[tuple[int, object]]) -> bytes:
    """One small message from (field number, int | str | bytes) pairs (bytes: a nested message)."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, int):
            out += _varint(number << 3) + _varint(value)
            continue
        data = visible(value).encode("utf-8") if isinstance(value, str) else value
        assert isinstance(data, bytes)
        out += _varint((number << 3) | 2) + _varint(len(data)) + data
    return bytes(out)


def _packet(body: bytes) -> bytes:
    return _message([(1, body)])


class _Interned:
    """Strings interned by kind (InternedData field number), ids from 1."""

    def __init__(self) -> None:
        self.tables: dict[int, dict[str, int]] = {}

    def ids(self, field: int, values: pd.Series | np.ndarray | Sequence[object]) -> np.ndarray:
        """Ids of ``values`` (int64; a missing value: -1). Each distinct value is looked up once."""
        table = self.tables.setdefault(field, {})
        if isinstance(values, list | tuple):
            values = np.array(values, dtype=object)
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        mapping = np.array([table.setdefault(str(u), len(table) + 1) for u in uniques] + [-1], np.int64)
        return mapping[codes]  # code -1 (missing) takes the trailing -1

    def one(self, field: int, value: str) -> int:
        table = self.tables.setdefault(field, {})
        return table.setdefault(value, len(table) + 1)

    def packet(self) -> bytes:
        entries = []
        for field, table in sorted(self.tables.items()):
            for text, iid in table.items():
                entries.append((field, _message([(1, iid), (2, visible(text).encode("utf-8"))])))
        interned = _message(entries)
        return _packet(_message([(10, _SEQUENCE), (12, interned), (13, _CLEARED | _NEEDS_STATE)]))


_NAMES, _CATEGORIES, _ARG_NAMES, _ARG_STRINGS = 2, 1, 3, 29  # InternedData fields
# (name iid, an interned string?, value per row from the first row on (-1: absent), the first row)
Argument = tuple[int, bool, np.ndarray, int]


def _lookup(
    interned: _Interned, field: int, codes: np.ndarray, text: Callable[[int], str | None]
) -> np.ndarray:
    """Interned ids of coded values (small non-negative ints; ``text(code)`` their string, None:
    absent -> -1): each distinct code is looked up once, the rest is one gather."""
    codes = codes.astype(np.int64)
    if not len(codes):
        return np.zeros(0, np.int64)
    used = np.zeros(int(codes.max()) + 1, bool)
    used[codes] = True
    mapping = np.full(len(used), -1, np.int64)
    for code in np.flatnonzero(used).tolist():
        value = text(code)
        if value is not None:
            mapping[code] = interned.one(field, value)
    return mapping[codes]


def _kind_mask(kind: np.ndarray, names: Sequence[str]) -> np.ndarray:
    table = np.zeros(len(_events.KINDS), bool)
    table[[_events.KINDS.index(k) for k in names]] = True
    return table[kind.astype(np.int64)]


def write(
    path: str | os.PathLike[str],
    columns: Columns,
    t0: int,
    host: pd.DataFrame | None = None,
    shapes: tuple[Sequence[object], Sequence[object]] | None = None,
) -> None:
    """Write a trace's event columns (``Trace.columns``; ``t0`` its start) as a Perfetto protobuf
    trace (Note [Perfetto's protobuf, written in columns]): the same events, names and arguments as
    ``Trace.events`` holds. ``host`` (``Trace.host_events``) adds the sampled Python as a lane per
    thread, under the thread's track; ``shapes`` the events' ``shapes`` and ``dtypes`` columns
    (``Trace.events``), when the trace recorded them."""
    f, strings, threads = columns.fields, columns.strings, columns.threads
    pid = os.getpid()
    interned = _Interned()
    head = [_track(_PROCESS_TRACK, (3, _message([(1, pid), (6, "openreg-lab")])))]
    for thread in sorted(threads):
        descriptor = _message([(1, pid), (2, int(threads[thread])), (5, f"openreg thread {thread}")])
        head.append(_track(_THREAD_TRACK + thread, (5, _PROCESS_TRACK), (4, descriptor)))
    for uuid, name in ((_COPY_TRACK, "copies"), (_CAST_TRACK, "autocast casts")):
        head.append(_track(uuid, (2, name), (5, _PROCESS_TRACK)))
    kind = f["kind"].astype(np.int64)
    memory = _kind_mask(kind, ["alloc", "free"])
    device = f["device"].astype(np.int64)
    memory_devices = sorted(set(device[memory].tolist()) - {_events.NO_DEVICE})
    memory_track = np.full(_events.MAX_DEVICES - _events.NO_DEVICE, _MEMORY_TRACK, np.int64)
    for i, code in enumerate(memory_devices):
        memory_track[code - _events.NO_DEVICE] = _MEMORY_TRACK + i
        head.append(_track(_MEMORY_TRACK + i, (2, f"memory {_events.device_name(code)}"), (5, _PROCESS_TRACK),
                           (8, b"")))  # fmt: skip

    n = len(kind)
    slices = _kind_mask(kind, _SLICE_KINDS)
    instants = _kind_mask(kind, ["mark", "step"])
    start = f["start_ns"].astype(np.int64) - t0
    end = start + np.maximum(f["dur_ns"], 0)
    thread = f["thread"].astype(np.int64)
    copy, cast = kind == _events.KINDS.index("copy"), kind == _events.KINDS.index("cast")
    track = np.where(copy, _COPY_TRACK, np.where(cast, _CAST_TRACK, _THREAD_TRACK + thread))
    track[memory] = memory_track[device[memory] - _events.NO_DEVICE]
    name_code = f["name"].astype(np.int64)
    name_iid = _lookup(interned, _NAMES, name_code, lambda c: strings[c])
    step = np.flatnonzero(kind == _events.STEP)
    name_iid[step] = [interned.one(_NAMES, f"end of step {s}") for s in f["seq"][step].tolist()]
    category_iid, colour_iid = _categories(interned, kind, f["kernel"].astype(np.int64), name_code, strings)
    packet_type = np.where(slices, _BEGIN, np.where(instants, _INSTANT, _COUNTER))
    counter = np.where(memory, f["seq"], 0).astype(np.int64)
    args = _arguments(columns, interned, colour_iid, shapes)
    rows = np.flatnonzero(slices | instants | memory)

    h = host if host is not None and len(host) else None
    if h is not None:  # the host slices: rows n, n + 1, ... after the events
        lanes = _python_lanes(h, threads)
        head += [_track(uuid, *fields) for uuid, fields in lanes.values()]
        m = len(h)
        start = np.concatenate([start, h["start_ns"].to_numpy(np.int64)])
        end = np.concatenate([end, start[n:] + np.maximum(h["dur_ns"].to_numpy(np.int64), 0)])
        track = np.concatenate([track, [lanes[int(t)][0] for t in h["os_thread"]]])
        name_iid = np.concatenate([name_iid, interned.ids(_NAMES, h["function"])])
        waiting = h["wait_ns"].to_numpy(np.int64) * 2 > h["dur_ns"].to_numpy(np.int64)
        host_keys = np.where(waiting, "host wait", "host")
        category_iid = np.concatenate([category_iid, [interned.one(_CATEGORIES, k) for k in host_keys]])
        packet_type = np.concatenate([packet_type, np.full(m, _BEGIN)])
        counter = np.concatenate([counter, np.zeros(m, np.int64)])
        args += [(iid, s, v, n) for iid, s, v, _ in _host_arguments(h, interned)]
        rows = np.concatenate([rows, np.arange(n, n + m)])
        slices = np.concatenate([slices, np.ones(m, bool)])

    event, is_end = _packet_order(rows, slices, start, end, n)
    ts = np.where(is_end, end[event], start[event])
    kinds = np.where(is_end, _END, packet_type[event])

    with atomic.replacing(path, "wb") as out:
        out.write(interned.packet())  # every string is interned by now: the first packet holds them all
        out.write(b"".join(head))
        for lo in range(0, len(event), _CHUNK):
            e = event[lo : lo + _CHUNK]
            out.write(
                _C._trace_perfetto_packets(ts[lo : lo + _CHUNK], kinds[lo : lo + _CHUNK], track[e],
                                           name_iid[e], category_iid[e], counter[e], e, args, _SEQUENCE)
            )  # fmt: skip


def _packet_order(
    rows: np.ndarray, slices: np.ndarray, start: np.ndarray, end: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The packets in time order: (row of each packet, is it a slice's end).

    At one time: ends of earlier slices, then begins (outer first), then the ends of slices of no
    length (inner first), so slices nest on their track. The events' rows are in start order with
    a parent before its children (``events.merge``), so their begins are in order already; rows
    from ``n`` on (host slices) are sorted here. Ends go by time, then the inner first: between
    slices of one start and end, the later row (the child). The runs are merged by one stable sort
    on (time, place at that time), which for sorted runs is a linear merge."""
    begins = rows[rows < n]
    extra = rows[rows >= n]
    if len(extra):
        extra = extra[np.lexsort((extra, -end[extra], start[extra]))]
    ends = rows[slices[rows]][::-1]  # by row, descending: the inner first at one time
    zero = end[ends] == start[ends]
    ends = ends[np.argsort(end[ends] * 3 + np.where(zero, 2, 0), kind="stable")]
    event = np.concatenate([begins, extra, ends])
    is_end = np.zeros(len(event), bool)
    is_end[len(begins) + len(extra) :] = True
    at = np.where(is_end, end[event] * 3 + np.where(end[event] == start[event], 2, 0), start[event] * 3 + 1)
    order = np.argsort(at, kind="stable")
    return event[order], is_end[order]


def _categories(
    interned: _Interned, kind: np.ndarray, kernel: np.ndarray, name: np.ndarray, strings: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Each event's category (its theme key: ``native``, ``fallback``, ``H2D``, ``collective wait``,
    ... the keys of ``theme.CHROME_CNAMES``; the kind otherwise) and colour name, as interned ids."""
    key = np.full(len(kind), -1, np.int64)
    for code in np.unique(kind).tolist():
        at = kind == code
        label = _events.KINDS[code]
        if label == "op":
            key[at] = _lookup(interned, _CATEGORIES, kernel[at], lambda k: _events.KERNELS[k] or "op")
        elif label == "copy":
            key[at] = _lookup(interned, _CATEGORIES, name[at], lambda c: strings[c])
        elif label == "collective":
            wait = lambda c: "collective wait" if strings[c].startswith("wait ") else "collective"  # noqa: E731
            key[at] = _lookup(interned, _CATEGORIES, name[at], wait)
        else:
            key[at] = interned.one(_CATEGORIES, label)
    text = {iid: t for t, iid in interned.tables.get(_CATEGORIES, {}).items()}
    colour = _lookup(
        interned, _ARG_STRINGS, np.maximum(key, 0), lambda i: theme.CHROME_CNAMES.get(text.get(i, ""))
    )
    return key, colour


def _track(uuid: int, *fields: tuple[int, object]) -> bytes:
    """The packet of a TrackDescriptor (uuid, then ``fields``)."""
    return _packet(_message([(10, _SEQUENCE), (60, _message([(1, uuid), *fields]))]))


def _python_lanes(h: pd.DataFrame, threads: dict[int, int]) -> dict[int, tuple[int, tuple]]:
    """Per OS thread of the host slices, its Python lane: (track uuid, descriptor fields), a child of
    the thread's track when the recorder knows the thread."""
    index = {int(os_id): int(i) for i, os_id in threads.items()}
    lanes: dict[int, tuple[int, tuple]] = {}
    for i, os_thread in enumerate(sorted(set(h["os_thread"].astype(np.int64).tolist()))):
        thread = index.get(os_thread)
        parent = _PROCESS_TRACK if thread is None else _THREAD_TRACK + thread
        label = f"Python (tid {os_thread})" if thread is None else f"Python (openreg thread {thread})"
        lanes[os_thread] = (_PYTHON_TRACK + i, ((2, label), (5, parent)))
    return lanes


def _host_arguments(h: pd.DataFrame, interned: _Interned) -> list[Argument]:
    """The debug annotations of the host slices: their ``file:line`` and the time they waited."""
    # A folded import (Note [Folding host frames]) has no file: an empty source.
    source = [f"{f}:{line}" if f else "" for f, line in zip(h["file"], h["line"], strict=True)]
    wait = h["wait_ns"].to_numpy(np.int64)
    waiting = wait * 2 > h["dur_ns"].to_numpy(np.int64)
    colour = [theme.CHROME_CNAMES["host wait" if w else "host"] for w in waiting]
    return [
        (interned.one(_ARG_NAMES, "source"), True, interned.ids(_ARG_STRINGS, source), 0),
        (interned.one(_ARG_NAMES, "wait_ns"), False, np.where(wait > 0, wait, -1), 0),
        (interned.one(_ARG_NAMES, "colour"), True, interned.ids(_ARG_STRINGS, colour), 0),
    ]


def _arguments(
    columns: Columns,
    interned: _Interned,
    colour_iid: np.ndarray,
    shapes: tuple[Sequence[object], Sequence[object]] | None,
) -> list[Argument]:
    """The debug annotations of the slices, the values of ``Trace.events``' columns: (name iid, is
    an interned string, value per event or -1)."""
    f, strings = columns.fields, columns.strings
    kind = f["kind"].astype(np.int64)
    out: list[Argument] = [(interned.one(_ARG_NAMES, "id"), False, f["id"].astype(np.int64), 0)]

    def number(name: str, values: np.ndarray) -> None:
        if (values >= 0).any():
            out.append((interned.one(_ARG_NAMES, name), False, values.astype(np.int64), 0))

    def text(name: str, codes: np.ndarray, of: Callable[[int], str | None]) -> None:
        ids = _lookup(interned, _ARG_STRINGS, codes, of)
        if (ids >= 0).any():
            out.append((interned.one(_ARG_NAMES, name), True, ids, 0))

    number("parent", np.where(f["parent"] >= 0, f["parent"], -1))
    number("bytes", np.where(f["bytes"] > 0, f["bytes"], -1))
    is_op, is_cast = kind == 0, kind == _events.KINDS.index("cast")
    dispatch = f["dispatch"].astype(np.int64)
    text("kernel", f["kernel"], lambda k: _events.KERNELS[k] or None)
    text("dispatch", np.where(is_op, dispatch + 1, 0), lambda c: strings[c - 1] if c else None)
    device = lambda c: _events.device_name(c + _events.NO_DEVICE)  # noqa: E731
    text("device", f["device"].astype(np.int64) - _events.NO_DEVICE, device)
    collective = kind == _events.KINDS.index("collective")  # src and dst hold ranks
    for column in ("src", "dst"):
        text(
            column,
            np.where(collective, _events.NO_DEVICE, f[column].astype(np.int64)) - _events.NO_DEVICE,
            device,
        )
    for column in ("from_dtype", "to_dtype"):
        text(column, f[column].astype(np.int64) + 1, lambda c: _events.dtype_name(c - 1))
    source = _events.inherit(f["source"].astype(np.int64), f["parent"])
    text("source", source, lambda c: strings[c] if c else None)
    text("argument", np.where(is_cast, dispatch + 1, 0), lambda c: strings[c - 1] if c else None)
    for column, codes in _events.compiled_codes(f).items():
        text(column, codes, lambda c: strings[c] if c else None)
    if shapes is not None:
        for column, values in zip(("shapes", "dtypes"), shapes, strict=True):
            at = np.flatnonzero(f["shapes"] >= 0)
            ids = np.full(len(kind), -1, np.int64)
            ids[at] = interned.ids(_ARG_STRINGS, [str(v) for v in np.asarray(values, dtype=object)[at]])
            if len(at):
                out.append((interned.one(_ARG_NAMES, column), True, ids, 0))
    seq = f["seq"]
    number("seq", np.where(((kind <= 1) | (kind == _events.STEP)) & (seq >= 0), seq, -1))
    number("still running", np.where(f["dur_ns"] < 0, 1, -1))
    out.append((interned.one(_ARG_NAMES, "colour"), True, colour_iid, 0))
    return out
