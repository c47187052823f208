"""The browser harness: the notebooks run in a real JupyterLab and Notebook 7, in headless Chromium.

Fixtures:

* ``jupyter`` (session, one per front end, ``lab`` and ``notebook``): a Jupyter server on 127.0.0.1
  with a random token and a free port, serving a temporary copy of ``notebooks/`` (and of
  ``tests/browser/fixtures/``), with the kernel importing this checkout's ``openreg_lab``
  (``PYTHONPATH``). User settings live in a temporary folder: no news or update checks, and every
  cell attached to the page (``windowingMode: none``) so the views of every cell can be queried.
* ``browser`` (session): Debian's chromium through playwright (never playwright's own download).
  Installed by ``scripts/install_chromium.sh`` when missing; the tests skip, saying why, only when
  that is impossible (no root, no apt-get).
* ``notebook_page``: opens a notebook in a fresh page and returns a :class:`NotebookPage` that runs
  all cells, waits for the kernel to go idle, and collects JavaScript errors (console errors and
  uncaught exceptions). At teardown it saves ``build/screenshots/<test>.png`` (pass or fail) and
  fails the test on any JavaScript error the test did not look at.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.browser_harness import (
    _IGNORED_CONSOLE,
    CHROMIUM_ARGS,
    FIXTURES,
    FRONTENDS,
    NOTEBOOKS,
    ROOT,
    SCREENSHOTS,
    SETTINGS,
    JupyterServer,
    NotebookPage,
    _chromium,
    _free_port,
    _screenshot_name,
    is_known_load_error,
)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    path = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


# Note [A server per front end]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The tier starts one JupyterLab server and one Notebook 7 server, each once (session scope; pytest
# runs every test of one front end before the other's). One `jupyter lab` could serve both, as it
# loads Notebook 7's server extension, but then Notebook 7's pages are not the ones `jupyter
# notebook` serves: JupyterLab's page handler writes each page's settings (`treePath`, `mode`,
# `workspace`) into the server's shared `page_config_data`, which Notebook 7's handler copies into
# its own pages, and Notebook 7 then runs `filebrowser:open-path`, a command it does not have (a
# page error in every Notebook 7 test run after a JupyterLab one). A Notebook 7 server costs one
# start in the default selection (17 s at a load average of 12).
@pytest.fixture(scope="session", params=FRONTENDS)
def jupyter(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JupyterServer]:
    """A Jupyter server for the front end ``lab`` or ``notebook`` (Note [A server per front end])."""
    frontend = request.param
    base = tmp_path_factory.mktemp(f"jupyter-{frontend}")
    root = base / "root"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    if FIXTURES.is_dir():
        for nb in FIXTURES.glob("*.ipynb"):
            shutil.copy(nb, root / nb.name)
    settings = base / "settings"
    for rel, values in SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(values))
    token, port = secrets.token_hex(16), _free_port()
    app = "JupyterNotebookApp" if frontend == "notebook" else "LabApp"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "IPYTHONDIR": str(base / "ipython"),
    }
    log = base / "server.log"
    cmd = [
        sys.executable, "-m", "jupyter", frontend,
        "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", "--allow-root", "--no-browser",
        f"--ServerApp.root_dir={root}", f"--{app}.expose_app_in_browser=True",
    ]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # a loaded machine starts it slowly
        while True:
            if proc.poll() is not None:
                pytest.fail(f"jupyter {frontend} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter {frontend} did not start in 180 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield JupyterServer(frontend, url, token, root, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def notebook_page(
    browser: Any, jupyter: JupyterServer, request: pytest.FixtureRequest
) -> Iterator[Callable[[str], NotebookPage]]:
    """``notebook_page(name)`` opens ``name`` (from the served folder) in a fresh page."""
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    opened: list[NotebookPage] = []

    def open_notebook(name: str) -> NotebookPage:
        page = context.new_page()
        nb = NotebookPage(page, jupyter, name)

        def on_console(msg: Any) -> None:
            if msg.type == "error" and not any(p.search(msg.text) for p in _IGNORED_CONSOLE):
                nb.errors.append(f"console: {msg.text}")

        page.on("console", on_console)

        def on_pageerror(exc: Any) -> None:
            stack = (getattr(exc, "stack", None) or "").splitlines()[1:4]
            if not nb.opened and is_known_load_error(jupyter.frontend, str(exc), stack):
                nb.known_load_errors.append(str(exc))
                return
            nb.errors.append("\n".join([f"pageerror: {exc}", *stack]))

        page.on("pageerror", on_pageerror)
        nb.open()
        opened.append(nb)
        return nb

    yield open_notebook
    name = _screenshot_name(request.node.nodeid)
    for i, nb in enumerate(opened):
        try:
            nb.screenshot(SCREENSHOTS / (f"{name}.png" if i == 0 else f"{name}-{i}.png"))
        except Exception as exc:  # a screenshot must not hide the test's own outcome
            print(f"screenshot of {nb.name} failed: {exc}")
    unseen = [e for nb in opened for e in nb.errors[nb.seen_errors :]]
    context.close()
    _shut_down_kernels(jupyter)
    assert unseen == [], "JavaScript errors the test did not check"


def _shut_down_kernels(server: JupyterServer) -> None:
    """Stop every kernel the test started: each holds torch (hundreds of MB) and a core's worth of
    threads, and closing the page does not stop it."""
    headers = {"Authorization": f"token {server.token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{server.url}/api/kernels", headers=headers)) as r:
        kernels = json.load(r)
    for k in kernels:
        req = urllib.request.Request(f"{server.url}/api/kernels/{k['id']}", headers=headers, method="DELETE")
        with urllib.request.urlopen(req):
            pass


#: The one Notebook 7 run of the default selection (test, notebook): the tour. Notebook 7 draws the
#: same widgets through the same JupyterLab components, every view test runs in JupyterLab, and each
#: browser run costs 20-45 s of the suite's 30-minute budget; the other Notebook 7 runs are kept
#: for ``-m slow``.
NOTEBOOK_7_DEFAULT = ("test_notebook_in_the_browser", "01-tour.ipynb")
#: View tests whose JupyterLab run is kept for ``-m slow`` as well (the suite's budget): the
#: kernels-only dashboard's note is checked on its data in tests/recording/test_trace_kernel_ops.py.
LAB_SLOW_TESTS = {"test_dashboard_of_a_kernels_only_trace_says_so"}
#: Notebooks whose JupyterLab run is kept for ``-m slow`` too: their views (the dispatch explorer,
#: the coverage view, the dashboard) are drawn in the browser by the other notebooks' runs and the
#: view tests, and nbclient runs every notebook by default, checking each shows its views with a
#: text/html fallback (tests/notebooks/test_notebooks.py). By default JupyterLab runs the tour (01)
#: and the compile notebook (07: the only dashboard of compiled regions drawn in a browser). The
#: distributed one (08) costs 40-46 s here: its rank-0 dashboard draws as 01's does, and the ranks
#: view it shows (static HTML and SVG) is drawn from the same kind of job in test_browser_ranks.py.
LAB_SLOW = {
    "02-dispatch-keys.ipynb",
    "03-finding-fallbacks.ipynb",  # its verdict's host time is also notebook 01's, drawn by default
    "04-autocast.ipynb",
    "05-writing-a-kernel.ipynb",
    "06-emulating-a-backend.ipynb",
    "08-distributed.ipynb",
    "09-porting-a-hugging-face-model.ipynb",  # its dashboard draws as 01's and 07's do
    # 44-84 s here (its cells 32-71 s, load 5-8): the out-of-memory trace's dashboard draws as 01's, its
    # memory charts are plotly FigureWidgets in a box, as the dashboard's own plots.
    "10-where-memory-goes.ipynb",
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the Notebook 7 runs outside ``NOTEBOOK_7_DEFAULT`` and the JupyterLab runs of ``LAB_SLOW``
    and ``LAB_SLOW_TESTS`` ``slow`` (the suite's time budget)."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        lab_slow = params.get("name") in LAB_SLOW or getattr(item, "originalname", "") in LAB_SLOW_TESTS
        if params.get("jupyter") == "lab" and lab_slow:
            item.add_marker(pytest.mark.slow)
        if params.get("jupyter") != "notebook":
            continue
        if (getattr(item, "originalname", item.name), params.get("name")) != NOTEBOOK_7_DEFAULT:
            item.add_marker(pytest.mark.slow)
