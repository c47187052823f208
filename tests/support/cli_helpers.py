"""Running ``python -m openreg_lab`` (and other modules) from this checkout in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    """The environment with this checkout first on the path (the venv may point at another one)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def run_module(
    module: str,
    *args: str | os.PathLike[str],
    cwd: Path,
    timeout: float = 60,
    extra_env: dict[str, str] | None = None,
):
    """Run ``python -m module args`` in ``cwd`` (with ``extra_env`` set); return the completed process
    (text output)."""
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=cwd,
        env={**env(), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def openreg_lab(
    *args: str | os.PathLike[str], cwd: Path, timeout: float = 60, extra_env: dict[str, str] | None = None
):
    """Run ``python -m openreg_lab args`` in ``cwd`` (with ``extra_env`` set)."""
    return run_module("openreg_lab", *args, cwd=cwd, timeout=timeout, extra_env=extra_env)


def table_rows(text: str, title: str) -> list[list[str]]:
    """The rows (cells split on runs of two spaces) of the table under the line starting ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 2 :]:  # skip the title and the header
        if not line.strip() or line.startswith("openreg-lab"):
            break
        rows.append([cell.strip() for cell in line.split("  ") if cell.strip()])
    return rows


def with_default_sigint(argv: list[str]) -> list[str]:
    """``argv`` started with SIGINT at its default action, whatever this process inherited.

    A shell without job control starts a background command (``pytest ... &``, a CI runner's
    step) with SIGINT ignored; the setting is inherited through fork and exec, and a Python started
    with SIGINT ignored keeps ignoring it, as it should (``python script.py &`` does the same). A
    test that interrupts its child must therefore reset it first: here in a shim that then execs
    ``argv`` (``preexec_fn`` is not safe in a process with threads, such as pytest with torch)."""
    shim = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", shim, *argv]
