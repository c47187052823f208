"""torch.profiler's own trace of an openreg job, as a user makes it (``profile(activities=[CPU,
PrivateUse1], schedule=...)``, ``prof.step()``, ``tensorboard_trace_handler`` or
``export_chrome_trace``), is read by Holistic Trace Analysis (HTA 0.5) as a CUDA job's: openreg's
device work is kernels and memcpys on a stream, each launched from the cpu_op that asked for it
(Note [openreg's work in torch.profiler's trace] in csrc/trace/KinetoProfiler.cpp). Its kernel totals
equal the lab's own for the same steps; hostile names keep the file valid JSON."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

import openreg_lab
from openreg_lab.recording.device_work import device_work
from tests.recording.test_trace_kineto import _analysis, _lab_totals_us
from tests.support import trace_event_format
from tests.support.hostile_data import PAYLOAD

trace_analysis = pytest.importorskip("hta.trace_analysis")
trace_diff = pytest.importorskip("hta.trace_diff")
hta_trace = pytest.importorskip("hta.common.trace")

WAIT, WARMUP, ACTIVE = 1, 1, 3
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
# HTA 0.5 calls pandas APIs that pandas 3 deprecates: its warnings, not ours.
# Kernels of tens of microseconds: HTA reads times in whole microseconds, so each kernel's time is
# off by under 1 us (Note [openreg's work as Kineto's device activity]), about 1% of a 48-wide
# layer's few-microsecond kernels (a total 1.3% off in one loaded run), a tenth of that here.
WIDTH, BATCH = 256, 64
pytestmark = [
    pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def _profiled_training(folder: Path, layers: int = 2) -> openreg_lab.Trace:
    """A small MLP of ``layers`` linear layers trained on openreg under torch.profiler's schedule,
    its trace written by torch's handler into ``folder``; the lab's own trace of the active steps,
    the same window, returned."""
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers - 1):
        blocks += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTH, 8)).to("openreg")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, WIDTH).to("openreg")
    lab = openreg_lab.trace()
    sched = schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    handler = tensorboard_trace_handler(str(folder))
    with profile(activities=ACTIVITIES, schedule=sched, on_trace_ready=handler) as prof:
        for step in range(WAIT + WARMUP + ACTIVE):
            if step == WAIT + WARMUP:  # torch.profiler's session started in the last prof.step()
                lab.__enter__()
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            if step == WAIT + WARMUP + ACTIVE - 1:  # and it stops in the next one
                lab.__exit__(None, None, None)
            prof.step()
    return lab


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("torch_profiler")
    lab = _profiled_training(folder)
    (path,) = folder.glob("*.json")
    return lab, path, _analysis(folder)


def _events(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["traceEvents"]


def _work(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]


def test_hta_kernel_totals_agree_with_the_lab_within_one_percent(profiled):
    lab, _, analysis = profiled
    kinds, per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
    totals = dict(zip(kinds["kernel_type"], kinds["sum"], strict=True))
    compute, memcpy = _lab_totals_us(lab)
    assert compute > 0
    assert abs(totals["COMPUTATION"] - compute) <= 0.01 * compute, (totals, compute)
    assert totals.get("MEMORY", 0) == pytest.approx(memcpy, abs=2 + 0.01 * memcpy)
    assert {"aten::addmm", "aten::mm", "aten::relu"} <= set(per_kernel["name"])
    assert "COMMUNICATION" not in totals


def test_hta_breakdowns_launch_statistics_and_overlap_run_on_the_device_work(profiled):
    _, path, analysis = profiled
    kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    work_us = kinds["sum"].sum()
    temporal = analysis.get_temporal_breakdown(visualize=False)
    assert temporal["rank"].tolist() == [0]
    row = temporal.iloc[0]
    assert row["compute_time(us)"] + row["non_compute_time(us)"] == pytest.approx(work_us, abs=2)
    assert row["idle_time(us)"] > 0
    idle, _ = analysis.get_idle_time_breakdown(visualize=False)
    assert set(idle["stream"]) == {1}
    assert idle["idle_time"].sum() == pytest.approx(row["idle_time(us)"], abs=2)
    stats = analysis.get_cuda_kernel_launch_stats(visualize=False)[0]
    assert len(stats) == len(_work(_events(path))) and stats["correlation"].is_unique
    assert stats["gpu_duration"].sum() == pytest.approx(work_us, abs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 0 / 0: no communication to overlap
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    assert overlap["rank"].tolist() == [0]
    # The active steps, from torch.profiler's own ProfilerStep annotations.
    assert analysis.t.get_iterations(0) == list(range(WAIT + WARMUP, WAIT + WARMUP + ACTIVE))


def test_every_op_that_launched_work_has_its_launch_inside_it(profiled):
    lab, path, _ = profiled
    events = _events(path)
    work = _work(events)
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    # The same work as the lab's own trace of the same steps, every piece from a distinct op of its.
    expected = device_work(lab.events, lab.collectives())
    assert len(launches) == len(work) == len(expected) > 0
    assert len({k["args"]["External id"] for k in work}) == expected["op"].nunique()
    for k in work:
        launch = launches[k["args"]["correlation"]]
        assert launch["name"] == ("cudaMemcpyAsync" if k["cat"] == "gpu_memcpy" else "cudaLaunchKernel")
        op = ops[k["args"]["External id"]]  # every piece of work has its op's id
        assert k["cat"] == "gpu_memcpy" or k["name"].split(".")[0] == op["name"]
        assert launch["args"]["External id"] == op["args"]["External id"]
        assert (launch["pid"], launch["tid"]) == (op["pid"], op["tid"])
        if math.ceil(op["ts"]) <= math.floor(op["ts"] + op["dur"]):  # a whole microsecond inside
            assert op["ts"] <= launch["ts"] <= op["ts"] + op["dur"]
        else:
            assert launch["ts"] == k["ts"]
        # The work ends inside its op (the recorder's callback ends the op first, less than a
        # microsecond before torch.profiler's); it starts before the cpu_op's clock reading, by
        # 1-2 us or, when the thread was preempted between the two callbacks, tens of us
        # (Note [Which torch.profiler op launched openreg's work]).
        assert k["ts"] <= op["ts"] + op["dur"] and k["ts"] + k["dur"] <= op["ts"] + op["dur"] + 1


def test_hta_trace_diff_counts_each_op_once(profiled, tmp_path):
    # The recorder's own op events, once in torch.profiler's trace too, were counted by HTA as
    # CPU ops beside torch's (Note [openreg's work in torch.profiler's trace]).
    _, path, _ = profiled
    _profiled_training(tmp_path, layers=3)
    traces = []
    for folder in (path.parent, tmp_path):
        t = hta_trace.Trace(trace_dir=str(folder))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t.load_traces(include_last_profiler_step=True)
        traces.append(t)
    cpu = trace_diff.TraceDiff.compare_traces(traces[0], traces[1], device_type=trace_diff.DeviceType.CPU)
    for name in ("aten::linear", "aten::relu", "AddmmBackward0", "ReluBackward0"):  # one more a step
        assert cpu.at[name, "diff_counts"] == 1, cpu.loc[name]
    assert cpu.at["aten::ones_like", "diff_counts"] == 0  # the loss's gradient, once a step
    gpu = trace_diff.TraceDiff.compare_traces(traces[0], traces[1], device_type=trace_diff.DeviceType.GPU)
    relu = gpu.loc["aten::relu"]  # two ReLU layers' kernels where there was one
    assert relu["Test_counts"] == 2 * relu["Control_counts"] > 0


def test_the_trace_holds_the_devices_the_rank_and_what_the_recorder_lost(profiled):
    _, path, analysis = profiled
    doc = json.loads(path.read_text())
    assert [d["id"] for d in doc["deviceProperties"]] == [0]
    assert doc["deviceProperties"][0]["name"].startswith("openreg")
    assert doc["distributedInfo"] == {"backend": "ogloo", "rank": 0, "world_size": 1}
    assert doc["openreg"]["dropped_events"] == 0
    assert analysis.t.meta_data[0]["distributedInfo"]["rank"] == 0
    streams = [e for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"]
    assert {"pid": 0, "tid": 1, "name": "stream 1"} in [
        {"pid": e["pid"], "tid": e["tid"], "name": e["args"]["name"]} for e in streams
    ]


def test_the_trace_keeps_the_trace_event_format_perfetto_and_chrome_read(profiled):
    _, path, _ = profiled
    doc = trace_event_format.load_strict(path)
    phases = trace_event_format.check(doc, kineto=True)
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "ac2g"]
    work = _work(doc["traceEvents"])
    assert len(work) > 0 and phases["s"] >= len(work) and len(flows) == 2 * len(work)


def test_hostile_names_keep_torch_profilers_trace_valid_json(tmp_path):
    x = torch.ones(4, device="openreg")
    hostile = type(PAYLOAD, (torch.nn.Module,), {"forward": lambda self, t: t * 2})()
    with profile(activities=ACTIVITIES) as prof:
        openreg_lab.mark(PAYLOAD)
        openreg_lab.mark('quote " and back \\ slash')
        openreg_lab.mark("lone \ud800 surrogate, \u03b1\u03b2")
        with openreg_lab.trace(stack=True):
            hostile(x)
    path = tmp_path / "hostile.json"
    prof.export_chrome_trace(str(path))
    doc = trace_event_format.load_strict(path)  # strict JSON, ASCII (Note [Text in Kineto's JSON])
    trace_event_format.check(doc, kineto=True)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert {e["name"] for e in kernels} == {"aten::mul.Tensor", "aten::empty.memory_format"}
    assert {e["args"]["kernel"] for e in kernels} == {"native"}


def test_copies_are_memcpys_with_their_bytes_in_a_profile_without_a_schedule(tmp_path):
    x = torch.arange(1000, dtype=torch.float32)
    with profile(activities=ACTIVITIES) as prof:
        y = x.to("openreg")
        (y + y).cpu()
    path = tmp_path / "plain.json"
    prof.export_chrome_trace(str(path))
    copies = sorted((e["name"], e["args"]["bytes"]) for e in _events(path) if e.get("cat") == "gpu_memcpy")
    assert copies == [("Memcpy DtoH (openreg -> Host)", 4000), ("Memcpy HtoD (Host -> openreg)", 4000)]
