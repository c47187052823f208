"""What the code Inductor generates for openreg calls at run time (Note [Compiled code in the trace]).

Imported by each generated module when it loads (the traced wrapper of ``compiled.py`` writes the
import); imports only ``openreg_lab._C`` itself, so that loading a cached graph stays cheap (the
recording package is loaded already: the lab attached it at the device's registration).
``compiled_begin`` / ``compiled_end`` are the recorder's C++ hooks themselves: with no trace open
each is one relaxed atomic load behind a pybind11 call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from openreg_lab import _C

intern: Callable[[str], int] = _C._trace_intern
compiled_begin: Callable[[int, int, int], int] = _C._trace_compiled_begin
compiled_end: Callable[[int], None] = _C._trace_scope_end
#: Note [The node an allocation is for]: (frame, source) of an FX node's line, made when the module
#: loads, and the call naming it to the allocations that follow (0, 0: none).
node_frame: Callable[[str, int, str], tuple[int, int]] = _C._memory_node_frame
node: Callable[[int, int], None] = _C._memory_node
#: Runs a graph's call as torch runs an eager call: its C++ warnings become Python warnings
#: (Note [Warnings from compiled code] in csrc/python/Trace.cpp).
call_with_python_warnings: Callable[[Any, Any], Any] = _C._call_with_python_warnings


def graph_name(part: str) -> str:
    """The name of a graph: Dynamo's compile id and ``part`` (forward, backward or inference).

    ``"graph 0/0 forward"`` is the forward graph of frame 0's first compilation, ``"graph 0/1
    backward"`` the backward of its first recompile. The id is read when the generated module
    loads, which happens while its frame compiles (or is fetched from Inductor's cache), so it is
    right for cached code too. After a ``torch._dynamo.reset()`` inside a trace the name says so
    (Note [A Dynamo reset inside a trace]).
    """
    import torch

    from openreg_lab.recording import compile_events as _compile_events

    _compile_events.install()  # after a reset (Note [A Dynamo reset inside a trace])
    compile_id = torch._guards.CompileContext.current_compile_id()
    name = f"graph {compile_id} {part}" if compile_id is not None else f"graph {part}"
    return name + _compile_events.epoch_suffix()


def region(call: Callable[..., Any], part: str, device: int) -> Callable[..., Any]:
    """``call`` (a generated module's entry point) recorded as one ``compiled`` event per call; its
    C++ warnings become Python warnings, as in eager mode (Note [Warnings from compiled code])."""
    name = intern(graph_name(part))

    @functools.wraps(call)
    def recorded(args: Any) -> Any:
        token = compiled_begin(name, 0, device)
        try:
            return call_with_python_warnings(call, args)
        finally:
            compiled_end(token)

    return recorded
