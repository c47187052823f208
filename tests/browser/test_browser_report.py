"""The HTML report opened from disk in headless Chromium: every plot and the timeline are drawn,
the timeline zooms with no kernel, and no JavaScript error occurs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from harness import SCREENSHOTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from views_data import training_trace


def test_the_report_draws_offline(browser: Any, tmp_path: Path):
    path = tmp_path / "report.html"
    training_trace().to_html(path, run_info={"command": "pytest"})
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    # Nothing may come from the network: the report is one file.
    page.route("http*://**", lambda route: (errors.append(f"network: {route.request.url}"), route.abort()))
    page.goto(path.as_uri())
    page.locator("#timeline canvas").wait_for(timeout=20_000)
    assert page.locator(".js-plotly-plot").count() == 4
    assert page.locator(".sankey .sankey-node").count() >= 4
    assert page.locator(".js-plotly-plot .bars path").count() >= 3  # the fallback bars
    status = page.locator(".openreg-timeline-status")
    assert "slices in view" in status.inner_text()
    canvas = page.locator("#timeline canvas").first
    box = canvas.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 40)
    before = status.inner_text()
    for _ in range(4):
        page.mouse.wheel(0, -400)
    page.wait_for_timeout(300)
    assert status.inner_text() != before  # zoomed: fewer slices in view
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "report.png"))
    page.close()
    assert errors == []
