"""openreg in PyTorch's own profiler: the Kineto plugin and the legacy PrivateUse1 stubs."""

from __future__ import annotations

import json

import torch
from torch.profiler import ProfilerActivity, profile

import openreg_lab
from openreg_lab import _C


def test_torch_profiler_trace_has_openregs_work_as_device_activity(tmp_path):
    # Note [openreg's work in torch.profiler's trace]: kernels and memcpys on an "openreg 0" process.
    x = torch.randn(1000, device="openreg")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
        y = x + x
        torch.logcumsumexp(y, 0)
    assert not _C._trace_enabled()
    path = tmp_path / "profile.json"
    p.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    ours = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
    assert {e["pid"] for e in ours} == {0}
    process = [e for e in events if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] == 0]
    assert process[0]["args"]["name"] == "openreg 0"
    assert not [e for e in events if e.get("cat") == "privateuse1_runtime"]  # HTA counted them as CPU ops

    add = next(e for e in ours if e["name"] == "aten::add.Tensor")
    assert add["cat"] == "kernel" and add["tid"] == add["args"]["stream"] == 1
    assert (add["args"]["kernel"], add["args"]["dispatch"]) == ("native", "AutogradPrivateUse1 > PrivateUse1")
    # The fallback computes on the CPU: no kernel, only its copies, launched from torch's op.
    assert not [e for e in ours if "logcumsumexp" in e["name"]]
    copies = sorted((e["name"], e["args"]["bytes"]) for e in ours if e["cat"] == "gpu_memcpy")
    assert copies == [("Memcpy DtoH (openreg -> Host)", 4000), ("Memcpy HtoD (Host -> openreg)", 4000)]
    ops = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    launched_by = {ops[e["args"]["External id"]] for e in ours if e["cat"] == "gpu_memcpy"}
    assert launched_by == {"aten::_logcumsumexp"}

    # On the same clock as torch's CPU ops: our add's kernel and the profiler's aten::add overlap in
    # time (each side's interval also holds the other's callback overhead, so neither contains the other).
    cpu_add = next(e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::add")
    assert add["args"]["External id"] == cpu_add["args"]["External id"]
    assert max(add["ts"], cpu_add["ts"]) < min(add["ts"] + add["dur"], cpu_add["ts"] + cpu_add["dur"])


def test_legacy_profiler_reports_openreg_device_time():
    x = torch.randn(1000, device="openreg")
    with torch.autograd.profiler.profile(use_device="openreg", use_kineto=False) as p:
        x + x
    rows = {e.key: e for e in p.key_averages()}
    assert rows["aten::add"].self_device_time_total > 0


def test_generic_kernels_have_their_name_in_the_kineto_trace(tmp_path):
    # The exporter names kernels from a table: "generic" (kernel 4) was past its end before.
    x = torch.randn(8, device="openreg")
    ops = sorted({*openreg_lab.profile_ops("default"), "aten::_logcumsumexp"})
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
        with openreg_lab.use_profile(ops):
            torch.logcumsumexp(x, 0)
        openreg_lab.step()
    path = tmp_path / "profile.json"
    p.export_chrome_trace(str(path))
    kernels = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    row = next(e for e in kernels if e["name"] == "aten::_logcumsumexp")
    assert row["args"]["kernel"] == "generic"
