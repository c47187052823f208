"""Hostile inputs to the recording layer: strict Chrome JSON, still-running events, damaged trace
files, abandoned and misused traces, nested tensors with shapes on. Each was a bug."""

from __future__ import annotations

import gc
import json
import math
import warnings

import numpy as np
import pytest
import torch

import openreg_lab
from openreg_lab import _C
from openreg_lab.recording import analysis
from openreg_lab.recording.session import events_so_far


def _rich_trace():
    x = torch.randn(16, 8, device="openreg", requires_grad=True)
    with openreg_lab.trace(record_shapes=True) as t:
        with torch.autocast("openreg", dtype=torch.bfloat16):
            y = torch.nn.functional.linear(x, torch.randn(4, 8, device="openreg"))
        torch.logcumsumexp(y.detach().float(), 0)  # a fallback: copies both ways
        y.float().sum().backward()
    return t


def test_the_chrome_export_is_strict_json(tmp_path):
    t = _rich_trace()
    kinds = set(t.events["kind"])
    assert {"copy", "cast", "backward", "fallback"} <= kinds
    path = tmp_path / "t.json"
    t.export_chrome_trace(path)

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the Chrome trace")

    doc = json.loads(path.read_text(), parse_constant=refuse)
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    events = int(t.events["kind"].isin(["op", "backward", "fallback", "copy", "cast"]).sum())
    assert len(complete) == events + len(t.host_events)  # the host slices on their Python lanes
    for e in complete:
        assert math.isfinite(e["ts"]) and e["dur"] >= 0 and isinstance(e["name"], str)
        assert all(v is not None for v in e["args"].values())


def test_still_running_events_never_count_negative_time():
    events = _rich_trace().events.copy()
    fb = events["kind"] == "fallback"
    events.loc[fb, "dur_ns"] = -1  # as when a trace ends inside a fallback
    out = analysis.fallbacks(events)
    for col in ("total_ns", "cpu_ns", "copy_to_cpu_ns", "copy_back_ns", "op_ns"):
        assert (out[col] >= 0).all(), col


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda a, h: h.update(strings=h["strings"][:1]), "points past its string table"),
        (lambda a, h: h.pop("strings"), "lacks 'strings'"),
        (lambda a, h: a["f_kind"].__setitem__(0, 42), "unknown kind"),
        (lambda a, h: a["f_parent"].__setitem__(3, 10**6), "parent is not an event"),
        (
            lambda a, h: a["f_shapes"].__setitem__(int(np.flatnonzero(a["f_shapes"] >= 0)[0]), 10**7),
            "shapes offset",
        ),
        (lambda a, h: a.__setitem__("pool", a["pool"][:2]), "shapes"),
        (lambda a, h: a.pop("f_name"), "lacks the columns name"),
        (lambda a, h: a.__setitem__("f_id", a["f_id"][::-1].copy()), "ids are not"),
    ],
)
def test_every_damaged_file_gets_our_value_error(tmp_path, damage, message):
    path = tmp_path / "t.trace"
    _rich_trace().save(path)
    with np.load(path) as data:
        arrays = {k: data[k].copy() for k in data.files}
    header = json.loads(bytes(arrays["header"]).decode("utf-8", "surrogatepass"))  # Note [Header text]
    damage(arrays, header)
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    bad = tmp_path / "bad.trace"
    with open(bad, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ValueError, match=message):
        openreg_lab.load_trace(bad).events  # noqa: B018  (reading the events is part of loading)


def test_an_abandoned_trace_is_closed_and_warned_about():
    t = openreg_lab.trace()
    t.__enter__()
    torch.ones(2, device="openreg") + 1
    assert _C._trace_enabled() and events_so_far() > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del t
        gc.collect()
    assert any(
        issubclass(w.category, ResourceWarning) and "still recording" in str(w.message) for w in caught
    )
    assert not _C._trace_enabled() and events_so_far() == 0
    with openreg_lab.trace() as again:
        torch.ones(2, device="openreg") + 1
    assert len(again) > 0


def test_misused_traces_say_what_is_wrong():
    t = openreg_lab.trace()
    assert "not started" in repr(t)
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        t.__exit__(None, None, None)
    with t:
        pass
    with pytest.raises(RuntimeError, match="without a matching __enter__"):
        t.__exit__(None, None, None)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_tensors_keep_their_op_events_with_shapes_on():
    a, b = torch.randn(2, 3, device="openreg"), torch.randn(4, 3, device="openreg")
    with openreg_lab.trace(record_shapes=True) as t:
        nt = torch.nested.nested_tensor([a, b])
        doubled = nt * 2  # through the nested fallback (csrc/aten/fallback/LayoutFallback.cpp)
    assert torch.equal(doubled.unbind()[1].cpu(), b.cpu() * 2)
    ev = t.events
    assert t.dropped == 0
    mul = ev[(ev["kind"] == "op") & (ev["name"] == "aten::mul.Tensor")]
    assert len(mul) == 1
    assert mul["shapes"].iloc[0][0] == [-1, -1, -1]  # a nested tensor has no single size per dim


@pytest.mark.parametrize(
    ("capacity", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (2**63, ValueError),
        (2**64, ValueError),
        (1.5, TypeError),
        ("10", TypeError),
        (True, TypeError),
        (None, TypeError),
    ],
)
def test_trace_capacity_out_of_range_names_the_valid_range(capacity, error):
    with pytest.raises(
        error, match=r"trace\(capacity=...\) must be a positive number of events up to 2\*\*63 - 1"
    ):
        openreg_lab.trace(capacity=capacity)


def test_the_largest_capacity_records():
    with openreg_lab.trace(capacity=2**63 - 1) as t:
        torch.ones(2, device="openreg") + 1
    assert t.capacity == 2**63 - 1 and t.dropped == 0 and len(t) > 0
