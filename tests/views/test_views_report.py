"""The HTML report (Trace.to_html): self-contained, offline, with the run's facts and bounded in size."""

from __future__ import annotations

import re

import pytest

from openreg_lab.views.report import MAX_TIMELINE_ITEMS, report_html
from tests.support.views_data import tile, training_trace


@pytest.fixture(scope="module")
def trace():
    return training_trace()


def test_the_report_is_one_offline_file_with_every_view(trace, tmp_path):
    path = tmp_path / "r.html"
    trace.to_html(path, title="my run", run_info={"command": "python train.py --epochs 1", "profile": "mps"})
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<title>my run</title>" in text
    # plotly.js is inside, once; nothing is fetched from the network.
    assert len(re.findall(r"plotly\.js v\d", text)) >= 1
    assert not re.search(r"<script[^>]+src=[\"']https?:", text)
    for facts in ("python train.py --epochs 1", "mps", "2.13.0", f"{len(trace):,}"):
        assert facts in text
    for section in (
        "Timeline",
        "Ops",
        "Fallbacks",
        "Dispatch flow",
        "Copies and casts",
        "Memory",
        "Autocast casts",
        "Coverage of the ops that ran",
    ):
        assert f"<h2>{section}</h2>" in text, section
    assert "aten::_logcumsumexp" in text and "views_data.py:" in text  # a fallback with its source line
    assert text.count('class="plotly-graph-div"') == 4


def test_a_large_trace_makes_a_bounded_report(trace):
    small = report_html(trace.events)
    big_events = tile(trace.events, 80)  # ~200k events
    big = report_html(big_events)
    assert len(big) < len(small) + 12 * MAX_TIMELINE_ITEMS * 8  # the timeline's levels are capped
    assert "events are aggregated" in big and "down to no finer level" in big
    assert "down to every slice" in small
    kept = int(re.search(r"levels of detail \(([\d,]+) drawn items", big).group(1).replace(",", ""))
    assert kept <= MAX_TIMELINE_ITEMS + 2 * 2048 * 20


def test_an_unwritable_path_names_itself(trace, tmp_path):
    with pytest.raises(OSError, match="cannot write the report to"):
        trace.to_html(tmp_path / "no" / "such" / "dir" / "r.html")


def test_the_op_explorer_has_the_summary_rows_with_their_longest_call(trace):
    from openreg_lab.recording import analysis
    from openreg_lab.views.op_explorer import explorer_data

    ev = trace.events
    summary = analysis.summary(ev)
    data = explorer_data(ev, summary, max_details=3)
    rows = data["rows"]
    assert [(r["name"], r["device"], r["calls"]) for r in rows] == list(
        zip(summary["name"], summary["device"], summary["calls"], strict=True)
    )
    for r in rows:
        calls = ev[(ev["kind"] == "op") & (ev["name"] == r["name"]) & (ev["device"] == r["device"])]
        assert r["event"] == int(calls["dur_ns"].idxmax())
        assert r["fallback"] + r["native"] + r["composite"] + r["generic"] <= r["calls"]
    assert all("dispatch path" in r["details"] for r in rows[:3]) and rows[3]["details"] == ""
    assert data["kernels"] == ["native", "fallback", "composite", "generic"]


def test_no_string_of_the_trace_can_close_the_report_script():
    import torch

    import openreg_lab

    x = torch.ones(3, device="openreg")
    with openreg_lab.trace() as t:
        openreg_lab.mark("</script><img src=x onerror=alert(1)>")
        x + x
    text = report_html(t.events)
    assert "</script><img" not in text and "<img src=x" not in text
    assert "\\u003c/script\\u003e\\u003cimg src=x onerror=alert(1)\\u003e" in text


def test_a_trace_without_op_events_has_no_sankey_but_says_why(trace):
    """A Sankey of no nodes makes plotly.js throw in the page (the browser test
    tests/browser/test_browser_report.py sees it); the figure says there is no flow instead."""
    import openreg_lab
    from openreg_lab.recording import flow
    from openreg_lab.views import charts

    with openreg_lab.trace() as t:
        openreg_lab.mark("only a mark")
    flows = flow.dispatch_flows(t.events)
    assert flows.empty
    fig = charts.dispatch_flow(flows)
    assert [d.type for d in fig.data] == []
    assert [a.text for a in fig.layout.annotations] == [charts.NO_FLOW]
    page = report_html(t.events)
    assert charts.NO_FLOW in page and '"type":"sankey"' not in page
    full = report_html(trace.events)
    assert full.count('"type":"sankey"') == 1 and charts.NO_FLOW not in full
