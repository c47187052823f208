"""Run the full OpInfo parity sweep and print the pass rate and the failures grouped by cause.

.venv/bin/python scripts/opinfo_report.py [--json reports/opinfo.json] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import json
import re
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.opinfo_parity import Mismatch, all_cases, check


def _cause(err: BaseException) -> str:
    if isinstance(err, Mismatch):
        return f"mismatch ({err.cause})"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    first = re.sub(r"\d+", "N", first)[:110]
    return f"{type(err).__name__}: {first}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, help="also write every result to this file")
    parser.add_argument("--only", nargs="*", help="OpInfo ids to run (default: all)")
    parser.add_argument("--progress", action="store_true", help="print each OpInfo id before running it")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    faulthandler.enable()
    cases = [c for c in all_cases() if not args.only or c.id in args.only]
    results: dict[str, str] = {}
    start = time.perf_counter()
    for case in cases:
        if args.progress:
            print("running", case.id, file=sys.stderr, flush=True)
        try:
            n = check(case)
            results[case.id] = "pass" if n else "no sample"
        except Exception as err:  # every failure is reported, none stops the sweep
            results[case.id] = _cause(err)
    elapsed = time.perf_counter() - start
    passed = sum(r == "pass" for r in results.values())
    empty = sum(r == "no sample" for r in results.values())
    checked = len(results) - empty
    print(
        f"OpInfo float32 parity: {passed}/{checked} pass ({100 * passed / max(checked, 1):.1f}%), "
        f"{empty} without a usable sample, {elapsed:.0f} s"
    )
    by_cause = collections.defaultdict(list)
    for name, r in results.items():
        if r not in ("pass", "no sample"):
            by_cause[r].append(name)
    for cause, names in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(names):4d}  {cause}\n      {', '.join(sorted(names))}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
