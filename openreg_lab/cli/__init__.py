"""The ``openreg-lab`` command line (also ``python -m openreg_lab``): one module per command.

* ``run``: run a script or module on openreg, traced (``openreg_lab.cli.run``);
* ``report``: print a saved trace's summary, write its HTML report (``openreg_lab.cli.report``);
* ``coverage``: how openreg runs every operator, as a table, CSV or JSON (``openreg_lab.cli.coverage``);
* ``explain``: one operator's dispatch path (``openreg_lab.cli.explain``);
* ``demo``: the CPU parity demo (``openreg_lab.cli.demo``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from openreg_lab.cli import coverage, demo, explain, report, run
from openreg_lab.cli._common import Parser, UsageError, usage_exit

EXAMPLES = """\
examples:
  openreg-lab run --html report.html train.py --epochs 1    # the script, on openreg, traced
  openreg-lab run -m openreg_lab.examples.train_lm --steps 8
  openreg-lab report run.trace --html report.html
  openreg-lab coverage --profile mps --format csv > mps.csv
  openreg-lab explain aten::linear
  openreg-lab demo

`openreg-lab COMMAND --help` explains each command's options.
"""


def build_parser(prog: str) -> tuple[Parser, dict[str, Parser]]:
    """The top-level parser and each command's parser."""
    parser = Parser(
        prog=prog,
        description="openreg-lab: run PyTorch code on the simulated openreg device and see what falls back.",
        epilog=EXAMPLES,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands = {
        m.__name__.rsplit(".", 1)[-1]: m.add_parser(sub) for m in (run, report, coverage, explain, demo)
    }
    return parser, commands


def _prog() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "openreg-lab" if name in ("openreg-lab", "openreg-lab.exe") else "python -m openreg_lab"


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command and return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or _prog()
    parser, commands = build_parser(prog)
    try:
        if argv and argv[0] == "run":
            # `run` stops parsing at the script: what follows is the script's (see run.split).
            return run.main(commands["run"], argv[1:], run.command_line(prog, argv))
        args = parser.parse_args(argv)
        return int(args.handler(args))
    except UsageError as e:
        return usage_exit(f"{prog} {argv[0]}" if argv else prog, e)
    except SystemExit as e:  # argparse: --help (0) or a bad argument (2); the message is printed
        return e.code if isinstance(e.code, int) else 2
    except BrokenPipeError:  # `openreg-lab coverage | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def console_main() -> None:
    """Entry point of the ``openreg-lab`` console script."""
    sys.exit(main(prog="openreg-lab"))
