"""The merged report of a job's ranks (``RanksView.to_html``, ``openreg-lab report r*.trace --html``,
``openreg-lab run --html`` under torchrun): one self-contained file, in the single-rank report's style.

It opens on the job's verdict (``recording.ranks.JobVerdict``: whom the others waited for, how long
and why, a row per rank); then one timeline with a lane group per rank on one clock (the single-rank
timeline: level of detail, zoom, the step picker), each collective drawn across the ranks at its
completion with a dot where the late rank arrived; the collectives table; each rank's memory peak
by category (``memory_ranks.peaks_by_rank``); the op explorer with a rank filter; what was merged,
collapsed. Start-up skew does not take the clock: when the ranks' first collective waited for a
rank still starting up, the timeline opens where it arrived (Note [The view opens after start-up
skew]); it opens on the steps, step 0 apart when it was mostly one-off work (Note [The timeline opens
on the steps]).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import pandas as pd
import torch

from openreg_lab import theme
from openreg_lab.recording import analysis, atomic
from openreg_lab.recording.lod import Pyramid
from openreg_lab.recording.memory_ranks import peaks_by_rank
from openreg_lab.recording.ranks_timeline import job_steps, rank_verdicts
from openreg_lab.views import memory_view, static
from openreg_lab.views._embed import plain_text
from openreg_lab.views.op_explorer import explorer_data
from openreg_lab.views.report import _mount_script, _timeline_levels
from openreg_lab.views.timeline import COLOR_NAMES, PALETTE, marks_of, rows_of
from openreg_lab.views.timeline import opening as steps_opening

#: What the functions here read of a ``views.ranks_view.RanksView`` (which imports this module):
#: ``ranks``, ``traces``, ``names``, ``table``, ``events``, ``causes``, ``verdict``, ``collectives()``.
RanksView = Any

#: Collectives drawn across the ranks at most (the longest waits first); the rest are counted.
MAX_LINKS = 4000
#: Op explorer rows whose details panel is embedded, per rank.
DETAILS_PER_RANK = 40
COLLECTIVE_COLUMNS = [
    ("name", "collective", "text"), ("group", "group", "text"), ("issued_by", "issued by", "text"),
    ("issued_in", "in autograd node", "text"), ("bytes", "bytes", "bytes"), ("ranks", "ranks", "int"),
    ("start_ns", "start", "ns"), ("dur_ns", "slowest", "ns"), ("last_rank", "last to arrive", "int"),
    ("late_ns", "others waited", "ns"), ("gbytes_per_s", "GB/s", "text"),
]  # fmt: skip


#: The columns of the straggler causes' table, ``(key, label, format)``.
CAUSE_COLUMNS = [
    ("collective", "collective", "text"), ("late_rank", "late rank", "int"),
    ("waited_ns", "others waited", "ns"), ("op", "op", "text"), ("source", "source", "text"),
    ("rank_ns", "on the late rank", "ns"), ("others_ns", "on the others", "ns"),
    ("excess_ns", "longer by", "ns"), ("calls", "calls", "int"), ("others_calls", "others' calls", "int"),
]  # fmt: skip
#: The columns of the per-rank verdict table.
RANK_COLUMNS = [
    ("rank", "rank", "int"), ("span_ns", "time", "ns"), ("steps", "steps", "int"),
    ("median_step_ns", "median step", "ns"), ("fallback_share", "in fallbacks", "pct"),
    ("waited_ns", "waited for others", "ns"), ("held_up_ns", "held others up", "ns"),
    ("last_at", "last at", "int"), ("blocked_ns", "blocked in wait()", "ns"),
    ("comm_ns", "communication", "ns"), ("overlap", "overlapped by compute", "pct"),
    ("host_python", "host Python (your code's terms)", "text"),
]  # fmt: skip


def rank_rows(view: Any) -> pd.DataFrame:
    """The per-rank verdict table (``ranks_timeline.rank_verdicts`` of the view's ranks)."""
    return rank_verdicts(view.traces, view.ranks, view.verdict.per_rank)


def verdict_html(view: Any) -> str:
    """The job's verdict: the headline, the per-rank table, the causes of the waits, notes."""
    v = view.verdict
    notes = "".join(
        f"<div class='openreg-warning' style='color:{theme.WARNING_COLOR};font-weight:600'>"
        f"{html.escape(n)}</div>"
        for n in v.notes
    )
    causes = view.causes
    if len(causes):
        worst = causes.sort_values("waited_ns", ascending=False, kind="stable")
        keys = worst.drop_duplicates("key")["key"].head(8).tolist()
        shown = worst[worst["key"].isin(keys)]
        cut = causes["key"].nunique() - len(keys)
        more = (
            f"<div style='color:#555'>… and {cut:,} more collectives with a late rank</div>"
            if cut > 0
            else ""
        )
        why = (
            "<div style='margin-top:6px'><b>Why they waited</b> (at the collectives with the longest "
            "waits: what took longer on the late rank since its previous collective)</div>"
            + static.table_html(shown, CAUSE_COLUMNS, max_rows=len(shown))
            + more
        )
    else:
        why = "<div style='color:#555'>No collective had a late rank to explain.</div>"
    return (
        "<div class='openreg-verdict openreg-job-verdict' style='font:12px system-ui,sans-serif;"
        "margin:4px 0 8px 0'><div class='openreg-headline' style='font-size:14px;margin-bottom:4px'>"
        f"<b>{html.escape(v.headline())}</b></div>{notes}"
        f"<div class='openreg-rank-table'>{static.table_html(rank_rows(view), RANK_COLUMNS, max_rows=10_000)}"
        "</div>"
        f"<div class='openreg-causes'>{why}</div></div>"
    )


def _links(view: RanksView, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Each collective across the ranks: its completion ``t``, the collectives lanes of its ranks,
    the late rank's lane and arrival; at most ``MAX_LINKS`` (the longest waits), and how many in all."""
    lane = {r["lane"]: i for i, r in enumerate(rows)}
    t = view.table
    if t.empty:
        return [], 0
    row_of = t["global_rank"].map(lambda r: lane.get(f"rank {int(r)} · collectives", -1))
    t = t.assign(row=row_of, end=t["end_ns"].where(t["end_ns"] >= 0, t["start_ns"]))
    g = t.groupby("key", sort=False)
    per = pd.DataFrame({"t": g["end"].max(), "late": g["late_ns"].max(), "n": g.size()})
    per = per[per["n"] > 1].sort_values("late", ascending=False, kind="stable")
    total = len(per)
    out = []
    members = g["row"].agg(list)
    lasts = t[t["last"]].drop_duplicates("key").set_index("key")
    for key, r in per.head(MAX_LINKS).iterrows():
        late = lasts.loc[key] if key in lasts.index else None
        out.append(
            {
                "t": float(r["t"]),
                "rows": [int(x) for x in members[key] if x >= 0],
                "late": int(late["row"]) if late is not None else -1,
                "arrived": float(late["start_ns"]) if late is not None else 0.0,
            }
        )
    return out, total


def _steps(view: RanksView) -> list[dict[str, Any]]:
    """The training steps across ranks (``ranks_timeline.job_steps``), as the page's script reads them."""
    return [
        {"step": int(s), "t0": float(a), "t1": float(b), "complete": bool(c)}
        for s, a, b, c in job_steps(view.traces).itertuples(index=False)
    ]


# Note [The view opens after start-up skew]
# Ranks start at different times; their first collective waits for the last one to arrive, and on a
# single clock that start-up wait can fill most of the timeline. When it did (the first collective of
# every rank had a late arrival, and at least half the ops ran after it), the timeline opens at that
# arrival instead of at 0. Nothing is cut: reset, a double-click or "all steps" shows the whole clock,
# and the page says so.
def _opening(view: RanksView) -> tuple[float, str]:
    """Where the timeline opens (ns) and the sentence saying why (empty: at 0)."""
    t = view.table
    if t.empty:
        return 0.0, ""
    first = t.loc[t["start_ns"].idxmin(), "key"]
    rows = t[t["key"] == first]
    if len(rows) < len(view.ranks) or rows["late_ns"].max() <= 0:
        return 0.0, ""
    arrived = float(rows["start_ns"].max())
    e = view.events
    ops = e["start_ns"].to_numpy()[(e["kind"] == "op").to_numpy()]
    if not len(ops) or (ops >= arrived).mean() < 0.5:
        return 0.0, ""
    last = int(rows.loc[rows["start_ns"].idxmax(), "global_rank"])
    return arrived, (
        f"The timeline opens at {theme.format_ns(arrived)}, when rank {last} reached the ranks' first "
        f"collective ({rows['name'].iloc[0]}): the others had waited "
        f"{theme.format_ns(rows['late_ns'].max())} for it to start up. Reset (or double-click) shows "
        "the whole clock."
    )


def _explorer(view: RanksView) -> dict[str, Any]:
    """The op explorer's data with a row per op, device and rank (``rank``) and the rank filter."""
    rows: list[dict[str, Any]] = []
    e = view.events
    base = 0
    data: dict[str, Any] = {}
    for r, t in zip(view.ranks, view.traces, strict=True):
        mine = t.events
        data = explorer_data(mine, analysis.summary(mine), max_details=DETAILS_PER_RANK)
        for row in data["rows"]:
            row["rank"] = r
            if row["event"] >= 0:
                row["event"] += base  # the merged events' ids (recording.ranks.merged_events)
        rows += data["rows"]
        base += len(mine)
    assert base == len(e)
    return {**data, "rows": rows, "ranks": list(view.ranks)}


def ranks_report_html(
    view: RanksView, *, title: str | None = None, run_info: Mapping[str, str] | None = None
) -> str:
    """The merged report as one HTML string (see the module's docstring)."""
    title = title or "openreg-lab: ranks"
    events = view.events
    pyramid = Pyramid(events)
    rows = rows_of(pyramid)
    links, total_links = _links(view, rows)
    opening, opening_note = _opening(view)
    span = float(max(pyramid.span, 1))
    # The steps' window, step 0 apart (Note [The timeline opens on the steps]), after start-up skew.
    step_bands = _steps(view)
    opens = steps_opening(step_bands, span, events)
    if opening > opens["view"][0]:
        opens["view"] = [opening, opens["view"][1] if opens["view"][1] > opening else span]
    levels, kept = _timeline_levels(pyramid, events)
    model = {
        "rows": rows,
        "palette": PALETTE,
        "color_names": COLOR_NAMES,
        "memory_color": theme.MEMORY_COLOR,
        "mark_color": theme.MARK_COLOR,
        "marks": marks_of(pyramid),
        "steps": step_bands,
        "step_color": theme.STEP_BAND_COLOR,
        "opening": opens,
        "span_ns": span,
        "view": list(opens["view"]),
        "width": 900,
        "data": {},
        "levels": levels,
        "selected": -1,
        "highlight": "",
        "links": links,
        "link_color": theme.COLLECTIVE_COLOR,
    }
    explorer = _explorer(view)
    cut_links = (
        f" The {MAX_LINKS:,} collectives with the longest waits are drawn across the ranks, "
        f"of {total_links:,}."
        if total_links > len(links)
        else ""
    )
    detail_note = (
        f"One lane group a rank ({', '.join(f'rank {r}' for r in view.ranks)}), on one clock. A line "
        "across the ranks marks each collective's completion; the dot, where the rank the others waited "
        f"for arrived.{cut_links} The timeline keeps {len(levels)} levels of detail ({kept:,} drawn items) "
        f"for {pyramid.slice_count:,} slices."
    )
    coll = view.collectives()
    coll = coll.assign(gbytes_per_s=coll["gbytes_per_s"].map(lambda x: "" if pd.isna(x) else f"{x:.3g}"))
    info = {
        "torch": torch.__version__,
        "ranks": f"{len(view.ranks)} of world size {view.verdict.world_size}",
        "run id": str(view.verdict.run_id),
        "events": f"{len(events):,}",
        **{f"rank {r} trace": n for r, n in zip(view.ranks, view.names, strict=True)},
        **dict(run_info or {}),
    }
    info_rows = "".join(
        f"<tr><th style='{static._TH}'>{html.escape(k)}</th>"
        f"<td style='{static._TD}'>{html.escape(str(v))}</td></tr>"
        for k, v in info.items()
    )
    muted = f"color:{theme.MUTED_TEXT_COLOR}"
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font:13px system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:18px;
color:{theme.TEXT_COLOR}}}
h1{{font-size:20px}} h2{{font-size:15px;margin-top:22px}} section{{margin-bottom:12px}}</style>
</head>
<body><h1>{html.escape(title)}</h1>
<section id="verdict">{verdict_html(view)}</section>
<section><h2>Timeline</h2>
<div id="opening" style="{muted}">{html.escape(opening_note)}</div>
<div id="timeline" style="width:100%"></div>
<div style="{muted}">{html.escape(detail_note)}</div></section>
<section id="collectives"><h2>Collectives</h2>
{static.table_html(coll, COLLECTIVE_COLUMNS, max_rows=500)}</section>
<section id="memory-ranks"><h2>Memory: each rank's peak</h2>
<div style="{muted}">The most bytes each rank held at once, by category, on the merged clock.</div>
{memory_view.rank_peaks_html(peaks_by_rank(view.traces))}</section>
<section><h2>Ops</h2><div id="op-explorer"></div></section>
<details id="run-info"><summary><b>What was merged</b> (ranks, run id, trace files)</summary>
<table style="{static._TABLE}">{info_rows}</table></details>
{_mount_script(model, explorer)}
</body></html>
"""


def write_ranks_report(
    view: RanksView, path: str, *, title: str | None = None, run_info: Mapping[str, str] | None = None
) -> None:
    """Write ``ranks_report_html(...)`` to ``path``, whole or not at all; ``OSError`` names the path."""
    atomic.check(path)  # a path no output may go to, refused before the report is drawn
    text = ranks_report_html(view, title=title, run_info=run_info)
    try:
        with atomic.replacing(path, "w", encoding="utf-8") as f:
            f.write(plain_text(text))
    except OSError as e:
        raise OSError(f"cannot write the report to {path!r}: {e.strerror or e}") from None
