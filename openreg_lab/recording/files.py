"""Trace files: what ``Trace.save`` writes and ``load_trace`` reads back (lossless).

The saved format is a zip of uncompressed numpy arrays (as ``numpy.savez`` writes; ``_archive``):
one array per event field, the shapes pool, and a JSON header with a magic string and version. It
stores the recorder's columns as they are (64 bytes an event), so a million events write and read
in a fraction of a second. A file is read as untrusted (Note [Reading an untrusted trace file]),
then checked whole before any view reads it (``_damage``, ``_host_problem``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from openreg_lab.recording import _archive, _memory_file, atomic
from openreg_lab.recording.events import (
    EVENT_DTYPE,
    KERNELS,
    KINDS,
    MAX_DEVICES,
    MAX_DTYPE,
    MEMORY_KINDS,
    NO_DEVICE,
    Columns,
)
from openreg_lab.recording.host import Samples
from openreg_lab.recording.observations import Observed

MAGIC = "openreg-lab trace"
OPS = ("all", "kernels")  # trace(ops=...): where the op events came from
VERSION = 2  # 2: memory events name their block (Note [Memory events]); module, segment, oom kinds
READS = (1, 2)  # the versions load_trace reads (1: before those, every other field the same)


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
    job: dict[str, Any] | None = None  # run id, rank, world size (Note [A run id for every trace])
    samples: Samples | None = None  # host samples (trace(host=True)); None: not sampled
    step_sources: list[int] | None = None  # per step, the optimizer that ended it (steps.sources)
    observed: Observed | None = None  # memory observations (Note [Memory observations in a trace file])


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
    job: dict[str, Any] | None = None,
    samples: Samples | None = None,
    step_sources: list[int] | None = None,
    observed: Observed | None = None,
) -> None:
    """Write the columns ``c`` of a trace and its settings to ``path`` (conventionally ``*.trace``),
    whole or not at all: a save that fails part way leaves the file that was there untouched."""
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
        "job": job,
        "threads": {str(k): v for k, v in c.threads.items()},
        "strings": c.strings,
    }
    arrays = {f"f_{name}": values for name, values in c.fields.items()}
    arrays["pool"] = c.pool
    if samples is not None:  # Note [Host samples in a trace file]
        header["host"] = {"interval_ns": samples.interval_ns, "strings": samples.strings}
        arrays.update({f"h_{k}": getattr(samples, k) for k in Samples.SAMPLE_FIELDS})
        arrays.update({f"n_{k}": getattr(samples, k) for k in Samples.NODE_FIELDS})
    if step_sources is not None:
        header["step_sources"] = step_sources
    if observed is not None:  # Note [Memory observations in a trace file]
        header["memory"], more = _memory_file.pack(observed)
        arrays.update(more)
    text = json.dumps(header, ensure_ascii=False).encode("utf-8", "surrogatepass")  # Note [Header text]
    arrays["header"] = np.frombuffer(text, dtype=np.uint8)
    with atomic.replacing(path) as f:  # Note [Where an output may go]
        _archive.write(f, arrays)


def read(path: str | os.PathLike[str]) -> Saved:
    """Read a file written by ``save``.

    Raises:
        FileNotFoundError: no such file (another ``OSError`` when it cannot be read: permissions).
        ValueError: the file is not an openreg-lab trace, is of a newer version, or is damaged.
    """
    try:
        with _archive.Archive(path) as data:  # Note [Reading an untrusted trace file]
            header = _header(data)
            fields = {name[2:]: data.array(name) for name in data.names if name.startswith("f_")}
            if "pool" not in data.names:
                raise _Damaged("it lacks the shapes pool (pool.npy)")
            pool = data.array("pool")
            host = {name: data.array(name) for name in data.names if name.startswith(("h_", "n_"))}
            memory = {name: data.array(name) for name in data.names if name.startswith(_memory_file.PREFIXES)}
    except (_Damaged, _archive.DamagedMember) as d:
        problem: str | None = str(d)
    except _Version as v:
        raise ValueError(
            f"{os.fspath(path)!r} is an openreg-lab trace of format version {v.version}; this "
            f"openreg-lab reads versions {' and '.join(map(str, READS))}: upgrade openreg-lab to read it"
        ) from None
    except _archive.NotATrace as e:
        raise ValueError(
            f"{os.fspath(path)!r} is not an openreg-lab trace: {e}. Trace files are written by "
            "Trace.save(); the file may be truncated or of another kind"
        ) from None
    else:
        problem = (
            _damage(header, fields, pool)
            or _host_problem(header, host)
            or _memory_file.problem(header, memory)
        )
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
        job=header.get("job"),  # checked by _job_problem; absent in files from before run ids
        samples=_samples_of(header, host),
        step_sources=header.get("step_sources"),
        observed=_memory_file.unpack(header, memory),
    )


# Note [Header text]
# The header is JSON holding the recorder's string table, and a Python string may hold surrogate
# code points (a file name's undecodable byte, "caf\udce9"; anything a mark was given). JSON's
# \uXXXX escapes cannot keep a high surrogate followed by a low one apart from the character the
# pair encodes: "a\ud83d\ude00b" (four code points) was read back as "a\U0001f600b" (three).
# So the header is written with every character as itself and encoded with the "surrogatepass"
# handler (a surrogate code point as its three-byte form, a character beyond the BMP as its
# four-byte UTF-8), and read back the same way: every string comes back equal. A header without
# surrogates is plain UTF-8; files written with ASCII escapes before read as they did.


def _header(data: _archive.Archive) -> dict[str, Any]:
    """The header of the archive ``data``: its magic and version checked (``NotATrace``, ``_Version``
    or ``_Damaged``)."""
    if "header" not in data.names:
        raise _archive.NotATrace("it is a zip without an openreg-lab header (header.npy)")
    try:
        raw = data.array("header")
    except _archive.DamagedMember as e:
        raise _archive.NotATrace(str(e)) from None
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise _archive.NotATrace(f"its header.npy holds {raw.dtype} of {raw.ndim} dimensions, not text")
    try:
        header = json.loads(raw.tobytes().decode("utf-8", "surrogatepass"))  # Note [Header text]
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise _archive.NotATrace(f"its header is not JSON text ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise _Damaged(f"its header is a JSON {type(header).__name__}, not an object")
    if header.get("magic") != MAGIC:
        raise _archive.NotATrace(f"its header has no {MAGIC!r} magic")
    if not _is_int(header.get("version")) or header["version"] < 1:
        raise _Damaged(f"its header's version is {_short(header.get('version'))}, not a positive integer")
    if header["version"] not in READS:
        raise _Version(header["version"])
    return header


# Note [Host samples in a trace file]
# A trace sampled on the host (trace(host=True)) adds arrays h_<field> (one entry a sample) and
# n_<field> (one entry a stack node) to the file, and a "host" object to its header (the interval
# and the string table of function and file names). Readers from before host samples skip them; a
# file without them loads with no samples. Like the event columns, they are untrusted: every index
# must point inside what the file holds before a view reads a string through it.
def _host_problem(header: dict[str, Any], host: dict[str, np.ndarray]) -> str | None:
    """What is wrong with the host samples of a file (None: nothing, or none saved)."""
    sources = header.get("step_sources")
    if sources is not None and not (
        isinstance(sources, list) and all(_is_int(v) and 0 <= v < 2**31 for v in sources)
    ):
        return "its header's step_sources is not a list of small non-negative integers"
    h = header.get("host")
    if h is None and not host:
        return None
    if not isinstance(h, dict):
        return f"its header's host is {_short(h)}, not an object with the host samples' strings"
    if not _is_int(h.get("interval_ns")) or h["interval_ns"] <= 0:
        return f"its header's host interval_ns is {_short(h.get('interval_ns'))}, not a positive integer"
    strings = h.get("strings")
    if not isinstance(strings, list) or not all(isinstance(x, str) for x in strings) or not strings:
        return "its header's host strings is not a non-empty list of strings"
    names = [f"h_{k}" for k in Samples.SAMPLE_FIELDS] + [f"n_{k}" for k in Samples.NODE_FIELDS]
    missing = [k for k in names if k not in host]
    if missing:
        return f"it lacks the host columns {', '.join(missing)}"
    for k in names:
        v = host[k]
        if v.ndim != 1 or not np.issubdtype(v.dtype, np.integer):
            return f"its host column {k} holds {v.dtype} values of {v.ndim} dimensions, not integers"
    ns, nn = len(host["h_time"]), len(host["n_parent"])
    if any(len(host[f"h_{k}"]) != ns for k in Samples.SAMPLE_FIELDS) or any(
        len(host[f"n_{k}"]) != nn for k in Samples.NODE_FIELDS
    ):
        return "its host columns disagree in length"
    node = host["h_node"]
    if ns and (int(node.min()) < -1 or int(node.max()) >= nn):
        return f"a host sample's node is not a node of the file (h_node; {nn} nodes)"
    for k, lo in (("h_time", 0), ("h_thread", 0), ("h_cpu", -1), ("h_queue", -1)):
        if ns and int(host[k].min()) < lo:
            return f"its host column {k} holds {int(host[k].min())}, below {lo}"
    if nn:
        parent = host["n_parent"].astype(np.int64)
        if int(parent.min()) < -1 or (parent >= np.arange(nn)).any():
            return "a host stack node's parent is not an earlier node (n_parent)"
        for k in ("n_function", "n_file", "n_callee"):
            if int(host[k].min()) < 0 or int(host[k].max()) >= len(strings):
                return f"its host column {k} points past its host strings ({len(strings)} strings)"
        for k in ("n_first_line", "n_line"):
            if int(host[k].min()) < 0:
                return f"its host column {k} holds a negative line number"
    return None


def _samples_of(header: dict[str, Any], host: dict[str, np.ndarray]) -> Samples | None:
    h = header.get("host")
    if h is None:
        return None
    cols = {k: host[f"h_{k}"].astype(np.int64) for k in Samples.SAMPLE_FIELDS}
    cols.update({k: host[f"n_{k}"].astype(np.int64) for k in Samples.NODE_FIELDS})
    return Samples(**cols, strings=list(h["strings"]), interval_ns=int(h["interval_ns"]))


_FIELDS = (*EVENT_DTYPE.names, "id", "thread")
_INT64_MAX = 2**63 - 1
#: Header fields: their type and range (inclusive), and what they are, for the error message.
_HEADER: dict[str, tuple[type, int | None, int | None, str]] = {
    "capacity": (int, 1, _INT64_MAX, "a number of events from 1 to 2**63 - 1"),
    "dropped": (int, 0, _INT64_MAX, "a count of events (0 or more)"),
    "t0": (int, 0, _INT64_MAX, "a monotonic clock time in ns from 0 to 2**63 - 1"),
    "record_shapes": (bool, None, None, "true or false"),
    "stack": (bool, None, None, "true or false"),
    "strings": (list, None, None, "a list of strings"),
    "threads": (dict, None, None, "an object of thread index -> OS thread id"),
}
#: Columns holding a code of an enum: their smallest and largest valid code (devices as the
#: recorder writes them: -2 none, -1 CPU, 0..15 openreg; dtypes: -1 none, c10::ScalarType codes).
_CODES = {
    "kind": (0, len(KINDS) - 1, "kind"),
    "kernel": (0, len(KERNELS) - 1, "kernel"),
    "device": (NO_DEVICE, MAX_DEVICES - 1, "device"),
    "src": (NO_DEVICE, MAX_DEVICES - 1, "device"),
    "dst": (NO_DEVICE, MAX_DEVICES - 1, "device"),
    "from_dtype": (-1, MAX_DTYPE, "dtype"),
    "to_dtype": (-1, MAX_DTYPE, "dtype"),
}


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _header_problem(header: dict[str, Any]) -> str | None:
    """What is wrong with the header's fields (None: nothing), naming the field."""
    for key, (kind, lo, hi, what) in _HEADER.items():
        if key not in header:
            return f"its header lacks {key!r}"
        v = header[key]
        ok = _is_int(v) if kind is int else isinstance(v, kind)
        if ok and lo is not None and not lo <= v <= (hi if hi is not None else v):
            ok = False
        if not ok:
            return f"its header's {key} is {_short(v)}, not {what}"
    if not all(isinstance(x, str) for x in header["strings"]):
        return "its string table holds something other than strings"
    # A lone surrogate is data, not damage: a file name's undecodable byte (surrogateescape).
    for k, v in header["threads"].items():
        if not (k.isdigit() and k.isascii() and _is_int(v) and v >= 0):
            return (
                f"its header's threads has {_short(k)}: {_short(v)}, not a thread index and an OS thread id"
            )
    if header.get("ops", "all") not in OPS:
        return f"its header's ops is {_short(header.get('ops'))}, not one of {', '.join(OPS)}"
    return _job_problem(header.get("job"))


def _job_problem(job: object) -> str | None:
    """What is wrong with the header's ``job`` (None, or run id, rank and world size; Note [A run id
    for every trace] in distributed.py), naming the field."""
    if job is None:
        return None
    if not isinstance(job, dict) or set(job) != {"run_id", "rank", "world_size"}:
        return f"its header's job is {_short(job)}, not an object of run_id, rank and world_size"
    run_id, rank, world = job["run_id"], job["rank"], job["world_size"]
    if not isinstance(run_id, str) or not 0 < len(run_id) <= 200 or not run_id.isprintable():
        return f"its header's job.run_id is {_short(run_id)}, not a printable string of 1 to 200 characters"
    if world is not None and not (_is_int(world) and 1 <= world <= 1 << 24):
        return f"its header's job.world_size is {_short(world)}, not a number of ranks (1 or more) or null"
    if rank is not None and not (_is_int(rank) and 0 <= rank < (world if world is not None else 1 << 24)):
        return f"its header's job.rank is {_short(rank)}, not a rank from 0 to the world size - 1 or null"
    return None


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _damage(header: dict[str, Any], fields: dict[str, np.ndarray], pool: np.ndarray) -> str | None:
    """What makes the file's contents inconsistent (None: nothing), naming the field: the header's
    fields have their types and ranges; every column is integers of one length; every index into
    the string table, the shapes pool and the events points inside what the file holds, and a
    parent comes before its children (so no chain of parents is a cycle); every code of an enum
    column is known; counts and times are not negative."""
    problem = _header_problem(header)
    if problem is not None:
        return problem
    missing = [f for f in _FIELDS if f not in fields]
    if missing:
        return f"it lacks the columns {', '.join(missing)}"
    for name, v in (*fields.items(), ("pool", pool)):
        if v.ndim != 1 or not np.issubdtype(v.dtype, np.integer):
            col = "shapes pool" if name == "pool" else f"{name} column"
            what = "values" if v.ndim == 1 else f"of {v.ndim} dimensions"
            return f"its {col} holds {v.dtype} {what}, not integers"
    n = len(fields["id"])
    if any(len(v) != n for v in fields.values()):
        return "its columns disagree in length"
    if not np.array_equal(fields["id"], np.arange(n)):
        return "its event ids are not 0..n-1"
    if n == 0:
        return None
    strings = header["strings"]
    texts = ~np.isin(fields["kind"], MEMORY_KINDS)  # a memory event's dispatch is an address
    for col in ("name", "dispatch", "source"):
        values = fields[col] if col != "dispatch" else fields[col][texts]
        if not len(values):
            continue
        lo, hi = int(values.min()), int(values.max())
        if lo < 0 or hi >= len(strings):
            bad = lo if lo < 0 else hi
            return f"its {col} column points past its string table ({len(strings)} strings): {bad}"
    for col, (lo, hi, what) in _CODES.items():
        bad = (fields[col] < lo) | (fields[col] > hi)
        if bad.any():
            v = int(fields[col][bad][0])
            return f"an event has an unknown {what} in its {col} column ({v}; known: {lo} to {hi})"
    parent = fields["parent"].astype(np.int64)
    if ((parent < -1) | (parent >= n)).any():
        return "an event's parent is not an event of the file (parent column)"
    if (parent >= fields["id"]).any():
        i = int(np.flatnonzero(parent >= fields["id"])[0])
        return (
            f"event {i}'s parent is {int(parent[i])}, not an earlier event (parent column: a parent "
            "comes before its children, and no event is its own ancestor)"
        )
    threads = {int(k) for k in header["threads"]}
    thread = fields["thread"]
    if int(thread.min()) >= 0 and int(thread.max()) < 1 << 20:  # as recorded: counted, not sorted
        present = set(np.flatnonzero(np.bincount(thread)).tolist())
    else:
        present = set(np.unique(thread).tolist())
    unknown_threads = present - threads
    if unknown_threads:
        return f"its thread column names threads its header's threads lacks: {sorted(unknown_threads)[:5]}"
    for col, lo in (("start_ns", 0), ("dur_ns", -1), ("bytes", 0)):
        if int(fields[col].min()) < lo:
            return f"its {col} column holds {int(fields[col].min())}, below {lo}"
    return _shapes_problem(fields["shapes"], pool)


def _shapes_problem(shapes: np.ndarray, pool: np.ndarray) -> str | None:
    """Every op's shapes record (count, then per argument dtype, ndim, sizes) lies inside the pool."""
    if (shapes < -1).any():
        return "a shapes offset points past the shapes pool (shapes column)"
    offsets = shapes[shapes >= 0].astype(np.int64)
    if not len(offsets):
        return None
    if int(offsets.max()) >= len(pool):
        return "a shapes offset points past the shapes pool (shapes column)"
    count = pool[offsets].astype(np.int64)
    if (count < 0).any():
        return "the shapes pool is truncated (a negative argument count)"
    if (count > (len(pool) - offsets - 1) // 2).any():  # each argument takes 2 entries at least
        return "the shapes pool is truncated (more arguments than it holds)"
    pos = offsets + 1
    for k in range(int(count.max())):
        live = count > k
        at = pos[live]
        if (at + 2 > len(pool)).any():
            return "the shapes pool is truncated"
        ndim = pool[at + 1].astype(np.int64)
        if (ndim < 0).any():
            return "the shapes pool is truncated (a negative number of dimensions)"
        pos[live] = at + 2 + ndim
    if (pos > len(pool)).any():
        return "the shapes pool is truncated"
    return None


class _Damaged(Exception):
    """A header field is wrong before the columns can be read (said as a damaged file)."""


class _Version(Exception):
    def __init__(self, version: Any) -> None:
        super().__init__(version)
        self.version = version
