"""How ``openreg-lab run`` runs the script: as ``__main__`` (a path, a module or a zip), its exit
code and traceback as Python gives them, a SIGTERM that ends it as Ctrl-C does and that the
outputs outlast (Note [SIGTERM while run writes its outputs]), the threads it leaves, and
accelerate's device choice on openreg."""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from openreg_lab.cli._common import say


@contextlib.contextmanager
def accelerate_on_openreg() -> Iterator[None]:
    """While the script runs, accelerate (and so the Hugging Face Trainer) picks openreg.

    accelerate reaches a device it does not know by name only through ``ACCELERATE_TORCH_DEVICE``;
    without it a Trainer would train on the CPU, and move a model the script put on openreg back
    there, without a word. A value the user set is kept, and said when it is not openreg, so a run
    never lands on the CPU silently. (Under ``--from-cuda`` accelerate sees CUDA, which is openreg.)
    """
    name = "ACCELERATE_TORCH_DEVICE"
    before = os.environ.get(name)
    if before is None:
        os.environ[name] = "openreg"
    elif not before.startswith("openreg"):
        say(
            f"openreg-lab run: {name}={before}: accelerate and the Hugging Face Trainer will use {before}, "
            f"not openreg (unset it to train on openreg)"
        )
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)


class Terminated(BaseException):
    """SIGTERM arrived while the script ran (``kill``, a job scheduler's time limit)."""


# Note [SIGTERM while run writes its outputs]
# Under torchrun, when one rank fails the agent sends SIGTERM to the others, often just as their
# script ended and they write the trace and the report; Python's default action killed them with
# nothing written. From the script's end until the outputs are written, the first
# SIGTERM is noted and said, and the writing goes on (the trace first, _outputs.write); the exit
# status is then 143, the script's own failure status kept. A second SIGTERM stops at once and
# says which outputs are missing (an output being written is never left half-written: each is
# replaced atomically). While the script runs, SIGTERM ends it (sigterm_ends_the_script).
# OPENREG_LAB_TEST_PAUSE_OUTPUT=WHAT:N (tests only) pauses before writing output WHAT until N
# SIGTERMs have arrived, so that tests send them while run writes.
_PAUSE_ENV = "OPENREG_LAB_TEST_PAUSE_OUTPUT"


class OutputsOutlastSigterm:
    """Note [SIGTERM while run writes its outputs]: SIGTERM after the script waits for the outputs."""

    def __init__(self) -> None:
        self.signals = 0
        self.started: list[str] = []
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> OutputsOutlastSigterm:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.signals += 1
        if self.signals > 1:
            raise Terminated
        say("openreg-lab run: SIGTERM while the outputs are written: finishing them first "
            "(a second SIGTERM stops at once)")  # fmt: skip

    def writing(self, what: str) -> None:
        """Called before each output is written: remembers it; the test-only pause (see the Note)."""
        self.started.append(what)
        pause = os.environ.get(_PAUSE_ENV, "")
        if pause.rpartition(":")[0] != what:
            return
        wanted = int(pause.rpartition(":")[2])
        say(f"openreg-lab test: paused before writing the {what}")
        deadline = time.monotonic() + 60
        while self.signals < wanted and time.monotonic() < deadline:
            time.sleep(0.01)

    def stopped(self, asked: list[str]) -> int:
        """A second SIGTERM stopped the writing: say what is missing; the exit status."""
        done = set(self.started[:-1])
        missing = [what for what in asked if what not in done]
        say(f"openreg-lab run: a second SIGTERM stopped the writing: not written: {', '.join(missing)}")
        return 128 + signal.SIGTERM

    def finished(self, code: int) -> int:
        """SIGTERM arrived while writing and every output was attempted: the exit status."""
        say("openreg-lab run: the outputs are written; exiting for the SIGTERM")
        return code or 128 + signal.SIGTERM


@contextlib.contextmanager
def sigterm_ends_the_script() -> Iterator[None]:
    """While the script runs, SIGTERM ends it like Ctrl-C (exit code 143, the partial trace and
    report written) instead of killing the process before anything is written. A script that sets
    its own SIGTERM handler keeps it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def wait_for_threads(code: int, how: str, before: set[threading.Thread]) -> tuple[int, str, str]:
    """Wait for the script's non-daemon threads, as Python does before it exits, so that the trace
    holds their events; return the exit code, how the run ended and what the trace leaves out
    ("" when nothing: daemon threads still running, or a Ctrl-C that stopped the wait).

    The script's threads are those it started: the ones alive ``before`` it ran are not its own.
    The workers of ``concurrent.futures`` thread pools are not waited for: at exit Python first
    tells them to stop and only then joins threads, so an idle worker (Inductor's compile pool, a
    pool the script never shut down) would keep this wait from ever ending. A task still running in
    such a pool when the script ends is therefore not waited for.
    """
    from concurrent.futures import thread as pool_threads

    queues = getattr(pool_threads, "_threads_queues", {})  # a pool's workers and their queues

    def started_by_the_script() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t not in before and t.is_alive()]

    try:
        while True:
            alive = [t for t in started_by_the_script() if not t.daemon and t not in queues]
            if not alive:
                break
            for t in alive:
                t.join()
    except (KeyboardInterrupt, Terminated):
        running = started_by_the_script()
        return (
            130,
            "was interrupted",
            (
                f"{len(running)} threads of the script were still running when Ctrl-C stopped the wait "
                "for them: what they did afterwards is not in the trace"
            ),
        )
    daemons = [t for t in started_by_the_script() if t.daemon]
    ours = [t for t in daemons if t.name.startswith("openreg-lab")]
    if len(daemons) > len(ours):
        n = len(daemons) - len(ours)
        return (
            code,
            how,
            (
                f"{n} daemon thread{'s' if n > 1 else ''} of the script {'were' if n > 1 else 'was'} still "
                "running when it ended: what they did afterwards is not in the trace"
            ),
        )
    return code, how, ""


def run_target(ns: argparse.Namespace) -> tuple[int, str]:
    """Run the script or module as ``__main__``; return its exit code and how it ended.

    Like ``python script.py``: ``SystemExit`` gives its code (a message prints and gives 1), an
    exception prints its traceback and gives 1, ``KeyboardInterrupt`` gives 130.
    """
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if ns.module is not None:
            sys.argv = [ns.module, *ns.args]  # run_module puts the module's file in argv[0]
            sys.path[:1] = [os.getcwd()]  # as `python -m`
            runpy.run_module(ns.module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [ns.script, *ns.args]
            script = os.path.abspath(ns.script)
            sys.path[:1] = [script if os.path.isdir(script) else os.path.dirname(script)]
            runpy.run_path(ns.script, run_name="__main__")
        return 0, "finished"
    except SystemExit as e:
        return _exit_code(e.code), "exited"
    except KeyboardInterrupt as e:
        _print_traceback(e)
        return 130, "was interrupted"
    except Terminated:
        return 128 + signal.SIGTERM, "was terminated (SIGTERM)"
    except BaseException as e:
        _print_traceback(e)
        return 1, f"raised {type(e).__name__}"
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _exit_code(code: object) -> int:
    """The process exit status ``sys.exit(code)`` gives (a non-integer is printed and gives 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    say(str(code))
    return 1


def _print_traceback(e: BaseException) -> None:
    """Print ``e``'s traceback as Python would for the script, without our and runpy's frames."""
    ours = (
        os.path.dirname(os.path.abspath(__file__)) + os.sep,
        os.path.abspath(runpy.__file__),
        "<frozen runpy>",
    )
    tb = e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not (name.startswith("<frozen runpy") or os.path.abspath(name).startswith(ours)):
            break
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb, file=sys.stderr)
    sys.stderr.flush()
