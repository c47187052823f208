"""``trace()``: record what the openreg backend did, and read it as tables.

::

    with openreg_lab.trace(record_shapes=True, stack=True) as t:
        loss = model(x).sum()
        loss.backward()
    t.summary()     # one row per op and device: calls, how they ran, total and self time, bytes copied
    t.fallbacks()   # ops that ran on CPU, ranked by time including their copies
    t.copies()      # every H2D / D2H / D2D copy and the op that caused it
    t.casts()       # every autocast cast
    t.events        # every event

The events are recorded in C++ (``csrc/trace/``) while the ``with`` block runs, on every thread,
and handed to Python when it ends.
"""

from __future__ import annotations

import functools
import operator
import os
import sysconfig
import threading
import time
import warnings
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
import torch

from openreg_lab import _C
from openreg_lab.recording import compile_events as _compile_events
from openreg_lab.recording import distributed, files, steps
from openreg_lab.recording import events as _events
from openreg_lab.recording import host as _host
from openreg_lab.recording import memory as _memory
from openreg_lab.recording import modules as _modules
from openreg_lab.recording import observations as _observations
from openreg_lab.recording import sampler as _sampler
from openreg_lab.recording._strings import interned_count as _interned_count
from openreg_lab.recording._strings import strings as _strings
from openreg_lab.recording.exports import Exports
from openreg_lab.recording.frame import EVENT_COLUMNS  # noqa: F401  (re-exported)
from openreg_lab.recording.tables import Tables
from openreg_lab.recording.viewing import Renderer, Viewable, install_renderer  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from openreg_lab.recording.events import Columns

DEFAULT_CAPACITY = 1_000_000


class TraceDroppedEventsWarning(UserWarning):
    """A trace filled up: some events were not recorded (see ``Trace.dropped``)."""


class TraceForkedWarning(UserWarning):
    """A trace open when the process forked was closed in the child: the parent holds its events."""


def mark(name: str) -> None:
    """Record an instant named ``name`` in every open trace (drawn as a vertical line on the timeline).

    ::

        with openreg_lab.trace() as t:
            for step in range(3):
                openreg_lab.mark(f"step {step}")
                train_step()

    Does nothing when no trace is open. Any string is kept as it is, a lone surrogate included
    (a file name's undecodable byte, ``"\\udce9"``): the views show one as its escape (Note
    [Strings the recorder keeps] in ``csrc/python/Text.h``).
    """
    if not isinstance(name, str):
        raise TypeError(f"openreg_lab.mark(name) takes a string, got {type(name).__name__}")
    _C._trace_mark(name)


def events_so_far() -> int:
    """Events the open traces have recorded so far (kept or dropped; 0 when none is open).

    One atomic read, for progress displays such as ``python -m openreg_lab run``'s.
    """
    return int(_C._trace_events_so_far())


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace written by ``Trace.save``.

    Raises:
        FileNotFoundError: no such file (another OSError when it cannot be read: permissions).
        ValueError: the file is not an openreg-lab trace, is of a newer version, or is damaged.
    """
    saved = files.read(path)
    t = Trace(
        record_shapes=saved.record_shapes,
        stack=saved.stack,
        capacity=saved.capacity,
        columns=saved.columns,
        dropped=saved.dropped,
        ops=saved.ops,
    )
    t._t0 = saved.t0
    t._skipped = saved.skipped
    t.profile = saved.profile
    if saved.job is not None:
        t.job = distributed.Job(**saved.job)
    t.host_sampling = saved.samples is not None
    t._samples = saved.samples
    t._step_sources = saved.step_sources or []
    t._observed = saved.observed
    return t


def trace(
    *,
    record_shapes: bool = False,
    stack: bool = False,
    capacity: int = DEFAULT_CAPACITY,
    ops: Literal["all", "kernels"] = "all",
    steps: range | str | None = None,
    host: bool = True,
) -> Trace:
    """Record the openreg backend's events while a ``with`` block runs.

    Args:
        record_shapes: also record the shapes and dtypes of each op's tensor arguments.
        stack: give each top-level op the ``file:line`` of the user code that called it, and record
            which ``nn.Module`` ran each event (``module`` spans: Note [Module spans]).
        capacity: the most events to keep, from 1 to 2**63 - 1 (``TypeError`` for a non-integer,
            ``ValueError`` out of range); the rest are counted in ``Trace.dropped`` and a
            ``TraceDroppedEventsWarning`` says so when the block ends.
        ops: where op events come from. ``"all"`` (the default): every operator call that
            involves an openreg tensor, composites (``aten::linear`` around its ``aten::addmm``)
            and autograd nodes included, from PyTorch's RecordFunction, which makes a training step
            of small ops about 1.25x slower while the trace is open (docs/benchmarks.md).
            ``"kernels"``: only the calls that openreg runs, from its own kernels and its CPU
            fallback, at about 1.1x: no composite parents and no ``backward`` events (the ops a
            backward pass runs are recorded), nor calls of a kernel registered from outside openreg with
            ``torch.library`` (the ops it calls are); each op's dispatch path starts at its
            kernel's key, and ``seq`` is -1.
            Copies, casts, allocations and fallbacks are recorded the same in both.
        steps: record only these training steps of the block, counted from 0 at its start
            (``"5:8"``: steps 5 to 8, both included; ``"5"``; ``range(5, 9)``), with the same
            events inside them as a full trace. A step ends at each ``optimizer.step()`` or
            ``openreg_lab.step()`` (``openreg_lab.recording.steps``). What was not recorded is
            said by ``Trace.skipped``, the report and ``openreg-lab run``; a block that ends
            before the first chosen step records nothing and warns.
        host: also sample the Python the traced threads run, every 1 to 16 ms within a CPU budget
            (Note [Host samples] in ``recording/sampler.py``): ``Trace.host()`` and
            ``Trace.host_events``, the Python lane of
            the timeline, and the host Python and waiting the verdict splits the wall time into.
            ``host=False`` records no host samples.

    Traces may nest and may be opened from several threads at once: each sees every event
    recorded while it is open, on any thread. While an ``ops="all"`` trace is open, every
    open trace records all ops.
    """
    return Trace(record_shapes=record_shapes, stack=stack, capacity=capacity, ops=ops, steps=steps, host=host)


MAX_CAPACITY = 2**63 - 1  # the recorder counts events in 64 bits, and adds capacities


def _check_capacity(capacity: object) -> int:
    """``capacity`` as an int from 1 to ``MAX_CAPACITY``; ValueError / TypeError naming the range."""
    if isinstance(capacity, bool) or not hasattr(capacity, "__index__"):
        raise TypeError(
            f"trace(capacity=...) must be a positive number of events up to 2**63 - 1 (an int), "
            f"got {type(capacity).__name__} {capacity!r}"
        )
    n = operator.index(capacity)  # type: ignore[arg-type]
    if not 1 <= n <= MAX_CAPACITY:
        raise ValueError(f"trace(capacity=...) must be a positive number of events up to 2**63 - 1, got {n}")
    return n


@functools.cache
def _skip_prefixes() -> list[str]:
    """Files that are not the user's code, for ``stack=True``: torch and the standard library."""
    prefixes = [os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.__file__) + os.sep]
    here = os.path.dirname(os.path.abspath(__file__))
    prefixes.append(os.path.abspath(__file__))
    # --from-cuda wraps the functions where devices enter torch: their frames are not the user's.
    for name in ("from_cuda.py", "_cuda_entries.py", "_cuda_module.py"):
        prefixes.append(os.path.join(os.path.dirname(here), "device", name))
    purelib = sysconfig.get_paths().get("purelib")
    if purelib:
        prefixes.append(os.path.join(purelib, "torch") + os.sep)
    return sorted(set(prefixes))


class Trace(Tables, Exports, Viewable):
    """The events of one ``trace()`` block, and tables computed from them."""

    def __init__(
        self,
        *,
        record_shapes: bool = False,
        stack: bool = False,
        capacity: int = DEFAULT_CAPACITY,
        columns: Columns | None = None,
        dropped: int = 0,
        ops: str = "all",
        steps: range | str | None = None,
        host: bool = False,
    ) -> None:
        if ops not in files.OPS:
            raise ValueError(
                f"trace(ops=...) must be 'all' (every op call, composites and autograd nodes) or "
                f"'kernels' (only the calls openreg's kernels and fallback run), got {ops!r}"
            )
        self.ops = ops
        self.capacity = _check_capacity(capacity)
        self.record_shapes = record_shapes
        self.stack = stack
        self._session: int | None = None
        self._columns = columns
        self._raw: tuple[dict, int] | None = None  # _C._trace_close's result, strings interned
        self._dropped = dropped
        self._t0 = 0
        self._events: pd.DataFrame | None = None
        self.chosen_steps = None if steps is None else _steps_of(steps)
        self._step_base = 0  # steps.ended() when the block began: its step 0
        self._schedule: dict[str, int] = {}  # trace(steps=...): times and step counts, for `skipped`
        self._skipped: str | None = None
        self.profile: str | None = None  # the coverage profile active when recording began
        #: The run id, rank and world size of the process that recorded it, set when the block
        #: ends (Note [A run id for every trace] in distributed.py; None before, or in an old file).
        self.job: distributed.Job | None = None
        if not isinstance(host, bool):
            raise TypeError(f"trace(host=...) is True (sample the host's Python) or False, got {host!r}")
        self.host_sampling = host
        self._sampler: _sampler.Sampler | None = None
        self._samples: _host.Samples | None = None
        self._pending: tuple[Any, set[int], int] | None = None  # a stopped sampler's raw samples
        self._opener = 0  # the OS thread that opened the recording (its Python is sampled too)
        self._step_sources: list[int] = []  # per step: what ended it (steps.watch)
        self._host_slices: dict[bool, pd.DataFrame] = {}  # per library=: Trace.host_slices
        # Note [Memory categories] in allocations.py: what the trace saw of the model, and its tables.
        self._watch: _observations.Watch | None = None
        self._closed_watch: _observations.Watch | None = None  # made into _observed when first read
        self._observed: _observations.Observed | None = None
        self._memory: _memory.Memory | None = None

    # -- recording ---------------------------------------------------------
    def __enter__(self) -> Trace:
        if self._session is not None or self._columns is not None or self._raw is not None or self._schedule:
            raise RuntimeError("this trace has already been used: start a new one with openreg_lab.trace()")
        self._step_base = steps.ended()
        if self.chosen_steps is None:
            self._open()
            return self
        self._schedule = {"began_ns": time.monotonic_ns(), "opened_ns": -1, "closed_ns": -1, "closed_at": -1}
        if self.chosen_steps.start == 0:
            self._open()
        steps.listen(self._step_ended)
        return self

    def _open(self) -> None:
        self.profile = _C.profile_name()
        # Installing the compile callbacks imports parts of torch._dynamo the first time (seconds):
        # the tracer's own start-up, before the trace's clock starts.
        _compile_events.install_if_dynamo_loaded()  # so that compilations inside are recorded
        if self.host_sampling:
            self._opener = threading.get_native_id()
            self._sampler = _sampler.Sampler()
            self._sampler.start()
        self._t0 = time.monotonic_ns()
        self._session = _C._trace_open(
            self.capacity, self.record_shapes, self.stack, _skip_prefixes(), self.ops == "kernels"
        )
        self._watch = _observations.open_watch()
        if self.stack:  # where in the user's code: lines and modules (Note [Module spans])
            _modules.attach()
        steps.watch(self._step_sources)
        if self._schedule:
            self._schedule["opened_ns"] = self._t0

    def _step_ended(self, ended: int) -> None:
        """After a step ends: open at the first chosen step, close after the last (trace(steps=...))."""
        chosen = self.chosen_steps
        assert chosen is not None
        now = ended - self._step_base  # the step beginning now
        if self._session is None and self._raw is None and now == chosen.start:
            self._open()
        elif self._session is not None and now == chosen.stop:
            self._close()
            self._schedule["closed_ns"] = time.monotonic_ns()
            self._schedule["closed_at"] = now

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.chosen_steps is not None and self._schedule:
            steps.unlisten(self._step_ended)
            self._finish_schedule()
            return
        if self._session is None:
            raise RuntimeError("this trace is not recording: __exit__ without a matching __enter__")
        self._close()

    def _close(self) -> None:
        raw = _C._trace_close(self._session)
        closed = time.monotonic_ns()
        self._session = None
        if self.stack:
            _modules.detach()
        if self._watch is not None:
            self._closed_watch, self._watch = _observations.close_watch(self._watch), None
        self.job = distributed.current_job()
        steps.unwatch(self._step_sources)
        self._step_sources[:] = steps.sources(self._step_sources)
        if self._sampler is not None:
            # Only the threads that recorded events, and the one that opened the trace, are kept.
            traced = {int(t["os_thread"]) for t in raw["threads"]} | {self._opener}
            # Names and lines are read at the first look, not here (Note [A session costs its window]).
            self._pending = (self._sampler.stop_raw(), traced, closed)
            self._sampler = None
        if raw.get("inherited"):
            warnings.warn(
                "this trace was open when the process forked: the parent process records its events, "
                "and this child's copy holds none (Note [The recorder across fork]). Open a trace in "
                "the child to record what the child does",
                TraceForkedWarning,
                stacklevel=2,
            )
        # Merging into columns waits for the first read (tables are not always wanted); the
        # strings are a prefix of the interned ones, copied then (Note [A session costs its window]).
        self._raw = (raw, _interned_count())
        recorded = sum(len(t["events"]) for t in raw["threads"]) // _events.EVENT_DTYPE.itemsize
        self._dropped = int(raw["dropped"]) + max(0, recorded - self.capacity)
        if self._dropped:
            warnings.warn(
                f"openreg trace dropped {self._dropped} events: it holds at most {self.capacity}. "
                f"Pass a larger capacity, e.g. openreg_lab.trace(capacity={4 * self.capacity}), "
                "or trace a shorter region",
                TraceDroppedEventsWarning,
                stacklevel=3,
            )

    def _finish_schedule(self) -> None:
        """End a ``trace(steps=...)`` block: close what is open, and say what was not recorded."""
        chosen = self.chosen_steps
        assert chosen is not None
        end_ns = time.monotonic_ns()
        ran = steps.ended() - self._step_base  # steps ended in the block
        if self._session is not None:
            self._close()
            self._schedule["closed_ns"], self._schedule["closed_at"] = end_ns, ran
        sched = self._schedule
        wanted = steps.describe(chosen)
        if sched["opened_ns"] < 0:
            self.job = distributed.current_job()
            self._raw = ({"threads": [], "capacity": self.capacity, "dropped": 0}, _interned_count())
            self._skipped = (
                f"trace(steps={wanted!r}) recorded nothing: the block ended after {ran} steps, before "
                f"step {chosen.start} began (steps end at optimizer.step() or openreg_lab.step())"
            )
            warnings.warn(self._skipped, UserWarning, stacklevel=3)
            return
        before = sched["opened_ns"] - sched["began_ns"]
        after = end_ns - sched["closed_ns"]
        closed_at = sched["closed_at"]  # the step that began when recording stopped
        last = min(chosen.stop, closed_at) - 1
        parts = []
        if chosen.start:
            parts.append(f"{_steps_text(0, chosen.start - 1)} before ({_ms(before)})")
        if ran > chosen.stop:
            parts.append(f"{_steps_text(chosen.stop, ran - 1)} after ({_ms(after)})")
        elif after > 0 and closed_at == chosen.stop:
            parts.append(f"the block's end after step {chosen.stop - 1} ({_ms(after)})")
        cut = ""
        if closed_at < chosen.stop:
            cut = f"; the block ended during step {closed_at}, before the chosen steps did"
        done = _steps_text(chosen.start, last)
        if last < chosen.start:
            done = "no complete step"
        missing = ", and ".join(parts) or "nothing"
        self._skipped = f"recorded {done} of the {ran} the block ran{cut}; not recorded: {missing}"

    def __del__(self) -> None:
        # A trace entered and never exited (an exception between a manual __enter__ and
        # __exit__, a notebook cell interrupted) would keep recording for ever and hold the
        # recording's budget: close it when it is collected, and say so.
        session = getattr(self, "_session", None)
        if session is not None:
            self._session = None
            _C._trace_close(session)
            if self.stack:
                _modules.detach()
            if getattr(self, "_watch", None) is not None:
                _observations.close_watch(self._watch)
            sampler = getattr(self, "_sampler", None)
            if sampler is not None:
                self._sampler = None
                sampler.stop()
            warnings.warn(
                "an openreg trace was collected while still recording: it is now closed. Use "
                "`with openreg_lab.trace() as t:` so that it ends with its block",
                ResourceWarning,
                stacklevel=2,
            )

    @property
    def running(self) -> bool:
        """True inside the ``with`` block."""
        return self._session is not None

    @property
    def dropped(self) -> int:
        """Events not recorded because the trace was full (0 when nothing was lost)."""
        return self._dropped

    def __bool__(self) -> bool:
        """Always true, empty or still recording (``len``, which raises while it records, counts events)."""
        return True

    def __len__(self) -> int:
        if self._raw is not None:
            recorded = sum(len(t["events"]) for t in self._raw[0]["threads"]) // _events.EVENT_DTYPE.itemsize
            return min(recorded, self.capacity)
        return len(self.columns)

    def __repr__(self) -> str:
        if self.running:
            return "<openreg Trace: recording>"
        if self._columns is None and self._raw is None:
            return "<openreg Trace: not started (use it as `with openreg_lab.trace() as t:`)>"
        kinds = self.events["kind"].value_counts().to_dict() if len(self) else {}
        detail = ", ".join(f"{n} {k}" for k, n in kinds.items())
        dropped = f", {self._dropped} dropped" if self._dropped else ""
        return f"<openreg Trace: {len(self)} events ({detail}){dropped}>"

    @property
    def columns(self) -> Columns:
        """The raw columns (numpy arrays); most users want ``events``."""
        if self._columns is None and self._raw is not None:
            raw, n_strings = self._raw
            self._columns, _ = _events.merge(raw, _strings[:n_strings])
            self._raw = None
            # Steps count from 0 at the block's start (steps.step numbers them for the process).
            fields = self._columns.fields
            is_step = fields["kind"] == _events.STEP
            fields["seq"] = np.where(is_step, fields["seq"] - self._step_base, fields["seq"])
        if self._columns is None:
            raise RuntimeError(
                "the trace is still recording: read it after the `with openreg_lab.trace()` block ends"
            )
        return self._columns

    # -- files -------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the trace to ``path`` (read it back with ``openreg_lab.load_trace``)."""
        files.save(
            path,
            self.columns,
            capacity=self.capacity,
            dropped=self.dropped,
            record_shapes=self.record_shapes,
            stack=self.stack,
            t0=self._t0,
            ops=self.ops,
            skipped=self._skipped,
            profile=self.profile,
            job=None if self.job is None else self.job.as_dict(),
            samples=self.host_samples,
            step_sources=self._step_sources,
            observed=self._seen(),
        )


def _steps_of(chosen: range | str) -> range:
    return steps.parse(chosen)


def _steps_text(first: int, last: int) -> str:
    """``"step 3"`` or ``"steps 3 to 5"``."""
    return f"step {first}" if first == last else f"steps {first} to {last}"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.1f} ms"
