"""The recorder and coverage profiles together: switches are marked, kernels are told apart, and
coverage() joins a real trace."""

from __future__ import annotations

import torch

import openreg_lab


def test_profile_switches_are_marks_and_change_what_runs():
    x, y = torch.randn(1000, device="openreg"), torch.randn(1000, device="openreg")
    with openreg_lab.trace() as t:
        x + y
        with openreg_lab.use_profile("minimal"):
            x + y
        x + y
    ev = t.events
    marks = ev[ev["kind"] == "mark"]["name"].tolist()
    assert marks == ["profile: minimal", "profile: none"]
    adds = ev[(ev["kind"] == "op") & (ev["name"] == "aten::add.Tensor")]
    # Under `minimal`, add.Tensor has no kernel of its own: its composite calls add.out, which falls back.
    assert adds["kernel"].tolist() == ["native", "composite", "native"]
    fb = ev[ev["kind"] == "fallback"]
    assert fb["name"].tolist() == ["aten::add.out"]
    copies = ev[ev["kind"] == "copy"]
    assert sorted(copies["name"]) == ["D2H", "D2H", "H2D"] and (copies["bytes"] == 4000).all()
    minimal_id, none_id = ev[ev["kind"] == "mark"]["id"]
    assert (minimal_id < fb["id"]).all() and (fb["id"] < none_id).all()


def test_generic_native_ops_run_without_copies_and_are_marked_generic():
    x = torch.randn(1000, device="openreg")
    with openreg_lab.use_profile("cpu"), openreg_lab.trace() as t:
        y = torch.logcumsumexp(x, 0)
    torch.testing.assert_close(y.cpu(), torch.logcumsumexp(x.cpu(), 0))
    ev = t.events
    assert (ev["kind"] != "copy").all() and (ev["kind"] != "fallback").all()
    # The CPU's own _logcumsumexp kernel ran on device memory under its composite: one generic op,
    # its result allocated on openreg.
    assert ev.loc[ev["kind"] == "op", ["name", "kernel"]].values.tolist() == [
        ["aten::logcumsumexp", "composite"],
        ["aten::_logcumsumexp", "generic"],
    ]
    assert ev.loc[ev["kind"] == "alloc", ["bytes", "device"]].values.tolist() == [[4000, "openreg:0"]]


def test_coverage_joins_a_real_trace():
    x = torch.randn(100, device="openreg")
    with openreg_lab.trace() as t:
        for _ in range(3):
            x + x
        torch.logcumsumexp(x, 0)
    cov = openreg_lab.coverage(trace=t).set_index("name")
    assert cov.loc["aten::add.Tensor", "hits"] == 3
    assert cov.loc["aten::_logcumsumexp", "hits"] == 1
    assert cov.loc["aten::_logcumsumexp", "resolution"] == "fallback"
    assert cov.loc["aten::_logcumsumexp", "time_ns"] > 0
    assert cov.loc["aten::mm", "hits"] == 0
    ranked = t.fallbacks()
    assert ranked["name"].tolist() == ["aten::_logcumsumexp"]
