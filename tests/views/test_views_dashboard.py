"""The trace dashboard without a browser: its data equals the trace's tables, its panels are linked,
and it displays itself as a widget with text/html and text/plain beside it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import openreg_lab
from openreg_lab.recording import breakdown, flow, lookup, steps
from openreg_lab.recording.verdict import verdict
from openreg_lab.views import charts, static
from openreg_lab.views.dashboard import CHARTS, Dashboard
from openreg_lab.views.report import report_html
from openreg_lab.views.timeline import steps_of
from tests.support.views_data import training_trace


@pytest.fixture(scope="module")
def trace():
    return training_trace()


@pytest.fixture(scope="module")
def dash(trace):
    return trace.show()


def test_show_and_a_bare_trace_give_the_dashboard(trace, dash):
    assert isinstance(dash, Dashboard) and "openreg-dashboard" in dash._dom_classes
    bundle = trace._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "application/vnd.jupyter.widget-view+json"}
    assert bundle["text/plain"].startswith(f"<openreg trace dashboard: {len(trace)} events")
    html = bundle["text/html"]
    assert "<svg" in html and "aten::_logcumsumexp" in html and "<script" not in html
    assert "Implementing aten::" in html


def test_op_table_counts_equal_the_summary(trace, dash):
    summary = trace.summary().set_index("name")
    ops = dash.ops.groupby("name")[
        ["calls", "native", "fallback", "composite", "generic", "bytes_copied"]
    ].sum()
    pd.testing.assert_frame_equal(
        ops.sort_index(), summary[ops.columns].sort_index().astype(np.int64), check_names=False
    )
    assert dash.table.total == len(dash.ops)
    assert len(dash.table.rows) == min(len(dash.ops), dash.table.page_size)


def test_table_filters_by_name_kernel_and_device(dash):
    t = dash.table
    # the example model's attention: scaled_dot_product_attention and openreg's fused kernel
    t.name_filter = "attention"
    assert t.total > 0 and all("attention" in r["name"] for r in t.rows)
    t.name_filter = ""
    t.kernel_filter = "fallback"
    assert sorted(r["name"] for r in t.rows) == sorted(dash.ops.loc[dash.ops["fallback"] > 0, "name"])
    t.kernel_filter = ""
    t.device_filter = "openreg:0"
    assert t.total == int((dash.ops["device"] == "openreg:0").sum())
    t.device_filter = ""
    t.sort = ["calls", False]
    calls = [r["calls"] for r in t.rows]
    assert calls == sorted(calls, reverse=True)
    t.page = 1
    assert t.rows and t.rows[0]["calls"] <= calls[-1]
    t.sort, t.page = ["total_ns", False], 0


def test_clicking_a_row_or_a_slice_selects_the_op_everywhere(trace, dash):
    ev = trace.events
    dash.table.selected_key = "aten::addmm|openreg:0"
    addmm = ev[(ev["kind"] == "op") & (ev["name"] == "aten::addmm")]
    longest = int(addmm.loc[addmm["dur_ns"].idxmax(), "id"])
    assert dash.selection.event == longest and dash.timeline.selected == longest
    assert dash.timeline.highlight == "aten::addmm"
    assert [r["name"] for r in dash.table.rows] == ["aten::addmm"]  # the table filters to that name
    details = dash.details.value
    assert "aten::addmm" in details and "AutogradPrivateUse1" in details and "PrivateUse1" in details
    assert f"one of {len(addmm)} calls" in details
    # A backward op: its forward op and that op's source line.
    bw = ev[(ev["kind"] == "op") & (ev["forward"] >= 0) & (ev["parent"] >= 0)].iloc[0]
    dash.timeline.selected = int(bw["id"])
    fwd = ev.iloc[int(bw["forward"])]
    assert dash.selection.event == int(bw["id"])
    assert "forward op" in dash.details.value and fwd["name"] in dash.details.value
    assert str(fwd["source"]) in dash.details.value
    # Children: a fallen-back op lists its fallback and copies.
    fb = ev[(ev["kind"] == "fallback") & (ev["name"] == "aten::_logcumsumexp")].iloc[0]
    dash.select_event(int(fb["parent"]))
    assert "fallback: " + fb["name"] in dash.details.value
    assert "views_data.py" in dash.details.value  # the source line of the user's code


def test_fallback_bars_equal_the_fallbacks_table(trace, dash):
    fb = trace.fallbacks()
    fig = charts.fallbacks(breakdown.fallback_costs(trace.events))
    by_part = {bar.name: dict(zip(bar.y, bar.x, strict=True)) for bar in fig.data}
    assert set(by_part) == {"copy to CPU", "CPU compute", "copy back"}
    for r in fb.itertuples(index=False):
        assert by_part["copy to CPU"][r.name] == pytest.approx(r.copy_to_cpu_ns / 1e6)
        assert by_part["CPU compute"][r.name] == pytest.approx(r.cpu_ns / 1e6)
        assert by_part["copy back"][r.name] == pytest.approx(r.copy_back_ns / 1e6)
    top = fb.iloc[0]
    sentence = breakdown.savings_sentence(breakdown.fallback_costs(trace.events))
    assert sentence.startswith(f"Implementing {top['name']} natively would save")
    assert f"over its {top['calls']} calls" in sentence


def test_the_dispatch_flow_accounts_for_every_call(trace, dash):
    ev = trace.events
    ops = ev[ev["kind"] == "op"]
    flows = dash.flows
    into_ran = flows[flows["target"].str.startswith("ran ")]
    assert int(into_ran["calls"].sum()) == len(ops)
    for kernel in ("native", "composite", "fallback"):
        assert int(into_ran.loc[into_ran["target"] == f"ran {kernel}", "calls"].sum()) == int(
            (ops["kernel"] == kernel).sum()
        )
    assert int(into_ran["time_ns"].sum()) == int(ops["dur_ns"].clip(lower=0).sum())
    # Calls entering at each first key equal the calls whose path starts there.
    first = ops["dispatch"].fillna("").str.split(" > ").str[0]
    entering = flows[flows["source"] == flow.ALL_CALLS].set_index("target")["calls"]
    assert entering.to_dict() == first.value_counts().to_dict()
    # Every key node passes on what it receives.
    for key in set(flows["target"]) - set(flow.RAN.values()):
        assert (
            flows.loc[flows["target"] == key, "calls"].sum()
            == flows.loc[flows["source"] == key, "calls"].sum()
        )
    sankey = charts.dispatch_flow(flows, "time").data[0]
    assert sum(sankey.link.value) == pytest.approx(flows["time_ns"].sum() / 1e6 * 1.0)


def test_picking_a_flow_filters_the_op_table(trace, dash):
    dash.select_flow(("AutocastPrivateUse1", "AutogradPrivateUse1"))
    names = {r["name"] for r in dash.table.rows}
    ev = trace.events
    expected = set(
        ev.loc[ev["dispatch"].fillna("").str.contains("AutocastPrivateUse1 > AutogradPrivateUse1"), "name"]
    )
    assert names == expected and dash.table.flow_label == "AutocastPrivateUse1 → AutogradPrivateUse1"
    dash.table.flow_label = ""  # the chip's close button
    assert dash.table.flow is None and dash.table.total == len(dash.ops)


def test_every_chart_draws_in_the_one_figure_widget(dash):
    for chart in CHARTS:
        dash.chart_tabs.value = chart
        assert len(dash.figure.data) >= 1, chart
    dash.chart_tabs.value = "Dispatch flow"
    assert dash.figure.data[0].type == "sankey"
    dash.weight.value = "time"
    assert sum(dash.figure.data[0].link.value) == pytest.approx(dash.flows["time_ns"].sum() / 1e6)
    dash.weight.value = "calls"
    with pytest.raises(ValueError, match="no chart named"):
        dash.figure_for("Pie")


def test_memory_chart_marks_the_peak_and_names_the_op(trace):
    ev = trace.events
    peaks = breakdown.memory_peaks(ev)
    mem = ev[ev["kind"].isin(["alloc", "free"])]
    assert peaks["peak_bytes"].tolist() == [int(mem["total"].max())]
    assert isinstance(peaks["op"].iloc[0], str) and peaks["op"].iloc[0].startswith("aten::")


def test_casts_and_copies_tables(trace):
    ev = trace.events
    casts = breakdown.cast_table(ev)
    assert int(casts["casts"].sum()) == int((ev["kind"] == "cast").sum())
    assert int(casts["bytes"].sum()) == int(ev.loc[ev["kind"] == "cast", "bytes"].sum())
    ct = breakdown.copy_timeline(ev)
    for d in ("H2D", "D2H", "D2D"):
        assert int(ct[d].sum()) == int(ev.loc[(ev["kind"] == "copy") & (ev["name"] == d), "bytes"].sum())


def test_dropped_events_are_on_screen():
    x = openreg_lab.trace
    import torch

    a = torch.ones(2, device="openreg")
    with pytest.warns(openreg_lab.TraceDroppedEventsWarning), x(capacity=5) as t:
        for _ in range(10):
            a = a + 1
    d = t.show()
    assert f"{t.dropped:,} events were dropped" in d.header.value
    assert "DROPPED" in t._repr_mimebundle_()["text/plain"]


def test_an_empty_trace_has_a_dashboard():
    with openreg_lab.trace() as t:
        pass
    d = t.show()
    assert d.table.total == 0 and "nothing recorded" in d.header.value


def test_notebook_cell_sources_read_as_cells(monkeypatch):
    class Compile:
        def __init__(self) -> None:
            self._filename_map = {"/tmp/ipykernel_42/123.py": 7}

    class Shell:
        compile = Compile()

    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    assert lookup.cell_source("/tmp/ipykernel_42/123.py:3") == "In[7], line 3"
    assert lookup.cell_source("/tmp/ipykernel_42/999.py:3") == "/tmp/ipykernel_42/999.py:3"
    assert lookup.cell_source("train.py:12") == "train.py:12" and lookup.cell_source(None) is None


def test_the_steps_table_is_computed_once_for_the_verdict_and_the_timeline(trace, tmp_path, monkeypatch):
    """The dashboard computes ``steps.table`` once and hands it to the verdict and the timeline (it
    had computed it twice, 0.28 s of a 1M-op dashboard), as its text/html and the report do; a
    trace keeps its own for its verdict, its host table, ``steps()`` and its dashboard, and draws
    the same."""
    ev = trace.events
    want = {"bands": steps_of(ev), "verdict": verdict(ev), "table": steps.table(ev)}
    computed = []
    table = steps.table

    def counting(events: pd.DataFrame, **kwargs) -> pd.DataFrame:
        computed.append(len(events))
        return table(events, **kwargs)

    monkeypatch.setattr(steps, "table", counting)
    d = Dashboard(ev)
    assert computed == [len(ev)]
    assert d.timeline.steps == want["bands"] and d.verdict == want["verdict"]
    pd.testing.assert_frame_equal(d.step_table, want["table"])
    for page in (static.dashboard_html, report_html):  # the verdict's table is the bands'
        computed.clear()
        page(ev)
        assert computed == [len(ev)], page
    # The report's fallback costs too: once for its chart and its verdict.
    costed = []
    costs = breakdown.fallback_costs

    def costing(events: pd.DataFrame, **kwargs) -> pd.DataFrame:
        costed.append(1)
        return costs(events, **kwargs)

    monkeypatch.setattr(breakdown, "fallback_costs", costing)
    report_html(ev)
    assert costed == [1]
    trace.save(tmp_path / "t.trace")
    t = openreg_lab.load_trace(tmp_path / "t.trace")
    computed.clear()
    shown = t.show()
    t.verdict(), t.host()
    first = t.steps()
    first["ops"] = -1  # a copy: the trace's own table is not changed
    pd.testing.assert_frame_equal(t.steps(), want["table"])
    # Once, host slices drawn or not: the bands are the events' steps stretched over the slices,
    # what the steps of the drawn rows are (it had been computed again over them: 0.08 s at 1M ops).
    assert computed == [len(ev)]
    assert shown.timeline.steps == steps_of(shown.drawn)
