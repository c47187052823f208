"""At the command line: ``run`` and ``report`` never write an output over one
of their inputs (compared as files: a link or a hard link counts), refuse a directory, a block device
or a socket by name, write through a device or a FIFO, and keep file names that are not UTF-8."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import openreg_lab
from openreg_lab.cli import main
from openreg_lab.cli._common import say
from openreg_lab.recording.distributed import Job
from tests.support.cli_helpers import openreg_lab as run_openreg_lab
from tests.support.hostile_data import small_trace


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), prog="openreg-lab")
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """In ``tmp_path`` (the working directory): a trace ``a.trace`` with a link and a hard link to it,
    two ranks' traces, a script ``x.py`` (importable as ``x``) with a link, and a profile file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    small_trace().save(tmp_path / "a.trace")
    (tmp_path / "link.trace").symlink_to(tmp_path / "a.trace")
    os.link(tmp_path / "a.trace", tmp_path / "hard.trace")
    for rank in (0, 1):
        t = openreg_lab.load_trace(tmp_path / "a.trace")
        t.job = Job("run", rank, 2)
        t.save(tmp_path / f"r.rank{rank}.trace")
    (tmp_path / "x.py").write_text("raise SystemExit('must not run')\n")
    (tmp_path / "xlink.py").symlink_to(tmp_path / "x.py")
    (tmp_path / "p.yaml").write_text("- aten::add.Tensor\n")
    return tmp_path


INPUTS = [
    (
        ["report", "a.trace", "--chrome", "a.trace"],
        "--chrome a.trace: the same file as the input trace a.trace",
    ),
    (
        ["report", "a.trace", "--html", "./a.trace"],
        "--html ./a.trace: the same file as the input trace a.trace",
    ),
    (
        ["report", "a.trace", "--html", "link.trace"],
        "--html link.trace: the same file as the input trace a.trace",
    ),
    (
        ["report", "a.trace", "--chrome", "hard.trace"],
        "--chrome hard.trace: the same file as the input trace a.trace",
    ),
    (
        ["report", "r.rank0.trace", "r.rank1.trace", "--html", "r.rank0.trace"],
        "--html r.rank0.trace: the same file as the input trace r.rank0.trace",
    ),
    (["run", "--trace", "xlink.py", "x.py"], "--trace {tmp}/xlink.py: the same file as the script"),
    (["run", "--html", "x.py", "-m", "x"], "--html {tmp}/x.py: the same file as the module x"),
    (
        ["run", "--profile", "p.yaml", "--chrome", "p.yaml", "x.py"],
        "--chrome {tmp}/p.yaml: the same file as the --profile file",
    ),
]


@pytest.mark.parametrize(("argv", "message"), INPUTS, ids=[" ".join(a) for a, _ in INPUTS])
def test_an_output_that_is_an_input_is_refused_in_one_line(files, capsys, argv, message):
    before = {p.name: p.read_bytes() for p in files.iterdir() if p.is_file()}
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert message.format(tmp=files) + "; give each output its own path" in err, err
    assert {p.name: p.read_bytes() for p in files.iterdir() if p.is_file()} == before
    assert (files / "link.trace").is_symlink()


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def test_a_directory_a_socket_or_a_block_device_is_refused_by_name(files, capsys):
    (files / "d").mkdir()
    _socket(files / "sock")
    code, _, err = _cli(capsys, "report", "a.trace", "--html", "sock")
    assert (
        code == 2
        and err == "openreg-lab report: error: --html sock: is a socket, not a file; give a file's path\n"
    )
    code, _, err = _cli(capsys, "run", "--chrome", "d", "x.py")
    assert code == 2 and err == "openreg-lab run: error: --chrome d: is a directory; give a file's path\n"
    try:
        os.mknod(files / "disk", 0o600 | stat.S_IFBLK, os.makedev(7, 200))
    except PermissionError:
        pytest.skip("os.mknod of a block device node needs root")
    code, _, err = _cli(capsys, "run", "--trace", "disk", "x.py")
    assert code == 2 and "--trace disk: is a block device (a disk), not a file; give a file's path" in err
    assert stat.S_ISBLK((files / "disk").lstat().st_mode)


def test_run_writes_through_a_fifo_and_a_character_device(files, capsys):
    (files / "ok.py").write_text("import torch\ntorch.ones(2, device='openreg').logcumsumexp(0)\n")
    try:
        os.mknod(files / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("os.mknod of the null device's node needs root")
    os.mkfifo(files / "pipe.json")
    with open(files / "read.json", "wb") as copy:
        reader = subprocess.Popen(["cat", str(files / "pipe.json")], stdout=copy)
    try:
        code, _, err = _cli(capsys, "run", "--trace", "null", "--chrome", "pipe.json", "ok.py")
        reader.wait(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait(timeout=10)
    assert code == 0, err
    assert stat.S_ISCHR((files / "null").lstat().st_mode) and stat.S_ISFIFO(
        (files / "pipe.json").lstat().st_mode
    )
    events = json.loads((files / "read.json").read_text())["traceEvents"]
    assert any(e.get("cat") == "fallback" and e["name"] == "aten::_logcumsumexp" for e in events)
    assert (
        f"wrote the trace to {files / 'null'}" in err
        and f"wrote the Chrome trace to {files / 'pipe.json'}" in err
    )


def test_say_shows_a_lone_surrogate_as_its_escape_on_a_strict_stream():
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    say("caf\udce9/s.py", stream)
    assert stream.buffer.getvalue() == b"caf\\udce9/s.py\n"


def test_a_script_under_a_directory_whose_name_is_not_utf8_gives_a_trace_that_loads(tmp_path, monkeypatch):
    folder = os.fsdecode(b"caf\xe9")  # "caf\udce9": the name's byte 0xE9 is not UTF-8
    os.makedirs(tmp_path / folder)
    script = tmp_path / folder / "s.py"
    script.write_text(
        "import time, torch\n"
        "x = torch.ones(64, 64, device='openreg')\n"
        "end = time.perf_counter() + 0.2\n"
        "while time.perf_counter() < end:\n"
        "    torch.cumsum(x @ x, 0)\n"
    )
    done = run_openreg_lab("run", "--trace", "t.trace", "--html", "r.html", script, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    t = openreg_lab.load_trace(tmp_path / "t.trace")  # was: "a damaged openreg-lab trace"
    assert str(script) in set(t.host_events["file"])  # the name as Python has it, lone surrogate kept
    page = (tmp_path / "r.html").read_bytes().decode("utf-8")
    assert f"caf\\udce9{os.sep}s.py" in page and "caf\ufffd" not in page
    # report prints the summary to stdout, whose encoding may be strict: the name is escaped there
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict"))
    assert main(["report", str(tmp_path / "t.trace")], prog="openreg-lab") == 0
    sys.stdout.flush()
    assert b"caf\\udce9/s.py" in sys.stdout.buffer.getvalue()


def test_run_kineto_writes_rank0_json_in_a_directory_it_makes_and_refuses_a_file(files, capsys):
    (files / "ok.py").write_text("import torch\n(torch.ones(2, device='openreg') * 2).sum()\n")
    code, _, err = _cli(capsys, "run", "--kineto", "x.py", "ok.py")
    assert code == 2 and err == (
        "openreg-lab run: error: --kineto x.py: is not a directory; give a directory (a file a rank)\n"
    )
    code, _, err = _cli(capsys, "run", "--kineto", "no/such/dir", "ok.py")
    assert code == 2 and f"--kineto no/such/dir: directory {files / 'no' / 'such'} does not exist" in err
    code, _, err = _cli(capsys, "run", "--kineto", "hta", "ok.py")
    assert code == 0, err
    assert f"openreg-lab: wrote the Kineto trace to {files / 'hta' / 'rank0.json'}" in err
    doc = json.loads((files / "hta" / "rank0.json").read_text())
    assert doc["distributedInfo"] == {"backend": "ogloo", "rank": 0, "world_size": 1}
    kernels = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    assert {"aten::mul.Tensor", "aten::sum"} <= kernels
