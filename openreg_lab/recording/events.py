"""The recorder's raw records, as numpy sees them.

``EVENT_DTYPE`` mirrors ``struct Event`` in ``csrc/trace/Event.h`` field for field (64 bytes); the
two change together. ``merge`` turns the per-thread buffers handed over by ``_C._trace_close`` into
one table of columns ordered by start time, with ids and parent ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

EVENT_DTYPE = np.dtype(
    [
        ("start_ns", "<i8"),
        ("dur_ns", "<i8"),
        ("bytes", "<i8"),
        ("seq", "<i8"),
        ("parent", "<i4"),
        ("name", "<u4"),
        ("dispatch", "<u4"),
        ("source", "<u4"),
        ("shapes", "<u4"),
        ("reserved", "<u4"),
        ("kind", "i1"),
        ("kernel", "i1"),
        ("device", "i1"),
        ("src", "i1"),
        ("dst", "i1"),
        ("from_dtype", "i1"),
        ("to_dtype", "i1"),
        ("flags", "u1"),
    ]
)
assert EVENT_DTYPE.itemsize == 64

# The index is the code of csrc/trace/Event.h's Kind.
KINDS = (
    "op", "backward", "fallback", "copy", "cast", "alloc", "free", "mark",
    "compiled", "compile", "collective", "step", "module", "segment", "oom",
)  # fmt: skip
STEP = KINDS.index("step")
#: The allocator's events (Note [Memory events] in csrc/trace/Event.h): each names a block's address.
MEMORY_KINDS = (KINDS.index("alloc"), KINDS.index("free"), KINDS.index("segment"), KINDS.index("oom"))
KERNELS = ("", "native", "fallback", "composite", "generic")
CPU, NO_DEVICE = -1, -2
MAX_DEVICES = 16  # openreg devices are 0..15 (OPENREG_DEVICE_COUNT, csrc/runtime/Device)
MAX_DTYPE = 63  # the largest c10::ScalarType code a dtype column may hold (-1: none)
CACHE_HIT = 1
WAIT = 2  # a collective event that is a wait on it (Note [Collective events])

# c10::ScalarType codes -> names ("float32"), for the dtype columns.
_SCALAR_TYPES = [
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
    torch.float64, torch.complex32, torch.complex64, torch.complex128, torch.bool, torch.qint8,
    torch.quint8, torch.qint32, torch.bfloat16,
]  # fmt: skip


def dtype_name(code: int) -> str | None:
    """The name of c10::ScalarType ``code`` ("float32"), None for -1."""
    if code < 0:
        return None
    if code < len(_SCALAR_TYPES):
        return str(_SCALAR_TYPES[code]).removeprefix("torch.")
    return f"scalar_type_{code}"


def device_name(code: int) -> str | None:
    """ "openreg:1", "cpu", or None for a device code of the recorder."""
    if code == CPU:
        return "cpu"
    if code == NO_DEVICE:
        return None
    return f"openreg:{code}"


@dataclass
class Columns:
    """All events of one trace, one numpy array per field, ordered by start time (id = row)."""

    fields: dict[str, np.ndarray]  # EVENT_DTYPE fields, plus id, parent (trace ids), thread
    pool: np.ndarray  # int64 shapes pool; the "shapes" field is an offset into it, -1: none
    strings: list[str]  # interned strings, indexed by the name/dispatch/source fields
    threads: dict[int, int]  # thread index -> OS thread id

    def __len__(self) -> int:
        return len(self.fields["id"])


def merge(raw: dict[str, Any], strings: list[str]) -> tuple[Columns, int]:
    """Merge ``_C._trace_close``'s per-thread buffers; return the columns and events cut by capacity."""
    columns, cut, _ = merge_with_positions(raw, strings)
    return columns, cut


def merge_with_positions(raw: dict[str, Any], strings: list[str]) -> tuple[Columns, int, np.ndarray]:
    """``merge``, and per event its position in its thread's buffer: how the recorder's C++ names an
    event (with its ``thread``), as torch.profiler's links do (``recording/profiler_work.py``)."""
    parts, pools, threads = [], [], {}
    pool_offset = 0
    row_offset = 0
    for t in raw["threads"]:
        ev = np.frombuffer(t["events"], dtype=EVENT_DTYPE)
        pool = np.frombuffer(t["pool"], dtype=np.int64)
        first = t["first"]
        n = len(ev)
        part = {name: ev[name] for name in EVENT_DTYPE.names}
        local_parent = ev["parent"].astype(np.int64)
        inside = local_parent >= first
        part["parent"] = np.where(inside, local_parent - first + row_offset, -1)
        # The buffer hands over its pool from pool_first on (the session's window).
        shift = pool_offset - 1 - int(t.get("pool_first", 0))
        part["shapes"] = np.where(ev["shapes"] > 0, ev["shapes"].astype(np.int64) + shift, -1)
        part["thread"] = np.full(n, t["thread"], dtype=np.int32)
        part["order"] = np.arange(n, dtype=np.int64)
        part["position"] = first + part["order"]
        parts.append(part)
        pools.append(pool)
        threads[t["thread"]] = t["os_thread"]
        pool_offset += len(pool)
        row_offset += n
    names = [*EVENT_DTYPE.names, "thread", "order", "position"]
    if parts:
        cat = {k: np.concatenate([p[k] for p in parts]) for k in names}
    else:
        cat = {k: np.zeros(0, dtype=EVENT_DTYPE[k] if k in EVENT_DTYPE.names else np.int64) for k in names}
        cat["parent"] = np.zeros(0, dtype=np.int64)
        cat["shapes"] = np.zeros(0, dtype=np.int64)
    # Order by start time; a parent starts no later than its children, and on
    # a tie its buffer position (order) keeps it first.
    perm = np.lexsort((cat["order"], cat["thread"], cat["start_ns"]))
    cut = max(0, len(perm) - int(raw["capacity"]))
    if cut:
        perm = perm[: int(raw["capacity"])]
    new_id = np.full(row_offset, -1, dtype=np.int64)
    new_id[perm] = np.arange(len(perm))
    fields = {k: cat[k][perm] for k in names if k not in ("order", "position")}
    old_parent = fields["parent"]
    fields["parent"] = np.where(old_parent >= 0, new_id[np.maximum(old_parent, 0)], -1)
    fields["id"] = np.arange(len(perm), dtype=np.int64)
    pool = np.concatenate(pools) if pools else np.zeros(0, dtype=np.int64)
    return Columns(fields, pool, strings, threads), cut, cat["position"][perm]


def decode_shapes(pool: np.ndarray, offset: int) -> tuple[list[list[int]], list[str | None]]:
    """The shapes and dtypes of one op's tensor arguments, from the pool at ``offset``."""
    count = int(pool[offset])
    i = offset + 1
    shapes, dtypes = [], []
    for _ in range(count):
        if i + 2 > len(pool) or i + 2 + int(pool[i + 1]) > len(pool) or int(pool[i + 1]) < 0:
            raise ValueError(f"damaged trace: the shapes at offset {offset} run past the shapes pool")
        dtype, ndim = int(pool[i]), int(pool[i + 1])
        shapes.append([int(s) for s in pool[i + 2 : i + 2 + ndim]])
        dtypes.append(dtype_name(dtype))
        i += 2 + ndim
    return shapes, dtypes


def inherit(values: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Give events without a value (0) their nearest ancestor's value (the ``source`` column)."""
    out = values.copy()
    while True:
        take = (out == 0) & (parent >= 0)
        take &= out[np.maximum(parent, 0)] != 0
        if not take.any():
            return out
        out[take] = out[parent[take]]


def compiled_codes(f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The string codes of ``fused``, ``graph`` and ``reason`` per event (0: none; Note [Compiled
    code in the trace] in csrc/trace/Compiled.h).

    A ``compiled`` event is a compiled graph's call (no fused ops) or a generated kernel inside
    one: ``graph`` names the graph of both. A ``compile`` event's ``reason`` is Dynamo's.
    """
    kind, parent, text = f["kind"], f["parent"], f["dispatch"].astype(np.int64)
    compiled = kind == KINDS.index("compiled")
    is_kernel = compiled & (text > 0)
    graph = np.where(compiled, f["name"].astype(np.int64), 0)
    inner = is_kernel & (parent >= 0)
    inner &= compiled[np.maximum(parent, 0)]
    graph[inner] = graph[parent[inner]]
    graph[is_kernel & ~inner] = 0
    is_compile = (kind == KINDS.index("compile")) & (text > 0)
    return {"fused": np.where(is_kernel, text, 0), "graph": graph, "reason": np.where(is_compile, text, 0)}


def addresses(f: dict[str, np.ndarray]) -> np.ndarray:
    """Per event, the block address a memory event names (``dispatch | reserved << 32``), -1 for
    other events (Note [Memory events] in ``csrc/trace/Event.h``)."""
    is_mem = np.isin(f["kind"], MEMORY_KINDS)
    address = f["dispatch"].astype(np.int64) | (f["reserved"].astype(np.int64) << 32)
    return np.where(is_mem, address, -1)


def forward_links(f: dict[str, np.ndarray]) -> np.ndarray:
    """For a backward node and the ops it ran: the id of the forward op that made the node.

    The autograd node made by a forward op carries that op's sequence number; ops that made no node
    share the number of the next one that did, so the maker is the last op with the number.
    """
    n = len(f["id"])
    out = np.full(n, -1, dtype=np.int64)
    kind, seq, parent = f["kind"], f["seq"], f["parent"]
    makers = np.flatnonzero((kind == 0) & (seq >= 0))  # ops that may have made a node, by id
    order = np.lexsort((makers, seq[makers]))  # by number, then id
    makers, numbers = makers[order], seq[makers[order]].astype(np.int64)
    nodes = np.flatnonzero((kind == 1) & (seq >= 0))
    # The last maker with the node's number and an id below the node's.
    at = np.searchsorted(numbers * (n + 1) + makers, seq[nodes].astype(np.int64) * (n + 1) + nodes) - 1
    found = at >= 0
    found[found] = numbers[at[found]] == seq[nodes[found]]
    out[nodes[found]] = makers[at[found]]
    inside = (parent >= 0) & (kind == 0)
    inside &= kind[np.maximum(parent, 0)] == 1
    out[inside] = out[parent[inside]]
    return out
