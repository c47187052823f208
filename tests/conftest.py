"""Shared fixtures: every test gets openreg registered, device 0 current and no memory limits."""

from __future__ import annotations

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


@pytest.hookimpl(trylast=True)  # after -m / -k deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the Binder build now, in the background, and run the tests that need it last.

    The build takes minutes, mostly compiling on a core the test run leaves idle (binder_build.py).
    """
    needs_build = [item for item in items if "binder_env" in getattr(item, "fixturenames", ())]
    if needs_build and not config.option.collectonly:
        from tests.support import binder_build

        binder_build.BACKGROUND.start()
        items[:] = [item for item in items if item not in needs_build] + needs_build
