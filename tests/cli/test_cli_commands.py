"""``coverage``, ``explain``, ``report``, ``demo`` and every command's ``--help``, run in-process."""

from __future__ import annotations

import argparse
import io
import json

import pytest
import torch

import openreg_lab
from openreg_lab.cli import build_parser, main
from openreg_lab.cli._progress import Progress
from openreg_lab.cli.run import split

PROG = "python -m openreg_lab"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), prog=PROG)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def saved_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "run.trace"
    x = torch.arange(9.0).reshape(3, 3).to("openreg")
    with openreg_lab.trace(stack=True) as t:
        x.trunc()
        x.trunc()
        with torch.autocast("openreg", dtype=torch.bfloat16):
            torch.mm(x, x)
    t.save(path)
    return path


def test_every_command_explains_every_option_with_an_example(capsys):
    _, commands = build_parser(PROG)
    assert sorted(commands) == ["coverage", "demo", "explain", "report", "run"]
    for name, sub in commands.items():
        code, out, _ = run_cli(capsys, name, "--help")
        assert code == 0
        assert "examples:" in out and f"openreg-lab {name}" in out, name
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:
                continue
            assert action.help, (name, action.dest)
            for option in action.option_strings:
                assert option in out, (name, option)
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and all(name in out for name in commands)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "--profile", "nosuch", "{tmp}/x.py"],
            "run: error: --profile nosuch: unknown profile 'nosuch'",
        ),
        (["run", "missing.py"], "run: error: no such script: missing.py"),
        (["run", "-m", "no_such_module_here"], "run: error: -m no_such_module_here: no module named"),
        (["run"], "run: error: give the script to run, or -m MODULE"),
        (["run", "--bogus", "x.py"], "run: error: unrecognized arguments: --bogus"),
        (["run", "--capacity", "0", "x.py"], "run: error: argument --capacity: expected a positive integer"),
        (["run", "--policy", "never", "x.py"], "run: error: argument --policy: invalid choice: 'never'"),
        (
            ["run", "--html", "/no/such/dir/r.html", "{tmp}/x.py"],
            "run: error: --html /no/such/dir/r.html: directory",
        ),
        (["run", "--trace", "{tmp}", "{tmp}/x.py"], "run: error: --trace {tmp}: is a directory"),
        (["report", "{tmp}/none.trace"], "report: error: no such trace file: {tmp}/none.trace"),
        (
            ["report", "{tmp}/notes.txt"],
            "report: error: '{tmp}/notes.txt' is not an openreg-lab trace: it is not a zip archive",
        ),
        (["report", "{trace}", "--html", "/no/such/dir/r.html"], "report: error: --html /no/such/dir/r.html"),
        (["coverage", "--profile", "nosuch"], "coverage: error: --profile nosuch: unknown profile"),
        (["coverage", "--format", "xml"], "coverage: error: argument --format: invalid choice: 'xml'"),
        (["explain", "aten::no_such_op"], "explain: error: no operator named 'aten::no_such_op'"),
        (["explain", "aten::mm", "--args", "t(2, 3)"], "explain: error: explain: the arguments do not match"),
        (["explain", "aten::mm", "--dtype", "floaty"], "explain: error: --dtype floaty: not a torch dtype"),
        (["demo", "--steps", "0"], "demo: error: argument --steps: expected a positive integer"),
        (["frobnicate"], "error: argument COMMAND: invalid choice: 'frobnicate'"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(capsys, tmp_path, saved_trace, argv, message):
    (tmp_path / "notes.txt").write_text("not a trace\n")
    (tmp_path / "x.py").write_text("raise SystemExit('x.py must not run')\n")
    argv = [a.format(tmp=tmp_path, trace=saved_trace) for a in argv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(PROG), err
    assert message.format(tmp=tmp_path) in err


def test_run_splits_our_options_from_the_script_and_its_arguments():
    _, commands = build_parser(PROG)
    p = commands["run"]
    assert split(p, ["--html", "r.html", "--stack", "t.py", "--html", "x", "-m"]) == (
        ["--html", "r.html", "--stack"],
        ["t.py", "--html", "x", "-m"],
    )
    assert split(p, ["--profile=mps", "-m", "pkg.train", "--epochs", "1"]) == (
        ["--profile=mps"],
        ["-m", "pkg.train", "--epochs", "1"],
    )
    assert split(p, ["-mpkg.train", "a"]) == ([], ["-m", "pkg.train", "a"])
    assert split(p, ["--shapes", "--", "-weird.py", "a"]) == (["--shapes"], ["-weird.py", "a"])


def test_coverage_formats_agree(capsys):
    code, csv_out, _ = run_cli(
        capsys, "coverage", "--profile", "mps", "--format", "csv", "--namespace", "aten"
    )
    assert code == 0
    lines = csv_out.splitlines()
    assert lines[0] == "name,namespace,overload,resolution,kernel,has_autograd_kernel,has_autocast_rule,tags"
    code, json_out, _ = run_cli(
        capsys, "coverage", "--profile", "mps", "--format", "json", "--namespace", "aten"
    )
    records = json.loads(json_out)
    assert len(records) == len(lines) - 1
    expected = openreg_lab.coverage(profile="mps")
    expected = expected[expected["namespace"] == "aten"]
    assert [r["name"] for r in records] == expected["name"].tolist()
    assert [r["resolution"] for r in records] == expected["resolution"].astype(str).tolist()
    add = next(r for r in records if r["name"] == "aten::add.Tensor")
    assert add["kernel"] == "hand_written" and "pointwise" in add["tags"]
    code, table, _ = run_cli(capsys, "coverage", "--resolution", "fallback", "--namespace", "aten")
    rows = table.splitlines()
    assert rows[0].split() == ["operator", "resolution", "kernel", "autograd", "autocast"]
    n = (openreg_lab.coverage().query("namespace == 'aten' and resolution == 'fallback'")).shape[0]
    assert rows[-1] == f"{n} operators: fallback {n}"
    assert any(r.split()[:3] == ["aten::trunc.out", "fallback", "cpu_fallback"] for r in rows[1:])


def test_explain_text_and_json(capsys):
    code, text, _ = run_cli(capsys, "explain", "aten::linear")
    assert code == 0
    assert text.startswith("explain aten::linear\n")
    assert "openreg: composite_implicit (composite)" in text and "aten::mm" in text
    code, out, _ = run_cli(capsys, "explain", "trunc", "--format", "json", "--shape", "3,3")
    data = json.loads(out)
    assert data["op"] == "aten::trunc" and data["kernel"] == "composite"
    trunc_out = next(c for c in data["calls"] if c["op"] == "aten::trunc.out")
    expected = {
        "op": "aten::trunc.out",
        "resolution": "fallback",
        "kernel": "cpu_fallback",
        "ran": "fallback",
    }
    assert trunc_out == {"depth": 0, **expected}
    code, out, _ = run_cli(capsys, "explain", "aten::mm", "--args", "t(2, 3), t(3, 4)")
    assert code == 0 and "openreg: native (hand_written)" in out


def test_report_prints_the_summary_of_a_saved_trace(capsys, saved_trace, tmp_path):
    code, out, err = run_cli(capsys, "report", str(saved_trace), "--chrome", str(tmp_path / "c.json"))
    assert code == 0, err
    assert "top fallbacks (1 of 1 ops, by time including copies)" in out
    row = next(line for line in out.splitlines() if line.startswith("aten::trunc.out"))
    assert row.split()[1] == "2" and row.split()[-3].startswith("test_cli_commands.py:")
    assert row.endswith("(+1 more)")  # two lines called trunc
    assert "autocast casts" in out and f"wrote the Chrome trace to {tmp_path / 'c.json'}" in err
    assert json.loads((tmp_path / "c.json").read_text())["traceEvents"]


# Needs Trace.to_html, which the views layer provides.
def test_report_writes_html_with_the_trace_facts(capsys, saved_trace, tmp_path):
    code, _, err = run_cli(capsys, "report", str(saved_trace), "--html", str(tmp_path / "r.html"))
    assert code == 0, err
    html = (tmp_path / "r.html").read_text()
    assert str(saved_trace) in html and "run.trace" in html


def test_demo_still_checks_parity(capsys):
    code, out, _ = run_cli(capsys, "demo", "--steps", "1")
    assert code == 0
    assert "parity with CPU: OK" in out


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_updates_in_place_on_a_terminal_and_prints_lines_otherwise(tty):
    stream = _Stream(tty)
    progress = Progress(stream, "openreg-lab run x.py", delay=0.0, tty_every=0.01, line_every=0.01)
    progress.start()
    deadline = torch.randn(1)  # noqa: F841  (anything, while the thread writes)
    import time

    time.sleep(0.1)
    progress.stop()
    text = stream.getvalue()
    assert "openreg-lab run x.py: " in text and "s elapsed, tracing" in text
    if tty:
        assert "\n" not in text and text.count("\r\x1b[K") >= 3 and text.endswith("\r\x1b[K")
    else:
        assert "\r" not in text and text.count("\n") >= 3


def test_progress_says_nothing_for_short_runs():
    stream = _Stream(True)
    progress = Progress(stream, "x", delay=10.0)
    progress.start()
    progress.stop()
    assert stream.getvalue() == ""


def test_progress_counts_the_events_recorded_so_far():
    import openreg_lab
    from openreg_lab.recording.session import events_so_far

    assert events_so_far() == 0  # no trace open
    x = torch.ones(3, device="openreg")
    with openreg_lab.trace() as t:
        for _ in range(5):
            x = x + 1
        during = events_so_far()
        stream = _Stream(False)
        line = Progress(stream, "run", count=events_so_far).line()
    assert during == len(t) > 0
    assert line.endswith(f"elapsed, {during:,} events recorded")
    assert events_so_far() == 0


class _Syscalls(io.RawIOBase):
    """A raw stream that keeps each write it is given, as the pipe sees them."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self.calls.append(bytes(b))
        return len(b)


def test_say_writes_a_line_in_one_call_where_print_makes_two():
    # What sys.stderr is under PYTHONUNBUFFERED: every write reaches the pipe at once. torchrun's
    # ranks share that pipe, so a line must be one write for another rank's to stay out of it.
    from openreg_lab.cli._common import say

    raw = _Syscalls()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # type: ignore[arg-type]
    print("openreg-lab: a", file=stream)
    assert raw.calls == [b"openreg-lab: a", b"\n"]  # the cause
    raw.calls.clear()
    say("openreg-lab: b\nsecond line", stream)
    assert raw.calls == [b"openreg-lab: b\nsecond line\n"]
