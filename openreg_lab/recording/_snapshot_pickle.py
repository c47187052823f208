"""Writing PyTorch's memory snapshot as a pickle, a million entries in a fraction of a second.

Note [A snapshot written in columns]
``torch.cuda.memory._dump_snapshot`` pickles a dict with one small dict per trace entry. Built and
pickled that way, a million entries take about 3 s and 480 MB (the dicts, then the pickler's memo
of every one). The entries of a snapshot all have the same keys and the same kinds of values,
so this module writes them from numpy columns as fixed-size pickle records (the opcodes of a dict
of seven keys, with the values' bytes in place), a chunk at a time: what ``pickle.load`` reads back
is the same dict, built at load. Strings, each frame and each stack's list of frames are written
once, first (memoized, then popped off the stack), and every entry refers to them by their memo
index, as the pickler's own memo would. Everything else (the segments, further top-level keys) is
written by :func:`_obj`. Protocol 2, as torch's C++ pickler writes CUDA's snapshots; strings are
encoded with ``surrogatepass``, as the pickler does, so a lone surrogate in a file name (Note
[Strings the recorder keeps]) loads as itself.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

#: The trace entries' actions, by code (torch.cuda.memory._snapshot's TraceEntry).
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom")
OOM = ACTIONS.index("oom")
_CHUNK = 1 << 18  # entries a block of records holds (21 MB)


@dataclass(frozen=True)
class Stack:
    """In a segment or block dict: the frames list of stack ``index`` of :class:`Parts`."""

    index: int


@dataclass
class Entries:
    """One device's trace entries, as columns of one length."""

    action: np.ndarray  # codes of ACTIONS
    addr: np.ndarray  # the block's address; an oom's: the bytes the device had free
    size: np.ndarray
    time_us: np.ndarray
    stack: np.ndarray  # index into Parts.stacks
    category: np.ndarray  # index into Parts.categories

    @staticmethod
    def empty() -> Entries:
        z = np.zeros(0, dtype=np.int64)
        return Entries(z, z, z, z, z, z)

    def __len__(self) -> int:
        return len(self.action)


@dataclass
class Parts:
    """What a snapshot holds, before it is written."""

    frames: list[tuple[str, int, str]]  # (filename, line, name)
    stacks: list[Sequence[int]]  # frame indices, innermost first; stack 0 is no frames
    categories: list[str]
    segments: list[dict[str, Any]]  # plain values, Stack for a frames list
    device_traces: list[Entries]
    extra: dict[str, Any] = field(default_factory=dict)  # more top-level keys, plain values


_KEYS = ("action", "addr", "device_free", "size", "stream", "time_us", "frames", "category")

# One entry: {action, addr (device_free for an oom), size, stream, time_us, frames, category}.
_GET, _LONG8 = ord("j"), (0x8A, 8)
_RECORD = np.dtype(
    [("dict", "u1"), ("mark", "u1")]
    + [("action_get", "u1"), ("action_key", "<u4"), ("action_vget", "u1"), ("action", "<u4")]
    + [("addr_get", "u1"), ("addr_key", "<u4"), ("addr_long", "u1"), ("addr_len", "u1"), ("addr", "<u8")]
    + [("size_get", "u1"), ("size_key", "<u4"), ("size_long", "u1"), ("size_len", "u1"), ("size", "<i8")]
    + [("stream_get", "u1"), ("stream_key", "<u4"), ("stream_int", "u1"), ("stream", "u1")]
    + [("time_get", "u1"), ("time_key", "<u4"), ("time_long", "u1"), ("time_len", "u1"), ("time", "<i8")]
    + [("frames_get", "u1"), ("frames_key", "<u4"), ("frames_vget", "u1"), ("frames", "<u4")]
    + [("cat_get", "u1"), ("cat_key", "<u4"), ("cat_vget", "u1"), ("cat", "<u4")]
    + [("setitems", "u1")],
    align=False,
)


def write(parts: Parts, out: IO[bytes]) -> None:
    """Write ``parts`` to ``out`` as the pickle of the snapshot dict (Note [A snapshot written in
    columns])."""
    memo: dict[Any, int] = {}
    head = bytearray(b"\x80\x02")

    def put(key: Any) -> None:
        memo[key] = len(memo)
        head.extend(b"r" + struct.pack("<I", memo[key]) + b"0")  # LONG_BINPUT, POP

    for text in (*_KEYS, *ACTIONS, "filename", "line", "name", *parts.categories):
        if ("s", text) not in memo:
            head.extend(_str(text))
            put(("s", text))
    get = {text: _get(memo[("s", text)]) for (_, text) in memo}
    used = {int(s) for e in parts.device_traces for s in np.unique(e.stack)} | _stacks_in(parts.segments)
    frames = sorted({int(f) for s in used for f in parts.stacks[s]})
    for f in frames:
        file, line, name = parts.frames[f]
        head.extend(b"}(" + get["filename"] + _str(file) + get["line"] + _int(line))
        head.extend(get["name"] + _str(name) + b"u")
        put(("f", f))
    for s in sorted(used):
        members = parts.stacks[s]
        head.extend(
            b"]"
            + (b"(" + b"".join(_get(memo[("f", int(f))]) for f in members) + b"e" if len(members) else b"")
        )
        put(("k", s))
    out.write(bytes(head))
    out.write(b"}(" + _str("segments") + _obj(parts.segments, memo) + _str("device_traces") + b"]")
    if parts.device_traces:
        out.write(b"(")
        for entries in parts.device_traces:
            out.write(b"]")
            if len(entries):
                out.write(b"(")
                for start in range(0, len(entries), _CHUNK):
                    out.write(_records(entries, slice(start, start + _CHUNK), memo, parts))
                out.write(b"e")
        out.write(b"e")
    for key, value in parts.extra.items():
        out.write(_str(key) + _obj(value, memo))
    out.write(b"u.")


def _stacks_in(value: Any) -> set[int]:
    if isinstance(value, Stack):
        return {value.index}
    if isinstance(value, dict):
        return set().union(*(_stacks_in(v) for v in value.values()))
    if isinstance(value, list | tuple):
        return set().union(*(_stacks_in(v) for v in value))
    return set()


def _records(e: Entries, part: slice, memo: dict[Any, int], parts: Parts) -> bytes:
    """The fixed-size records of entries ``part`` of ``e``: a record of the opcodes and keys every
    entry shares, repeated, then the values written into it column by column."""
    action = np.asarray(e.action[part], dtype=np.int64)
    n = len(action)
    r = np.frombuffer(_template(memo) * n, dtype=_RECORD).copy()
    addr = np.asarray(e.addr[part], dtype=np.uint64)
    if n and int(addr.max()) >= 1 << 63:
        raise ValueError("a snapshot entry's address does not fit in 63 bits")
    r["addr_key"] = np.where(action == OOM, memo[("s", "device_free")], memo[("s", "addr")])
    r["addr"], r["size"], r["time"] = addr, e.size[part], e.time_us[part]
    r["action"] = np.array([memo[("s", a)] for a in ACTIONS], dtype=np.uint32)[action]
    stack_memo = np.zeros(len(parts.stacks), dtype=np.uint32)
    for s in np.unique(e.stack[part]):
        stack_memo[int(s)] = memo[("k", int(s))]
    r["frames"] = stack_memo[np.asarray(e.stack[part], dtype=np.int64)]
    cats = np.array([memo[("s", c)] for c in parts.categories], dtype=np.uint32)
    r["cat"] = cats[np.asarray(e.category[part], dtype=np.int64)]
    return r.tobytes()


def _template(memo: dict[Any, int]) -> bytes:
    """One entry's record with every value that all entries share (the opcodes, the keys' memo
    indices, the stream 0)."""
    r = np.zeros(1, dtype=_RECORD)
    r["dict"], r["mark"], r["setitems"] = ord("}"), ord("("), ord("u")
    for k in ("action", "addr", "size", "stream", "time", "frames", "cat"):
        r[f"{k}_get"] = _GET
    for k, key in (("action", "action"), ("size", "size"), ("stream", "stream"), ("time", "time_us"),
                   ("frames", "frames"), ("cat", "category")):  # fmt: skip
        r[f"{k}_key"] = memo[("s", key)]
    r["action_vget"] = r["frames_vget"] = r["cat_vget"] = _GET
    for k in ("addr", "size", "time"):
        r[f"{k}_long"], r[f"{k}_len"] = _LONG8
    r["stream_int"], r["stream"] = ord("K"), 0
    return r.tobytes()


def _get(index: int) -> bytes:
    return b"j" + struct.pack("<I", index)  # LONG_BINGET


def _str(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def _int(n: int) -> bytes:
    if 0 <= n < 256:
        return b"K" + bytes([n])  # BININT1
    if -(2**31) <= n < 2**31:
        return b"J" + struct.pack("<i", n)  # BININT
    data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data  # LONG1


def _obj(value: Any, memo: dict[Any, int]) -> bytes:
    """``value`` (None, a bool, int, float, str, list, tuple, dict or Stack) as pickle opcodes."""
    if value is None:
        return b"N"
    if value is True or value is False:
        return b"\x88" if value else b"\x89"
    if isinstance(value, int):
        return _int(value)
    if isinstance(value, float):
        return b"G" + struct.pack(">d", value)
    if isinstance(value, str):
        return _str(value)
    if isinstance(value, Stack):
        return _get(memo[("k", value.index)])
    if isinstance(value, list):
        return b"]" + (b"(" + b"".join(_obj(v, memo) for v in value) + b"e" if value else b"")
    if isinstance(value, tuple):
        return b"(" + b"".join(_obj(v, memo) for v in value) + b"t"
    if isinstance(value, dict):
        items = b"".join(_obj(k, memo) + _obj(v, memo) for k, v in value.items())
        return b"}" + (b"(" + items + b"u" if value else b"")
    raise TypeError(f"a snapshot holds no {type(value).__name__}")
