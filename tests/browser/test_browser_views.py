"""The dashboard answers the mouse in a real JupyterLab: a click on a timeline slice fills the
details panel, a click on a band of the dispatch flow filters the op table, the wheel zooms the
timeline into real slices, and a click on a column header sorts. A trace with ops="kernels" says so in
its dashboard, and its slices show the path from the kernel's own key. The header leads with the
verdict, and the step picker zooms the timeline to one training step."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.support.browser_harness import NotebookPage


def _until(predicate: Callable[[], bool], timeout_s: float = 20) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _click_a_slice(page: Any, dash: Any) -> tuple[Any, dict, float]:
    """Click along thread 0's top row of the dashboard's timeline until a slice is hit: the details
    panel names an op. Returns the details panel, the timeline's box and the row's y."""
    canvas = dash.locator(".openreg-timeline canvas").first
    canvas.wait_for()
    details = dash.locator(".openreg-details").first
    assert "Click a slice" in details.inner_text()
    box = canvas.bounding_box()
    assert box is not None
    row_y = box["y"] + 22 + 9  # ruler, then the middle of the first row
    for frac in [i / 60 for i in range(2, 60)]:
        page.mouse.click(box["x"] + 128 + frac * (box["width"] - 132), row_y)
        if _until(lambda: "dispatch path" in details.inner_text(), 1.0):
            break
    assert "dispatch path" in details.inner_text(), "no slice answered a click on the timeline"
    return details, box, row_y


def _run_to_dashboard(notebook_page: Callable[[str], NotebookPage], name: str) -> tuple[NotebookPage, Any]:
    """Open fixture `name`, run all its cells and wait for its first dashboard."""
    nb = notebook_page(name)
    assert nb.run_all()
    dash = nb.page.locator(".openreg-dashboard").first
    dash.wait_for(timeout=60_000)
    return nb, dash


def test_dashboard_clicks(notebook_page: Callable[[str], NotebookPage]):
    nb, dash = _run_to_dashboard(notebook_page, "dashboard-clicks.ipynb")
    page = nb.page
    _, box, row_y = _click_a_slice(page, dash)
    # A band of the Sankey filters the op table (the chip names the flow).
    links = dash.locator(".sankey .sankey-link")
    assert links.count() >= 3
    links.first.click(force=True)
    chip = dash.locator(".openreg-table .chip")
    assert _until(lambda: chip.count() > 0 and "flow:" in chip.first.inner_text()), "the flow did not filter"
    # Sorting by calls from the header.
    dash.locator(".openreg-table th", has_text="calls").first.click()
    assert _until(
        lambda: (
            "calls ▼" in dash.locator(".openreg-table th").all_inner_texts()[3]
            or "calls ▲" in dash.locator(".openreg-table th").all_inner_texts()[3]
        )
    )
    # The wheel zooms in until the status says no slice is aggregated.
    status = dash.locator(".openreg-timeline-status").first
    page.mouse.move(box["x"] + box["width"] / 2, row_y)
    for _ in range(5):
        page.mouse.wheel(0, -300)
    assert _until(lambda: "none aggregated" in status.inner_text())
    nb.assert_clean()


def test_dashboard_of_a_kernels_only_trace_says_so(notebook_page: Callable[[str], NotebookPage]):
    nb, dash = _run_to_dashboard(notebook_page, "dashboard-kernel-ops.ipynb")
    assert "Op events come from openreg's kernels and fallback only" in dash.inner_text()
    cells = " ".join(dash.locator(".openreg-table td").all_inner_texts())  # every op, before a click
    assert "aten::mm" in cells and "fallback" in cells and "composite" not in cells
    details, _, _ = _click_a_slice(nb.page, dash)
    assert "PrivateUse1" in details.inner_text()  # the path from the kernel's own key
    nb.assert_clean()


def test_dashboard_leads_with_the_verdict_and_picks_a_step(notebook_page: Callable[[str], NotebookPage]):
    nb, dash = _run_to_dashboard(notebook_page, "dashboard-steps.ipynb")
    verdict = dash.locator(".openreg-verdict").first
    headline = verdict.locator(".openreg-headline").inner_text()
    assert headline.startswith("CPU fallbacks took ") and "implement aten::_logcumsumexp first" in headline
    text = verdict.inner_text()
    assert "step 0 took " in text and "the median of the 2 steps after it" in text
    # The verdict is the dashboard's first thing, above the timeline.
    v_box, t_box = verdict.bounding_box(), dash.locator(".openreg-timeline").first.bounding_box()
    assert v_box is not None and t_box is not None and v_box["y"] < t_box["y"]
    picker = dash.locator(".openreg-step-picker").first
    assert picker.locator("option").all_inner_texts()[0] == "all 3 steps"
    status = dash.locator(".openreg-timeline-status").first
    canvas = dash.locator(".openreg-timeline canvas").first
    before = canvas.screenshot()
    picker.select_option("2")  # by value: the step at position 2, step 2
    assert _until(lambda: canvas.screenshot() != before), "picking a step did not redraw the timeline"
    assert _until(lambda: "none aggregated" in status.inner_text())
    nb.assert_clean()
