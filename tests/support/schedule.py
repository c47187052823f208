"""How ``make test`` shares the suite between two pytest-xdist workers (Note [Two workers]).

Note [Two workers]
~~~~~~~~~~~~~~~~~~
``make test`` runs pytest with ``-n 2`` (``scripts/run_tests.sh``; ``TEST_WORKERS=0`` runs one
process). Much of the suite waits rather than computes: on fresh interpreters, rank processes,
Jupyter kernels and servers, a browser. Two workers keep both cores busy through those waits.
The unit of work a worker takes is one test file (``TierScheduling``): a file's module fixtures
(rank pools, traced models, executed notebooks) are then built once, in one worker, as in a
single process. The browser tier is one unit: its Jupyter servers and its Chromium are session
fixtures, started once for the whole tier. Units go, one at a time, to the worker that has run
out of work; the longest come first (``LONGEST_FIRST``, in the order of the tiers' measured
times in tests/README.md), so that no long unit starts last while the other worker idles. Within
a unit the order is pytest's own. Nothing is shared between the workers but the files they
write: every test writes under its own temporary directory (each worker has its own base) and
picks free ports, and the tests that look for processes left running look in their own job's
directory only (``tests.support.processes``).
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

#: Tiers run before the others, longest first: one unit each browser tier, then files.
LONGEST_FIRST = ("tests/browser/", "tests/notebooks/", "tests/cli/", "tests/device/")
#: Folders run by one worker as one unit (their session fixtures are started once).
ONE_UNIT = ("tests/browser/",)


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or its folder for a folder of ``ONE_UNIT``."""
    for folder in ONE_UNIT:
        if nodeid.startswith(folder):
            return folder
    return nodeid.split("::", 1)[0]


def rank(nodeid: str) -> int:
    """Where a test's tier comes in the run: the tiers of ``LONGEST_FIRST`` first, in that order."""
    for i, folder in enumerate(LONGEST_FIRST):
        if nodeid.startswith(folder):
            return i
    return len(LONGEST_FIRST)


def order(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place by ``rank``, keeping pytest's order within a tier (every worker
    collects, and must order, alike: the sort is stable and reads only node ids)."""
    items.sort(key=lambda item: rank(item.nodeid))


class TierScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with ``unit_of``'s units, taken in collection order."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        # Keep the collection's order (``order``), not xdist's reordering by number of tests.
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
