"""``torch.cuda.nvtx`` inside ``from_cuda()``: NVTX's ranges and marks as labels for a profiler.

Note [NVTX labels]
NVTX calls name regions for a profiler (Nsight) and do nothing else: a script written for CUDA
wraps its forward, its data loading or a whole step in them. Inside ``from_cuda()`` they keep NVTX's
contract (``range_push`` returns the zero-based depth of the range it starts, ``range_pop`` that of
the range it ends, or -1 with none open; ``range_start`` a handle that ``range_end`` takes, on any
thread; ``range`` a context manager and decorator that formats its message) and hand each start,
end and mark to the device's seam (``_seam.label``). There openreg-lab records it as an instant,
as ``openreg_lab.mark`` does: a range's start under its message, its end as ``"<message> (end)"``,
drawn as lines on the timeline; with no trace open (or no lab attached) a label goes nowhere, as
NVTX's do with no profiler attached. Range stacks are per thread, as NVTX's are.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from openreg_lab.device import _seam

__all__ = ["mark", "range", "range_end", "range_pop", "range_push", "range_start"]

_local = threading.local()  # .stack: this thread's open range_push messages
_started: dict[int, str] = {}  # range_start handle -> message, until its range_end
_handles = itertools.count(1)
_lock = threading.Lock()


def _message(call: str, msg: Any) -> str:
    if not isinstance(msg, str):
        raise TypeError(f"torch.cuda.nvtx.{call}(msg) takes a string, got {type(msg).__name__}")
    return msg


def _stack() -> list[str]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def range_push(msg: str) -> int:
    """Start a range named ``msg`` on this thread; the zero-based depth of the range started."""
    stack = _stack()
    stack.append(_message("range_push", msg))
    _seam.label(msg)
    return len(stack) - 1


def range_pop() -> int:
    """End this thread's innermost range; the zero-based depth of the range ended, -1 if none was
    open (as NVTX returns a negative number)."""
    stack = _stack()
    if not stack:
        return -1
    msg = stack.pop()
    _seam.label(f"{msg} (end)")
    return len(stack)


def range_start(msg: str) -> int:
    """Start a range named ``msg`` that any thread may end; the handle ``range_end`` takes."""
    msg = _message("range_start", msg)
    with _lock:
        handle = next(_handles)
        _started[handle] = msg
    _seam.label(msg)
    return handle


def range_end(range_id: int) -> None:
    """End the range ``range_start`` returned ``range_id`` for."""
    with _lock:
        msg = _started.pop(range_id, None)
    if msg is None:
        warnings.warn(
            f"torch.cuda.nvtx.range_end({range_id!r}): no range with this handle is open (never "
            "started, or ended already); NVTX ignores the call, and so does openreg",
            stacklevel=2,
        )
        return
    _seam.label(f"{msg} (end)")


def mark(msg: str) -> None:
    """An instant named ``msg``."""
    _seam.label(_message("mark", msg))


@contextlib.contextmanager
def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
    """A range around the block (or the decorated function), named ``msg.format(*args, **kwargs)``."""
    range_push(_message("range", msg).format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
