"""The report's first screen in Chromium (Note [The timeline opens on the steps]): it shows the
steps, op lanes first, the Python lane folded; a click on its label expands it, "step 0" shows the
one-off work, and "library frames" draws the library's frames, with no JavaScript error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser_harness import SCREENSHOTS
from tests.support.opening_trace import opening_trace

ROW_H, RULER_H = 18, 22  # timeline.js's row height and ruler


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    folder = tmp_path_factory.mktemp("opening-report")
    t = opening_trace(folder)
    path = folder / "report.html"
    t.to_html(path)
    return t, path


def test_the_first_screen_is_the_steps_with_op_lanes_first_and_python_folded(browser: Any, report):
    t, path = report
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    canvas = page.locator("#timeline canvas")
    canvas.wait_for(timeout=20_000)
    model = page.evaluate("() => { const m = window.openregReport.timeline; return {view: m.get('view'), "
                          "opening: m.get('opening'), rows: m.get('rows')}; }")  # fmt: skip
    st = t.steps()
    assert model["view"] == [
        float(st["start_ns"].iloc[1]),
        float(st["start_ns"].iloc[-1] + st["dur_ns"].iloc[-1]),
    ]
    assert model["opening"]["apart"]["step"] == 0
    rows = model["rows"]
    assert rows[0]["lane"] == "thread 0" and rows[-1]["lane"] == "python 0"
    hidden = sum(bool(r.get("folded")) for r in rows)
    assert hidden >= 2
    assert int(canvas.get_attribute("data-rows")) == len(rows) - hidden
    assert int(canvas.get_attribute("data-folded")) == hidden
    assert page.locator(".openreg-step-apart").inner_text() == "step 0"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#timeline").screenshot(path=str(SCREENSHOTS / "report-opening.png"))
    # A click on the Python lane's label expands it; a second folds it back.
    first_python = next(i for i, r in enumerate(rows) if r["lane"] == "python 0")
    box = canvas.bounding_box()
    assert box is not None
    label = (box["x"] + 30, box["y"] + RULER_H + first_python * ROW_H + ROW_H / 2)
    page.mouse.click(*label)
    assert int(canvas.get_attribute("data-rows")) == len(rows)
    assert canvas.get_attribute("data-folded") == "0"
    page.mouse.click(*label)
    assert int(canvas.get_attribute("data-folded")) == hidden
    # "step 0" shows the one-off work; "steps" comes back.
    page.locator(".openreg-step-apart").click()
    page.wait_for_timeout(300)  # the view is told to the model 120 ms after the last move
    view = page.evaluate("() => window.openregReport.timeline.get('view')")
    status = page.locator(".openreg-timeline-status").inner_text()
    assert "slices in view" in status or "marks stand for" in status
    apart = model["opening"]["apart"]
    assert abs(view[0] - apart["t0"]) < 1 and abs(view[1] - apart["t1"]) < 1
    # The library toggle draws the library's rows (more of them) and back.
    before = int(canvas.get_attribute("data-rows"))
    page.locator(".openreg-library-frames").check()
    lib_rows = page.evaluate("() => window.openregReport.timeline.get('library_rows').length")
    lib_hidden = page.evaluate(
        "() => window.openregReport.timeline.get('library_rows').filter(r => r.folded).length"
    )
    assert int(canvas.get_attribute("data-rows")) == lib_rows - lib_hidden
    page.locator(".openreg-library-frames").uncheck()
    assert int(canvas.get_attribute("data-rows")) == before
    page.close()
    assert errors == []
