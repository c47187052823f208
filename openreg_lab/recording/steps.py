"""Training steps: ``openreg_lab.step()``, the optimizer hook that calls it, and the per-step table.

A training script is a loop; the recorder knows where each of its steps ends without changes to
the script: every ``optimizer.step()`` of ``torch.optim`` ends one (through torch's global
optimizer step hooks), and ``openreg_lab.step()`` ends one by hand in loops without an optimizer.
Each end is a ``step`` event in every open trace; ``Trace.steps()`` gives one row a step, and
``trace(steps="5:8")`` records only the chosen steps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from torch.optim.optimizer import register_optimizer_step_post_hook

from openreg_lab import _C
from openreg_lab.recording.host_fold import IMPORT
from openreg_lab.recording.kinds import Kinds

#: The columns of ``table``: one row a step.
STEP_COLUMNS = [
    "step", "start_ns", "dur_ns", "ops", "fallbacks", "copies", "bytes_copied", "casts", "peak_bytes",
    "complete",
]  # fmt: skip

_lock = threading.Lock()
_ended = 0  # steps ended in this process so far
_listeners: list[Callable[[int], None]] = []  # traces waiting for chosen steps (trace(steps=...))
_watchers: list[list[int]] = []  # open traces' step sources: what ended each step (``sources``)


def step() -> None:
    """End the current training step: a ``step`` event in every open trace, and the next step begins.

    ``torch.optim`` optimizers call this after each ``optimizer.step()``; call it by hand in loops
    without one (inference, a hand-written update)::

        with openreg_lab.trace() as t:
            for batch in loader:
                model(batch)
                openreg_lab.step()
        t.steps()

    A loop with two optimizers ends two steps an iteration (the verdict says so). Cheap when no
    trace is open.
    """
    _end(0)


def _end(source: int) -> None:
    """End a step; ``source`` is what ended it: 0 for ``step()``, else the optimizer's ``id``."""
    global _ended
    with _lock:
        number = _ended
        _ended += 1
        listeners = list(_listeners)
        for w in _watchers:
            w.append(source)
    _C._trace_step(number)
    for listener in listeners:
        listener(number + 1)


def ended() -> int:
    """How many steps have ended in this process (``step()`` calls and optimizer steps)."""
    return _ended


def listen(listener: Callable[[int], None]) -> None:
    """Call ``listener(ended())`` after each step ends (a trace that records chosen steps)."""
    with _lock:
        _listeners.append(listener)


def unlisten(listener: Callable[[int], None]) -> None:
    """Stop calling ``listener`` (no error if it was not listening)."""
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def watch(into: list[int]) -> None:
    """Append to ``into`` what ends each step from now on (0: ``step()``, else an optimizer's id)."""
    with _lock:
        _watchers.append(into)


def unwatch(into: list[int]) -> None:
    """Stop appending to ``into`` (no error if it was not watching)."""
    with _lock:
        if any(w is into for w in _watchers):
            _watchers[:] = [w for w in _watchers if w is not into]


def sources(raw: list[int]) -> list[int]:
    """``watch``'s ids as small numbers: 0 for ``step()``, 1, 2, ... for optimizers by first step."""
    number: dict[int, int] = {}
    return [0 if r == 0 else number.setdefault(r, len(number) + 1) for r in raw]


def per_iteration(sources: list[int]) -> str | None:
    """In words, when several optimizers end steps each iteration (``sources``' numbers repeating in
    one order): how many steps an iteration makes; None when one thing ends every step."""
    opts = [s for s in sources if s]
    k = len(set(opts))
    if k < 2:
        return None
    cycle = opts[:k]
    regular = len(set(cycle)) == k and all(o == cycle[i % k] for i, o in enumerate(opts))
    if regular:
        return (
            f"{k} optimizers call step() each iteration, and each optimizer.step() ends a training "
            f"step: one iteration is {k} steps here"
        )
    return (
        f"{k} optimizers call step() in the trace, and each optimizer.step() ends a training step: "
        "a step here is one optimizer's update, not an iteration"
    )


def _after_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    _end(id(optimizer))


_hook = register_optimizer_step_post_hook(_after_optimizer_step)


def table(events: pd.DataFrame, *, kinds: Kinds | None = None) -> pd.DataFrame:
    """One row a step (``STEP_COLUMNS``): its number, start and duration, op calls, fallbacks,
    copies and the bytes they moved, autocast casts, and the peak of device memory allocated
    during it (the most any allocation of the step left allocated on one device; 0 if it
    allocated nothing).

    A step runs from the end of the previous one (the first, from the trace's start) to its
    ``step`` event. Work after the last step event is one more row, ``complete`` False, when it
    called any op. Empty when the trace holds no step event. ``kinds``: the events' kinds when the
    caller read them already (Note [Kinds read once]).
    """
    kinds = Kinds.of(events, kinds)
    is_step = kinds.mask("step")
    if not is_step.any():
        return pd.DataFrame(columns=STEP_COLUMNS)
    ends = events["start_ns"].to_numpy()[is_step].astype(np.int64)
    numbers = events["seq"].to_numpy()[is_step].astype(np.int64)
    start = events["start_ns"].to_numpy().astype(np.int64)
    # The step each event belongs to: the first step ending at or after its start.
    which = np.searchsorted(ends, start, side="left")
    after = which == len(ends)
    complete = [True] * len(ends)
    bounds = [0, *ends.tolist()]
    if (after & kinds.mask("op")).any():
        end = start[after] + np.maximum(events["dur_ns"].to_numpy()[after], 0)
        bounds.append(int(end.max()))
        numbers = np.r_[numbers, numbers[-1] + 1]
        complete.append(False)
    n = len(numbers)
    keep = ~is_step & (which < n)
    w = which[keep]
    k = kinds.take(np.flatnonzero(keep))
    nbytes = events["bytes"].to_numpy()[keep].astype(np.int64)

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(w[mask], minlength=n)

    copied = np.zeros(n, dtype=np.int64)
    np.add.at(copied, w[k.mask("copy")], nbytes[k.mask("copy")])
    peak = np.zeros(n, dtype=np.int64)
    allocs = k.mask("alloc")
    np.maximum.at(peak, w[allocs], events["total"].to_numpy()[keep][allocs].astype(np.int64))
    starts = np.asarray(bounds[:-1], dtype=np.int64)
    return pd.DataFrame(
        {
            "step": numbers,
            "start_ns": starts,
            "dur_ns": np.asarray(bounds[1:], dtype=np.int64) - starts,
            "ops": count(k.mask("op")),
            "fallbacks": count(k.mask("fallback")),
            "copies": count(k.mask("copy")),
            "bytes_copied": copied,
            "casts": count(k.mask("cast")),
            "peak_bytes": peak,
            "complete": complete,
        },
        columns=STEP_COLUMNS,
    )


def stretched(step_table: pd.DataFrame, start_ns: np.ndarray, dur_ns: np.ndarray) -> pd.DataFrame:
    """``step_table`` (``table(events)``) as ``table`` gives it of the events and these slices drawn
    after them (host slices: no op, copy, cast, allocation or step, so no count changes): the
    incomplete last row, the work after the last step event, ends at the latest end of the
    slices that start after that step event too, when later than its own. A copy; ``step_table``
    itself when there is nothing to stretch. Saves hashing the events' kinds again (the 1M-op
    dashboard's step bands with its host slices)."""
    if step_table.empty or bool(step_table["complete"].iloc[-1]):
        return step_table
    begun = int(step_table["start_ns"].iloc[-1])  # the unfinished step's start: the last step event
    start = np.asarray(start_ns, dtype=np.int64)
    later = start > begun
    if not later.any():
        return step_table
    end = int((start[later] + np.maximum(np.asarray(dur_ns, dtype=np.int64)[later], 0)).max())
    if end <= begun + int(step_table["dur_ns"].iloc[-1]):
        return step_table
    out = step_table.copy()
    out.loc[out.index[-1], "dur_ns"] = end - begun
    return out


def steady_state(steps: pd.DataFrame) -> dict[str, Any] | None:
    """The first step apart from the rest: ``first`` (its row as a dict), ``median_ns`` (the median
    duration of the other complete steps) and ``steady`` (how many those are); None without
    complete steps."""
    done = steps[steps["complete"]]
    if done.empty:
        return None
    rest = done.iloc[1:]
    return {
        "first": done.iloc[0].to_dict(),
        "median_ns": int(rest["dur_ns"].median()) if len(rest) else None,
        "steady": len(rest),
    }


def parse(chosen: object) -> range:
    """The steps ``trace(steps=...)`` records: ``"5:8"`` (5 to 8, both included), ``"5"``, or a
    ``range`` with step 1 (``range(5, 9)``); ValueError / TypeError naming the accepted forms."""
    forms = "steps='5:8' (steps 5 to 8, both included), steps='5', or steps=range(5, 9)"
    if isinstance(chosen, range):
        out = chosen
    elif isinstance(chosen, str):
        first, sep, last = chosen.partition(":")
        try:
            lo = int(first)
            hi = int(last) if sep else lo
        except ValueError:
            raise ValueError(f"trace(steps=...) takes {forms}; got {chosen!r}") from None
        out = range(lo, hi + 1)
    else:
        raise TypeError(f"trace(steps=...) takes {forms}; got {type(chosen).__name__} {chosen!r}")
    if out.step != 1 or len(out) == 0 or out.start < 0:
        raise ValueError(f"trace(steps=...) takes a non-empty run of steps from 0: {forms}; got {chosen!r}")
    return out


def describe(chosen: range) -> str:
    """``"5:8"`` for ``range(5, 9)``."""
    return f"{chosen.start}:{chosen.stop - 1}" if len(chosen) > 1 else str(chosen.start)


def one_off_work(events: pd.DataFrame | None, t0: float, t1: float) -> list[tuple[str, int]]:
    """The time of the imports (outermost ``import`` host slices, as ``Trace.host_slices`` folds
    them) and of the compilation (outermost compile events) that start in ``[t0, t1)``:
    ``[("imports", ns), ("compilation", ns)]`` (they may overlap). Reads only the host and compile
    rows of the window, so a trace of millions of events answers in milliseconds."""
    if events is None or events.empty:
        return []
    kind = events["kind"].to_numpy()
    start = events["start_ns"].to_numpy()
    rows = np.flatnonzero((start >= t0) & (start < t1))
    rows = rows[np.isin(kind[rows], ("host", "compile"))]
    name = events["name"].to_numpy()
    parent = events["parent"].to_numpy().astype(np.int64)
    dur = np.maximum(events["dur_ns"].to_numpy().astype(np.int64), 0)

    def is_import(idx: np.ndarray) -> np.ndarray:
        ok = idx >= 0
        safe = np.maximum(idx, 0)
        names = pd.Series(name[safe], dtype=object)
        return ok & (kind[safe] == "host") & names.str.startswith(IMPORT, na=False).to_numpy(bool)

    host, compiled = rows[kind[rows] == "host"], rows[kind[rows] == "compile"]
    outer_import = host[is_import(host) & ~is_import(parent[host])]
    p = parent[compiled]
    outer_compile = compiled[~((p >= 0) & (kind[np.maximum(p, 0)] == "compile"))]
    return [("imports", int(dur[outer_import].sum())), ("compilation", int(dur[outer_compile].sum()))]
