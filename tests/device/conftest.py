"""The device tier's fixture: exact memory statistics in the modules that assert them."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

#: Modules whose tests assert exact allocator statistics.
EXACT_MEMORY = {"test_memory", "test_ipc"}


@pytest.fixture(autouse=True)
def _no_collection_midway(request: pytest.FixtureRequest) -> Iterator[None]:
    """Earlier tests' cyclic garbage (device tensors among it) is freed before the test, never in
    the middle of it: a collection triggered by the test's own allocations once freed an earlier
    tier's tensors between two reads of ``memory_reserved`` (the tiers run compile before device)."""
    if request.module.__name__.rpartition(".")[2] not in EXACT_MEMORY:
        yield
        return
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
