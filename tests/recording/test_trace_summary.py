"""The one per-op aggregate (``Trace.summary()``): self time, the device column, and every view,
the report and the command line showing that same table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import openreg_lab
from openreg_lab.recording import analysis


def _check_self_time(events: pd.DataFrame) -> None:
    """Every op's self time is >= 0 and, with its child ops' total, makes its own total."""
    ops = events[events["kind"] == "op"]
    self_ns = pd.Series(analysis.self_time(events), index=events.index)[ops.index]
    assert (self_ns >= 0).all()
    owner = pd.Series(analysis.nearest_op(events), index=events.index)[ops.index]
    dur = ops["dur_ns"].clip(lower=0)
    children = dur.groupby(owner.to_numpy()).sum()
    for i, op in ops.iterrows():
        assert self_ns[i] + int(children.get(op["id"], 0)) == op["dur_ns"], op["name"]


@pytest.fixture(scope="module")
def autocast_trace() -> openreg_lab.Trace:
    m = torch.nn.Linear(64, 64).to("openreg")
    x = torch.randn(32, 64, device="openreg")
    with openreg_lab.trace() as t:
        for _ in range(5):
            with torch.autocast("openreg", dtype=torch.bfloat16):
                m(x)
    return t


def test_self_time_under_autocast_is_not_negative(autocast_trace):
    # The repro: a cast event and the aten::to op that made it overlap under aten::linear.
    events = autocast_trace.events
    casts = events[events["kind"] == "cast"]
    assert len(casts) == 15  # input, weight, bias of 5 calls
    _check_self_time(events)
    s = autocast_trace.summary().set_index("name")
    assert s.loc["aten::linear", "calls"] == 5
    assert 0 <= s.loc["aten::linear", "self_ns"] <= s.loc["aten::linear", "total_ns"]
    assert (s["self_ns"] >= 0).all()
    # The ops the summary counts are exactly the trace's op events, and its self times add up
    # to the top-level ops' total time.
    ops = events[events["kind"] == "op"]
    assert int(s["calls"].sum()) == len(ops)
    top = ops[analysis.nearest_op(events)[ops.index] < 0]
    assert int(s["self_ns"].sum()) == int(top["dur_ns"].sum())


def test_self_time_of_nested_and_fallback_calls():
    x = torch.randn(64, 64, device="openreg")
    w = torch.randn(64, 64, device="openreg")
    with openreg_lab.trace() as t:
        torch.nn.functional.linear(x, w)  # composite -> t, mm
        torch.logcumsumexp(x, 0)  # composite -> cumsum.out, which falls back (copies under the fallback)
    events = t.events
    _check_self_time(events)
    s = t.summary().set_index("name")
    assert s.loc["aten::_logcumsumexp", "fallback"] == 1
    # The fallback's copies and CPU time are the fallen-back op's own time.
    fb = events[events["kind"] == "fallback"].iloc[0]
    assert s.loc["aten::_logcumsumexp", "self_ns"] >= fb["dur_ns"]
    assert s.loc["aten::_logcumsumexp", "bytes_copied"] == 2 * 64 * 64 * 4


def test_self_time_of_a_backward_pass():
    x = torch.randn(16, 16, device="openreg", requires_grad=True)
    with openreg_lab.trace() as t:
        (x.softmax(-1) * 2).sum().backward()
    assert (t.events["kind"] == "backward").any()
    _check_self_time(t.events)


def test_an_op_still_running_has_no_negative_self_time():
    # Events as the recorder hands over a trace closed inside an op: the op has no duration yet
    # (-1) but its first child finished.
    events = pd.DataFrame(
        {
            "id": [0, 1],
            "parent": [-1, 0],
            "kind": ["op", "op"],
            "dur_ns": [-1, 500],
        }
    )
    assert analysis.self_time(events).tolist() == [0, 500]


def test_the_summary_has_one_row_per_op_and_device():
    a = torch.randn(100, device="openreg:0")
    b = torch.randn(100, device="openreg:1")
    with openreg_lab.trace() as t:
        a + a
        b + b
        b + b
    s = t.summary()
    assert list(s.columns) == analysis.SUMMARY_COLUMNS
    add = s[s["name"] == "aten::add.Tensor"].set_index("device")
    assert add["calls"].to_dict() == {"openreg:0": 1, "openreg:1": 2}
    assert set(add["kernel"]) == {"native"} and set(add["native"]) == {1, 2}
    assert set(add["path"]) == {"AutogradPrivateUse1 > PrivateUse1"}


def test_the_dashboard_and_its_static_html_show_the_summary(autocast_trace):
    from openreg_lab.views import static
    from openreg_lab.views.dashboard import Dashboard

    summary = autocast_trace.summary()
    dash = Dashboard(autocast_trace.events)
    pd.testing.assert_frame_equal(dash.ops, summary)
    html = static.dashboard_html(autocast_trace.events)
    linear = summary.set_index("name").loc["aten::linear"]
    from openreg_lab import theme

    assert f"<td style='{static._TD}'>{theme.format_ns(linear['self_ns'])}</td>" in html
    assert np.int64(linear["self_ns"]) >= 0
