"""openreg_lab.mark(): user marks in a trace, drawn as vertical lines on the timeline."""

import json

import pytest
import torch

import openreg_lab


def test_marks_are_recorded_in_order_with_their_names():
    x = torch.ones(4, device="openreg")
    with openreg_lab.trace() as t:
        for step in range(3):
            openreg_lab.mark(f"step {step}")
            x = x + 1
    ev = t.events
    marks = ev[ev["kind"] == "mark"]
    assert marks["name"].tolist() == ["step 0", "step 1", "step 2"]
    ops = ev[(ev["kind"] == "op") & (ev["parent"] == -1)]
    assert ops["name"].tolist() == ["aten::add.Tensor"] * 3
    # Each mark comes before the add of its step and after the previous one.
    assert (marks["start_ns"].to_numpy() <= ops["start_ns"].to_numpy()).all()
    assert (marks["start_ns"].to_numpy()[1:] >= ops["start_ns"].to_numpy()[:-1]).all()


def test_a_mark_outside_a_trace_records_nothing_and_bad_names_are_refused():
    openreg_lab.mark("nobody listens")
    with openreg_lab.trace() as t:
        pass
    assert len(t) == 0
    with pytest.raises(TypeError, match=r"mark\(name\) takes a string"):
        openreg_lab.mark(3)  # type: ignore[arg-type]


def test_the_chrome_export_colours_events_with_the_theme(tmp_path):
    x = torch.randn(8, device="openreg")
    with openreg_lab.trace() as t:
        torch.logcumsumexp(x, 0)  # falls back: an op, a fallback, copies
        x + x  # native
    path = tmp_path / "t.json"
    t.export_chrome_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    cname = {(e["cat"], e["name"]): e.get("cname") for e in events if e.get("ph") == "X"}
    assert cname[("op", "aten::add.Tensor")] == "good"
    assert cname[("fallback", "aten::_logcumsumexp")] == "terrible"
    assert cname[("copy", "D2H")] == "bad" and cname[("copy", "H2D")] == "yellow"
