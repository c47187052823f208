"""The Perfetto export at scale: a trace of N events (3M by default) recorded
through the real recorder (a loop of tiny in-place ops on openreg, ``ops="kernels"``: each call
is one op event), exported by each candidate, side by side in one run:

* ``json``: the Chrome Trace Event JSON (``chrome.py``), as before;
* ``json.gz``: the same JSON, gzip-compressed (level 1) as it is written;
* ``perfetto builder``: the ``perfetto`` package's ``TraceProtoBuilder``, one protobuf message per
  packet (slice begin and end, with the same arguments), on a sample of the events;
* ``pftrace (ours)``: ``perfetto.py``: the packets prepared in columns with numpy from the
  recorder's columns, their bytes written by ``csrc/trace/PerfettoWriter.cpp``; the full-size row
  is ``Trace.export_chrome_trace("t.pftrace")`` itself (host slices included).

The JSON candidates and the builder run on ``--sample`` events (they take about a minute a million);
their full-size figures are extrapolated linearly, and marked so (``--json-full`` also writes the
JSON of every event, measuring its peak memory in a fresh process). Each row gives seconds of wall
and CPU time, bytes on disk and the ratio to ours per event; on a shared machine CPU time is what
the export takes on an idle core (the load average is printed).

.venv/bin/python benchmarks/bench_export.py [--events 3000000] [--sample 300000] [--json-full]
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import print_table

import openreg_lab
from openreg_lab.recording import chrome, perfetto
from openreg_lab.recording.events import Columns


def record(n: int) -> openreg_lab.Trace:
    """A trace of about ``n`` op events: tiny in-place adds on openreg (one op event per call)."""
    x = torch.ones(4, device="openreg")
    with openreg_lab.trace(ops="kernels", capacity=n + 1000) as t:
        for _ in range(n):
            x.add_(1)
    return t


def builder(path: str, ev: pd.DataFrame) -> None:
    """The perfetto package's TraceProtoBuilder: the same packets, one message each."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    b = TraceProtoBuilder()
    interned = b.add_packet()
    interned.trusted_packet_sequence_id = 1
    interned.sequence_flags = 3
    names: dict[str, int] = {}
    for row in ev.itertuples(index=False):
        iid = names.setdefault(row.name, len(names) + 1)
        begin = b.add_packet()
        begin.timestamp = int(row.start_ns)
        begin.trusted_packet_sequence_id = 1
        begin.sequence_flags = 2
        begin.track_event.type = TrackEvent.TYPE_SLICE_BEGIN
        begin.track_event.track_uuid = 1024 + int(row.thread)
        begin.track_event.name_iid = iid
        for key, value in (("id", row.id), ("parent", row.parent)):
            a = begin.track_event.debug_annotations.add()
            a.name = key
            a.int_value = int(value)
        if isinstance(row.kernel, str):
            a = begin.track_event.debug_annotations.add()
            a.name = "kernel"
            a.string_value = row.kernel
        end = b.add_packet()
        end.timestamp = int(row.start_ns + max(row.dur_ns, 0))
        end.trusted_packet_sequence_id = 1
        end.sequence_flags = 2
        end.track_event.type = TrackEvent.TYPE_SLICE_END
        end.track_event.track_uuid = 1024 + int(row.thread)
    for name, iid in names.items():
        e = interned.interned_data.event_names.add()
        e.iid, e.name = iid, name
    Path(path).write_bytes(b.serialize())


def head(c: Columns, n: int) -> Columns:
    """The first ``n`` events of ``c`` (rows are in start order: a parent's row is below its children's)."""
    return Columns({k: v[:n] for k, v in c.fields.items()}, c.pool, c.strings, c.threads)


# A fresh process writes the Chrome JSON of every event of a saved trace: wall, CPU, peak RSS.
_JSON_FULL = """
import resource, sys, time, openreg_lab
t = openreg_lab.load_trace(sys.argv[1])
ev = t.events
w, c = time.perf_counter(), time.process_time()
t.export_chrome_trace(sys.argv[2])
print(time.perf_counter() - w, time.process_time() - c, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def json_gz(path: str, ev: pd.DataFrame, threads: dict[int, int]) -> None:
    plain = path + ".tmp.json"
    chrome.write(plain, ev, threads)
    with open(plain, "rb") as src, gzip.open(path, "wb", compresslevel=1) as dst:
        while chunk := src.read(1 << 22):
            dst.write(chunk)
    os.unlink(plain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--sample", type=int, default=300_000)
    parser.add_argument("--json-full", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    t = record(args.events)
    ev, threads = t.events, t.columns.threads
    print(f"recorded {len(ev):,} events in {time.perf_counter() - start:.1f} s")
    sample = ev.head(args.sample)
    small = head(t.columns, args.sample)
    candidates = [
        ("json", len(sample), lambda p: chrome.write(p, sample, threads)),
        ("json.gz", len(sample), lambda p: json_gz(p, sample, threads)),
        ("perfetto builder", len(sample), lambda p: builder(p, sample)),
        ("pftrace (ours)", len(sample), lambda p: perfetto.write(p, small, t._t0)),
        ("pftrace (ours)", len(ev), lambda p: t.export_chrome_trace(p + ".pftrace")),
    ]
    rows, per_event = [], {}
    with tempfile.TemporaryDirectory() as d:
        for name, n, write in candidates:
            path = os.path.join(d, "out")
            wall, cpu = time.perf_counter(), time.process_time()
            write(path)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if not os.path.exists(path):
                path += ".pftrace"
            size = os.path.getsize(path)
            os.unlink(path)
            per_event.setdefault(name, (cpu / n, size / n))
            rows.append((name, n, wall, cpu, size))
        if args.json_full:
            saved, out = os.path.join(d, "t.trace"), os.path.join(d, "t.json")
            t.save(saved)
            proc = subprocess.run(
                [sys.executable, "-c", _JSON_FULL, saved, out], capture_output=True, text=True
            )
            if proc.returncode:
                raise SystemExit(proc.stderr[-3000:])
            wall, cpu, rss = (float(v) for v in proc.stdout.split()[-3:])
            rows.append(("json (fresh process)", len(ev), wall, cpu, os.path.getsize(out)))
            print(f"json of {len(ev):,} events: peak RSS {rss / 2**20:.2f} GB (the process, trace loaded)")
        ours_s, ours_b = per_event["pftrace (ours)"]
        table = []
        for name, n, wall, cpu, size in rows:
            s_ev, b_ev = cpu / n, size / n
            full_s, full_b = s_ev * len(ev), b_ev * len(ev)
            measured = n == len(ev)
            table.append(
                (
                    name,
                    f"{n:,}",
                    f"{wall:.2f} s",
                    f"{cpu:.2f} s",
                    f"{size / 1e6:.1f} MB",
                    f"{full_s:.1f} s" + ("" if measured else " (extrapolated)"),
                    f"{full_b / 1e6:.0f} MB" + ("" if measured else " (extrapolated)"),
                    f"{s_ev / ours_s:.1f}x",
                    f"{b_ev / ours_b:.2f}x",
                )
            )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print_table(
        ["export", "events", "wall", "CPU", "size", f"CPU for {len(ev):,}", f"size for {len(ev):,}",
         "CPU/event vs ours", "bytes/event vs ours"],
        table,
    )  # fmt: skip


if __name__ == "__main__":
    main()
