"""Each notebook, opened in JupyterLab and in Notebook 7 in headless Chromium, runs all its cells
with no error, no warning output, no "Error displaying widget" and no JavaScript error; its views
are in the page and answer a click. Screenshots: build/screenshots/<test>.png.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.browser_harness import SCREENSHOTS, NotebookPage
from tests.support.notebook_views import NOTEBOOKS, VIEWS

NOTEBOOK_NAMES = [p.name for p in NOTEBOOKS]


def _wait_for(nb: NotebookPage, selector: str, timeout_s: float = 30) -> int:
    nb.page.locator(selector).first.wait_for(state="attached", timeout=timeout_s * 1000)
    return nb.page.locator(selector).count()


def test_harness_renders_widgets_and_their_round_trips(notebook_page: Callable[[str], NotebookPage]):
    """ipywidgets, plotly FigureWidget (bars, Sankey) and anywidget render; a click reaches the kernel."""
    nb = notebook_page("widgets-smoke.ipynb")
    assert nb.run_all()
    assert _wait_for(nb, ".js-plotly-plot") == 2
    assert _wait_for(nb, ".sankey .sankey-node") == 4  # plotly.js names its nodes sankey-node
    assert _wait_for(nb, "canvas.smoke-canvas") == 1
    label = nb.page.locator(".smoke-label")
    assert "not clicked" in label.inner_text()
    nb.page.locator(".smoke-button").click()
    nb.page.wait_for_function(
        "() => document.querySelector('.smoke-label').textContent.includes('clicked from the kernel')",
        timeout=20_000,
    )
    nb.assert_clean()


# Inside the views (the views issue's DOM contract), beyond the root classes of notebook_views.VIEWS.
INNER: dict[str, list[str]] = {
    "01-tour.ipynb": [".openreg-dashboard .openreg-timeline canvas", ".openreg-dashboard .openreg-table"],
    # The contract says `.sankey .node`; plotly.js's own Sankey calls its nodes `.sankey-node`.
    "02-dispatch-keys.ipynb": [".openreg-dispatch-explorer .sankey :is(.node, .sankey-node)"],
    "03-finding-fallbacks.ipynb": [".openreg-dashboard .js-plotly-plot, .openreg-dashboard canvas"],
    "04-autocast.ipynb": [".openreg-compare .js-plotly-plot, .openreg-compare .openreg-table"],
    "05-writing-a-kernel.ipynb": [".openreg-coverage .openreg-table tr.openreg-row"],
    "06-emulating-a-backend.ipynb": [".openreg-coverage .openreg-table tr.openreg-row"],
    "07-compile.ipynb": [".openreg-compare .openreg-table", ".openreg-dashboard .openreg-timeline canvas"],
    "08-distributed.ipynb": [".openreg-dashboard .openreg-timeline canvas", "svg rect.collective"],
    "09-porting-a-hugging-face-model.ipynb": [
        ".openreg-dashboard .openreg-timeline canvas",
        ".openreg-compare .openreg-table",
    ],
    # The out-of-memory trace's dashboard, and the stacked memory charts (plotly FigureWidgets) drawn
    # with their traces: shown alone, or sent numpy arrays, a FigureWidget drew empty in some runs.
    "10-where-memory-goes.ipynb": [
        ".openreg-dashboard .openreg-timeline canvas",
        ".js-plotly-plot .scatterlayer .trace",
    ],
}
# Where a click on an op row must change the details panel.
CLICK_ROOT: dict[str, str] = {
    "01-tour.ipynb": ".openreg-dashboard",
    "03-finding-fallbacks.ipynb": ".openreg-dashboard",
    "04-autocast.ipynb": ".openreg-dashboard",
    "07-compile.ipynb": ".openreg-dashboard",
    "09-porting-a-hugging-face-model.ipynb": ".openreg-dashboard",
    "10-where-memory-goes.ipynb": ".openreg-dashboard",
}


def _click_a_row_changes_the_details(nb: NotebookPage, root_selector: str) -> None:
    root = nb.page.locator(root_selector).first
    details = root.locator(".openreg-details").first
    rows = root.locator(".openreg-table tr.openreg-row")
    assert rows.count() >= 2, f"{root_selector}: {rows.count()} op rows"
    before = details.inner_text()
    # The first row may be selected already: click the second, then the first, until the text moves.
    for i in (1, 0):
        rows.nth(i).click()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and details.inner_text() == before:
            time.sleep(0.2)
        if details.inner_text() != before:
            return
    raise AssertionError(f"clicking op rows in {root_selector} left .openreg-details at {before!r}")


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_in_the_browser(notebook_page: Callable[[str], NotebookPage], name: str):
    nb = notebook_page(name)
    start = time.monotonic()
    assert nb.run_all(), "a cell failed (run-all stopped)"
    ran = time.monotonic() - start
    assert nb.state()["pending"] == 0
    for selector in [f".{cls}" for cls in VIEWS[name]] + INNER[name]:
        assert _wait_for(nb, selector) >= 1, selector
    if name in CLICK_ROOT:
        _click_a_row_changes_the_details(nb, CLICK_ROOT[name])
    nb.assert_clean()
    # A close-up of each view for the eye (and the README's dashboard picture).
    for root in (".openreg-dashboard", ".openreg-compare", ".openreg-coverage", ".openreg-dispatch-explorer"):
        view = nb.page.locator(root)
        if view.count():
            view.first.scroll_into_view_if_needed()
            path = SCREENSHOTS / f"{Path(name).stem}-{nb.server.frontend}-{root.strip('.')}.png"
            view.first.screenshot(path=str(path))
    print(f"{nb.server.frontend} {name}: cells ran in {ran:.1f} s")
