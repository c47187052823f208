"""Traces that nest, run in several threads, fill up, or start while another thread dispatches."""

from __future__ import annotations

import threading

import pytest
import torch

import openreg_lab
from openreg_lab import _C


def op_names(t: openreg_lab.Trace, top_only: bool = True) -> list[str]:
    ev = t.events
    ev = ev[ev["kind"] == "op"]
    if top_only:
        ev = ev[ev["parent"] == -1]
    return ev["name"].tolist()


def well_formed(t: openreg_lab.Trace) -> None:
    ev = t.events
    ids = set(ev["id"])
    start = ev.set_index("id")["start_ns"]
    for row in ev.itertuples():
        if row.parent >= 0:
            assert row.parent in ids
            assert start[row.parent] <= row.start_ns
    assert (ev["dur_ns"] >= -1).all()


def test_switch_is_off_outside_traces():
    assert not _C._trace_enabled()
    with openreg_lab.trace():
        assert _C._trace_enabled()
    assert not _C._trace_enabled()


def test_nested_traces_each_see_their_window():
    x = torch.ones(4, device="openreg")
    with openreg_lab.trace() as outer:
        x.neg()
        with openreg_lab.trace() as inner:
            x.exp()
        x.sin()
    assert op_names(outer) == ["aten::neg", "aten::exp", "aten::sin"]
    assert op_names(inner) == ["aten::exp"]
    assert outer.dropped == inner.dropped == 0
    well_formed(outer)
    well_formed(inner)


def test_two_threads_tracing_at_once_see_both_threads():
    barrier = threading.Barrier(2)
    traces: dict[int, openreg_lab.Trace] = {}
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            x = torch.ones(n, device="openreg")
            with openreg_lab.trace() as t:
                barrier.wait()
                for _ in range(5):
                    x.add_(1)
                barrier.wait()
            traces[n] = t
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in (10, 20)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for t in traces.values():
        adds = t.events[(t.events["name"] == "aten::add_.Tensor") & (t.events["parent"] == -1)]
        # Both threads' five calls, recorded once each, in both traces.
        assert adds.groupby("thread").size().tolist() == [5, 5]
        well_formed(t)


def test_tracing_while_another_thread_dispatches():
    stop = threading.Event()
    calls = [0]

    def spin() -> None:
        x = torch.ones(64, device="openreg")
        while not stop.is_set():
            x.add_(1).mul_(0.5)
            calls[0] += 1

    th = threading.Thread(target=spin)
    th.start()
    try:
        seen = 0
        for _ in range(30):
            with openreg_lab.trace() as t:
                torch.ones(3, device="openreg").neg()
            well_formed(t)
            names = set(t.events.loc[t.events["kind"] == "op", "name"])
            assert "aten::neg" in names
            assert all(n.startswith("aten::") for n in names)
            seen += (t.events["thread"] != t.events["thread"].iloc[0]).any()
    finally:
        stop.set()
        th.join()
    assert calls[0] > 0


def test_a_full_trace_counts_what_it_dropped_and_warns():
    x = torch.ones(8, device="openreg")

    def work() -> None:
        for _ in range(20):
            x.add_(1)

    with openreg_lab.trace() as full:
        work()
    n = len(full)
    assert n >= 20
    with pytest.warns(openreg_lab.TraceDroppedEventsWarning, match=r"dropped \d+ events.*capacity="):
        with openreg_lab.trace(capacity=7) as t:
            work()
    assert len(t) == 7
    assert t.dropped == n - 7
    assert t.events["name"].tolist() == full.events["name"].tolist()[:7]
    well_formed(t)


def test_a_small_inner_trace_does_not_limit_the_outer_one():
    x = torch.ones(8, device="openreg")
    with openreg_lab.trace() as outer:
        with pytest.warns(openreg_lab.TraceDroppedEventsWarning):
            with openreg_lab.trace(capacity=2) as inner:
                for _ in range(10):
                    x.add_(1)
    assert outer.dropped == 0 and op_names(outer) == ["aten::add_.Tensor"] * 10
    assert len(inner) == 2 and inner.dropped == len(outer) - 2


def test_an_op_running_when_the_trace_ends_is_marked_unfinished():
    # An openreg kernel (written in Python) that ends the trace while it runs.
    lib = torch.library.Library("openreg_trace_test", "DEF")
    lib.define("end_trace(Tensor x) -> Tensor")
    holder: dict[str, openreg_lab.Trace] = {}

    def end_trace(x: torch.Tensor) -> torch.Tensor:
        holder["t"].__exit__(None, None, None)
        return x

    lib.impl("end_trace", end_trace, "PrivateUse1")
    x = torch.ones(8, device="openreg")
    t = openreg_lab.trace()
    holder["t"] = t.__enter__()
    x.neg()
    torch.ops.openreg_trace_test.end_trace(x)
    ops = t.events[t.events["kind"] == "op"]
    assert ops["name"].tolist()[-1] == "openreg_trace_test::end_trace"
    assert ops["dur_ns"].tolist()[-1] == -1  # unfinished, and says so
    assert (ops["dur_ns"].iloc[:-1] > 0).all()
    assert t.summary().set_index("name").loc["openreg_trace_test::end_trace", "total_ns"] == 0
    assert not _C._trace_enabled()
