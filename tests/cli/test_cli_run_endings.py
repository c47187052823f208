"""How a script ends under ``openreg-lab run`` (threads that outlive its
main code, a change of directory, os._exit) and the arguments refused before it starts. Run
in-process through ``cli.main``, as tests/cli/test_cli_commands.py does."""

from __future__ import annotations

import textwrap
import zipfile

import pytest
import torch

import openreg_lab
from openreg_lab.cli import main
from tests.support.cli_helpers import openreg_lab as run_openreg_lab

THREADS = """\
import threading
import torch
import openreg_lab

x = torch.arange(4.0, device="openreg")
start = threading.Event()

def work():
    start.wait()
    for _ in range(200):
        x.logcumsumexp(0)  # a CPU fallback

threads = [threading.Thread(target=work) for _ in range(2)]
for t in threads:
    t.start()
start.set()  # the script's main code returns at once: Python waits for the threads
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["run", *argv], prog="openreg-lab")
    out, err = capsys.readouterr()
    return code, out, err


def test_threads_that_outlive_the_script_are_recorded(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "threads.py").write_text(THREADS)
    code, _, err = _run(capsys, "--trace", "t.trace", "threads.py")
    assert code == 0, err
    ev = openreg_lab.load_trace(tmp_path / "t.trace").events
    assert int((ev["kind"] == "fallback").sum()) == 400  # every call of both threads
    assert "not in the trace" not in err


def test_daemon_threads_still_running_are_said_to_be_left_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = """\
        import threading, time
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True, name="spinner").start()
        """
    (tmp_path / "daemon.py").write_text(textwrap.dedent(script))
    code, _, err = _run(capsys, "--html", "r.html", "daemon.py")
    assert code == 0
    line = "openreg-lab run: 1 daemon thread of the script was still running when it ended: "
    assert line + "what they did afterwards is not in the trace" in err
    assert "what they did afterwards is not in the trace" in (tmp_path / "r.html").read_text()


def test_outputs_stay_where_run_started_when_the_script_changes_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "moves.py").write_text(
        "import os, torch\ntorch.ones(2, device='openreg') + 1\nos.chdir('elsewhere')\n"
    )
    code, _, err = _run(capsys, "--trace", "t.trace", "--html", "r.html", "--chrome", "c.json", "moves.py")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == []
    for name in ("t.trace", "r.html", "c.json"):
        assert (tmp_path / name).stat().st_size > 0, name
        assert f"to {tmp_path / name}" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--capacity=9223372036854775808", "x.py"], "expected at most 2**63 - 1 events"),
        (["--capacity", str(2**70), "x.py"], "expected at most 2**63 - 1 events"),
        (["-m", "pkg_without_main"], "-m pkg_without_main: is a package without a __main__ module"),
        (["--trace", "x.py", "x.py"], "the same file as the script; give each output its own path"),
        (["app.zip"], "app.zip is a zip file without __main__.py"),
        (["--html", "o", "--chrome", "./o", "x.py"], "--html {tmp}/o: the same file as --chrome"),
    ],
)
def test_bad_run_arguments_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "x.py").write_text("raise SystemExit('must not run')\n")
    with zipfile.ZipFile(tmp_path / "app.zip", "w") as z:
        z.writestr("mod.py", "raise SystemExit('must not run')\n")
    (tmp_path / "pkg_without_main").mkdir()
    (tmp_path / "pkg_without_main" / "__init__.py").write_text("raise SystemExit('must not run')\n")
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    message = message.format(tmp=tmp_path)
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert "must not run" not in err


def test_a_package_with_main_still_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pkg_with_main").mkdir()
    (tmp_path / "pkg_with_main" / "__init__.py").write_text("")
    (tmp_path / "pkg_with_main" / "__main__.py").write_text("import sys\nsys.exit(3)\n")
    code, _, err = _run(capsys, "-m", "pkg_with_main")
    assert code == 3, err


def test_help_says_what_os_exit_writes(capsys):
    assert main(["run", "--help"], prog="openreg-lab") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "A script that ends with os._exit(), exec or a signal that kills the process (SIGKILL) writes nothing"
        in out
    )
    assert "Output paths are relative to the directory openreg-lab starts in" in out


def test_os_exit_writes_nothing_as_documented(tmp_path):
    """A real process: os._exit ends it before any of our code runs again (README, run --help)."""
    (tmp_path / "quits.py").write_text("import os, torch\ntorch.ones(2, device='openreg') + 1\nos._exit(4)\n")
    p = run_openreg_lab("run", "--trace", "t.trace", "quits.py", cwd=tmp_path, timeout=120)
    assert p.returncode == 4
    assert not (tmp_path / "t.trace").exists()


def test_a_child_the_script_forks_writes_nothing(tmp_path):
    """The child returns from the script like its parent (no os._exit), after the parent waited for
    it: only the parent writes the outputs, and they hold the parent's events."""
    script = """\
        import os, torch, openreg_lab
        x = torch.ones(2, device="openreg")
        pid = os.fork()
        if pid == 0:
            openreg_lab.mark("child")
            x * 3
        else:
            os.waitpid(pid, 0)
            x + 1
        """
    (tmp_path / "forks.py").write_text(textwrap.dedent(script))
    p = run_openreg_lab("run", "--trace", "t.trace", "forks.py", cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("openreg-lab: wrote the trace to") == 1, p.stderr
    assert "TraceForkedWarning" not in p.stderr
    ev = openreg_lab.load_trace(tmp_path / "t.trace").events
    assert (ev["name"] == "aten::add.Tensor").sum() == 1 and (ev["kind"] == "mark").sum() == 0


def test_sigterm_ends_the_script_and_keeps_the_partial_trace(tmp_path):
    import signal
    import subprocess
    import sys

    from tests.support.cli_helpers import env

    (tmp_path / "slow.py").write_text(
        "import time, torch\ntorch.ones(3, device='openreg').logcumsumexp(0)\nprint('ready', flush=True)\n"
        "while True:\n    time.sleep(0.05)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "openreg_lab", "run", "--trace", "t.trace", "slow.py"],
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "slow.py was terminated (SIGTERM) (exit code 143)" in err
    assert openreg_lab.load_trace(tmp_path / "t.trace").fallbacks()["name"].tolist() == [
        "aten::_logcumsumexp"
    ]


POOL = """
from concurrent.futures import ThreadPoolExecutor
import torch
import openreg_lab
x = torch.ones(16, device="openreg")
pool = ThreadPoolExecutor(2)  # never shut down, as Inductor's compile pool is not
print(sum(f.result().sum().item() for f in [pool.submit(x.logcumsumexp, 0) for _ in range(10)]))
"""


def test_an_idle_thread_pool_the_script_leaves_open_does_not_keep_run_waiting(tmp_path):
    # Python stops a pool's idle workers before it joins threads at exit; run waited for them for ever.
    (tmp_path / "pool.py").write_text(POOL)
    p = run_openreg_lab("run", "--trace", "t.trace", "pool.py", cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    each = torch.ones(16).logcumsumexp(0).sum().item()
    assert float(p.stdout) == pytest.approx(sum(each for _ in range(10)), rel=1e-6)
    ev = openreg_lab.load_trace(tmp_path / "t.trace").events
    assert int((ev["kind"] == "fallback").sum()) == 10  # every task's logcumsumexp, run on the pool's threads
    assert "not in the trace" not in p.stderr


def _run_and_terminate_while_writing(tmp_path, pause: str, signals: int):
    """``run`` paused before writing an output (OPENREG_LAB_TEST_PAUSE_OUTPUT, Note [SIGTERM while
    run writes its outputs]); ``signals`` SIGTERMs sent then, each after the previous one was seen.
    Returns the exit status and stderr."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    from tests.support.cli_helpers import env

    (tmp_path / "done.py").write_text("import torch\ntorch.ones(3, device='openreg').logcumsumexp(0)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "openreg_lab", "run", "--trace", "t.trace", "--chrome", "c.json",
         "--html", "r.html", "done.py"],
        cwd=tmp_path, env={**env(), "OPENREG_LAB_TEST_PAUSE_OUTPUT": pause}, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    seen: list[str] = []
    watchdog = threading.Timer(120, proc.kill)  # every read below ends by then
    watchdog.start()
    try:
        assert proc.stderr is not None

        def wait_for(text: str) -> None:
            for line in proc.stderr:
                seen.append(line)
                if text in line:
                    return
            raise AssertionError(f"{text!r} never printed:\n{''.join(seen)}")

        wait_for(f"paused before writing the {pause.split(':')[0]}")
        for i in range(signals):
            os.kill(proc.pid, signal.SIGTERM)
            if i == 0:
                wait_for("SIGTERM while the outputs are written: finishing them first")
        seen.append(proc.stderr.read())  # to the end (not communicate(): it skips what is buffered)
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
    return proc.returncode, "".join(seen)


def test_sigterm_while_run_writes_its_outputs_finishes_them(tmp_path):
    """The normal path under torchrun when another rank fails; the default action
    of SIGTERM killed run there with nothing written."""
    code, err = _run_and_terminate_while_writing(tmp_path, "trace:1", 1)
    assert code == 143, err
    for name, what in (("t.trace", "trace"), ("c.json", "Chrome trace"), ("r.html", "report")):
        assert f"openreg-lab: wrote the {what} to {tmp_path / name}" in err
    assert "openreg-lab run: the outputs are written; exiting for the SIGTERM" in err
    assert openreg_lab.load_trace(tmp_path / "t.trace").fallbacks()["name"].tolist() == [
        "aten::_logcumsumexp"
    ]
    assert "aten::_logcumsumexp" in (tmp_path / "r.html").read_text()


def test_a_second_sigterm_stops_the_writing_and_says_what_is_missing(tmp_path):
    code, err = _run_and_terminate_while_writing(tmp_path, "report:2", 2)
    assert code == 143, err
    assert "openreg-lab run: a second SIGTERM stopped the writing: not written: report" in err
    assert (tmp_path / "t.trace").stat().st_size > 0 and (tmp_path / "c.json").stat().st_size > 0
    assert not (tmp_path / "r.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "done.py", "t.trace"]  # no temporary left
