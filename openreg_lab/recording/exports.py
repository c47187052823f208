"""The files a trace exports for other tools: Perfetto and chrome://tracing (``export_chrome_trace``),
torch.profiler's Kineto schema for Holistic Trace Analysis (``to_kineto``). ``Trace`` has them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pandas as pd

from openreg_lab.recording import chrome, kineto, perfetto

if TYPE_CHECKING:
    from openreg_lab.recording.distributed import Job
    from openreg_lab.recording.events import Columns


class Exports:
    """``Trace``'s exports (a base of ``Trace``: it supplies the columns, events and what it lost)."""

    columns: Columns
    events: pd.DataFrame
    job: Job | None
    dropped: int
    capacity: int
    _t0: int
    _skipped: str | None

    def collectives(self) -> pd.DataFrame: ...

    def host_slices(self, *, library: bool = False) -> pd.DataFrame: ...

    def export_chrome_trace(self, path: str | os.PathLike[str], *, library: bool = False) -> None:
        """Write the trace for Perfetto (ui.perfetto.dev): a ``path`` ending in ``.pftrace``,
        ``.perfetto-trace`` or ``.pb`` gets Perfetto's own protobuf format (fast and compact, for
        millions of events: Note [Perfetto's protobuf, written in columns]); any other the Chrome
        Trace Event JSON, which chrome://tracing also opens. Both draw the sampled Python as a lane
        per thread, in your code's terms (``host_slices()``: imports as one ``import <module>``
        slice, library frames folded into your code's); ``library=True`` keeps the library frames."""
        host = self.host_slices(library=library)
        if os.fspath(path).lower().endswith(perfetto.SUFFIXES):
            f = self.columns.fields
            shapes = (self.events["shapes"], self.events["dtypes"]) if (f["shapes"] >= 0).any() else None
            perfetto.write(path, self.columns, self._t0, host, shapes)
            return
        chrome.write(path, self.events, self.columns.threads, host, dropped=self.dropped,
                     capacity=self.capacity)  # fmt: skip

    def to_kineto(self, path: str | os.PathLike[str]) -> None:
        """Write the trace in the JSON schema of torch.profiler's (Kineto's) traces, which Holistic
        Trace Analysis reads (``hta.trace_analysis.TraceAnalysis``), as do Perfetto and
        chrome://tracing: ops as ``cpu_op`` events, openreg's device work as kernels on a stream
        with their launches, copies as memcpys, collectives as communication kernels,
        ``ProfilerStep#N`` spans from the trace's steps, the rank in ``distributedInfo``
        (Note [openreg's work as Kineto's device activity]). ``path`` ends with ``.json`` (or
        ``.json.gz``, compressed); it is written whole or not at all. Dropped events are said in the
        file's ``openreg`` metadata."""
        job = self.job
        kineto.write(
            path,
            self.events,
            threads=self.columns.threads,
            t0=self._t0,
            collectives=self.collectives(),
            rank=None if job is None else job.rank,
            world_size=None if job is None else job.world_size,
            dropped=self.dropped,
            capacity=self.capacity,
            skipped=self._skipped,
        )
