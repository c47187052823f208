"""``Trace``'s tables: the events, the summary, the verdict, memory, host time, steps, fallbacks,
copies, casts and collectives, each computed from the columns when first asked for (a base of
``Trace``, which supplies the columns and what the trace was opened with)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from openreg_lab.recording import analysis, distributed, host_fold, steps
from openreg_lab.recording import events as _events
from openreg_lab.recording import host as _host
from openreg_lab.recording import memory as _memory
from openreg_lab.recording import memory_text as _memory_text
from openreg_lab.recording import observations as _observations
from openreg_lab.recording import verdict as _verdict
from openreg_lab.recording.frame import to_frame

if TYPE_CHECKING:
    from openreg_lab.recording.events import Columns


class Tables:
    """The tables of a closed trace (a base of ``Trace``)."""

    columns: Columns
    dropped: int
    capacity: int
    ops: str
    profile: str | None
    host_sampling: bool
    _t0: int
    _events: pd.DataFrame | None
    _memory: _memory.Memory | None
    _observed: _observations.Observed | None
    _closed_watch: _observations.Watch | None
    _pending: tuple | None
    _samples: _host.Samples | None
    _host_slices: dict[bool, pd.DataFrame]
    _step_sources: list[int]
    _skipped: str | None
    #: ``steps.table(events)``, computed when first asked for (the verdict, ``host()``, the dashboard)
    _step_table: pd.DataFrame | None = None

    # -- tables ------------------------------------------------------------
    @property
    def events(self) -> pd.DataFrame:
        """Every event, one row each (columns: ``EVENT_COLUMNS``), ordered by start time."""
        if self._events is None:
            self._events = to_frame(self.columns, self._t0)
        return self._events

    def summary(self) -> pd.DataFrame:
        """One row per op name and device: calls, how they ran (native / fallback / composite /
        generic), total and self time (Note [Self time]), bytes copied and the dispatch path.

        The dashboard, the report and ``openreg-lab run`` show this same table."""
        return analysis.summary(self.events)

    def memory(self) -> _memory.Memory:
        """Where the device memory went: every allocation with its category, op, module and line,
        what was live at the peak, per step, leaks and out-of-memory errors (``recording.memory``)."""
        if self._memory is None:
            self._memory = _memory.Memory(
                self.columns, self._t0, self._seen(), dropped=self.dropped, capacity=self.capacity
            )
        return self._memory

    def _seen(self) -> _observations.Observed | None:
        """What the trace observed (Note [Memory categories]), as arrays once first read."""
        if self._observed is None and self._closed_watch is not None:
            self._observed, self._closed_watch = self._closed_watch.observed(), None
        return self._observed

    def verdict(self, *, library: bool = False) -> _verdict.Verdict:
        """The answer first: the share of the wall time (of the traced time with ``host=False``) in
        CPU fallbacks, copies and casts, the ops to implement first (by the time they would save)
        and the warnings that change how to read the rest. The report, the dashboard's header and
        ``openreg-lab run`` lead with it. When an allocation failed in the trace, it opens with what
        was live then, by category and line (``Trace.memory()``). Host time is named in your code's
        terms, imports by the line that caused them (``library=True``: by the innermost frame)."""
        failed = bool((self.columns.fields["kind"] == _events.KINDS.index("oom")).any())
        return _verdict.verdict(
            self.events,
            dropped=self.dropped,
            capacity=self.capacity,
            op_events=self.ops,
            profile=self.profile,
            skipped=self.skipped,
            samples=self.host_samples,
            t0=self._t0,
            host_sampling=self.host_sampling,
            step_sources=self._step_sources,
            thread_index=self._thread_index(),
            oom=_memory_text.oom_lines(self.memory()) if failed else None,
            library=library,
            step_table=self._steps(),
        )

    @property
    def host_samples(self) -> _host.Samples | None:
        """The raw host samples (``trace(host=True)``), None when the host was not sampled."""
        if self._pending is not None:
            raw, traced, closed = self._pending
            self._samples = _host.resolve(raw).keep_threads(traced, since=self._t0, until=closed)
            self._pending = None
        return self._samples

    @property
    def host_events(self) -> pd.DataFrame:
        """The sampled Python of the traced threads as flame slices (``host.SLICE_COLUMNS``), in
        your code's terms: ``host_slices()``. The dashboard, the report and the exports draw them."""
        return self.host_slices()

    def host_slices(self, *, library: bool = False) -> pd.DataFrame:
        """The sampled Python of the traced threads as flame slices (``host.SLICE_COLUMNS``): per
        thread and depth, consecutive samples in one function merged into one slice with its
        function, file, first line, start, duration and the time it waited; empty with
        ``trace(host=False)``. Imports are one ``import <module>`` slice each (no file, line 0) and
        library frames are folded into your code's (Note [Folding host frames]); ``library=True``
        keeps the library frames (the imports stay folded, one slice each)."""
        if library not in self._host_slices:
            samples = self.host_samples
            if samples is None:
                self._host_slices[library] = pd.DataFrame(columns=_host.SLICE_COLUMNS)
            else:
                folded = host_fold.fold(samples, library=library).samples
                self._host_slices[library] = _host.slices(folded, self._t0, self._thread_index())
        return self._host_slices[library]

    def host(self, *, library: bool = False) -> pd.DataFrame:
        """The sampled Python per training step, function and thread (``host.HOST_COLUMNS``):
        samples, time as the innermost frame (``self_ns``), on the stack (``total_ns``) and
        waiting off the CPU (``wait_ns``), by self time in each step (step -1: no step ended).
        Imports are one ``import <module>`` frame each, library frames folded into your code's
        (Note [Folding host frames]); ``library=True`` keeps the library frames."""
        samples = self.host_samples
        if samples is None:
            return pd.DataFrame(columns=_host.HOST_COLUMNS)
        folded = host_fold.fold(samples, library=library).samples
        return _host.per_function(folded, self._t0, self._steps(), self._thread_index())

    @property
    def step_sources(self) -> list[int]:
        """Per training step, what ended it: 0 ``openreg_lab.step()``, 1, 2, ... each optimizer."""
        return list(self._step_sources)

    def _thread_index(self) -> dict[int, int]:
        return {int(os_id): int(i) for i, os_id in self.columns.threads.items()}

    def steps(self) -> pd.DataFrame:
        """One row a training step: duration, op calls, fallbacks, copies, casts, peak memory.

        Steps end at each ``optimizer.step()`` and ``openreg_lab.step()``; the first is row 0,
        apart from the steady state after it (the verdict says where its time went). Empty when
        no step ended in the trace."""
        return self._steps().copy()

    def _steps(self) -> pd.DataFrame:
        """``steps()`` computed once (not to be changed: ``steps()`` gives a copy)."""
        if self._step_table is None:
            self._step_table = steps.table(self.events)
        return self._step_table

    @property
    def skipped(self) -> str | None:
        """For ``trace(steps=...)``: which steps were recorded and what was not (None otherwise)."""
        return self._skipped

    def fallbacks(self) -> pd.DataFrame:
        """Ops that ran through the CPU fallback, ranked by time including their copies."""
        return analysis.fallbacks(self.events)

    def copies(self) -> pd.DataFrame:
        """Every copy: direction, bytes, time, devices and the op that caused it."""
        return analysis.copies(self.events)

    def casts(self) -> pd.DataFrame:
        """Every autocast cast: op, argument, from and to dtype, bytes, weight-cache hit."""
        return analysis.casts(self.events)

    def collectives(self) -> pd.DataFrame:
        """Every ``torch.distributed`` collective on openreg: group, seq, rank, peer, bytes, wait."""
        return distributed.collectives(self.columns, self._t0)
