"""``openreg-lab run``: run a script or module as Python would, on openreg, traced.

Our options come before the script; everything after it is the script's (as with
``python -m cProfile``). The script sees its own ``sys.argv``, runs as ``__main__`` with its
directory as ``sys.path[0]``; its exit code is ours, and the partial trace and report are written
even when it raises or is interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import inspect
import os
import runpy
import shlex
import signal
import sys
import threading
import time
import traceback
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

from openreg_lab.cli import _common
from openreg_lab.cli._common import Parser, UsageError, check_output, check_profile, positive_int, say
from openreg_lab.cli._progress import Progress
from openreg_lab.recording.session import TraceForkedWarning, events_so_far

EXAMPLES = """\
examples:
  openreg-lab run --html report.html train.py --epochs 1
  openreg-lab run --trace run.trace --chrome run.json --profile mps --policy warn \\
      --shapes --stack --from-cuda train.py --epochs 1
  openreg-lab run -m mypackage.train --epochs 1
  openreg-lab run --html report.html -m openreg_lab.examples.train_lm --steps 8
  openreg-lab run --steps 5:8 --html steady.html train.py   # only training steps 5 to 8
  openreg-lab run --kineto traces/ train.py   # traces/rank0.json for Holistic Trace Analysis

Everything after the script (or -m MODULE) is passed to it. The script's exit code is the
command's (130 after Ctrl-C, 143 after SIGTERM); the trace and the report are written even when
the script fails; a SIGTERM while they are written lets them finish (a second one stops the
writing and says what is missing). An out of memory on openreg writes PyTorch's memory snapshot
of that moment beside the trace (NAME.oom.pickle, for pytorch.org/memory_viz), and the error's
message names it.
Output paths are relative to the directory openreg-lab starts in, even if the script changes
it. The trace stays open until the script's own (non-daemon) threads end, as Python waits for
them. A script that ends with os._exit(), exec or a signal that kills the
process (SIGKILL) writes nothing; so does a child process it forks, even one that returns from
the script (the outputs are the parent's). What openreg-lab prints goes to stderr, so the script
keeps stdout.
"""


def add_parser(sub: Any) -> Parser:
    """Add the ``run`` command to the subparsers ``sub``."""
    p: Parser = sub.add_parser(
        "run",
        help="run a script (or -m module) on openreg with tracing on; print the top fallbacks",
        description=__doc__,
        epilog=EXAMPLES,
        allow_abbrev=False,
    )
    p.add_argument(
        "-m",
        dest="module",
        metavar="MODULE",
        help="run a module as `python -m MODULE` would (e.g. -m openreg_lab.examples.train_lm)",
    )
    p.add_argument(
        "--profile",
        help="run with another backend's operator coverage: minimal, default, cpu, cuda, mps, or a "
        "YAML file of operator names (e.g. --profile mps)",
    )
    p.add_argument(
        "--policy",
        choices=("allow", "warn", "error"),
        help="what an op without an openreg kernel does: run on the CPU (allow), the same with a "
        "warning per op (warn), or raise (error); default: OPENREG_FALLBACK or allow (e.g. --policy warn)",
    )
    p.add_argument("--shapes", action="store_true", help="record the shapes and dtypes of each op's tensors")
    p.add_argument(
        "--stack", action="store_true", help="record the script's file:line for each op (source of fallbacks)"
    )
    p.add_argument(
        "--ops",
        choices=("all", "kernels"),
        default="all",
        help="where op events come from: every op call, composites and autograd nodes included (all, "
        "the default; RecordFunction makes the script about 15%% slower), or only the calls openreg's "
        "kernels and CPU fallback run (kernels: a few percent; e.g. --ops kernels)",
    )
    p.add_argument(
        "--steps",
        type=_steps,
        help="record only these training steps, counted from 0 (a step ends at each optimizer.step() "
        "or openreg_lab.step()): e.g. --steps 5:8 for steps 5 to 8; what was skipped is said",
    )
    p.add_argument(
        "--capacity",
        type=_capacity,
        default=_default_capacity(),
        help="the most events to keep; the rest are counted as dropped (default %(default)s; "
        "e.g. --capacity 5000000)",
    )
    p.add_argument("--html", metavar="PATH", help="write the HTML report there (e.g. --html report.html)")
    p.add_argument("--trace", metavar="PATH", help="save the trace there, for `report` or load_trace")
    p.add_argument(
        "--chrome",
        metavar="PATH",
        help="write a Chrome trace (Perfetto, chrome://tracing) (e.g. --chrome run.json); a name "
        "ending in .pftrace gets Perfetto's protobuf format, faster and smaller for big traces",
    )
    p.add_argument(
        "--kineto",
        metavar="DIR",
        help="write the trace in torch.profiler's (Kineto's) JSON schema into DIR, made if missing, "
        "as DIR/rankN.json (N: the rank under torchrun, else 0), for Holistic Trace Analysis "
        "(TraceAnalysis(trace_dir=DIR)) (e.g. --kineto traces)",
    )
    p.add_argument(
        "--from-cuda",
        action="store_true",
        help='run a script written for CUDA: "cuda" devices, .cuda(), torch.cuda.* and '
        'autocast("cuda") go to openreg',
    )
    p.add_argument(
        "--top",
        type=positive_int,
        default=10,
        help="how many fallbacks the final table lists (default %(default)s; e.g. --top 20)",
    )
    p.add_argument("script", nargs="?", help="the script to run, followed by its own arguments")
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(handler=None)  # cli.main calls run.main: parsing stops at the script
    return p


def _capacity(text: str) -> int:
    """argparse type: a trace capacity, from 1 to 2**63 - 1 events."""
    from openreg_lab.recording.session import MAX_CAPACITY

    value = positive_int(text)
    if value > MAX_CAPACITY:
        raise argparse.ArgumentTypeError(f"expected at most 2**63 - 1 events, got {text!r}")
    return value


def _steps(text: str) -> str:
    """``--steps``'s value, checked as ``trace(steps=...)`` checks it."""
    from openreg_lab.recording import steps

    try:
        steps.parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected FIRST:LAST or one step number, counted from 0 (e.g. 5:8), got {text!r}"
        ) from None
    return text


def _default_capacity() -> int:
    import openreg_lab

    default = inspect.signature(openreg_lab.trace).parameters["capacity"].default
    return int(default)


def split(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``run``'s arguments into ours and the target's: the script (or ``-m MODULE``) and after.

    Returns ``(ours, target)`` where ``target`` is ``[]``, ``[script, *args]`` or
    ``["-m", module, *args]``.
    """
    takes_value = {
        s: action.nargs != 0
        for action in parser._actions  # argparse keeps no public table of its options
        for s in action.option_strings
    }
    ours: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return ours, argv[i + 1 : i + 2] + list(argv[i + 2 :])
        if token == "-m":
            return ours, ["-m", *argv[i + 1 :]]
        if token.startswith("-m") and not token.startswith("--"):
            return ours, ["-m", token[2:], *argv[i + 1 :]]
        if token.startswith("-") and token != "-":
            ours.append(token)
            name = token.split("=", 1)[0]
            if takes_value.get(name) and "=" not in token and i + 1 < len(argv):
                ours.append(argv[i + 1])
                i += 1
            i += 1
            continue
        return ours, list(argv[i:])
    return ours, []


def main(parser: argparse.ArgumentParser, argv: Sequence[str], command: str) -> int:
    """Parse ``run``'s arguments (``argv``, after ``run``) and run; return the exit status."""
    ours, target = split(parser, argv)
    ns = parser.parse_args(ours)
    if not target or (target[0] == "-m" and len(target) < 2):
        parser.error("give the script to run, or -m MODULE")
    if target[0] == "-m":
        ns.module, ns.script, ns.args = target[1], None, target[2:]
    else:
        ns.module, ns.script, ns.args = None, target[0], target[1:]
    _check(ns)
    return execute(ns, command)


def _check(ns: argparse.Namespace) -> None:
    """Refuse bad arguments before the script runs: missing script or module, unwritable outputs."""
    if ns.script is not None and not os.path.exists(ns.script):
        raise UsageError(f"no such script: {ns.script}")
    if (
        ns.script is not None
        and os.path.isdir(ns.script)
        and not os.path.exists(os.path.join(ns.script, "__main__.py"))
    ):
        raise UsageError(f"{ns.script} is a directory without __main__.py")
    if ns.script is not None and os.path.isfile(ns.script) and zipfile.is_zipfile(ns.script):
        with contextlib.suppress(OSError, zipfile.BadZipFile), zipfile.ZipFile(ns.script) as z:
            if "__main__.py" not in z.namelist():
                raise UsageError(f"{ns.script} is a zip file without __main__.py")
    inputs = [("the script", ns.script)] if ns.script is not None else []
    if ns.module is not None:
        try:
            spec = importlib.util.find_spec(ns.module)
        except (ImportError, ValueError) as e:
            raise UsageError(f"-m {ns.module}: {e}") from None
        if spec is None:
            raise UsageError(f"-m {ns.module}: no module named {ns.module!r}")
        if spec.submodule_search_locations is not None and not _has_main(spec.submodule_search_locations):
            raise UsageError(
                f"-m {ns.module}: is a package without a __main__ module, so it cannot be run; "
                f"run one of its modules (-m {ns.module}.NAME)"
            )
        if spec.origin is not None and os.path.isfile(spec.origin):
            inputs.append((f"the module {ns.module}", spec.origin))
    check_output(ns.html, "--html")
    check_output(ns.trace, "--trace")
    check_output(ns.chrome, "--chrome")
    _common.check_output_directory(ns.kineto, "--kineto")
    check_profile(ns.profile)
    # Resolved now: a script that changes directory must not move our outputs.
    for option in ("html", "trace", "chrome", "kineto"):
        if getattr(ns, option) is not None:
            setattr(ns, option, os.path.abspath(getattr(ns, option)))
    # Two outputs in one file, or an output over an input (the script, its profile), would lose one.
    if ns.profile is not None and os.path.isfile(ns.profile):
        inputs.append(("the --profile file", ns.profile))
    _common.check_distinct([(f"--{o}", getattr(ns, o)) for o in ("trace", "chrome", "html")], inputs)


def _has_main(locations: Sequence[str]) -> bool:
    """Whether a package found in ``locations`` has a ``__main__`` module (without importing it)."""
    names = {f"__main__{suffix}" for suffix in importlib.machinery.all_suffixes()}
    return any(os.path.isdir(os.path.join(d, "__main__")) or names & set(_listdir(d)) for d in locations)


def _listdir(d: str) -> list[str]:
    try:
        return os.listdir(d)
    except OSError:
        return []


def execute(ns: argparse.Namespace, command: str) -> int:
    """Run the target under a trace, then write the outputs and print the summary."""
    with _OutputsOutlastSigterm() as outlast:
        try:
            return _execute(ns, command, outlast)
        except _Terminated:
            if outlast.signals < 2:
                raise
            outputs = (("trace", ns.trace), ("Chrome trace", ns.chrome),
                       ("Kineto trace", getattr(ns, "kineto", None)), ("report", ns.html))  # fmt: skip
            return outlast.stopped([what for what, path in outputs if path])


def _execute(ns: argparse.Namespace, command: str, outlast: _OutputsOutlastSigterm) -> int:
    """``execute``, SIGTERM after the script waiting for the outputs (Note [SIGTERM while run writes
    its outputs])."""
    import openreg_lab
    from openreg_lab.cli import _oom, _outputs, _ranks

    name = ns.module or os.path.basename(ns.script)
    trace = openreg_lab.trace(
        record_shapes=ns.shapes,
        stack=ns.stack,
        capacity=ns.capacity,
        ops=getattr(ns, "ops", "all"),
        steps=getattr(ns, "steps", None),
    )
    progress = Progress(sys.stderr, f"openreg-lab run {name}", count=events_so_far)
    start = time.monotonic()
    pid = os.getpid()
    with ExitStack() as stack:
        # A child the script forks and that returns from it closes its copy of the trace, which
        # holds nothing (Note [The recorder across fork]): that is expected here, not news.
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", category=TraceForkedWarning)
        stack.enter_context(trace)
        out_of_memory = stack.enter_context(_oom.snapshots(_oom.path_for(ns, _ranks.launched_rank())))
        if ns.profile is not None:
            stack.enter_context(openreg_lab.use_profile(ns.profile))
        if ns.policy is not None:
            stack.enter_context(openreg_lab.fallback_policy(ns.policy))
        if ns.from_cuda:
            stack.enter_context(openreg_lab.from_cuda())
        else:
            stack.enter_context(_accelerate_on_openreg())
        policy = openreg_lab.get_fallback_policy()
        stack.enter_context(_sigterm_ends_the_script())
        progress.start()
        before = set(threading.enumerate())  # ours, or the caller's when run is called in-process
        try:
            code, how = run_target(ns)
            code, how, left = _wait_for_threads(code, how, before)
        finally:
            progress.stop()
    if os.getpid() != pid:
        return code  # a child the script forked: the outputs are its parent's to write
    for path in out_of_memory:
        say(f"openreg-lab run: out of memory: a memory snapshot of that moment is in {path}")
    elapsed = time.monotonic() - start
    info = {
        "command": command,
        "exit code": f"{code} ({how})",
        "wall time": f"{elapsed:.1f} s",
        "profile": ns.profile or "default (openreg's own kernels)",
        "fallback policy": policy,
        "from cuda": "yes" if ns.from_cuda else "no",
    }
    if left:
        info["left out"] = left
    rank = _ranks.launched_rank()  # under torchrun: files per rank, rank 0 prints the summary
    if rank is not None:
        info["rank"] = str(rank)
    if rank in (None, 0):
        say(f"openreg-lab run: {name} {how} (exit code {code}) after {elapsed:.1f} s")
        if left:
            say(f"openreg-lab run: {left}")
        _outputs.print_summary(trace, ns.top)
    kineto = getattr(ns, "kineto", None)
    if rank is not None and ns.html:  # one report for the job (Note [One report for a job])
        written = _ranks.job_outputs(trace, info, ns.html, ns.trace, ns.chrome, rank, code, kineto)
        return 1 if not written and code == 0 else code
    html, trace_path, chrome = (_ranks.per_rank(p, rank) for p in (ns.html, ns.trace, ns.chrome))
    written = _outputs.write(trace, info, html=html, trace_path=trace_path, chrome=chrome,
                             kineto=_ranks.kineto_file(kineto, rank), before=outlast.writing)  # fmt: skip
    if outlast.signals:
        return outlast.finished(code)
    if not written and code == 0:
        return 1
    return code


@contextlib.contextmanager
def _accelerate_on_openreg() -> Iterator[None]:
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


class _Terminated(BaseException):
    """SIGTERM arrived while the script ran (``kill``, a job scheduler's time limit)."""


# Note [SIGTERM while run writes its outputs]
# Under torchrun, when one rank fails the agent sends SIGTERM to the others, often just as their
# script ended and they write the trace and the report; Python's default action killed them with
# nothing written. From the script's end until the outputs are written, the first
# SIGTERM is noted and said, and the writing goes on (the trace first, _outputs.write); the exit
# status is then 143, the script's own failure status kept. A second SIGTERM stops at once and
# says which outputs are missing (an output being written is never left half-written: each is
# replaced atomically). While the script runs, SIGTERM ends it (_sigterm_ends_the_script).
# OPENREG_LAB_TEST_PAUSE_OUTPUT=WHAT:N (tests only) pauses before writing output WHAT until N
# SIGTERMs have arrived, so that tests send them while run writes.
_PAUSE_ENV = "OPENREG_LAB_TEST_PAUSE_OUTPUT"


class _OutputsOutlastSigterm:
    """Note [SIGTERM while run writes its outputs]: SIGTERM after the script waits for the outputs."""

    def __init__(self) -> None:
        self.signals = 0
        self.started: list[str] = []
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> _OutputsOutlastSigterm:
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
            raise _Terminated
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
def _sigterm_ends_the_script() -> Iterator[None]:
    """While the script runs, SIGTERM ends it like Ctrl-C (exit code 143, the partial trace and
    report written) instead of killing the process before anything is written. A script that sets
    its own SIGTERM handler keeps it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wait_for_threads(code: int, how: str, before: set[threading.Thread]) -> tuple[int, str, str]:
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
    except (KeyboardInterrupt, _Terminated):
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
    except _Terminated:
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


def command_line(prog: str, argv: Sequence[str]) -> str:
    """The command as typed, quoted for a shell."""
    return " ".join([prog, shlex.join(argv)]) if argv else prog
