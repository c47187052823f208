"""Fresh interpreters for the tests that need one (a clean import, an environment variable set first)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with extra environment variables."""
    full_env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )


def running_in(directory: Path) -> list[int]:
    """The processes whose working directory is ``directory`` (a job's leftovers, when it has ended)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "cwd") == str(directory):
                found.append(int(proc.name))
        except OSError:
            continue
    return found
