"""``openreg-lab report TRACE``: a saved trace's totals and top fallbacks; ``--html`` writes its report."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from openreg_lab.cli import _outputs
from openreg_lab.cli._common import Parser, UsageError, check_output, positive_int

EXAMPLES = """\
examples:
  openreg-lab run --trace run.trace train.py      # save a trace first
  openreg-lab report run.trace                    # totals and top fallbacks in the terminal
  openreg-lab report run.trace --html report.html --title "step 1000, mps profile"
  openreg-lab report run.trace --chrome run.json  # for Perfetto or chrome://tracing
"""


def add_parser(sub: Any) -> Parser:
    """Add the ``report`` command to the subparsers ``sub``."""
    p: Parser = sub.add_parser(
        "report",
        help="summarize a saved trace; write its HTML report or Chrome trace",
        description=__doc__,
        epilog=EXAMPLES,
    )
    p.add_argument("trace", help="a trace file written by `run --trace` or Trace.save (e.g. run.trace)")
    p.add_argument("--html", metavar="PATH", help="write the HTML report there (e.g. --html report.html)")
    p.add_argument("--title", help="the report's title (default: the trace file's name)")
    p.add_argument("--chrome", metavar="PATH", help="write a Chrome trace there (e.g. --chrome run.json)")
    p.add_argument(
        "--top", type=positive_int, default=10, help="how many fallbacks to list (default %(default)s)"
    )
    p.set_defaults(handler=_handle)
    return p


def _handle(args: argparse.Namespace) -> int:
    import openreg_lab

    check_output(args.html, "--html")
    check_output(args.chrome, "--chrome")
    try:
        trace = openreg_lab.load_trace(args.trace)
    except FileNotFoundError:
        raise UsageError(f"no such trace file: {args.trace}") from None
    except IsADirectoryError:
        raise UsageError(f"{args.trace} is a directory, not a trace file") from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    _outputs.print_summary(trace, args.top, sys.stdout)
    info = {"trace file": os.path.abspath(args.trace)}
    title = args.title or os.path.basename(args.trace)
    ok = _outputs.write(trace, info, html=args.html, chrome=args.chrome, title=title)
    sys.stderr.flush()
    return 0 if ok else 1
