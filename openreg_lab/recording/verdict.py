"""The verdict: the answer a porting engineer came for, computed once for the report, the
dashboard's header and ``openreg-lab run`` alike.

What share of the wall time (with host sampling: from the trace's start to the last event or
sample; without it the traced time, first event to last) went to CPU fallbacks (their copies and
their CPU compute apart),
to copies and to autocast casts; the operators to implement first, ranked by the time a native
kernel would save, each with its calls, bytes moved and source lines; where the wall time of step 0
and of the median step went (device ops, compilation, host Python, waiting: Note [Accounting for
the wall time] in ``accounting``); and the warnings that change how to read the rest. When an
allocation failed in the trace, it opens with what was live then (``memory_text.oom_lines``).
``str(verdict)`` is its text, as ``openreg-lab run`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import accounting, analysis, breakdown, host_fold, steps
from openreg_lab.recording import host as _host
from openreg_lab.recording.kinds import Kinds

#: How many operators the verdict ranks.
TOP = 5

#: The warning under a trace recorded with ``trace(ops="kernels")``.
KERNEL_OPS_NOTE = (
    'Op events come from openreg\'s kernels and fallback only (trace(ops="kernels")): composite ops '
    "such as aten::linear, autograd nodes and kernels registered with torch.library are not recorded, "
    "and each op's dispatch path starts at its kernel's key. Trace with ops=\"all\" to see them."
)


@dataclass(frozen=True)
class Share:
    """Time spent in one kind of work, and its share of the verdict's ``span_ns``."""

    label: str
    ns: int
    share: float
    detail: str = ""


@dataclass(frozen=True, repr=False)
class Verdict:
    """See the module docstring. ``first``: one dict a ranked operator (``name``, ``calls``,
    ``saves_ns``, ``share``, ``bytes_moved``, ``copy_ns``, ``cpu_ns``, ``sources``). ``span_ns`` is
    the wall time when ``wall`` (the host was sampled, so the time between ops is accounted for),
    else the traced time."""

    span_ns: int
    shares: list[Share]
    first: list[dict[str, Any]]
    more: int  # fallen-back operators beyond the ranked ones
    step: str | None  # the first step and the median step, in words
    warnings: list[str] = field(default_factory=list)
    #: Where the wall time went: step 0 and the median step (or the whole trace without steps).
    time: list[accounting.WallTime] = field(default_factory=list)
    #: Several optimizers ending steps, in words (``steps.per_iteration``); None otherwise.
    iterations: str | None = None
    #: ``span_ns`` is the wall time (host sampling on), not only the ops' traced time.
    wall: bool = False
    #: An allocation failed in the trace: what was live then, in words (``memory_text.oom_lines``);
    #: the first line is the headline. Empty otherwise.
    oom: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        first = f"; {self.time[0].summary()}" if self.time else ""
        return f"<openreg Verdict: {self.headline()}{first}>".replace("\n", " ")

    def headline(self) -> str:
        """One sentence: what was live when an allocation failed, if one did (the trace's most
        urgent news); else the fallbacks' share and the first operator to implement."""
        return self.oom[0] if self.oom else self.fallbacks_headline()

    def fallbacks_headline(self) -> str:
        """One sentence: the fallbacks' share and the first operator to implement."""
        fb = self.shares[0]
        time = "wall time" if self.wall else "traced time"
        if not self.first:
            return f"No op fell back to the CPU in {theme.format_ns(self.span_ns)} of {time}."
        top = self.first[0]
        return (
            f"CPU fallbacks took {fb.share:.1%} of the {time} ({theme.format_ns(fb.ns)} of "
            f"{theme.format_ns(self.span_ns)}); implement {top['name']} first: it would save up to "
            f"{theme.format_ns(top['saves_ns'])} ({top['share']:.1%})."
        )

    def lines(self) -> list[str]:
        """The verdict as plain text lines (the command line prints them)."""
        out = [self.headline(), *self.oom[1:]]
        if self.oom:
            out.append(self.fallbacks_headline())
        out += [f"  {s.label}: {s.share:.1%} ({theme.format_ns(s.ns)}{s.detail})" for s in self.shares]
        if self.step:
            out.append(f"  {self.step}")
        if self.iterations:
            out.append(f"  {self.iterations}")
        if self.first:
            out.append("implement first (by the time a native kernel would save):")
            for i, r in enumerate(self.first, 1):
                where = f", from {r['sources'][0]}" if r["sources"] else ""
                more = f" (+{len(r['sources']) - 1} more)" if len(r["sources"]) > 1 else ""
                out.append(
                    f"  {i}. {r['name']}: saves up to {theme.format_ns(r['saves_ns'])} ({r['share']:.1%}), "
                    f"{_calls(r['calls'])}, {theme.format_bytes(r['bytes_moved'])} moved{where}{more}"
                )
            if self.more:
                out.append(f"  ... and {self.more} more ops that fell back")
        if self.time:
            out.append("where the wall time went:")
            out += [f"  {line}" for w in self.time for line in w.lines()]
        out += [f"warning: {w}" for w in self.warnings]
        return out


def verdict(
    events: pd.DataFrame,
    *,
    dropped: int = 0,
    capacity: int | None = None,
    op_events: str = "all",
    profile: str | None = None,
    skipped: str | None = None,
    samples: _host.Samples | None = None,
    t0: int = 0,
    host_sampling: bool = False,
    step_sources: list[int] | None = None,
    thread_index: dict[int, int] | None = None,
    oom: list[str] | None = None,
    kinds: Kinds | None = None,
    library: bool = False,
    fallbacks: pd.DataFrame | None = None,
    step_table: pd.DataFrame | None = None,
) -> Verdict:
    """The verdict of a trace's events (``Trace.verdict()`` passes the trace's settings, its host
    samples, what ended each step and, when an allocation failed, what was live then in words;
    ``kinds``: the events' kinds when the caller read them already, Note [Kinds read once]). Host
    Python is named in the user's terms (Note [Folding host frames]): by the user's frame, an import
    by the line that caused it; ``library=True`` names the innermost frame, a library's too.
    ``fallbacks``: ``breakdown.fallback_costs(events)`` when the caller has it (the dashboard);
    ``step_table``: ``steps.table(events)`` likewise (the dashboard's timeline draws it too)."""
    span = analysis.span(events)
    wall = bool(host_sampling and samples is not None)
    if wall:  # the trace's wall time: from its start (0) to the last event's end or the last sample
        assert samples is not None
        end = events["start_ns"].to_numpy() + np.maximum(events["dur_ns"].to_numpy(), 0)
        span = max(int(end.max()) if len(end) else 0, int(samples.time.max()) - t0 if len(samples) else 0)
    kinds = Kinds.of(events, kinds)  # once: Note [Kinds read once]
    dur = np.maximum(events["dur_ns"].to_numpy().astype(np.int64, copy=False), 0)
    nbytes = events["bytes"].to_numpy()
    fb = breakdown.fallback_costs(events, kinds=kinds) if fallbacks is None else fallbacks
    copies = kinds.mask("copy")
    casts = kinds.mask("cast")

    def share(ns: int) -> float:
        return ns / span if span else 0.0

    fb_ns = int(fb["total_ns"].sum())
    fb_copy = int(fb["copy_to_cpu_ns"].sum() + fb["copy_back_ns"].sum())
    fb_cpu = int(fb["cpu_ns"].sum())
    copy_ns = int(dur[copies].sum())
    cast_ns = int(dur[casts].sum())
    shares = [
        Share(
            "CPU fallbacks",
            fb_ns,
            share(fb_ns),
            f": copies {share(fb_copy):.1%}, CPU compute {share(fb_cpu):.1%}; "
            f"{_calls(int(fb['calls'].sum()))} of {len(fb)} ops",
        ),
        Share(
            "copies",
            copy_ns,
            share(copy_ns),
            f": {int(copies.sum()):,} copies moving {theme.format_bytes(int(nbytes[copies].sum()))}, "
            "the fallbacks' included",
        ),
        Share(
            "autocast casts",
            cast_ns,
            share(cast_ns),
            f": {int(casts.sum()):,} casts, {theme.format_bytes(int(nbytes[casts].sum()))}",
        ),
    ]
    # once: the step sentence and the wall times read it
    table = steps.table(events, kinds=kinds) if step_table is None else step_table
    first = [
        {
            "name": r.name,
            "calls": int(r.calls),
            "saves_ns": int(r.total_ns),
            "share": float(r.share),
            "bytes_moved": int(r.bytes_to_cpu + r.bytes_back),
            "copy_ns": int(r.copy_to_cpu_ns + r.copy_back_ns),
            "cpu_ns": int(r.cpu_ns),
            "sources": list(r.sources),
        }
        for r in fb.head(TOP).itertuples(index=False)
    ]
    return Verdict(
        span_ns=span,
        shares=shares,
        first=first,
        more=max(len(fb) - TOP, 0),
        step=_step_sentence(table),
        warnings=_warnings(events, kinds, dropped, capacity, op_events, profile, skipped),
        time=_wall_times(events, kinds, table, samples, t0, host_sampling, thread_index or {}, library),
        iterations=steps.per_iteration(step_sources or []),
        wall=wall,
        oom=list(oom or []),
    )


def _wall_times(
    events: pd.DataFrame,
    kinds: Kinds,
    table: pd.DataFrame,
    samples: _host.Samples | None,
    t0: int,
    sampled: bool,
    thread_index: dict[int, int],
    library: bool,
) -> list[accounting.WallTime]:
    """Step 0 and the median of the complete steps after it; the whole trace when no step ended."""
    done = table[table["complete"]] if len(table) else table
    iv = _host.intervals(samples, t0) if samples is not None else None  # once for both steps
    folded = host_fold.fold(samples, library=library) if samples is not None and len(samples) else None
    more = {"kinds": kinds, "iv": iv, "folded": folded}
    if done.empty:
        span = analysis.span(events)
        if samples is not None and len(samples):
            span = max(span, int(samples.time.max()) - t0)
        if span <= 0:
            return []
        return [
            accounting.account(events, samples, t0, thread_index, 0, span, "the traced time", sampled, **more)
        ]
    out = []
    first = done.iloc[0]
    a = int(first["start_ns"])
    out.append(
        accounting.account(
            events,
            samples,
            t0,
            thread_index,
            a,
            a + int(first["dur_ns"]),
            f"step {int(first['step'])}",
            sampled,
            **more,
        )
    )
    rest = done.iloc[1:]
    if len(rest):
        order = rest.sort_values("dur_ns", kind="stable")
        mid = order.iloc[(len(order) - 1) // 2]
        a = int(mid["start_ns"])
        label = (
            f"the median step (step {int(mid['step'])} of the {len(rest)} after step {int(first['step'])})"
        )
        out.append(
            accounting.account(
                events, samples, t0, thread_index, a, a + int(mid["dur_ns"]), label, sampled, **more
            )
        )
    return out


def _calls(n: int) -> str:
    return "1 call" if n == 1 else f"{n:,} calls"


def _step_sentence(table: pd.DataFrame) -> str | None:
    s = steps.steady_state(table)
    if s is None:
        return None
    first = s["first"]
    text = f"step {int(first['step'])} took {theme.format_ns(first['dur_ns'])}"
    if s["median_ns"] is None:
        return text + " (the only complete step)"
    after = "the step after it" if s["steady"] == 1 else f"the median of the {s['steady']} steps after it"
    return f"{text}; {after}: {theme.format_ns(s['median_ns'])}"


def _warnings(
    events: pd.DataFrame,
    kinds: Kinds,
    dropped: int,
    capacity: int | None,
    op_events: str,
    profile: str | None,
    skipped: str | None,
) -> list[str]:
    out = []
    if dropped:
        out.append(
            f"{dropped:,} events were dropped: the trace holds at most {capacity or 0:,}; the totals miss "
            "them. Trace again with a larger capacity"
        )
    if op_events == "kernels":
        out.append(KERNEL_OPS_NOTE)
    marks = events["name"].to_numpy()[kinds.mask("mark")]
    profiles = [m.removeprefix("profile: ") for m in marks if m.startswith("profile: ")]
    used = [p for p in [profile, *profiles] if p and p != "none"]
    if used:
        names = ", ".join(dict.fromkeys(used))
        out.append(
            f"a coverage profile was in use ({names}): ops ran natively or fell back as on that backend, "
            "not as openreg's own kernels would"
        )
    if kinds.any("compiled"):
        out.append(
            "the trace holds torch.compile regions: ops inside them ran from generated code, so their "
            "calls and self times are not those of eager mode"
        )
    if skipped:
        out.append(f"only chosen steps were recorded: {skipped}")
    return out
