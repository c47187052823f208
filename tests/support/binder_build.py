"""Build the Binder environment the way repo2docker would, in the background of the test run.

repo2docker's steps for a `requirements.txt` environment: a fresh virtual environment,
`pip install -r binder/requirements.txt`, then `binder/postBuild` from the root of a clean checkout
(the files git tracks). pip resolves `torch==2.13.0` the way `make test` does, from the machine's
pip configuration (here a local wheel directory, `find-links` in /etc/pip.conf).

The build takes minutes (it compiles the extension), mostly on a core the single-process test run
leaves idle, so `tests/conftest.py` starts it as soon as collection ends, at low priority, and moves
the tests that need it to the end of the run; `result()` waits for it. The virtual environment and
the checkout's sources are made afresh every run; only the checkout's ninja build directory
(build/ inside the copy) survives, so a second run on one machine recompiles only what changed.
build/binder/timings.txt has the timings.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "build" / "binder"
#: PyTorch's CPU wheel index, which binder/requirements.txt names for torch.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether a TCP connection to ``url``'s host opens within ``timeout`` seconds."""
    host = url.split("/")[2]
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def _requirements_here(checkout: Path) -> str:
    """binder/requirements.txt as pip here can read it: without PyTorch's CPU index when this
    machine cannot reach it (CI reaches only the package registries pip is configured with, which
    offer the same CPU wheel); pip would wait out its timeout on each retry."""
    path = checkout / "binder" / "requirements.txt"
    if _reachable(CPU_INDEX):
        return str(path)
    lines = [line for line in path.read_text().splitlines() if CPU_INDEX not in line]
    here = WORK / "requirements-here.txt"
    here.write_text("\n".join(lines) + "\n")
    return str(here)


@dataclass
class BinderEnv:
    """A built Binder environment: its venv, its checkout and the environment variables to use."""

    venv: Path
    checkout: Path
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def run(self, *cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cmd, cwd=cwd or self.checkout, env=self.env, capture_output=True, text=True, timeout=900
        )


class BuildFailed(AssertionError):
    """A step of the Binder build failed; the message has its output."""


def can_build() -> str | None:
    """Why the build cannot run here, or None."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return "needs a git checkout (the files a clone would have)"
    return None


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def _fresh_checkout(dest: Path) -> None:
    """The tracked files at dest, like a clone; keeps only dest/build (ninja's objects)."""
    if dest.exists():
        for entry in dest.iterdir():
            if entry.name != "build":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for rel in _tracked_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)  # keeps mtimes: ninja rebuilds only what changed


def build() -> BinderEnv:
    """Run repo2docker's steps now; raises BuildFailed with the failing step's output."""
    WORK.mkdir(parents=True, exist_ok=True)
    venv, checkout = WORK / "venv", WORK / "checkout"
    timings: dict[str, float] = {}
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []

    def step(name: str, cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
        start = time.monotonic()
        proc = subprocess.run([*nice, *cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
        timings[name] = time.monotonic() - start
        if proc.returncode != 0:
            raise BuildFailed(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")

    start = time.monotonic()
    _fresh_checkout(checkout)
    timings["checkout"] = time.monotonic() - start
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    step("venv", [sys.executable, "-m", "venv", "--clear", str(venv)], WORK, env)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    step(
        "pip install -r binder/requirements.txt",
        [*pip, "install", "-r", _requirements_here(checkout)],
        checkout,
        env,
    )
    step("binder/postBuild", ["bash", "binder/postBuild"], checkout, env)
    lines = [f"{name}: {seconds:.1f} s" for name, seconds in timings.items()]
    (WORK / "timings.txt").write_text("\n".join(lines) + "\n")
    return BinderEnv(venv, checkout, env, timings)


class _Background:
    """One build per test run, started early, waited for by whoever needs it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._result: BinderEnv | BaseException | None = None
        self.started_at: float | None = None

    def start(self) -> None:
        if self._thread is None and can_build() is None:
            self.started_at = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="binder-build", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._result = build()
        except BaseException as exc:  # handed to the test that waits, which raises it
            self._result = exc

    def result(self) -> BinderEnv:
        self.start()  # not started by conftest (a run of this module alone, say): build now
        assert self._thread is not None
        self._thread.join()
        if isinstance(self._result, BaseException):
            raise self._result
        assert self._result is not None
        return self._result


BACKGROUND = _Background()
