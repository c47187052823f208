"""Compilations, recompiles and graph breaks as ``compile`` events (Note [Compiled code in the trace]).

Dynamo calls its compile callbacks (``torch._dynamo.callback_handler``) when it starts and ends
compiling a frame, or a backward graph deferred to its first run. Each compilation is one
``compile`` event spanning all of it (Dynamo's tracing, AOTAutograd, Inductor's lowering and the
C++ build), named ``compile <id>`` (``compile 0/0``, ``compile 0/0 backward``), or ``recompile
<id>`` with Dynamo's reason (the first guard that failed) in ``reason``; the ops compilation runs
on the device are its children. Each graph break Dynamo counted meanwhile is an instant
``graph break`` event with Dynamo's reason. Nothing is recorded while no trace is open.

Note [A Dynamo reset inside a trace]
``torch._dynamo.reset()`` clears Dynamo's compile callbacks and restarts its compile ids: every
later compilation went unrecorded, and two functions compiled on either side of the reset made
two regions named ``graph 0/0 inference``. Dynamo offers no callback on reset, so openreg notices
it at the next compilation, from two points Dynamo keeps across resets: Inductor loading openreg's
generated module (``compiled_runtime.graph_name``) and a bytecode hook (every frame Dynamo
compiles, whatever the backend). Both put the callbacks back (:func:`install`); the compilation
under way is then recorded from its end, its start read from Dynamo's metrics (its span, without
its children). A reset noticed while a trace is open starts a new epoch, and names made in an
epoch other than 0 say so (``compile 0/0 (after reset 1)``, ``graph 0/0 inference (after reset
1)``), so names stay unique within a trace; a reset noticed with no trace open goes back to epoch
0, so a process that resets between traces keeps Dynamo's own names.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from openreg_lab import _C

_state = threading.local()
_installed = False  # once: then missing callbacks mean a reset
_epoch = 0  # Note [A Dynamo reset inside a trace]
_breaks_seen: dict[str, int] = {}  # Dynamo's graph-break counts when the last compilation ended


def epoch_suffix() -> str:
    """What names made now add to Dynamo's compile id (Note [A Dynamo reset inside a trace])."""
    return f" (after reset {_epoch})" if _epoch else ""


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
    kind = "recompile" if recompile else "compile"
    return f"{kind} {args.compile_id}" + (" backward" if backward else "") + epoch_suffix()


def _on_start(args: Any) -> None:
    if not _C._trace_enabled():
        return
    token = _C._trace_compile_begin(_C._trace_intern(_name(args)))
    _open()[args.compile_id] = (token, _graph_breaks())


def _intern(text: str) -> int:
    """The recorder's id of Dynamo's ``text`` (a reason, which may quote the user's strings, lone
    surrogates included: Note [Strings the recorder keeps] in ``csrc/python/Text.h``)."""
    return int(_C._trace_intern(text))


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
    reason_id = _intern(reason) if reason else 0
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
        breaks_before = _breaks_seen
    breaks = _graph_breaks()
    for text, count in breaks.items():
        for _ in range(count - breaks_before.get(text, 0)):
            _C._trace_compile(_C._trace_intern("graph break"), _intern(text), 0)
    _breaks_seen.clear()
    _breaks_seen.update(breaks)


def install_if_dynamo_loaded() -> None:
    """:func:`install` if Dynamo is already imported (a trace opening: compilations inside it are
    recorded; cheap otherwise, one dict lookup)."""
    if "torch._dynamo" in sys.modules:
        install()


def install() -> None:
    """Register the callbacks with Dynamo, unless they are (``torch._dynamo.reset()`` clears them:
    Note [A Dynamo reset inside a trace])."""
    global _installed, _epoch
    from torch._dynamo.callback import callback_handler

    if _on_start in callback_handler.start_callbacks:
        return
    if _installed:
        _epoch = _epoch + 1 if _C._trace_enabled() else 0
    else:
        from torch._dynamo.convert_frame import register_bytecode_hook

        register_bytecode_hook(_after_a_frame_compiled)
        _breaks_seen.update(_graph_breaks())
        _installed = True
    callback_handler.register_start_callback(_on_start)
    callback_handler.register_end_callback(_on_end)


def _after_a_frame_compiled(code: Any, new_code: Any) -> None:
    """Dynamo's bytecode hook, kept across resets: puts the callbacks back after a reset."""
    install()
