"""The report's memory view (views/memory_view.py) in headless Chromium, offline: the chart drawn,
what was live at the peak listed under it, and a click at a moment listing what was live then
(Trace.memory().live) and moving the timeline's cursor there; no page error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openreg_lab import theme
from openreg_lab.views import memory_view
from tests.support.browser_harness import SCREENSHOTS
from tests.support.views_data import mlp_step_trace


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    t = mlp_step_trace()
    path = tmp_path_factory.mktemp("memory") / "report.html"
    t.to_html(path)
    return t, path


def _listed(page: Any) -> list[list[str]]:
    rows = page.locator("#memory-live tr").all()
    return [r.locator("td").all_inner_texts() for r in rows[1:]]


def _expected(live: Any) -> list[list[str]]:
    text = lambda v: v if isinstance(v, str) else ""  # noqa: E731 (None or NaN: unknown)
    out = []
    for r in live.head(memory_view.LIVE_ROWS).itertuples(index=False):
        size = theme.format_bytes(r.block_bytes)
        out.append([size, r.category, *map(text, (r.op, r.module, r.source)), f"{r.age_steps:,}"])
    return out


def test_a_click_on_the_memory_chart_lists_what_was_live(browser: Any, report: tuple[Any, Path]):
    t, path = report
    m = t.memory()
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.route("http*://**", lambda route: (errors.append(f"network: {route.request.url}"), route.abort()))
    page.goto(path.as_uri())
    chart = page.locator("#memory-chart")
    chart.locator(".nsewdrag").first.wait_for(timeout=20_000)
    page.locator("#timeline canvas").wait_for(timeout=20_000)
    # Before a click: what was live at the peak, under the chart.
    assert _listed(page) == _expected(m.live(int(m.peaks()["t_ns"].iat[0]), 0))
    assert chart.locator(".scatterlayer .trace").count() >= 6  # the categories' areas, the steps, the peak
    chart.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#memory").screenshot(path=str(SCREENSHOTS / "report-memory.png"))
    when, _, _ = memory_view.tables(m, memory_view.REPORT_MOMENTS).moments("openreg:0")
    box = chart.locator(".nsewdrag").first.bounding_box()
    assert box is not None
    listed = page.locator("#memory-live")
    for fraction in (0.25, 0.6):
        x, y = box["x"] + box["width"] * fraction, box["y"] + box["height"] * 0.7
        page.mouse.move(x, y)
        page.mouse.click(x, y)
        listed_again = "document.getElementById('memory-live').dataset.moment !== undefined"
        page.wait_for_function(listed_again, timeout=5_000)
        i = int(listed.get_attribute("data-moment"))
        at = int(when[i])
        # The moment nearest the click's time on the axis (moments are sparse where nothing was
        # allocated or freed, so it can be far from the click), to a pixel either way.
        lo, hi = page.evaluate("document.getElementById('memory-chart')._fullLayout.xaxis.range")
        x_ms, pixel_ms = lo + fraction * (hi - lo), (hi - lo) / box["width"]
        gap = np.abs(when / 1e6 - x_ms)
        assert gap[i] <= gap.min() + pixel_ms, (x_ms, when[i] / 1e6, when[np.argmin(gap)] / 1e6)
        live = m.live(at, "openreg:0")
        assert _listed(page) == _expected(live)
        caption = listed.locator(".openreg-memory-caption").inner_text()
        assert caption.startswith(f"Live on openreg:0 at {theme.format_ns(at)}")
        assert f"{len(live):,} allocations, {theme.format_bytes(live['block_bytes'].sum())}" in caption
        # The timeline: its cursor at that moment, its view around it.
        assert page.evaluate("window.openregReport.timeline.get('cursor')") == at
        view = page.evaluate("window.openregReport.timeline.get('view')")
        assert view[0] < at < view[1]
        listed.evaluate("(e) => { delete e.dataset.moment; }")
    page.locator("#memory").screenshot(path=str(SCREENSHOTS / "report-memory-clicked.png"))
    page.close()
    assert errors == []
