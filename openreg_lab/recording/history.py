"""The memory history: what ``openreg_lab.memory._record_memory_history`` starts, as
``torch.cuda.memory._record_memory_history`` does on CUDA (Note [The memory history] in
``csrc/trace/MemoryHistory.h``).

While it runs, each action of openreg's allocator (an allocation, a free, a block taken from the
host or given back, an allocation that failed) is an entry of a ring of ``max_entries``, newest
kept, with the Python stack that made it (Note [Interned stacks] in
``csrc/python/AllocStacks.cpp``); ``snapshot.py`` turns it and the allocator's blocks into
PyTorch's snapshot. It is not a trace: it records no ops, costs no RecordFunction callback, and a
trace opened meanwhile is unchanged.
"""

from __future__ import annotations

import operator
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from openreg_lab import _C
from openreg_lab.recording import _strings

#: struct HistoryEntry (csrc/trace/MemoryHistory.h), 32 bytes.
ENTRY_DTYPE = np.dtype(
    [("time_ns", "<i8"), ("address", "<u8"), ("size", "<i8"), ("stack", "<u4"), ("action", "i1"),
     ("device", "i1"), ("unused", "<i2")]
)  # fmt: skip
assert ENTRY_DTYPE.itemsize == 32
#: struct StackFrame (csrc/python/AllocStacks.cpp): interned file and name, and the line.
FRAME_DTYPE = np.dtype([("file", "<u4"), ("line", "<i4"), ("name", "<u4")])
#: enum HistoryAction: a free is CUDA's free_requested and free_completed at once.
ALLOC, FREE, SEGMENT_ALLOC, SEGMENT_FREE, OOM = range(5)
#: What torch.cuda.memory._record_memory_history's skip_actions may name.
SKIPPABLE = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot")
_CONTEXTS = {None: 0, "state": 1, "alloc": 2, "all": 3}

#: The actions the last start asked to skip, for the two halves of a free the recorder keeps as one.
_skipped: set[str] = set()


@dataclass
class History:
    """The history read at one moment: its entries (oldest first) and the stack tables."""

    entries: np.ndarray  # ENTRY_DTYPE
    appended: int  # entries appended since it started; entries[i] is number appended - len + i
    max_entries: int
    enabled: bool
    frames: np.ndarray  # FRAME_DTYPE, by frame id
    offsets: np.ndarray  # stack s: members[offsets[s]:offsets[s + 1]]
    members: np.ndarray  # frame ids, innermost first
    strings: list[str]  # the recorder's string table (file and function names)
    skipped: frozenset[str]  # skip_actions

    @property
    def dropped(self) -> int:
        """Entries the ring overwrote: the oldest, once ``max_entries`` were kept."""
        return self.appended - len(self.entries)


def record_memory_history(
    enabled: str | bool | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: list[str] | None = None,
    **legacy: Any,
) -> None:
    """Start, change or stop the memory history of every openreg device, as
    ``torch.cuda.memory._record_memory_history`` does on CUDA.

    Args:
        enabled: ``"all"``: keep a history of the allocator's actions and the stack of each live
            block; ``"state"``: only the live blocks' stacks; ``None``: stop, and forget what was
            kept (as CUDA does). ``True``/``False`` is torch's older form (below).
        context: which stacks to keep: ``None`` none, ``"state"`` the live blocks', ``"alloc"``
            also each allocation's, ``"all"`` also each free's.
        stacks: ``"python"`` or ``"all"``: the Python frames (openreg records no C++ frames, so
            ``"all"`` keeps the Python ones).
        max_entries: the most entries kept (from 1): when full, each new one replaces the oldest,
            and the snapshot says how many were dropped.
        device: ignored, as on CUDA: the history covers every device.
        clear_history: forget the entries kept so far.
        compile_context: accepted; the frames of code ``torch.compile`` generated are recorded as
            any other, with the source line of its node where Inductor knows it.
        global_record_annotations: only ``False``: openreg records no annotations in the history
            (``openreg_lab.trace()`` records ``record_function`` ranges).
        skip_actions: actions not to keep (``"alloc"``, ``"free_requested"``, ``"free_completed"``,
            ``"segment_alloc"``, ``"segment_free"``, ``"oom"``, ``"snapshot"``).

        **legacy: the arguments of torch's older form ``_record_memory_history(True,
            record_context=True, trace_alloc_max_entries=1, trace_alloc_record_context=False, ...)``,
            read as torch reads them.
    """
    if isinstance(enabled, bool):
        _legacy(enabled, device=device, clear_history=clear_history, **legacy)
        return
    if legacy:
        raise TypeError(f"_record_memory_history() got unexpected arguments {sorted(legacy)}")
    if enabled not in (None, "state", "all"):
        raise ValueError(f"_record_memory_history: enabled is 'all', 'state' or None, got {enabled!r}")
    if context not in _CONTEXTS:
        raise ValueError(
            f"_record_memory_history: context is 'all', 'alloc', 'state' or None, got {context!r}"
        )
    if stacks not in ("python", "all"):
        raise ValueError(f"_record_memory_history: stacks is 'python' or 'all', got {stacks!r}")
    if isinstance(max_entries, bool) or not hasattr(max_entries, "__index__"):
        raise TypeError(f"_record_memory_history: max_entries is a number of entries, got {max_entries!r}")
    limit = operator.index(max_entries)
    if not 1 <= limit < 2**64:
        raise ValueError(f"_record_memory_history: max_entries is from 1 to 2**64 - 1 entries, got {limit}")
    if not isinstance(compile_context, bool):
        raise TypeError(f"_record_memory_history: compile_context is True or False, got {compile_context!r}")
    if global_record_annotations is not False:
        raise ValueError(
            "_record_memory_history: global_record_annotations=True is not supported on openreg (its "
            "history records no annotations); openreg_lab.trace() records record_function ranges"
        )
    skip = _check_skip(skip_actions)
    _start(enabled, context, limit, skip, clear_history)


def _check_skip(skip_actions: object) -> set[str]:
    if skip_actions is None:
        return set()
    if isinstance(skip_actions, str) or not isinstance(skip_actions, list | tuple | set | frozenset):
        raise TypeError(
            f"_record_memory_history: skip_actions is a list of action names, got {skip_actions!r}"
        )
    unknown = [a for a in skip_actions if a not in SKIPPABLE]
    if unknown:
        raise ValueError(
            f"_record_memory_history: unknown skip_actions {unknown}; the actions are {', '.join(SKIPPABLE)}"
        )
    return set(skip_actions)


def _start(enabled: str | None, context: str | None, limit: int, skip: set[str], clear: bool) -> None:
    bits = 0
    for name, code in (("alloc", ALLOC), ("segment_alloc", SEGMENT_ALLOC), ("segment_free", SEGMENT_FREE),
                       ("oom", OOM)):  # fmt: skip
        if name in skip:
            bits |= 1 << code
    if {"free_requested", "free_completed"} <= skip:
        bits |= 1 << FREE
    _skipped.clear()
    _skipped.update(skip)
    _C._memory_history_configure(
        enabled is not None, enabled == "all", limit, _CONTEXTS[context], bits, clear
    )


def _legacy(
    enabled: bool,
    record_context: bool = True,
    trace_alloc_max_entries: int = 1,
    trace_alloc_record_context: bool = False,
    device: Any = None,
    record_context_cpp: bool = False,
    clear_history: bool = False,
    **unsupported: Any,
) -> None:
    """torch's older ``_record_memory_history(enabled: bool, ...)``."""
    if unsupported:
        raise TypeError(f"_record_memory_history() got unexpected arguments {sorted(unsupported)}")
    if not enabled:
        _start(None, None, 1, set(), True)
        return
    context = "alloc" if trace_alloc_record_context else "state" if record_context else None
    limit = operator.index(trace_alloc_max_entries)
    if limit < 1:
        raise ValueError(f"_record_memory_history: trace_alloc_max_entries is 1 or more, got {limit}")
    _start("all", context, limit, set(), clear_history)


def read() -> History:
    """The history now, with the stack tables and strings its entries name."""
    raw = _C._memory_history_read()
    tables = _C._memory_stacks()
    n_strings = _strings.interned_count()  # after the stacks: every name they hold is interned
    return History(
        entries=np.frombuffer(raw["entries"], dtype=ENTRY_DTYPE),
        appended=int(raw["appended"]),
        max_entries=int(raw["max_entries"]),
        enabled=bool(raw["enabled"]),
        frames=np.frombuffer(tables["frames"], dtype=FRAME_DTYPE),
        offsets=np.frombuffer(tables["offsets"], dtype=np.uint32),
        members=np.frombuffer(tables["members"], dtype=np.uint32),
        strings=_strings.strings[:n_strings],
        skipped=frozenset(_skipped),
    )


def recording() -> bool:
    """Whether a memory history is being recorded (``enabled`` "all" or "state")."""
    return bool(_C._memory_history_on())
