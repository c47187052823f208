"""Reports and pages built from hostile strings, opened in headless Chromium, run
none of them: no dialog opens, no script error occurs, the timeline draws, and the strings show as
the text they are (Note [Strings reaching a page])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import openreg_lab
from openreg_lab.views import static
from tests.support.browser_harness import SCREENSHOTS
from tests.support.hostile_data import PAYLOAD, hostile_trace


@pytest.fixture
def page(browser: Any) -> Any:
    """A page that records dialogs (and dismisses them), script errors and network requests."""
    p = browser.new_page(viewport={"width": 1300, "height": 1000})
    p.problems = []
    p.on("dialog", lambda d: (p.problems.append(f"dialog: {d.message}"), d.dismiss()))
    p.on("pageerror", lambda e: p.problems.append(f"pageerror: {e}"))
    p.on("console", lambda m: p.problems.append(f"console: {m.text}") if m.type == "error" else None)
    p.route("http*://**", lambda route: (p.problems.append(f"network: {route.request.url}"), route.abort()))
    yield p
    p.close()


def _settle(page: Any) -> None:
    page.wait_for_timeout(500)  # an injected script or a deferred handler would have run by now


def test_a_report_of_hostile_strings_runs_none_of_them(page: Any, tmp_path: Path):
    path = tmp_path / "hostile.html"
    hostile_trace().to_html(path, title=PAYLOAD, run_info={PAYLOAD: PAYLOAD})
    page.goto(path.as_uri())
    page.locator("#timeline canvas").wait_for(timeout=20_000)
    status = page.locator(".openreg-timeline-status")
    assert "slices in view" in status.inner_text()  # the timeline drew
    assert int(status.get_attribute("data-items") or 0) > 0
    assert page.locator(".js-plotly-plot").count() == 4
    _settle(page)
    assert page.evaluate("document.querySelector('h1').textContent") == PAYLOAD
    cells = page.evaluate("[...document.querySelectorAll('th, td')].map(c => c.textContent)")
    assert cells.count(PAYLOAD) >= 2  # the run info's row, key and value
    # plotly shows the fallback's name as itself (its tick label), not as markup.
    ticks = page.evaluate("[...document.querySelectorAll('#chart0 .ytick text')].map(t => t.textContent)")
    assert any(t.startswith("aten::_logcumsumexp</script><script>alert(1)") for t in ticks), ticks
    assert page.locator("img, svg[onload]").count() == 0
    # The memory view's list of what was live (at the peak, under its chart) shows the ops that
    # allocated as text, and so does the list a click draws (memory_view.js's text nodes).
    listed = "[...document.querySelectorAll('#memory-live td')].map(t => t.textContent)"
    ops = [t for t in page.evaluate(listed) if t.startswith("aten::")]
    assert ops and all(t.endswith(PAYLOAD) for t in ops), ops
    chart = page.locator("#memory-chart")
    chart.scroll_into_view_if_needed()
    box = chart.locator(".nsewdrag").first.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.5)
    page.wait_for_function("document.getElementById('memory-live').dataset.moment !== undefined")
    ops = [t for t in page.evaluate(listed) if t.startswith("aten::")]
    assert ops and all(t.endswith(PAYLOAD) for t in ops), ops
    assert page.locator("img, svg[onload]").count() == 0
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "report-hostile.png"), full_page=False)
    assert page.problems == []


def test_the_report_of_a_hostile_mark_draws(page: Any, tmp_path: Path):
    """The issue's own case: a mark that closes the report's <script>."""
    import torch

    with openreg_lab.trace() as t:
        openreg_lab.mark("</script><script>alert(1)</script>")
        torch.ones(2, device="openreg") + 1
    path = tmp_path / "x.html"
    t.to_html(path)
    page.goto(path.as_uri())
    page.locator("#timeline canvas").wait_for(timeout=20_000)
    _settle(page)
    assert "slices in view" in page.locator(".openreg-timeline-status").inner_text()
    assert page.problems == []


def test_a_dashboards_text_html_of_hostile_strings_runs_none_of_them(page: Any):
    page.set_content(
        "<!DOCTYPE html><html><body>" + static.dashboard_html(hostile_trace().events) + "</body></html>"
    )
    _settle(page)
    assert page.locator(".openreg-static svg rect").count() > 0
    assert PAYLOAD.split("<img")[0] in page.locator(".openreg-static").inner_text()
    assert page.problems == []
