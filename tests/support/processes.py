"""Fresh interpreters for the tests that need one (a clean import, an environment variable set first)."""

from __future__ import annotations

import os
import subprocess
import sys


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with extra environment variables."""
    full_env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )
