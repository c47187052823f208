"""``openreg-lab coverage``: how openreg runs every registered operator, as a table, CSV or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from openreg_lab.cli._common import Parser, check_profile, format_table

EXAMPLES = """\
examples:
  openreg-lab coverage                                   # every operator, as a table
  openreg-lab coverage --profile mps --format csv > mps.csv
  openreg-lab coverage --resolution fallback --namespace aten
  openreg-lab coverage --format json | python -m json.tool

Columns: name, resolution (native, composite_implicit, composite_explicit, fallback, missing),
kernel (hand_written, generic, via_cpu, registered, unavailable, composite, cpu_fallback, none),
has_autograd_kernel, has_autocast_rule, tags (CSV: separated by ';').
"""

RESOLUTIONS = ("native", "composite_implicit", "composite_explicit", "fallback", "missing")


def add_parser(sub: Any) -> Parser:
    """Add the ``coverage`` command to the subparsers ``sub``."""
    p: Parser = sub.add_parser(
        "coverage",
        help="how openreg runs every registered operator (table, CSV or JSON)",
        description=__doc__,
        epilog=EXAMPLES,
    )
    p.add_argument(
        "--profile",
        help="classify as if this profile were active: minimal, default, cpu, cuda, mps, or a YAML file "
        "(e.g. --profile mps)",
    )
    p.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="output format (default %(default)s; e.g. --format csv)",
    )
    p.add_argument(
        "--resolution",
        choices=RESOLUTIONS,
        action="append",
        help="only operators with this resolution; repeatable (e.g. --resolution fallback)",
    )
    p.add_argument("--namespace", help="only operators of this namespace (e.g. --namespace aten)")
    p.set_defaults(handler=_handle)
    return p


def _handle(args: argparse.Namespace) -> int:
    import openreg_lab

    check_profile(args.profile)
    df = openreg_lab.coverage(profile=args.profile)
    if args.resolution:
        df = df[df["resolution"].isin(args.resolution)]
    if args.namespace:
        df = df[df["namespace"] == args.namespace]
    df = df.assign(
        resolution=df["resolution"].astype(str),
        kernel=df["kernel"].astype(str),
        tags=df["tags"].map(";".join),
    )
    if args.format == "csv":
        df.to_csv(sys.stdout, index=False, lineterminator="\n")
    elif args.format == "json":
        records = df.assign(tags=df["tags"].map(lambda t: t.split(";") if t else [])).to_dict("records")
        json.dump(records, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        rows = [
            [
                r.name,
                r.resolution,
                r.kernel,
                "yes" if r.has_autograd_kernel else "",
                "yes" if r.has_autocast_rule else "",
            ]
            for r in df.itertuples(index=False)
        ]
        headers = ["operator", "resolution", "kernel", "autograd", "autocast"]
        print(format_table(headers, rows, [False] * 5))
        counts = df["resolution"].value_counts()
        print(f"\n{len(df)} operators: " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    return 0
