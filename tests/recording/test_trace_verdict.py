"""The verdict first: shares of the traced time, the ops to implement first, the warnings; in the
report, the dashboard's header and the command line alike."""

from __future__ import annotations

import html
import io
import re

import pytest
import torch

import openreg_lab
from openreg_lab.cli import _outputs
from openreg_lab.recording import analysis, verdict
from openreg_lab.views import static


@pytest.fixture(scope="module")
def falls_back() -> openreg_lab.Trace:
    x = torch.randn(64, 64, device="openreg")
    with openreg_lab.trace(stack=True) as t:
        for _ in range(3):
            torch.logcumsumexp(x, 0)  # falls back: 16 KiB to the CPU and back
        torch.trunc(x)  # falls back once
        x + x
        with torch.autocast("openreg", dtype=torch.bfloat16):
            torch.mm(x, x)  # two casts
    return t


def test_the_shares_are_the_events_time_over_the_wall_time(falls_back):
    v = falls_back.verdict()
    ev = falls_back.events
    samples = falls_back.host_samples
    assert samples is not None  # host sampling is on by default: the wall time is accounted for
    ends = int((ev["start_ns"] + ev["dur_ns"].clip(lower=0)).max())
    last_sample = int(samples.time.max()) - falls_back._t0 if len(samples) else 0
    span = max(ends, last_sample)  # from the trace's start to the last event or sample
    assert v.wall and v.span_ns == span >= analysis.span(ev)
    fb, copies, casts = v.shares
    dur = ev["dur_ns"].clip(lower=0)
    assert (fb.label, fb.ns) == ("CPU fallbacks", int(dur[ev["kind"] == "fallback"].sum()))
    assert (copies.label, copies.ns) == ("copies", int(dur[ev["kind"] == "copy"].sum()))
    assert (casts.label, casts.ns) == ("autocast casts", int(dur[ev["kind"] == "cast"].sum()))
    assert fb.share == pytest.approx(fb.ns / span) and 0 < fb.share < 1
    assert "4 calls of 2 ops" in fb.detail and "2 casts" in casts.detail
    assert "10 copies moving 144.0 KiB" in copies.detail  # 4 fallbacks x 2 x 16 KiB, 2 casts x 8 KiB


def test_the_ops_to_implement_first_are_ranked_by_the_time_they_would_save(falls_back):
    v = falls_back.verdict()
    fb = falls_back.fallbacks()
    assert [r["name"] for r in v.first] == fb["name"].tolist()
    assert [r["saves_ns"] for r in v.first] == sorted((r["saves_ns"] for r in v.first), reverse=True)
    row = next(r for r in v.first if r["name"] == "aten::_logcumsumexp")
    assert row["calls"] == 3 and row["bytes_moved"] == 3 * 2 * 64 * 64 * 4
    assert row["sources"] == [f"{__file__}:24"]
    assert v.more == 0 and v.warnings == []
    assert v.headline().startswith(f"CPU fallbacks took {v.shares[0].share:.1%} of the wall time")
    assert f"implement {v.first[0]['name']} first" in v.headline()


def test_without_host_sampling_the_shares_are_of_the_traced_time():
    x = torch.randn(64, 64, device="openreg")
    with openreg_lab.trace(host=False) as t:
        torch.logcumsumexp(x, 0)  # falls back
        x + x
    v = t.verdict()
    span = analysis.span(t.events)
    assert not v.wall and v.span_ns == span
    assert v.shares[0].share == pytest.approx(v.shares[0].ns / span)
    assert v.headline().startswith(f"CPU fallbacks took {v.shares[0].share:.1%} of the traced time (")


def test_no_fallback_says_so():
    x = torch.ones(4, device="openreg")
    with openreg_lab.trace() as t:
        x + x
    v = t.verdict()
    assert v.first == [] and v.headline().startswith("No op fell back to the CPU in ")


def test_the_warnings_that_change_how_to_read_the_rest(falls_back):
    x = torch.ones(4, device="openreg")
    with pytest.warns(openreg_lab.TraceDroppedEventsWarning), openreg_lab.trace(capacity=3) as t:
        for _ in range(5):
            x = x + 1
    assert t.verdict().warnings[0].startswith(f"{t.dropped:,} events were dropped: the trace holds at most 3")
    with openreg_lab.trace(ops="kernels") as k:
        x.neg()
    assert k.verdict().warnings == [verdict.KERNEL_OPS_NOTE]
    with openreg_lab.use_profile("mps"), openreg_lab.trace() as p:
        x.neg()
    assert p.verdict().warnings == [
        "a coverage profile was in use (mps): ops ran natively or fell back as on that backend, not as "
        "openreg's own kernels would"
    ]
    with openreg_lab.trace() as q, openreg_lab.use_profile("mps"):  # switched inside: a mark says so
        x.neg()
    assert "(mps)" in q.verdict().warnings[0]
    # torch.compile regions are events of kind "compiled" (recorded since compiled code is traced).
    ev = falls_back.events.copy()
    ev.loc[0, "kind"] = "compiled"
    assert "torch.compile regions" in verdict.verdict(ev).warnings[0]


def test_the_report_opens_on_the_verdict_and_ends_with_what_was_run(falls_back, tmp_path):
    path = tmp_path / "r.html"
    falls_back.to_html(path, run_info={"command": "train.py <--epochs>"})
    text = path.read_text()
    v = falls_back.verdict()
    body = text[text.index("<body>") :]
    verdict_at = body.index("openreg-verdict")
    assert verdict_at < body.index("<h2>Timeline</h2>") < body.index('<details id="run-info">')
    assert html.escape(v.headline()) in body
    # The run's metadata is collapsed (a <details> without `open`), escaped, and after everything else.
    details = re.search(r'<details id="run-info">(.*?)</details>', body, re.S)
    assert details is not None and "train.py &lt;--epochs&gt;" in details.group(1)
    assert body.index('<details id="run-info">') > body.index("<h2>Autocast casts</h2>")
    # The ranked ops, with their calls and source lines.
    first = body[verdict_at : body.index("<h2>Timeline</h2>")]
    assert "Implement first" in first and "aten::_logcumsumexp" in first and f"{__file__}:24" in first


def test_the_dashboard_header_and_the_cli_lead_with_the_verdict(falls_back):
    board = falls_back.show()
    v = falls_back.verdict()
    assert html.escape(v.headline()) in board.header.value
    assert board.header.value == static.header_html(falls_back.events, v)
    out = io.StringIO()
    _outputs.print_summary(falls_back, 10, out)
    lines = out.getvalue().splitlines()
    assert lines[: len(v.lines())] == v.lines()
    assert lines[0] == v.headline()
    assert lines[4] == "implement first (by the time a native kernel would save):"
    assert lines[5].startswith(f"  1. {v.first[0]['name']}: saves up to ")
