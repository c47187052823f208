"""Command line: ``python -m openreg_lab demo``."""

from __future__ import annotations

import argparse
import sys

from openreg_lab.cli import demo


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m openreg_lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="train the example MLP on openreg and report what happened")
    p_demo.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(steps=args.steps)
    return 2


if __name__ == "__main__":
    sys.exit(main())
