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
    In a pytest-xdist worker, order the tiers for the scheduler instead (Note [Two workers]).
    """
    needs_build = [item for item in items if "binder_env" in getattr(item, "fixturenames", ())]
    worker = hasattr(config, "workerinput")  # a pytest-xdist worker (Note [Two workers])
    # Each worker collects: under xdist the build starts in the worker whose tests need it, when they do.
    if needs_build and not config.option.collectonly and not worker:
        from tests.support import binder_build

        binder_build.BACKGROUND.start()
        items[:] = [item for item in items if item not in needs_build] + needs_build
    if worker:  # the longest tiers first
        from tests.support import schedule

        schedule.order(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Share the suite between the workers by file, the browser tier whole (Note [Two workers] in
    tests/support/schedule.py)."""
    from tests.support import schedule

    return schedule.TierScheduling(config, log)
