"""Opening and closing a trace costs its own window: the shapes pool, the interned strings and the
threads handed over are those of the events recorded while it was open, not of the whole recording."""

from __future__ import annotations

import threading

import numpy as np
import torch

import openreg_lab
from openreg_lab import _C
from openreg_lab.recording import session


def _pool(raw: dict) -> list[int]:
    [thread] = [t for t in raw["threads"] if len(t["events"])]
    return np.frombuffer(thread["pool"], dtype=np.int64).tolist()


def test_an_inner_trace_hands_over_only_its_own_shapes():
    x = torch.ones(4, 3, device="openreg")
    alone = _C._trace_open(1000, True, False, [])
    x.mul_(2)
    expected = _pool(_C._trace_close(alone))
    assert expected[0] >= 1 and expected[2:5] == [2, 4, 3]  # [count, dtype, ndim, sizes...]
    with openreg_lab.trace(record_shapes=True) as outer:
        for _ in range(50):
            x.add_(1)
        inner = _C._trace_open(1000, True, False, [])
        x.mul_(2)
        raw = _C._trace_close(inner)
    assert _pool(raw) == expected  # nothing of the outer trace's 50 ops
    ops = outer.events[(outer.events["kind"] == "op") & (outer.events["parent"] == -1)]
    assert ops["name"].tolist()[:50] == ["aten::add_.Tensor"] * 50
    assert [s[0] for s in ops["shapes"]] == [[4, 3]] * 51


def test_nested_traces_read_their_shapes_after_the_outer_recorded_more():
    x = torch.ones(2, device="openreg")
    y = torch.ones(5, 7, device="openreg")
    with openreg_lab.trace(record_shapes=True) as outer:
        x.neg()
        with openreg_lab.trace(record_shapes=True) as inner:
            y.exp()
        x.sin()
    top_inner = inner.events[(inner.events["kind"] == "op") & (inner.events["parent"] == -1)]
    assert top_inner["shapes"].tolist() == [[[5, 7]]]
    top = outer.events[(outer.events["kind"] == "op") & (outer.events["parent"] == -1)]
    assert top["shapes"].tolist() == [[[2]], [[5, 7]], [[2]]]
    assert top["dtypes"].tolist() == [["float32"]] * 3


def test_closing_a_trace_fetches_only_the_strings_interned_since_the_last(monkeypatch):
    x = torch.ones(3, device="openreg")
    with openreg_lab.trace():
        x.cos()
    asked: list[tuple[int, int]] = []
    fetch = _C._trace_strings

    def counting(first: int = 0) -> list[str]:
        got = fetch(first)
        asked.append((first, len(got)))
        return got

    monkeypatch.setattr(_C, "_trace_strings", counting)
    known = len(fetch())
    with openreg_lab.trace() as again:
        x.cos()
    assert asked == [(known, 0)]  # nothing new to hand over: nothing copied
    with openreg_lab.trace() as fresh:
        openreg_lab.mark("a mark no trace has seen before: test_trace_window")
    assert asked[1] == (known, 1)
    assert again.events["name"].tolist()[0] == "aten::cos"
    assert fresh.events["name"].tolist() == ["a mark no trace has seen before: test_trace_window"]
    assert list(fresh.columns.strings) == fetch()[: len(fresh.columns.strings)]
    assert len(session._strings) == len(fetch())


def test_a_thread_running_only_cpu_ops_does_not_join_the_recording():
    x = torch.ones(3, device="openreg")
    done = threading.Event()

    def cpu_only() -> None:
        torch.ones(3).add(1).sum()
        done.set()

    with openreg_lab.trace() as t:
        x.exp()
        worker = threading.Thread(target=cpu_only)
        worker.start()
        worker.join()
    assert done.is_set()
    assert list(t.columns.threads) == [0]  # the CPU ops' ends took no lock, registered no buffer
    assert (t.events["thread"] == 0).all()
    assert t.events.loc[t.events["kind"] == "op", "name"].tolist()[0] == "aten::exp"
