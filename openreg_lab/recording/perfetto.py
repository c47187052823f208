"""The Perfetto export in Perfetto's own protobuf format (``.pftrace``), for traces of millions of events.

Note [Perfetto's protobuf, written in columns]
The Chrome JSON export (``chrome.py``) builds one dict per event: 3M events took 63 s and made an
807 MB file. This one writes Perfetto's ``Trace`` message (TracePacket / TrackEvent, the format
the Perfetto UI and trace processor read natively) from the event columns with numpy: every
packet is a row of fields, each field a byte matrix with a length per row (0: absent); a row's
bytes are its fields' first ``length`` bytes, so a whole chunk of packets is one boolean mask over
the stacked matrices. Strings are interned once (event names, argument names and values, the
categories) in the first packet of the one sequence, so a slice costs about 80 bytes. A slice is a
begin and an end packet, sorted so that slices nest on their track at equal timestamps.

Tracks are those of the Chrome export: ops, backward nodes, fallbacks, compiled code and
collectives on their thread's track, copies and casts on a track each, device memory a counter per
device, marks and step ends instants. Each slice's category is its theme key (``native``,
``fallback``, ``H2D``, ... the keys of ``theme.CHROME_CNAMES``): Perfetto colours slices by name,
so the category and the ``colour`` argument carry the theme. Strings are written as UTF-8 (a
lone surrogate becomes U+FFFD); protobuf needs no escaping.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import _atomic

#: File name endings that select this format in ``Trace.export_chrome_trace``.
SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")

_SEQUENCE = 1  # trusted_packet_sequence_id of every packet
_PROCESS_TRACK, _COPY_TRACK, _CAST_TRACK, _MEMORY_TRACK, _THREAD_TRACK = 1, 2, 3, 16, 1024
_BEGIN, _END, _INSTANT, _COUNTER = 1, 2, 3, 4  # TrackEvent.Type
_CLEARED, _NEEDS_STATE = 1, 2  # TracePacket.SequenceFlags
_SLICE_KINDS = ("op", "backward", "fallback", "compiled", "compile", "collective", "copy", "cast")
_STRING_ARGS = ("kernel", "dispatch", "device", "src", "dst", "from_dtype", "to_dtype", "source",
                "argument", "fused", "graph", "reason", "shapes", "dtypes")  # fmt: skip
_CHUNK = 1 << 19  # packets encoded at once (bounds the memory of the byte matrices)

Field = tuple[np.ndarray, np.ndarray]  # (rows x width uint8 bytes, length per row)


def _varint(values: np.ndarray) -> Field:
    """The protobuf varints of ``values`` (non-negative integers)."""
    v = np.asarray(values).astype(np.uint64)
    columns = []
    lengths = np.ones(len(v), np.int64)
    for _ in range(10):
        low = (v & np.uint64(0x7F)).astype(np.uint8)
        v = v >> np.uint64(7)
        more = v != 0
        columns.append(low | (more.astype(np.uint8) << 7))
        lengths += more
        if not more.any():
            break
    return np.stack(columns, axis=1), lengths


def _tag(number: int, wire: int) -> bytes:
    key, out = (number << 3) | wire, bytearray()
    while True:
        out.append((key & 0x7F) | (0x80 if key > 0x7F else 0))
        key >>= 7
        if not key:
            return bytes(out)


def _const(data: bytes, n: int, present: np.ndarray | None = None) -> Field:
    matrix = np.broadcast_to(np.frombuffer(data, np.uint8), (n, len(data)))
    lengths = np.full(n, len(data), np.int64)
    return matrix, lengths if present is None else np.where(present, lengths, 0)


def _scalar(number: int, values: np.ndarray, present: np.ndarray | None = None) -> list[Field]:
    """A varint field: its tag and value, absent where ``present`` is False."""
    n = len(values)
    tag = _const(_tag(number, 0), n, present)
    value = _varint(values)
    return [tag, value if present is None else (value[0], np.where(present, value[1], 0))]


def _nested(number: int, fields: list[Field], present: np.ndarray | None = None) -> list[Field]:
    """A length-delimited field holding ``fields`` (already absent where ``present`` is False)."""
    n = len(fields[0][1])
    size = fields[0][1].copy()
    for _, length in fields[1:]:
        size += length
    tag = _const(_tag(number, 2), n, present)
    matrix, length = _varint(size)
    return [tag, (matrix, length if present is None else np.where(present, length, 0)), *fields]


def _bytes(fields: list[Field]) -> bytes:
    """The rows' bytes, one after the other: each field's first ``length`` bytes, in order."""
    matrix = np.concatenate([np.ascontiguousarray(m) for m, _ in fields], axis=1)
    mask = np.concatenate([np.arange(m.shape[1]) < ln[:, None] for m, ln in fields], axis=1)
    return matrix[mask].tobytes()


def _message(fields: Iterable[tuple[int, object]]) -> bytes:
    """One small message from (field number, int | str | bytes) pairs (bytes: a nested message)."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, int):
            matrix, length = _varint(np.array([value]))
            out += _tag(number, 0) + matrix[0, : length[0]].tobytes()
            continue
        data = value.encode("utf-8", "replace") if isinstance(value, str) else value
        assert isinstance(data, bytes)
        size = _varint(np.array([len(data)]))
        out += _tag(number, 2) + size[0][0][: size[1][0]].tobytes() + data
    return bytes(out)


def _packet(body: bytes) -> bytes:
    return _message([(1, body)])


class _Interned:
    """Strings interned by kind (InternedData field number), ids from 1."""

    def __init__(self) -> None:
        self.tables: dict[int, dict[str, int]] = {}

    def ids(self, field: int, values: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of ``values`` (a missing value: id 0, present False)."""
        table = self.tables.setdefault(field, {})
        codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=True)
        mapping = np.array([table.setdefault(str(u), len(table) + 1) for u in uniques] + [0], np.int64)
        ids = mapping[codes]  # code -1 (missing) takes the trailing 0
        return ids, codes >= 0

    def one(self, field: int, value: str) -> int:
        table = self.tables.setdefault(field, {})
        return table.setdefault(value, len(table) + 1)

    def packet(self) -> bytes:
        entries = []
        for field, table in sorted(self.tables.items()):
            for text, iid in table.items():
                entries.append((field, _message([(1, iid), (2, text.encode("utf-8", "replace"))])))
        interned = _message(entries)
        return _packet(_message([(10, _SEQUENCE), (12, interned), (13, _CLEARED | _NEEDS_STATE)]))


_NAMES, _CATEGORIES, _ARG_NAMES, _ARG_STRINGS = 2, 1, 3, 29  # InternedData fields


def _theme_keys(ev: pd.DataFrame) -> np.ndarray:
    """Each event's theme key (the ``theme.CHROME_CNAMES`` key the Chrome export colours it by)."""
    kind = ev["kind"].to_numpy(dtype=object)
    key = kind.copy()
    is_op = kind == "op"
    key[is_op] = ev["kernel"].to_numpy(dtype=object)[is_op]
    is_copy = kind == "copy"
    key[is_copy] = ev["name"].to_numpy(dtype=object)[is_copy]
    is_coll = np.flatnonzero(kind == "collective")
    waits = np.array([str(n).startswith("wait ") for n in ev["name"].to_numpy(dtype=object)[is_coll]], bool)
    key[is_coll[waits]] = "collective wait"
    missing = pd.isna(key)
    key[missing] = "op"
    return key


def _strings(column: pd.Series) -> np.ndarray:
    """A column's values as strings (lists and tuples as Python writes them), None where missing."""
    values = column.to_numpy(dtype=object).copy()
    present = ~pd.isna(values)
    values[~present] = None
    sub = values[present]
    if sub.size and pd.api.types.infer_dtype(sub, skipna=True) != "string":
        values[present] = [v if isinstance(v, str) else str(v) for v in sub]
    return values


def write(path: str | os.PathLike[str], ev: pd.DataFrame, threads: dict[int, int]) -> None:
    """Write the events ``ev`` (``Trace.events``) as a Perfetto protobuf trace (Note [Perfetto's
    protobuf, written in columns]). ``threads`` maps thread indices to OS thread ids."""
    pid = os.getpid()
    interned = _Interned()
    head = [
        _packet(
            _message(
                [
                    (10, _SEQUENCE),
                    (60, _message([(1, _PROCESS_TRACK), (3, _message([(1, pid), (6, "openreg-lab")]))])),
                ]
            )
        )
    ]
    for thread in sorted(threads):
        descriptor = _message([(1, pid), (2, int(threads[thread])), (5, f"openreg thread {thread}")])
        head.append(_packet(_message([(10, _SEQUENCE), (60, _message(
            [(1, _THREAD_TRACK + thread), (5, _PROCESS_TRACK), (4, descriptor)]))])))  # fmt: skip
    for uuid, name in ((_COPY_TRACK, "copies"), (_CAST_TRACK, "autocast casts")):
        head.append(
            _packet(_message([(10, _SEQUENCE), (60, _message([(1, uuid), (2, name), (5, _PROCESS_TRACK)]))]))
        )
    kind = ev["kind"].to_numpy(dtype=object)
    memory = np.isin(kind, ["alloc", "free"])
    devices = sorted(set(_strings(ev["device"][memory])) - {None})
    memory_track = {d: _MEMORY_TRACK + i for i, d in enumerate(devices)}
    for device, uuid in memory_track.items():
        head.append(_packet(_message([(10, _SEQUENCE), (60, _message(
            [(1, uuid), (2, f"memory {device}"), (5, _PROCESS_TRACK), (8, b"")]))])))  # fmt: skip

    # One row per packet: slices give a begin and an end, the rest one packet each.
    slices = np.isin(kind, _SLICE_KINDS)
    instants = np.isin(kind, ["mark", "step"])
    start = ev["start_ns"].to_numpy(np.int64)
    end = start + np.maximum(ev["dur_ns"].to_numpy(np.int64), 0)
    thread = ev["thread"].to_numpy(np.int64)
    track = np.where(
        kind == "copy", _COPY_TRACK, np.where(kind == "cast", _CAST_TRACK, _THREAD_TRACK + thread)
    )
    if memory.any():
        track[memory] = [memory_track[d] for d in _strings(ev["device"][memory])]
    names = ev["name"].to_numpy(dtype=object).copy()
    step = kind == "step"
    names[step] = [f"end of step {s}" for s in ev["seq"].to_numpy()[step]]
    name_iid, _ = interned.ids(_NAMES, names)
    keys = _theme_keys(ev)
    category_iid, _ = interned.ids(_CATEGORIES, keys)
    codes, uniques = pd.factorize(keys)
    colours = [theme.CHROME_CNAMES.get(k, "") for k in uniques]
    colour_iid = np.array([interned.one(_ARG_STRINGS, c) if c else 0 for c in colours] + [0], np.int64)[codes]

    rows = np.flatnonzero(slices | instants | memory)
    ends = np.flatnonzero(slices)
    event = np.concatenate([rows, ends])
    is_end = np.concatenate([np.zeros(len(rows), bool), np.ones(len(ends), bool)])
    ts = np.where(is_end, end[event], start[event])
    zero = end[event] == start[event]
    # Sorted by time; at one time: ends of earlier slices, then begins (outer first), then the ends
    # of slices of no length (inner first), so slices nest on their track.
    order_at_time = np.where(is_end, np.where(zero, 2, 0), 1)
    inner_first = np.where(is_end, -start[event], -end[event])
    order = np.lexsort((event, inner_first, order_at_time, ts))
    event, is_end, ts = event[order], is_end[order], ts[order]

    args = _arguments(ev, interned, colour_iid)
    chunks = [b"".join(head)]
    for lo in range(0, len(event), _CHUNK):
        chunks.append(_encode(event[lo : lo + _CHUNK], is_end[lo : lo + _CHUNK], ts[lo : lo + _CHUNK], kind,
                              track, name_iid, category_iid, ev, args))  # fmt: skip
    with _atomic.replacing(path, "wb") as f:
        f.write(interned.packet())
        for chunk in chunks:
            f.write(chunk)


def _arguments(
    ev: pd.DataFrame, interned: _Interned, colour_iid: np.ndarray
) -> list[tuple[int, bool, np.ndarray, np.ndarray]]:
    """The debug annotations of the slices: (name iid, is an interned string, value, present)."""
    out: list[tuple[int, bool, np.ndarray, np.ndarray]] = []
    n = len(ev)
    out.append((interned.one(_ARG_NAMES, "id"), False, ev["id"].to_numpy(np.int64), np.ones(n, bool)))
    parent = ev["parent"].to_numpy(np.int64)
    out.append((interned.one(_ARG_NAMES, "parent"), False, np.maximum(parent, 0), parent >= 0))
    nbytes = ev["bytes"].to_numpy(np.int64)
    out.append((interned.one(_ARG_NAMES, "bytes"), False, np.maximum(nbytes, 0), nbytes > 0))
    seq = ev["seq"].to_numpy(np.int64)
    out.append((interned.one(_ARG_NAMES, "seq"), False, np.maximum(seq, 0), seq >= 0))
    for column in _STRING_ARGS:
        if column not in ev:
            continue
        values = ev[column]
        if values.dtype == object:
            values = pd.Series(_strings(values), index=ev.index)
        ids, present = interned.ids(_ARG_STRINGS, values.to_numpy(dtype=object))
        if present.any():
            out.append((interned.one(_ARG_NAMES, column), True, ids, present))
    running = ev["dur_ns"].to_numpy(np.int64) < 0
    if running.any():
        out.append((interned.one(_ARG_NAMES, "still running"), False, np.ones(n, np.int64), running))
    out.append((interned.one(_ARG_NAMES, "colour"), True, colour_iid, colour_iid > 0))
    return out


def _encode(event: np.ndarray, is_end: np.ndarray, ts: np.ndarray, kind: np.ndarray, track: np.ndarray,
            name_iid: np.ndarray, category_iid: np.ndarray, ev: pd.DataFrame,
            args: list[tuple[int, bool, np.ndarray, np.ndarray]]) -> bytes:  # fmt: skip
    """The packets of one chunk of rows."""
    n = len(event)
    k = kind[event]
    is_counter = np.isin(k, ["alloc", "free"])
    is_instant = np.isin(k, ["mark", "step"])
    starts = ~is_end & ~is_counter & ~is_instant
    kind_of_packet = np.where(
        is_end, _END, np.where(is_counter, _COUNTER, np.where(is_instant, _INSTANT, _BEGIN))
    )
    named = ~is_end & ~is_counter
    track_event = [
        *_scalar(9, kind_of_packet),
        *_scalar(11, track[event]),
        *_scalar(10, name_iid[event], named),
        *_scalar(3, category_iid[event], starts),
    ]
    for name_id, interned, values, present in args:
        on = starts & present[event]
        value_field = 17 if interned else 4
        value = _varint(values[event])
        head = _tag(1, 0) + _message([(0, name_id)])[1:] + _tag(value_field, 0)  # name iid, value's tag
        annotation = [_const(head, n, on), (value[0], np.where(on, value[1], 0))]
        track_event += _nested(4, annotation, on)
    total = ev["total"].to_numpy(np.int64)[event]
    track_event += _scalar(30, np.maximum(total, 0), is_counter)
    packet = [
        *_scalar(8, ts),
        _const(_message([(10, _SEQUENCE)]), n),
        *_nested(11, track_event),
        _const(_message([(13, _NEEDS_STATE)]), n),
    ]
    return _bytes(_nested(1, packet))
