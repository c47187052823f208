"""The recorder's string table in Python: every string it interned so far, fetched once (the trace's
names, dispatch paths and source lines; the memory history's file and function names)."""

from __future__ import annotations

import os
import threading

from openreg_lab import _C

strings: list[str] = []  # every string the recorder interned so far, by id
_lock = threading.Lock()


def _new_lock_in_child() -> None:
    # Another thread may have held the lock when the process forked: the child would wait for it
    # for ever (Note [The recorder across fork] in csrc/trace/Recorder.cpp). The list is whole:
    # it only grows by extend(), under the GIL.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_in_child)


def interned_count() -> int:
    """How many strings are interned now, fetching only those added since the last call.

    Ids only grow, so a trace's strings are the first ``n`` of ``strings`` whatever is interned later.
    """
    with _lock:
        strings.extend(_C._trace_strings(len(strings)))
        return len(strings)
