"""Every string that reaches a page or a mimebundle is inert text (Note [Strings
reaching a page]). The browser half (the report opened in Chromium) is in
tests/browser/test_browser_hostile.py; here the markup itself is checked."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from openreg_lab.dispatch.families import families
from openreg_lab.recording import breakdown, flow
from openreg_lab.recording.lod import Pyramid
from openreg_lab.views import charts, memory_view, static
from openreg_lab.views._embed import plotly_text, script_json
from openreg_lab.views.coverage_view import treemap_nodes
from openreg_lab.views.report import report_html
from tests.support.hostile_data import PAYLOAD, hostile_memory_trace, hostile_trace, memory_trace


class _Tags(HTMLParser):
    """The start tags of a page, and every attribute that runs code."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[tuple[str, str]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.handlers += [(tag, k) for k, _ in attrs if k.startswith("on")]
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def _tags(page: str) -> _Tags:
    p = _Tags()
    p.feed(page)
    p.close()
    return p


def test_script_json_is_the_same_value_and_no_markup():
    value = {"name": PAYLOAD, "lone": "x \ud800 y", "n": [1, 2.5]}
    text = script_json(value)
    assert json.loads(text) == value  # what JavaScript reads
    assert text.isascii()
    for bad in ("<", ">", "&", "\u2028"):
        assert bad not in text


def test_plotly_text_shows_the_string_itself():
    assert plotly_text("<b>x</b> & %{y}") == "&lt;b&gt;x&lt;/b&gt; &amp; %{y}"


@pytest.fixture(scope="module")
def reports() -> tuple[str, str]:
    """The report of a small trace with harmless strings, and with every string hostile."""
    info = {PAYLOAD: PAYLOAD}
    plain = report_html(hostile_trace("_x").events, title="plain", run_info={"x": "y"})
    hostile = report_html(hostile_trace().events, title=PAYLOAD, run_info=info)
    return plain, hostile


def test_the_report_of_hostile_strings_has_the_same_markup(reports):
    plain, hostile = (_tags(r) for r in reports)
    # No tag, script or handler came from the strings: the same elements as the plain report.
    assert hostile.tags == plain.tags
    assert hostile.handlers == plain.handlers == []
    assert len(hostile.scripts) == len(plain.scripts)
    # The strings are in the report, as text the reader sees.
    assert _text_of(reports[1], "h1") == PAYLOAD


def test_the_timeline_model_carries_the_strings_as_data(reports):
    module = _tags(reports[1]).scripts[-1]
    start = module.rindex("staticModel(") + len("staticModel(")
    model, _ = json.JSONDecoder().raw_decode(module[start:])
    assert model["marks"][0]["name"] == PAYLOAD + PAYLOAD  # the mark, and what hostile_trace adds
    names = {s for level in model["levels"] for s in level["strings"]}
    assert any(s.endswith(PAYLOAD) and s.startswith("aten::") for s in names)


def _text_of(page: str, tag: str) -> str:
    p = _Text(tag)
    p.feed(page)
    return p.text


class _Text(HTMLParser):
    def __init__(self, tag: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tag, self.text, self._on = tag, "", False

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self._on = self._on or tag == self.tag

    def handle_endtag(self, tag: str) -> None:
        self._on = self._on and tag != self.tag

    def handle_data(self, data: str) -> None:
        if self._on:
            self.text += data


def test_the_dashboards_text_html_has_no_markup_from_strings():
    plain = _tags(static.dashboard_html(hostile_trace("_x").events))
    hostile = _tags(static.dashboard_html(hostile_trace().events))
    assert hostile.tags == plain.tags
    assert hostile.handlers == plain.handlers == []
    assert hostile.scripts == []


def test_the_charts_escape_every_string():
    events = hostile_trace().events
    figs = [
        charts.fallbacks(breakdown.fallback_costs(events)),
        charts.dispatch_flow(flow.dispatch_flows(events)),
        charts.copies_and_casts(events),
        charts.memory(events, Pyramid(events)),
    ]
    text = json.dumps([f.to_plotly_json() for f in figs])
    assert "<script" not in text and "<img" not in text and "<b>bold" not in text
    assert plotly_text("aten::_logcumsumexp" + PAYLOAD) in figs[0].data[0].y  # the bar's label
    for f in figs:  # no string pasted into a template: %{x} of a name is never substituted
        for trace in f.data:
            assert PAYLOAD not in str(getattr(trace, "hovertemplate", "") or "")


def test_the_coverage_treemap_escapes_op_names():
    import pandas as pd

    cov = pd.DataFrame(
        {
            "name": ["evil::op." + PAYLOAD],
            "namespace": ["evil"],
            "overload": [PAYLOAD],
            "resolution": ["fallback"],
            "kernel": ["cpu_fallback"],
            "tags": [[]],
        }
    )
    nodes = treemap_nodes(families(cov))
    for col in ("label", "hover"):
        assert not any("<script" in s for s in nodes[col]), col
    assert plotly_text(PAYLOAD) in nodes["label"].tolist()


def test_a_hostile_profile_file_name_stays_text_in_the_coverage_view(tmp_path):
    import openreg_lab
    from openreg_lab.views import CoverageView

    path = tmp_path / "<img src=x onerror=alert(1)>.yaml"
    path.write_text("- aten::add.Tensor\n")
    view = CoverageView(profile=str(path), versus="default")
    for page in (view._repr_mimebundle_()["text/html"], view.summary.value, view.lacks_html.value):
        assert _tags(page).handlers == [] and "img" not in _tags(page).tags
    assert "&lt;img src=x onerror=alert(1)&gt;.yaml" in view.summary.value
    with openreg_lab.trace() as t, openreg_lab.use_profile(str(path)):
        pass
    assert "profile: <img src=x onerror=alert(1)>.yaml" in t.events["name"].tolist()  # a mark, as data


def test_to_html_shows_any_title_and_run_info_as_text(tmp_path):
    from tests.support.hostile_data import small_trace

    path = tmp_path / "r.html"
    small_trace().to_html(path, title=42, run_info={1: ["<b>x</b>"]})
    page = path.read_text()
    assert "<title>42</title>" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    with pytest.raises(TypeError, match=r"to_html\(run_info=...\) takes a mapping.*got str"):
        small_trace().to_html(path, run_info="command: x")


@pytest.fixture(scope="module")
def memory_reports() -> tuple[str, str]:
    """The report of a module's training step with its memory view, harmless and hostile strings."""
    plain, hostile = hostile_memory_trace("_x"), hostile_memory_trace()
    return (
        report_html(plain.events, title="plain", memory=plain.memory()),
        report_html(hostile.events, title="plain", memory=hostile.memory()),
    )


def test_the_memory_view_of_hostile_modules_and_files_has_the_same_markup(memory_reports):
    plain, hostile = (_tags(r) for r in memory_reports)
    assert hostile.tags == plain.tags
    assert hostile.handlers == plain.handlers == []
    assert len(hostile.scripts) == len(plain.scripts)
    # The lists embedded for a click hold them as data (the page draws them as text nodes).
    script = next(s for s in _tags(memory_reports[1]).scripts if "openregMemoryView(" in s)
    start = script.rindex("openregMemoryView(") + len("openregMemoryView(")
    dec = json.JSONDecoder()
    _, end = dec.raw_decode(script[start:])
    data, _ = dec.raw_decode(script[start + end + 2 :])
    assert any(s.startswith("Sequential") and s.endswith(PAYLOAD) for s in data["strings"])
    assert any(".py" in s and s.endswith(PAYLOAD) for s in data["strings"])


def test_the_memory_views_lists_show_modules_and_files_as_text():
    pages, lists = [], []
    for t in (hostile_memory_trace("_x"), hostile_memory_trace()):
        m = t.memory()
        pages.append(_tags(memory_view.static_html(m, memory_view.tables(m))))
        made = m.allocations()
        when = int(made.loc[made["module"].str.startswith("Sequential.1", na=False), "start_ns"].iat[0])
        lists.append(memory_view.live_html(m.live(when, 0), "openreg:0", when))
    assert pages[1].tags == pages[0].tags and pages[1].handlers == []
    assert _tags(lists[1]).tags == _tags(lists[0]).tags
    text = _text_of(lists[1], "table")  # what the dashboard lists at a click
    line = memory_trace().memory().allocations()["source"].dropna().iat[0]  # the file, the line
    assert "Sequential.1" + PAYLOAD in text and line + PAYLOAD in text
