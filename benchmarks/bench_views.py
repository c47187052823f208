"""What the views cost at scale: the verdict, building the dashboard, its payload to the browser,
the static text/html and the HTML report, for traces of about 10k, 100k and 1M events.

The traces are a real traced training step (tests/support/views_data.py) repeated to size, so the mix of
ops, copies, casts and allocations is a real one; the verdict reads the step's host samples repeated
alike (its wall-time accounting, Note [Accounting a window of a big trace]). Build times are medians of
a few runs (the first plotly FigureWidget import is paid once before timing); sizes are bytes.

.venv/bin/python benchmarks/bench_views.py [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the traces the views' tests use (tests.support.views_data)

from _timing import print_table  # noqa: E402

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


def main() -> None:
    """Print one row per trace size."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
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
