"""The HTML report opened from disk in headless Chromium: every plot and the timeline are drawn,
the timeline zooms with no kernel, and no JavaScript error occurs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser_harness import SCREENSHOTS
from tests.support.views_data import training_trace


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """A training trace (2 optimizer steps) and its report on disk."""
    t = training_trace()
    path = tmp_path_factory.mktemp("report") / "report.html"
    t.to_html(path, run_info={"command": "pytest"})
    return t, path


def test_the_report_draws_offline(browser: Any, report: tuple[Any, Path]):
    _, path = report
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


def test_the_report_opens_on_the_verdict_and_zooms_to_a_step(browser: Any, report: tuple[Any, Path]):
    t, path = report
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("http*://**", lambda route: (errors.append(f"network: {route.request.url}"), route.abort()))
    page.goto(path.as_uri())
    page.locator("#timeline canvas").wait_for(timeout=20_000)
    # The verdict is on the first screen, above the timeline; what was run is collapsed at the end.
    verdict = page.locator(".openreg-verdict")
    box = verdict.bounding_box()
    assert box is not None and box["y"] < 200
    assert verdict.locator(".openreg-headline").inner_text() == t.verdict().headline()
    timeline = page.locator("#timeline").bounding_box()
    assert timeline is not None and timeline["y"] > box["y"]
    assert page.locator("#run-info").get_attribute("open") is None
    assert not page.locator("#run-info table").is_visible()
    # The step picker: every step, and picking one zooms the timeline to it.
    steps = t.steps()
    picker = page.locator(".openreg-step-picker")
    options = picker.locator("option").all_inner_texts()
    assert len(options) == len(steps) + 1 and options[0] == f"all {len(steps)} steps"
    assert [o.split(":")[0] for o in options[1:]] == [f"step {n}" for n in steps["step"]]
    status = page.locator(".openreg-timeline-status")
    page.locator("#timeline").get_by_role("button", name="reset", exact=True).click()  # the whole trace
    whole = int(status.get_attribute("data-items"))
    picker.select_option("1")  # by value: the step at position 1
    page.wait_for_timeout(300)
    assert int(status.get_attribute("data-items")) < whole
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "report-verdict-step.png"))
    page.close()
    assert errors == []


def test_the_report_explores_ops_like_the_dashboard(browser: Any, report: tuple[Any, Path]):
    t, path = report
    summary = t.summary()
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.route("http*://**", lambda route: (errors.append(f"network: {route.request.url}"), route.abort()))
    page.goto(path.as_uri())
    explorer = page.locator("#op-explorer")
    explorer.locator(".openreg-op-table").wait_for(timeout=20_000)
    rows = explorer.locator("tr.openreg-op-row")
    names = lambda: [r.get_attribute("data-name") for r in rows.all()]  # noqa: E731
    assert names() == summary["name"].tolist()[:200]  # by total time, as the summary
    # Filter by name, then by kernel kind.
    # The model's attention runs fused on openreg (no softmax op): filter by "attention".
    explorer.locator(".openreg-op-filter").fill("attention")
    expected = [n for n in summary["name"] if "attention" in n.lower()]
    assert expected and names() == expected
    count = explorer.locator(".openreg-op-count").inner_text()
    assert count.startswith(f"{len(expected)} of {len(summary)} ops")
    explorer.locator(".openreg-op-filter").fill("")
    explorer.locator(".openreg-op-kernel").select_option("fallback")
    assert sorted(names()) == sorted(summary.loc[summary["fallback"] > 0, "name"])
    explorer.locator(".openreg-op-kernel").select_option("")
    # Sort by calls (most first), then the other way.
    explorer.locator("th[data-key=calls]").click()
    calls = [int(r.locator("td").nth(3).inner_text().replace(",", "")) for r in rows.all()]
    assert calls == sorted(calls, reverse=True)
    explorer.locator("th[data-key=calls]").click()
    calls = [int(r.locator("td").nth(3).inner_text().replace(",", "")) for r in rows.all()]
    assert calls == sorted(calls)
    # A click on a row: the timeline outlines the op (and redraws), the details show its path.
    canvas = page.locator("#timeline canvas").first
    before = canvas.screenshot()
    explorer.locator(".openreg-op-filter").fill("aten::addmm")
    rows.first.click()
    details = explorer.locator(".openreg-op-details")
    assert "dispatch path" in details.inner_text() and "aten::addmm" in details.inner_text()
    assert "AutogradPrivateUse1" in details.inner_text()
    assert page.evaluate("window.openregReport.timeline.get('highlight')") == "aten::addmm"
    longest = t.events[(t.events["kind"] == "op") & (t.events["name"] == "aten::addmm")]["dur_ns"].idxmax()
    assert page.evaluate("window.openregReport.timeline.get('selected')") == int(longest)
    assert canvas.screenshot() != before
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "report-op-explorer.png"), full_page=False)
    explorer.scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "report-op-explorer-table.png"))
    page.close()
    assert errors == []


@pytest.mark.parametrize("what", ["nothing", "a mark"])
def test_the_report_of_a_trace_without_op_events_draws(browser: Any, tmp_path: Path, what: str):
    """The Sankey of no flow threw ``RangeError: Invalid array length``."""
    import openreg_lab

    with openreg_lab.trace() as t:
        if what == "a mark":
            openreg_lab.mark("nothing else")
    assert t.events["kind"].tolist() == ([] if what == "nothing" else ["mark"])
    path = tmp_path / "empty.html"
    t.to_html(path)
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.locator("#timeline canvas").wait_for(timeout=20_000)
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 4", timeout=20_000)
    assert errors == []  # the Sankey threw RangeError: Invalid array length
    flow = page.locator("section", has=page.locator("h2", has_text="Dispatch flow"))
    assert "No op events in this trace: no dispatch flow to draw" in flow.inner_text()
    assert page.locator(".sankey").count() == 0
    page.close()
    assert errors == []


def test_the_step_picker_of_a_single_step_names_it_once(browser: Any, tmp_path: Path):
    """The picker's first entry read "all 1 steps"."""
    import torch

    import openreg_lab

    with openreg_lab.trace() as t:
        (torch.ones(4, device="openreg") + 1).sum()
        openreg_lab.step()
    assert len(t.steps()) == 1
    path = tmp_path / "one-step.html"
    t.to_html(path)
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.goto(path.as_uri())
    page.locator("#timeline canvas").wait_for(timeout=20_000)
    options = page.locator(".openreg-step-picker option").all_inner_texts()
    assert options[0] == "the 1 step" and len(options) == 2 and options[1].startswith("step 0: ")
    page.close()
