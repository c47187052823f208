"""A pytest plugin that finds the tests in which openreg ops fell back to the CPU.

::

    pytest -p openreg_lab.pytest_plugin --openreg-fallbacks=report   # a table at the end
    pytest -p openreg_lab.pytest_plugin --openreg-fallbacks=error    # ... and those tests fail

Each test's call (not its fixtures' setup and teardown) runs under ``openreg_lab.trace(stack=True)``.
The terminal summary lists, per test, the ops that fell back, their calls and the source lines
that called them. In ``error`` mode a test that fell back fails with the same facts; the fallback
policy itself is not changed, so the test runs to its end first.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

MODES = ("report", "error")


@dataclass(frozen=True)
class Fallback:
    """One op that fell back during a test."""

    op: str
    calls: int
    sources: tuple[str, ...]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--openreg-fallbacks``."""
    group = parser.getgroup("openreg", "openreg-lab")
    group.addoption(
        "--openreg-fallbacks",
        choices=MODES,
        default="report",
        help="trace each test on openreg: 'report' lists the ops that fell back to the CPU at the end; "
        "'error' also fails the tests in which an op fell back (default: report)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the tracing plugin with the chosen mode."""
    config.pluginmanager.register(_Plugin(config.getoption("openreg_fallbacks")), "openreg-fallbacks")


class _Plugin:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.results: dict[str, list[Fallback]] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        import openreg_lab

        failure: BaseException | None = None
        result = None
        with openreg_lab.trace(stack=True) as t:
            try:
                result = yield
            except BaseException as e:  # the test failed: record its fallbacks, then re-raise
                failure = e
        found = _fallbacks(t, str(item.config.rootpath))
        if found:
            self.results[item.nodeid] = found
        if failure is not None:
            raise failure
        if found and self.mode == "error":
            pytest.fail(_message(found), pytrace=False)
        return result

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.section("openreg fallbacks")
        if not self.results:
            tr.write_line("no op fell back to the CPU in any test")
            return
        rows = [
            (nodeid, f.op, str(f.calls), ", ".join(f.sources) or "?")
            for nodeid, found in self.results.items()
            for f in found
        ]
        headers = ("test", "op", "calls", "source")
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(4)]
        for r in [headers, *rows]:
            cells = [r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].rjust(widths[2]), r[3]]
            tr.write_line("  ".join(cells))
        ops = len({r[1] for r in rows})
        tr.write_line(f"{len(self.results)} test(s) fell back, {ops} op(s) ({self.mode} mode)")


def _fallbacks(trace: Any, root: str) -> list[Fallback]:
    table = trace.fallbacks()
    return [
        Fallback(r.name, int(r.calls), tuple(_relative(s, root) for s in r.sources))
        for r in table.itertuples(index=False)
    ]


def _relative(source: str, root: str) -> str:
    """``/root/tests/test_x.py:12`` -> ``tests/test_x.py:12``."""
    path, sep, line = source.rpartition(":")
    if not sep:
        return source
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return source
    return f"{path if rel.startswith('..') else rel}:{line}"


def _message(found: list[Fallback]) -> str:
    lines = ["openreg ops fell back to the CPU (--openreg-fallbacks=error):"]
    for f in found:
        where = ", ".join(f.sources) or "source unknown"
        lines.append(f"  {f.op}: {f.calls} call(s) at {where}")
    return "\n".join(lines)
