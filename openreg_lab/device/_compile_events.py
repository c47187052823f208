"""Compilations, recompiles and graph breaks as ``compile`` events (Note [Compiled code in the trace]).

Dynamo calls its compile callbacks (``torch._dynamo.callback_handler``) when it starts and ends
compiling a frame, or a backward graph deferred to its first run. Each compilation is one
``compile`` event spanning all of it (Dynamo's tracing, AOTAutograd, Inductor's lowering and the
C++ build), named ``compile <id>`` (``compile 0/0``, ``compile 0/0 backward``), or ``recompile
<id>`` with Dynamo's reason (the first guard that failed) in ``reason``; the ops compilation runs
on the device are its children. Each graph break Dynamo counted meanwhile is an instant
``graph break`` event with Dynamo's reason. Nothing is recorded while no trace is open.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from openreg_lab import _C

_state = threading.local()


def _open() -> dict[str, tuple[int, dict[str, int]]]:
    if not hasattr(_state, "open"):
        _state.open = {}
    return _state.open


def _graph_breaks() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return dict(counters["graph_break"])


def _is_backward(args: Any) -> bool:
    return args.callback_trigger.name == "LAZY_BACKWARD"


def _name(args: Any) -> str:
    backward = _is_backward(args)
    recompile = not backward and not str(args.compile_id).endswith("/0")
    return f"{'recompile' if recompile else 'compile'} {args.compile_id}" + (" backward" if backward else "")


def _on_start(args: Any) -> None:
    if not _C._trace_enabled():
        return
    token = _C._trace_compile_begin(_C._trace_intern(_name(args)))
    _open()[args.compile_id] = (token, _graph_breaks())


def _recompile_reason() -> str:
    from torch._dynamo.utils import get_metrics_context

    metrics = getattr(get_metrics_context(), "_metrics", {})  # read only: Dynamo keeps it there
    return str(metrics.get("recompile_reason") or "")


def _missed_start_ns() -> int | None:
    """When the compilation ending now started, on the recorder's clock (from Dynamo's metrics)."""
    from torch._dynamo.utils import get_metrics_context

    context = get_metrics_context()
    started = getattr(context, "_start_time_ns", 0)  # wall clock, read only
    if not context.in_progress() or not started:
        return None
    return _C._trace_now_ns() - max(0, time.time_ns() - started)


def _on_end(args: Any) -> None:
    if not _C._trace_enabled():
        _open().pop(args.compile_id, None)
        return
    reason = "" if _is_backward(args) else _recompile_reason()
    reason_id = _C._trace_intern(reason) if reason else 0
    opened = _open().pop(args.compile_id, None)
    if opened is not None:
        token, breaks_before = opened
        _C._trace_scope_end(token, reason_id)
    else:
        # Started before openreg registered with Dynamo (Dynamo was imported inside the trace and
        # openreg registered when it first traced the device): the span, without its children.
        start = _missed_start_ns()
        if start is None:
            return
        _C._trace_compile(_C._trace_intern(_name(args)), reason_id, start)
        breaks_before = {}
    for text, count in _graph_breaks().items():
        for _ in range(count - breaks_before.get(text, 0)):
            _C._trace_compile(_C._trace_intern("graph break"), _C._trace_intern(text), 0)


def install() -> None:
    """Register the callbacks with Dynamo, unless they are (``torch._dynamo.reset()`` clears them)."""
    from torch._dynamo.callback import callback_handler

    if _on_start not in callback_handler.start_callbacks:
        callback_handler.register_start_callback(_on_start)
        callback_handler.register_end_callback(_on_end)
