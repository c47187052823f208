"""``openreg-lab report TRACE [TRACE ...]``: a saved trace's totals and top fallbacks; ``--html`` writes
its report. Several traces (one per rank of a ``torch.distributed`` run) are merged: their
collectives lined up on one clock, who arrived last and by how much (``views.ranks``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from openreg_lab.cli import _outputs
from openreg_lab.cli._common import Parser, UsageError, check_distinct, check_output, positive_int, say

EXAMPLES = """\
examples:
  openreg-lab run --trace run.trace train.py      # save a trace first
  openreg-lab report run.trace                    # totals and top fallbacks in the terminal
  openreg-lab report run.trace --html report.html --title "step 1000, mps profile"
  openreg-lab report run.trace --chrome run.json  # for Perfetto or chrome://tracing
  openreg-lab report run.rank0.trace run.rank1.trace --html ranks.html   # ranks merged
"""


def add_parser(sub: Any) -> Parser:
    """Add the ``report`` command to the subparsers ``sub``."""
    p: Parser = sub.add_parser(
        "report",
        help="summarize a saved trace; write its HTML report or Chrome trace",
        description=__doc__,
        epilog=EXAMPLES,
    )
    p.add_argument(
        "trace",
        nargs="+",
        help="a trace file written by `run --trace` or Trace.save (e.g. run.trace); several: one per rank",
    )
    p.add_argument("--html", metavar="PATH", help="write the HTML report there (e.g. --html report.html)")
    p.add_argument("--title", help="the report's title (default: the trace file's name)")
    p.add_argument(
        "--chrome",
        metavar="PATH",
        help="write a Chrome trace there (e.g. --chrome run.json); a name ending in .pftrace gets "
        "Perfetto's protobuf format, faster and smaller for big traces",
    )
    p.add_argument(
        "--top",
        type=positive_int,
        default=10,
        help="how many fallbacks (of several traces: collectives) to list (default %(default)s)",
    )
    p.set_defaults(handler=_handle)
    return p


def _handle(args: argparse.Namespace) -> int:

    check_output(args.html, "--html")
    check_output(args.chrome, "--chrome")
    inputs = [(f"the input trace {path}", path) for path in args.trace if os.path.exists(path)]
    check_distinct([("--html", args.html), ("--chrome", args.chrome)], inputs)
    traces = [_load(path) for path in args.trace]
    if len(traces) > 1:
        return _ranks(args, traces, args.trace)
    (trace,), (path,) = traces, args.trace
    _outputs.print_summary(trace, args.top, sys.stdout)
    info = {"trace file": os.path.abspath(path)}
    title = args.title or os.path.basename(path)
    ok = _outputs.write(trace, info, html=args.html, chrome=args.chrome, title=title)
    sys.stderr.flush()
    return 0 if ok else 1


def _load(path: str) -> Any:
    import openreg_lab

    try:
        return openreg_lab.load_trace(path)
    except FileNotFoundError:
        raise UsageError(f"no such trace file: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory, not a trace file") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:  # permissions
        raise UsageError(f"cannot read the trace file {path}: {e.strerror or e}") from None


def _ranks(args: argparse.Namespace, traces: list[Any], paths: list[str]) -> int:
    """One trace per rank: the job's verdict and the merged collectives in the terminal, ``--html``
    the merged report (``views.ranks``); traces that are not one job are refused in one line."""
    from openreg_lab.recording.distributed import check_one_job
    from openreg_lab.views.ranks_view import ranks

    if args.chrome:
        raise UsageError("--chrome takes one trace; give one file per run of `report --chrome`")
    try:
        check_one_job(traces, paths)
    except ValueError as e:
        raise UsageError(str(e)) from None
    view = ranks(traces)
    table = view.collectives()
    say(f"{len(traces)} traces, {len(view.ranks)} ranks, {len(table)} collectives", sys.stdout)
    say("\n".join(view.verdict.lines()), sys.stdout)
    if len(table):
        shown = table.assign(
            dur_us=(table["dur_ns"] / 1e3).round(1), late_us=(table["late_ns"] / 1e3).round(1)
        )[["name", "group", "issued_by", "bytes", "ranks", "dur_us", "last_rank", "late_us", "gbytes_per_s"]]
        say(shown.head(args.top).to_string(index=False), sys.stdout)
        if len(table) > args.top:
            more = len(table) - args.top
            say(f"... {more} more collectives (--top {len(table)} lists them all)", sys.stdout)
    if args.html:
        try:
            view.to_html(
                args.html,
                title=args.title or "openreg-lab: ranks",
                run_info={"trace files": ", ".join(os.path.abspath(p) for p in paths)},
            )
        except OSError as e:
            say(f"openreg-lab: could not write the report to {args.html}: {e}")
            return 1
        say(f"openreg-lab: wrote the report to {os.path.abspath(args.html)}")
    return 0
