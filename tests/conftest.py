"""Shared fixtures: every test gets openreg registered, device 0 current and no memory limits."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

import openreg_lab


@pytest.fixture(autouse=True)
def _clean_openreg_state() -> Iterator[None]:
    torch.openreg.set_device(0)
    yield
    torch.openreg.set_device(0)
    for i in range(torch.openreg.device_count()):
        torch.openreg.set_memory_limit(None, i)
    openreg_lab.set_fallback_policy("allow")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with extra environment variables."""
    full_env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120
    )
