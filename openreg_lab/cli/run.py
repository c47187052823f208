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
import shlex
import sys
import threading
import time
import warnings
import zipfile
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from openreg_lab.cli import _common
from openreg_lab.cli._common import Parser, UsageError, check_output, check_profile, positive_int, say
from openreg_lab.cli._progress import Progress
from openreg_lab.cli._script import (
    OutputsOutlastSigterm,
    Terminated,
    accelerate_on_openreg,
    run_target,
    sigterm_ends_the_script,
    wait_for_threads,
)
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
        "the default; RecordFunction makes a step of small ops about 1.25x slower), or only the calls "
        "openreg's kernels and CPU fallback run (kernels: about 1.1x; e.g. --ops kernels)",
    )
    p.add_argument(
        "--no-host-samples",
        dest="host",
        action="store_false",
        help="sample no host Python (trace(host=False)): no python lane, no host time in the verdict, "
        "the smallest cost (the sampler takes about 1%% of the CPU)",
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
    with OutputsOutlastSigterm() as outlast:
        try:
            return _execute(ns, command, outlast)
        except Terminated:
            if outlast.signals < 2:
                raise
            outputs = (("trace", ns.trace), ("Chrome trace", ns.chrome),
                       ("Kineto trace", getattr(ns, "kineto", None)), ("report", ns.html))  # fmt: skip
            return outlast.stopped([what for what, path in outputs if path])


def _execute(ns: argparse.Namespace, command: str, outlast: OutputsOutlastSigterm) -> int:
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
        host=getattr(ns, "host", True),
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
            stack.enter_context(accelerate_on_openreg())
        policy = openreg_lab.get_fallback_policy()
        stack.enter_context(sigterm_ends_the_script())
        progress.start()
        before = set(threading.enumerate())  # ours, or the caller's when run is called in-process
        try:
            code, how = run_target(ns)
            code, how, left = wait_for_threads(code, how, before)
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


def command_line(prog: str, argv: Sequence[str]) -> str:
    """The command as typed, quoted for a shell."""
    return " ".join([prog, shlex.join(argv)]) if argv else prog
