"""The pytest plugin: ``--openreg-fallbacks=report`` lists the tests that fell back, ``error`` fails them."""

from __future__ import annotations

import pytest

from tests.support.cli_helpers import run_module

TESTS = """\
import torch
import openreg_lab


def test_native_only():
    x = torch.ones(4, device="openreg")
    assert (x + x).sum().item() == 8


def test_falls_back():
    x = torch.arange(9.0).reshape(3, 3).to("openreg")
    assert x.trunc().sum().item() == 36
    assert x.logcumsumexp(0).shape == (3, 3)


def test_fails_and_falls_back():
    x = torch.ones(3, device="openreg")
    x.logcumsumexp(0)
    assert False, "the test's own failure"
"""


def _pytest(root, mode: str):
    """Run pytest with the plugin on ``TESTS`` in ``root`` (with its own, empty configuration)."""
    (root / "test_small.py").write_text(TESTS)
    (root / "pytest.ini").write_text("[pytest]\n")  # not this repository's configuration
    return run_module(
        "pytest", "-p", "openreg_lab.pytest_plugin", f"--openreg-fallbacks={mode}",
        "-p", "no:cacheprovider", "-q", "--rootdir", root, "test_small.py", cwd=root,
    )  # fmt: skip


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return _pytest(tmp_path_factory.mktemp("report"), "report")


@pytest.fixture(scope="module")
def error(tmp_path_factory):
    return _pytest(tmp_path_factory.mktemp("error"), "error")


def _summary_table(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "openreg fallbacks" in line)
    rows = []
    for line in lines[start + 2 :]:
        if line.startswith(("=", "FAILED")) or "test(s) fell back" in line:
            break
        rows.append(line.split())
    return rows


@pytest.mark.parametrize("mode", ["report", "error"])
def test_summary_lists_each_test_its_ops_and_source_lines(mode, request):
    p = request.getfixturevalue(mode)
    assert _summary_table(p.stdout) == [
        ["test_small.py::test_falls_back", "aten::trunc.out", "1", "test_small.py:12"],
        ["test_small.py::test_falls_back", "aten::_logcumsumexp", "1", "test_small.py:13"],
        ["test_small.py::test_fails_and_falls_back", "aten::_logcumsumexp", "1", "test_small.py:18"],
    ] or _summary_table(p.stdout) == [
        ["test_small.py::test_falls_back", "aten::_logcumsumexp", "1", "test_small.py:13"],
        ["test_small.py::test_falls_back", "aten::trunc.out", "1", "test_small.py:12"],
        ["test_small.py::test_fails_and_falls_back", "aten::_logcumsumexp", "1", "test_small.py:18"],
    ]
    assert f"2 test(s) fell back, 2 op(s) ({mode} mode)" in p.stdout


def test_report_mode_only_reports(report):
    p = report
    assert p.returncode == 1  # the test that fails on its own
    assert "1 failed, 2 passed" in p.stdout
    assert "FAILED test_small.py::test_fails_and_falls_back - AssertionError" in p.stdout
    assert "E       AssertionError: the test's own failure" in p.stdout


def test_error_mode_fails_the_tests_that_fell_back_naming_ops_and_lines(error):
    p = error
    assert p.returncode == 1
    assert "2 failed, 1 passed" in p.stdout
    assert "FAILED test_small.py::test_falls_back - Failed: openreg ops fell back" in p.stdout
    assert "openreg ops fell back to the CPU (--openreg-fallbacks=error):" in p.stdout
    assert "aten::trunc.out: 1 call(s) at test_small.py:12" in p.stdout
    assert "aten::_logcumsumexp: 1 call(s) at test_small.py:13" in p.stdout
    # A test that fails on its own keeps its own failure.
    assert "FAILED test_small.py::test_fails_and_falls_back - AssertionError" in p.stdout
    assert "E       AssertionError: the test's own failure" in p.stdout
