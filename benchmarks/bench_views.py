"""What the views cost at scale: the verdict, building the dashboard, its payload to the browser,
the static text/html and the HTML report, for traces of about 10k, 100k and 1M events.

The traces are a real traced training step (tests/support/views_data.py) repeated to size, so the mix of
ops, copies, casts and allocations is a real one; the verdict reads the step's host samples repeated
alike (its wall-time accounting, Note [Accounting a window of a big trace]). Build times are medians of
a few runs (the first plotly FigureWidget import is paid once before timing); sizes are bytes.

Then the dashboard of a trace of ``--dashboard-ops`` ops (1M: 1.68M events), built ``--runs`` times:
the median CPU and wall seconds; with ``--host``, as ``Trace.show()`` builds it for a trace with host
samples (the step's samples repeated alike, their slices drawn after the events). ``--against DIR``
measures another checkout (its extension built) side by side: ``--rounds`` rounds, each a fresh
process of this tree then one of DIR, and the ratio of their median CPU seconds (CPU time, as the
machine may be busy with other work).

.venv/bin/python benchmarks/bench_views.py [--sizes 10000,100000,1000000] [--dashboard-ops 1000000]
    [--runs 3] [--host] [--against ../other-checkout --rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The tree measured (--against runs this file with another checkout's): its package and the traces
# its views' tests use (tests.support.views_data).
TREE = Path(os.environ.get("OPENREG_BENCH_TREE", ROOT))
sys.path.insert(0, str(TREE))

from _timing import print_table  # noqa: E402

from openreg_lab.recording import host as _host  # noqa: E402
from openreg_lab.recording import host_fold  # noqa: E402
from openreg_lab.recording.lod import Pyramid  # noqa: E402
from openreg_lab.recording.verdict import verdict  # noqa: E402
from openreg_lab.views import static  # noqa: E402
from openreg_lab.views.dashboard import Dashboard  # noqa: E402
from openreg_lab.views.report import report_html  # noqa: E402
from openreg_lab.views.timeline import payload_size  # noqa: E402
from tests.support.views_data import tile, tile_samples, tile_span, training_trace  # noqa: E402


def _median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def dashboard_builds(ops: int, runs: int, host: bool = False) -> dict[str, Any]:
    """Build the dashboard of a trace of about ``ops`` ops ``runs`` times: events, ops, host slices
    drawn (with ``host``, as ``Trace.show()`` draws a sampled trace's), and the CPU and wall seconds
    of each build."""
    traced = training_trace()
    base = traced.events
    copies = max(1, round(ops / int((base["kind"] == "op").sum())))
    events = tile(base, copies)
    slices = None
    if host:
        assert traced.host_samples is not None
        samples = tile_samples(traced.host_samples, copies, tile_span(base))
        slices = _host.slices(host_fold.fold(samples).samples, traced._t0, traced._thread_index())
    Dashboard(base, host=traced.host_events if host else None)  # pays the one-time imports
    cpu, wall = [], []
    for _ in range(runs):
        c, w = time.process_time(), time.perf_counter()
        Dashboard(events, host=slices)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    n_ops = int((events["kind"] == "op").sum())
    return {"events": len(events), "ops": n_ops, "host": len(slices) if host else 0, "cpu": cpu, "wall": wall}


def _in_fresh_process(tree: Path, ops: int, runs: int, host: bool) -> dict[str, Any]:
    env = {**os.environ, "OPENREG_BENCH_TREE": str(tree), "PYTHONPATH": str(tree)}
    args = [
        sys.executable,
        __file__,
        "--sizes",
        "",
        "--dashboard-ops",
        str(ops),
        "--runs",
        str(runs),
        "--json",
        *(["--host"] if host else []),
    ]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode:
        raise SystemExit(f"the build in {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def dashboard_row(ops: int, runs: int, against: str | None, rounds: int, host: bool = False) -> None:
    """Print the dashboard build of a ``ops``-op trace (this tree, and ``against`` side by side)."""
    if against is None:
        got = dashboard_builds(ops, runs, host)
        cpu, wall = statistics.median(got["cpu"]), statistics.median(got["wall"])
        header = ["events", "ops", "host slices", "dashboard build (CPU)", "(wall)", "load average"]
        row = [
            f"{got['events']:,}",
            f"{got['ops']:,}",
            f"{got['host']:,}",
            f"{cpu:.2f} s",
            f"{wall:.2f} s",
            _load(),
        ]
        print_table(header, [row])
        return
    sides: dict[str, list[float]] = {"this tree": [], "against": []}
    for _ in range(rounds):
        for side, tree in (("this tree", TREE), ("against", Path(against).resolve())):
            got = _in_fresh_process(tree, ops, runs, host)
            sides[side].append(statistics.median(got["cpu"]))
    mine, theirs = (statistics.median(v) for v in sides.values())
    header = ["events", "ops", "host slices", "this tree (CPU)", f"{against} (CPU)", "ratio", "load average"]
    row = [
        f"{got['events']:,}",
        f"{got['ops']:,}",
        f"{got.get('host', 0):,}",
        f"{mine:.2f} s",
        f"{theirs:.2f} s",
        f"{mine / theirs:.2f}x",
        _load(),
    ]
    print_table(header, [row])


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    """Print one row per trace size, then the dashboard of a big trace."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--dashboard-ops", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--host", action="store_true", help="draw host slices, as Trace.show() does")
    parser.add_argument("--json", action="store_true", help="print the builds as JSON (--against uses it)")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(dashboard_builds(args.dashboard_ops, args.runs, args.host)))
        return
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if sizes:
        sizes_table(sizes)
    if args.dashboard_ops:
        dashboard_row(args.dashboard_ops, args.runs, args.against, args.rounds, args.host)


def sizes_table(sizes: list[int]) -> None:
    """Print one row per trace size."""
    traced = training_trace()
    base, samples = traced.events, traced.host_samples
    assert samples is not None
    threads = traced._thread_index()
    Dashboard(base)  # pays the one-time imports (plotly's FigureWidget, anywidget)
    rows = []
    for target in sizes:
        copies = max(1, round(target / len(base)))
        events = tile(base, copies)
        host = tile_samples(samples, copies, tile_span(base))
        runs = 3 if len(events) <= 200_000 else 1
        verdict_s = _median_time(
            lambda ev=events, s=host: verdict(
                ev, samples=s, t0=traced._t0, host_sampling=True, thread_index=threads
            ),
            3,
        )
        build = _median_time(lambda ev=events: Dashboard(ev), runs)
        pyramid_s = _median_time(lambda ev=events: Pyramid(ev), runs)
        d = Dashboard(events)
        timeline = payload_size(d.timeline.data)
        table = len(json.dumps(d.table.rows))
        figure = len(d.figure.to_json())
        html = len(static.dashboard_html(events))
        start = time.perf_counter()
        report = len(report_html(events).encode())
        report_s = time.perf_counter() - start
        rows.append(
            [
                f"{len(events):,}",
                f"{verdict_s:.2f} s",
                f"{build:.2f} s",
                f"{pyramid_s:.2f} s",
                f"{timeline / 1e3:.0f} kB",
                f"{len(d.timeline.data['count'].tobytes()) // 4:,}",
                f"{table / 1e3:.1f} kB",
                f"{figure / 1e3:.0f} kB",
                f"{html / 1e3:.0f} kB",
                f"{report / 1e6:.2f} MB",
                f"{report_s:.2f} s",
            ]
        )
    print_table(
        [
            "events",
            "verdict",
            "dashboard build",
            "of which LOD",
            "timeline payload",
            "items drawn",
            "table page",
            "chart json",
            "text/html",
            "report",
            "report build",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
