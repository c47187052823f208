"""The merged report of a job's ranks (views.ranks_report) opened from disk in headless Chromium:
no page error, a lane group per rank, the straggler named with its op, the rank filter working."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openreg_lab.recording.memory_ranks import peaks_by_rank
from tests.support.browser_harness import SCREENSHOTS
from tests.support.distributed_pool import RankPool


@pytest.fixture(scope="module")
def job_report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path, str]]:
    """Two ranks (rank 1 runs 40 more matrix products before the second all_reduce) and their report."""
    import openreg_lab

    folder = tmp_path_factory.mktemp("ranks")
    pool = RankPool(2)
    try:
        results = pool.run("straggler", str(folder), 40)
    finally:
        pool.close()
    assert pool.alive() == [], "rank processes outlived the pool"
    view = openreg_lab.views.ranks([str(folder / f"s{r}.trace") for r in (0, 1)])
    path = folder / "job.html"
    view.to_html(path)
    yield view, path, results[1]["source"]


def test_the_merged_report_names_the_straggler(browser: Any, job_report: tuple[Any, Path, str]) -> None:
    view, path, line = job_report
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.route("http*://**", lambda route: (errors.append(f"network: {route.request.url}"), route.abort()))
    page.goto(path.as_uri())
    page.locator("#timeline canvas").wait_for(timeout=20_000)
    # The job's verdict first: whom the others waited for, and why (the op and its line).
    headline = page.locator(".openreg-job-verdict .openreg-headline").inner_text()
    assert headline == view.verdict.headline()
    assert "for rank 1" in headline and f"aten::mm at {line}" in headline
    box = page.locator(".openreg-job-verdict").bounding_box()
    assert box is not None and box["y"] < 120
    causes = page.locator(".openreg-causes tr").all_inner_texts()
    assert any("aten::mm" in row and line in row for row in causes)
    assert len(page.locator(".openreg-rank-table tr").all()) == 3  # a header and a row a rank
    # One timeline, a lane group per rank, collectives drawn across them.
    lanes = page.evaluate("window.openregReport.timeline.get('rows').map((r) => r.lane)")
    groups = {lane.split(" · ")[0] for lane in lanes}
    assert groups == {"rank 0", "rank 1"}
    assert "rank 0 · collectives" in lanes and "rank 1 · collectives" in lanes
    links = page.evaluate("window.openregReport.timeline.get('links')")
    assert len(links) == 3 and all(len(link["rows"]) == 2 for link in links)
    status = page.locator(".openreg-timeline-status")
    assert "slices in view" in status.inner_text()
    # It opens on the steps (Note [The timeline opens on the steps]): from the first step shown
    # (step 0 apart when it was mostly one-off work) to the last one's end, on the merged clock.
    model = page.evaluate(
        "(() => { const m = window.openregReport.timeline; "
        "return {view: m.get('view'), opening: m.get('opening'), steps: m.get('steps')}; })()"
    )
    steps = model["steps"]
    assert model["view"] == model["opening"]["view"]
    if steps:
        first = steps[1] if model["opening"]["apart"] else steps[0]
        assert model["view"][0] >= first["t0"] and model["view"][1] == steps[-1]["t1"]
    # The op explorer's rank filter.
    page.locator(".openreg-op-rank").select_option("1")
    ranks = page.locator(".openreg-op-row td:first-child").all_inner_texts()
    assert ranks and set(ranks) == {"1"}
    assert page.locator(".openreg-op-row", has_text="aten::mm").count() == 1
    page.locator(".openreg-op-rank").select_option("0")
    assert page.locator(".openreg-op-row", has_text="aten::mm").count() == 0  # rank 0 ran none
    # Each rank's memory peak, a bar split by category (memory_ranks.peaks_by_rank).
    peaks = peaks_by_rank(view.traces)
    rows = page.locator("#memory-ranks tr.openreg-memory-rank")
    assert [r.get_attribute("data-rank") for r in rows.all()] == [str(r) for r in peaks["rank"]]
    for row, p in zip(rows.all(), peaks.itertuples(index=False), strict=True):
        parts = row.locator(".openreg-memory-part")
        held = parts.evaluate_all("(ps) => ps.map((x) => x.dataset.bytes)")
        assert sum(int(b) for b in held) == p.peak_bytes
        assert parts.first.is_visible()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "ranks-report.png"), full_page=True)
    page.close()
    assert errors == []


def test_the_fragment_a_notebook_shows_draws_every_collective_of_every_rank(
    browser: Any, job_report: tuple[Any, Path, str]
) -> None:
    # What `view` displays in a notebook (its text/html): static HTML and SVG, no script.
    view, _, _ = job_report
    bundle = view._repr_mimebundle_()
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("http*://**", lambda route: (errors.append(f"network: {route.request.url}"), route.abort()))
    page.set_content(f"<!doctype html><meta charset='utf-8'><body>{bundle['text/html']}</body>")
    rects = page.locator("svg rect.collective")
    assert rects.count() == len(view.table) == 6  # 3 collectives on each of the 2 ranks
    boxes = [rects.nth(i).bounding_box() for i in range(rects.count())]
    assert all(b is not None and b["width"] >= 1 and b["height"] == 12 for b in boxes)
    assert len({round(b["y"]) for b in boxes if b}) == 2  # a lane per rank
    assert page.locator("text=for rank 1").count() >= 1  # the verdict names the straggler
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "ranks-fragment.png"), full_page=True)
    page.close()
    assert errors == []
