"""``ranks(traces)``: one trace per rank of a ``torch.distributed`` run, merged on one clock.

::

    view = openreg_lab.views.ranks(["run.rank0.trace", "run.rank1.trace"])  # paths or Traces
    view.verdict        # who the others waited for, how long and why (recording.ranks.JobVerdict)
    view.causes         # per collective: the late rank's ops that took longer than on the others
    view.table          # one row per collective and rank (recording.distributed.merge_ranks)
    view.collectives()  # one row per collective: bytes, slowest rank, who arrived last and how late
    view.to_html("job.html")  # the merged report (views.ranks_report)
    view                # the verdict, an SVG timeline (one lane per rank) and the tables

The traces must be the ranks of one job (``distributed.check_one_job``: one line says what
differs otherwise); ranks are labelled by the rank each trace recorded. The static view needs no
kernel: every rank's timeline on one time axis (the span of the collectives), its top-level ops
and backward nodes in a thin row above its collectives, each collective drawn from issue to
completion, with the time that rank spent blocked in ``wait()`` in a lighter shade beneath.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from openreg_lab import theme
from openreg_lab.recording import ranks as _ranks
from openreg_lab.recording.distributed import check_one_job, job_collectives, merge_ranks
from openreg_lab.recording.ranks_timeline import activity
from openreg_lab.recording.session import Trace, load_trace
from openreg_lab.views.ranks_report import verdict_html, write_ranks_report

if TYPE_CHECKING:
    from openreg_lab.recording.ranks import JobVerdict

_WIDTH, _LANE, _LEFT = 900, 34, 70


class RanksView:
    """The ranks of one job merged: the job's verdict, the collectives lined up (``table``), the
    straggler causes, every rank's events on one clock; static HTML and the merged report."""

    def __init__(self, traces: Sequence[Trace | str | os.PathLike[str]], notes: Sequence[str] = ()) -> None:
        """``notes``: sentences the verdict adds (e.g. a rank that failed before saving its trace)."""
        if isinstance(traces, (str, os.PathLike, Trace)):
            traces = [traces]
        if not traces:
            raise ValueError("views.ranks needs the traces of a job's ranks: paths or Trace objects")
        loaded, names = [], []
        for i, t in enumerate(traces):
            if isinstance(t, Trace):
                loaded.append(t)
                names.append(
                    f"trace {i} (rank {t.job.rank})" if t.job and t.job.rank is not None else f"trace {i}"
                )
            elif isinstance(t, (str, os.PathLike)):
                loaded.append(load_trace(t))
                names.append(os.fspath(t))
            else:
                raise TypeError(
                    f"views.ranks takes paths of trace files or Trace objects, got {type(t).__name__}"
                )
        check_one_job(loaded, names)
        order = sorted(range(len(loaded)), key=lambda i: loaded[i].job.rank)  # type: ignore[union-attr]
        self.traces = [loaded[i] for i in order]
        self.names = [names[i] for i in order]
        self.ranks = [int(t.job.rank) for t in self.traces]  # type: ignore[union-attr]
        self.table = merge_ranks(self.traces)
        self.events = _ranks.merged_events(self.traces, self.ranks)
        self.causes = _ranks.causes(self.traces, self.table)
        self.verdict: JobVerdict = _ranks.job_verdict(self.traces, self.table, self.events, self.causes)
        self.verdict.notes.extend(str(n) for n in notes)
        self.activity = activity(self.traces, self.table)

    def collectives(self) -> pd.DataFrame:
        """One row per collective across ranks: ``recording.distributed.job_collectives`` of ``table``."""
        return job_collectives(self.table)

    # -- display -------------------------------------------------------------
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/html": self.html(), "text/plain": repr(self)}

    def __repr__(self) -> str:
        n = self.table["key"].nunique() if len(self.table) else 0
        return f"<RanksView: {len(self.ranks)} ranks, {n} collectives>"

    def html(self) -> str:
        """The job's verdict, the timeline (SVG) and the per-collective table, as one HTML fragment
        that reads with no kernel and no JavaScript."""
        return (
            f'<div style="font-family:{theme.FONT}">{verdict_html(self)}{self._svg()}'
            f"{self._table_html()}</div>"
        )

    def to_html(
        self,
        path: str | os.PathLike[str],
        title: str = "openreg-lab: ranks",
        run_info: dict[str, str] | None = None,
    ) -> None:
        """Write the merged report (``views.ranks_report``) as one offline HTML file."""
        write_ranks_report(self, os.fspath(path), title=title, run_info=run_info)

    def _svg(self) -> str:
        t = self.table
        if t.empty:
            return "<p>No collectives were recorded.</p>"
        ranks = sorted(t["global_rank"].unique())
        end = t["end_ns"].where(t["end_ns"] >= 0, t["start_ns"])
        t0, t1 = int(t["start_ns"].min()), int(max(end.max(), t["start_ns"].max() + 1))
        scale = (_WIDTH - _LEFT - 10) / max(t1 - t0, 1)
        height = _LANE * len(ranks) + 24
        parts = [f'<svg width="{_WIDTH}" height="{height}" role="img" aria-label="collectives by rank">']
        for i, r in enumerate(ranks):
            y = i * _LANE
            parts.append(f'<text x="4" y="{y + 17}" font-size="12">rank {int(r)}</text>')
        for act in self.activity.itertuples():  # what each rank was doing: top-level ops, backward
            if act.rank not in ranks:
                continue
            a0, a1 = max(act.start_ns, t0), min(act.start_ns + act.dur_ns, t1)  # the collectives' span
            if a1 <= a0:
                continue
            y = ranks.index(act.rank) * _LANE
            x = _LEFT + (a0 - t0) * scale
            colour = theme.BACKWARD_COLOR if act.kind == "backward" else theme.OTHER_COLOR
            parts.append(
                f'<rect class="activity" x="{x:.1f}" y="{y + 2}" width="{max((a1 - a0) * scale, 0.5):.1f}" '
                f'height="5" fill="{colour}"><title>{html.escape(str(act.name))}</title></rect>'
            )
        for row in t.itertuples():
            y = ranks.index(row.global_rank) * _LANE + 6
            x = _LEFT + (row.start_ns - t0) * scale
            dur = row.dur_ns if row.dur_ns > 0 else 0
            w = max(dur * scale, 1.5)
            tip = html.escape(
                f"{row.name} (group {row.group} #{row.seq}) rank {row.global_rank}: {row.bytes} bytes, "
                f"{theme.format_ns(dur)}, arrived {theme.format_ns(row.late_ns)} after the first"
                + (", last" if row.last else "")
            )
            if row.wait_ns > 0:  # the wait ends when the collective completes
                ww = max(min(row.wait_ns, dur) * scale, 1.0)
                parts.append(
                    f'<rect x="{x + w - ww:.1f}" y="{y + 15}" width="{ww:.1f}" height="6" '
                    f'fill="{theme.COLLECTIVE_WAIT_COLOR}"><title>{tip} (waited)</title></rect>'
                )
            parts.append(
                f'<rect class="collective" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="12" '
                f'fill="{theme.COLLECTIVE_COLOR}"><title>{tip}</title></rect>'
            )
        parts.append(
            f'<text x="{_LEFT}" y="{height - 4}" font-size="11">0</text>'
            f'<text x="{_WIDTH - 10}" y="{height - 4}" font-size="11" text-anchor="end">'
            f"{(t1 - t0) / 1e6:.2f} ms</text></svg>"
        )
        return "".join(parts)

    def _table_html(self) -> str:
        c = self.collectives()
        if c.empty:
            return ""
        head = "".join(
            f"<th>{h}</th>"
            for h in ("collective", "group", "bytes", "ranks", "slowest", "last to arrive", "late by", "GB/s")
        )
        rows = []
        for r in c.itertuples():
            last = "" if pd.isna(r.last_rank) else f"rank {int(r.last_rank)}"
            bw = "" if pd.isna(r.gbytes_per_s) else f"{r.gbytes_per_s:.3g}"
            rows.append(
                f"<tr><td>{html.escape(str(r.name))}</td><td>{html.escape(str(r.group))}</td>"
                f"<td>{int(r.bytes):,}</td><td>{int(r.ranks)}</td><td>{theme.format_ns(r.dur_ns)}</td>"
                f"<td>{last}</td><td>{theme.format_ns(r.late_ns)}</td><td>{bw}</td></tr>"
            )
        return f'<table class="ranks"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def ranks(traces: Sequence[Trace | str | os.PathLike[str]], notes: Sequence[str] = ()) -> RanksView:
    """The traces (paths or ``Trace`` objects) of one job's ranks, merged (see the module doc);
    ``notes``: sentences the verdict adds."""
    return RanksView(traces, notes)
