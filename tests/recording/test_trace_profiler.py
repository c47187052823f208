"""openreg in PyTorch's own profiler: the Kineto plugin and the legacy PrivateUse1 stubs."""

from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerActivity, profile

import openreg_lab
from openreg_lab import _C


def test_torch_profiler_trace_has_an_openreg_process_with_our_events(tmp_path):
    x = torch.randn(1000, device="openreg")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
        y = x + x
        torch.logcumsumexp(y, 0)
    assert not _C._trace_enabled()
    path = tmp_path / "profile.json"
    p.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    ours = [e for e in events if e.get("cat") == "privateuse1_runtime"]
    pids = {e["pid"] for e in ours}
    assert len(pids) == 1
    process = [e for e in events if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] in pids]
    assert process[0]["args"]["name"] == "openreg"

    add = next(e for e in ours if e["name"] == "aten::add.Tensor")
    assert add["args"] == {"kind": "op", "kernel": "native", "dispatch": "AutogradPrivateUse1 > PrivateUse1"}
    fallback = next(e for e in ours if e["args"]["kind"] == "fallback")
    assert fallback["name"] == "aten::_logcumsumexp"
    copies = sorted((e["name"], e["args"]["bytes"]) for e in ours if e["args"]["kind"] == "copy")
    assert copies == [("D2H", "4000"), ("H2D", "4000")]

    # On the same clock as torch's CPU ops: our add and the profiler's aten::add overlap in time
    # (each side's interval also holds the other's callback overhead, so neither contains the other).
    cpu_add = next(e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::add")
    assert max(add["ts"], cpu_add["ts"]) < min(add["ts"] + add["dur"], cpu_add["ts"] + cpu_add["dur"])


def test_legacy_profiler_reports_openreg_device_time():
    x = torch.randn(1000, device="openreg")
    with torch.autograd.profiler.profile(use_device="openreg", use_kineto=False) as p:
        x + x
    rows = {e.key: e for e in p.key_averages()}
    assert rows["aten::add"].self_device_time_total > 0


def test_generic_kernels_and_steps_have_their_names_in_the_kineto_trace(tmp_path):
    # The exporter names kernels and kinds from tables: "generic" (kernel 4) and "step" (kind 11)
    # were past their end before.
    x = torch.randn(8, device="openreg")
    ops = sorted({*openreg_lab.profile_ops("default"), "aten::_logcumsumexp"})
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
        with openreg_lab.use_profile(ops):
            torch.logcumsumexp(x, 0)
        openreg_lab.step()
    path = tmp_path / "profile.json"
    p.export_chrome_trace(str(path))
    ours = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "privateuse1_runtime"]
    row = next(e for e in ours if e["name"] == "aten::_logcumsumexp")
    assert row["args"]["kernel"] == "generic"
    assert [e["args"]["kind"] for e in ours if e["name"] == "step"] == ["step"]
