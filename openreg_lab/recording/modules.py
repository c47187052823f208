"""Module spans: which ``nn.Module`` was running, for every event of a trace (Note [Module spans]).

While a trace with ``stack=True`` is open (where in the user's code: lines and modules; 6% on the
small-op MLP training step and 3% on the transformer block's, over a trace without them, so not
in the default trace), two global module hooks (``torch.nn.modules.module``'s
``register_module_forward_pre_hook`` and ``register_module_forward_hook``, the registration points
torch offers for this) time each module's forward and record it, when it returns, as one ``module``
event named by the module's path: its class and the attribute names that lead to it from the
outermost module called (``GPT2LMHeadModel.transformer.h.3.attn``). A span is not the parent of
the ops that ran inside it (Note [Module spans] in ``csrc/trace/Hooks.h``); the module of an event
is the innermost span around it on its thread (``module_of``).

Inside code that ``torch.compile`` traces the hooks do nothing (``torch.compiler.is_compiling()``
is a constant there, so they add no graph break): a compiled region is one ``compiled`` span, and
what it allocates belongs to it.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any

import numpy as np
import torch
from torch.nn.modules import module as _module

from openreg_lab import _C
from openreg_lab.recording import observations
from openreg_lab.recording.events import KINDS

_lock = threading.Lock()
_users = 0  # open traces that want module spans
_handles: list[Any] = []
#: module -> (its path's interned id, the path)
_paths: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, str]] = weakref.WeakKeyDictionary()
_local = threading.local()  # .stack: [(module, start_ns), ...] of the forwards running on a thread


# Note [Our module hooks and torch.compile's warning]
# torch.compile's module wrapper warns at each call while any global module hook is registered
# ("Using `torch.compile(module)` when there are global hooks on modules ..."): the hooks fire once
# more, for the wrapper. Ours are made for that (the wrapper's span is named after the module it
# compiles, and nothing inside compiled code records a span), so the warning would only tell the
# user about a trace's internals. While our hooks are registered, that one message is filtered
# out; the filter goes with the hooks, and a user's own global hooks are warned about as before
# the trace opened and after it closed.
# Note [A global hook with keyword arguments leaves a mark]
# torch's register_module_forward_hook(..., with_kwargs=True) records the hook's id in
# _global_forward_hooks_with_kwargs, and the handle it returns does not remove it from there (torch
# 2.13: its extra dict is the always-called one only). The mark left behind makes
# _has_any_global_hook() true for the rest of the process, and torch.compile(module) then warns at
# every call that global hooks are registered, long after our trace closed (it failed every
# compile test that ran after a trace(stack=True) with warnings as errors). detach() removes the
# mark with the hook.
_COMPILE_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks on modules"
_filter: tuple[Any, ...] | None = None


def attach() -> None:
    """Start recording module spans (a trace opens); nested calls are counted."""
    global _users, _filter
    with _lock:
        _users += 1
        if _users == 1:
            _handles.append(_module.register_module_forward_pre_hook(_enter))
            _handles.append(_module.register_module_forward_hook(_exit, with_kwargs=True, always_call=True))
            warnings.filterwarnings("ignore", message=_COMPILE_WARNING, category=UserWarning)
            _filter = warnings.filters[0]  # Note [Our module hooks and torch.compile's warning]


def detach() -> None:
    """Stop recording them once the last trace that wanted them closes."""
    global _users, _filter
    with _lock:
        _users = max(0, _users - 1)
        if _users == 0:
            for handle in _handles:
                handle.remove()
                # Note [A global hook with keyword arguments leaves a mark]
                _module._global_forward_hooks_with_kwargs.pop(handle.id, None)
            _handles.clear()
            if _filter is not None and _filter in warnings.filters:
                warnings.filters.remove(_filter)
                warnings._filters_mutated()  # type: ignore[attr-defined]  # as filterwarnings does
            _filter = None


def _stack() -> list[tuple[torch.nn.Module, int]]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _enter(module: torch.nn.Module, args: Any) -> None:
    if torch.compiler.is_compiling():
        return
    _stack().append((module, _C._trace_now_ns()))


def _exit(module: torch.nn.Module, args: Any, *rest: Any) -> None:
    # (kwargs, output), or (output,) when the forward raised: torch calls an always_call hook
    # without the keyword arguments then.
    if torch.compiler.is_compiling():
        return
    stack = _stack()
    # Pop to this module (a forward that raised before an inner one's hook ran leaves no debris).
    while stack:
        top, start = stack.pop()
        if top is module:
            _C._trace_module(_path_id(module, stack), start)
            if not stack:  # the outermost module: its inputs and parameters (Note [Memory categories])
                observations.saw_root(module, args, rest[0] if len(rest) == 2 else {})
            return


def _path_id(module: torch.nn.Module, outer: list[tuple[torch.nn.Module, int]]) -> int:
    """The interned path of ``module``: named from the outermost module running when it was first
    seen (its attribute names), or its class after its caller's path if that module does not own it."""
    found = _paths.get(module)
    if found is None:
        root = outer[0][0] if outer else module
        # torch.compile's wrapper is named after the module it compiles (its forward is one span).
        prefix = type(getattr(root, "_orig_mod", root) if _is_compiled_wrapper(root) else root).__name__
        for name, m in root.named_modules(remove_duplicate=False):
            if m not in _paths:
                _name(m, f"{prefix}.{name}" if name else prefix)
        found = _paths.get(module)
    if found is None:  # a module its caller calls but does not hold as an attribute
        caller = _paths.get(outer[-1][0]) if outer else None
        found = _name(module, f"{caller[1]}.{type(module).__name__}" if caller else type(module).__name__)
    return found[0]


def _is_compiled_wrapper(module: torch.nn.Module) -> bool:
    return type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")


def _name(module: torch.nn.Module, path: str) -> tuple[int, str]:
    _paths[module] = found = (int(_C._trace_intern(path)), path)
    return found


def module_of(
    f: dict[str, np.ndarray], rows: np.ndarray, pieces: dict[int, tuple[np.ndarray, np.ndarray]] | None = None
) -> np.ndarray:
    """For each event in ``rows`` (indices into the columns ``f``, as ``Columns.fields``), the name id
    of the innermost module span around its start on its thread, or 0 (none ran). ``pieces``: a
    dict the caller keeps between calls on the same columns, so each thread's spans are cut once."""
    kind, thread, start = f["kind"], f["thread"], f["start_ns"]
    out = np.zeros(len(rows), dtype=np.int64)
    spans = np.flatnonzero(kind == _MODULE)
    if not len(spans) or not len(rows):
        return out
    pieces = {} if pieces is None else pieces
    for t in np.unique(thread[rows]).tolist():
        if t not in pieces:
            # Spans nest: cut the thread's time into pieces, each owned by the innermost span open in it.
            mine = spans[thread[spans] == t]
            begin = start[mine].astype(np.int64)
            pieces[t] = _pieces(begin, begin + f["dur_ns"][mine], f["name"][mine])
        edges, owners = pieces[t]
        if not len(edges):
            continue
        sel = thread[rows] == t
        piece = np.searchsorted(edges, start[rows[sel]], side="right") - 1
        out[sel] = np.where(piece >= 0, owners[np.maximum(piece, 0)], 0)
    return out


_MODULE = KINDS.index("module")


def _pieces(begin: np.ndarray, end: np.ndarray, name: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nested spans as a step function: piece i from edges[i] to edges[i+1] is owned by owners[i]
    (the innermost span open there; 0: none). Spans of one thread nest (forward hooks run in
    stack order); a span's end hands the time back to the span around it."""
    order = np.lexsort((-end, begin))  # outer spans first where two start together
    b, e, owner = begin[order], end[order], name[order].astype(np.int64)
    n = len(b)
    # A span's depth: the spans before it (in that order) still open when it begins.
    depth = np.maximum(np.arange(n) - np.searchsorted(np.sort(e), b, side="right"), 0)
    parent = np.full(n, -1, dtype=np.int64)  # the span around each: the last one a level up
    for d in range(1, int(depth.max()) + 1 if n else 0):
        at, up = np.flatnonzero(depth == d), np.flatnonzero(depth == d - 1)
        k = np.searchsorted(up, at) - 1
        parent[at[k >= 0]] = up[k[k >= 0]]
    after_end = np.where(parent >= 0, owner[np.maximum(parent, 0)], 0)
    # At one time: ends before begins; ends inner first (the outermost's parent owns what follows),
    # begins outer first (the innermost owns what follows).
    times = np.r_[e, b]
    key = np.lexsort((np.r_[-depth, depth], np.r_[np.zeros(n), np.ones(n)], times))
    return times[key].astype(np.int64), np.r_[after_end, owner][key]
