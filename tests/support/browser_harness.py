"""The browser harness's pieces; the fixtures that use them are in conftest.py."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
FIXTURES = ROOT / "tests" / "browser" / "fixtures"
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
FRONTENDS = ("lab", "notebook")
WIDGET_ERROR = "Error displaying widget"
# User settings for both front ends (JUPYTERLAB_SETTINGS_DIR).
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def _chromium() -> str:
    path = os.environ.get("OPENREG_CHROMIUM", "/usr/bin/chromium")
    if not os.access(path, os.X_OK) and path == "/usr/bin/chromium":
        subprocess.run(["bash", str(ROOT / "scripts" / "install_chromium.sh")], timeout=900)
    if not os.access(path, os.X_OK):
        pytest.skip(
            f"no Chromium at {path} and scripts/install_chromium.sh could not install Debian's chromium "
            "(needs apt-get and root or sudo); set OPENREG_CHROMIUM to a Chromium to run the browser tests"
        )
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class JupyterServer:
    frontend: str  # "lab" or "notebook"
    url: str
    token: str
    root: Path
    log: Path

    def notebook_url(self, name: str) -> str:
        if self.frontend == "lab":
            return f"{self.url}/lab/tree/{name}?reset&token={self.token}"
        return f"{self.url}/notebooks/{name}?token={self.token}"


# Run in the page: the notebook panel of the current tab, once its kernel is ready.
_PANEL_JS = """
async () => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  if (!panel || !panel.sessionContext) return 'no notebook panel';
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  return kernel ? kernel.status : 'no kernel';
}
"""
_RUN_ALL_JS = """
async () => {
  const ok = await window.jupyterapp.commands.execute('notebook:run-all-cells');
  return ok;
}
"""
_STATE_JS = """
() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  return {
    status: kernel.status,
    pending: cells.filter(c => c.model.executionCount === null && c.model.sharedModel.source.trim()).length,
    running: [...panel.node.querySelectorAll('.jp-InputArea-prompt')]
      .filter(p => p.textContent.includes('*')).length,
  };
}
"""


@dataclass
class NotebookPage:
    """One notebook open in a browser page."""

    page: Any
    server: JupyterServer
    name: str
    errors: list[str] = field(default_factory=list)
    seen_errors: int = 0
    opened: bool = False
    known_load_errors: list[str] = field(default_factory=list)

    def open(self, timeout_s: float = 90) -> None:
        self.page.goto(self.server.notebook_url(self.name), wait_until="domcontentloaded")
        self.page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext",
            timeout=timeout_s * 1000,
        )
        status = self.page.evaluate(_PANEL_JS)
        assert status in ("idle", "starting", "busy", "unknown"), status
        self.wait_idle(timeout_s)
        self.opened = True

    def run_all(self, timeout_s: float = 180) -> bool:
        """Run all cells; True when every cell ran without an error. Waits for the kernel to go idle."""
        ok = self.page.evaluate(_RUN_ALL_JS)
        self.wait_idle(timeout_s)
        return bool(ok)

    def state(self) -> dict[str, Any]:
        return self.page.evaluate(_STATE_JS)

    def wait_idle(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while True:
            st = self.state()
            quiet = quiet + 1 if st["status"] == "idle" and st["running"] == 0 else 0
            if quiet >= 3:  # idle three times in a row, 0.5 s apart: outputs and comm messages settled
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"kernel not idle after {timeout_s} s: {st}")
            time.sleep(0.5)

    def text(self) -> str:
        return self.page.locator("body").inner_text()

    def widget_errors(self) -> list[str]:
        return [line for line in self.text().splitlines() if WIDGET_ERROR in line]

    def stderr_outputs(self) -> list[str]:
        """Text of error and stderr outputs (tracebacks, warnings) in the notebook."""
        loc = self.page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
        return [loc.nth(i).inner_text() for i in range(loc.count())]

    def js_errors(self) -> list[str]:
        """The JavaScript errors so far; the test has now looked at them."""
        self.seen_errors = len(self.errors)
        return list(self.errors)

    def assert_clean(self) -> None:
        """No error or warning output, no "Error displaying widget", no JavaScript error."""
        stderr, widget, js = self.stderr_outputs(), self.widget_errors(), self.js_errors()
        assert stderr == [], "error or warning outputs:\n" + "\n---\n".join(stderr)
        assert widget == [], "\n".join(widget)
        assert js == [], "JavaScript errors:\n" + "\n---\n".join(js)

    def screenshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))


def is_known_load_error(frontend: str, message: str, stack: list[str]) -> bool:
    """Notebook 7.6's keyboard-shortcuts plugin throws while the page loads, before any notebook
    code runs (it reads the schema of a plugin whose settings failed to load; it happens on the
    bare /tree page too, with default settings). Not ours, and only that one, only while loading."""
    return (
        frontend == "notebook"
        and message == "Cannot read properties of undefined (reading 'schema')"
        and bool(stack)
        and "/static/notebook/notebook_core." in stack[0]
    )


def _screenshot_name(nodeid: str) -> str:
    name = nodeid.split("::", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


# Messages Chromium logs as console errors that are not the page's: a missing favicon.
_IGNORED_CONSOLE = (re.compile(r"Failed to load resource: .* 404 .*favicon"),)
