"""``Trace.to_kineto`` writes torch.profiler's (Kineto's) schema, and Holistic
Trace Analysis (HTA 0.5) reads it as a CUDA job's trace: its temporal, kernel and idle-time
breakdowns, communication/computation overlap, kernel launch statistics and trace diff run, and its
kernel-time totals agree with the lab's own tables within 1%. Bad input: dropped events said in the
file's metadata, the file written whole or not at all, hostile names valid JSON, the Chrome format
kept (Perfetto and chrome://tracing open it)."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import pytest
import torch

import openreg_lab
from tests.support import trace_event_format
from tests.support.hostile_data import PAYLOAD

trace_analysis = pytest.importorskip("hta.trace_analysis")
trace_diff = pytest.importorskip("hta.trace_diff")
hta_trace = pytest.importorskip("hta.common.trace")

STEPS = 4
# HTA 0.5 calls pandas APIs that pandas 3 deprecates: its warnings, not ours.
# Kernels of tens of microseconds: HTA reads times in whole microseconds, so each kernel's time is
# off by under 1 us (Note [openreg's work as Kineto's device activity]), about 1% of a 48-wide
# layer's few-microsecond kernels (a total 1.3% off in one loaded run), a tenth of that here.
WIDTH, BATCH = 256, 64
pytestmark = [
    pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def _train(layers: int) -> openreg_lab.Trace:
    """``STEPS`` training steps of a small MLP of ``layers`` linear layers on openreg, traced."""
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers - 1):
        blocks += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTH, 8)).to("openreg")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, WIDTH).to("openreg")
    with openreg_lab.trace(record_shapes=True) as t:
        for _ in range(STEPS):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    return t


def _analysis(folder: Path) -> trace_analysis.TraceAnalysis:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas' FutureWarnings from inside HTA
        return trace_analysis.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    t = _train(layers=2)
    folder = tmp_path_factory.mktemp("kineto")
    t.to_kineto(folder / "rank0.json")
    return t, folder, _analysis(folder)


def _lab_totals_us(t: openreg_lab.Trace) -> tuple[float, float]:
    """From the lab's own tables: the self time of the native ops on openreg less the copies they
    made (which are memcpys), and the time of the copies to, from or within openreg (us)."""
    summary = t.summary()
    native = summary[
        summary["device"].str.startswith("openreg") & summary["kernel"].isin(["native", "generic"])
    ]
    copies = t.copies()
    ev = t.events.set_index("id")
    by_native_op = copies["op_id"].map(
        lambda i: (
            i >= 0
            and ev.at[i, "kernel"] in ("native", "generic")
            and ev.at[i, "device"].startswith("openreg")
        )
    )
    on_device = copies["src"].str.startswith("openreg") | copies["dst"].str.startswith("openreg")
    compute = native["self_ns"].sum() - copies.loc[by_native_op.astype(bool), "dur_ns"].sum()
    return compute / 1000, copies.loc[on_device, "dur_ns"].sum() / 1000


def test_hta_kernel_totals_agree_with_the_lab_within_one_percent(exported):
    t, _, analysis = exported
    kinds, per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
    totals = dict(zip(kinds["kernel_type"], kinds["sum"], strict=True))
    compute, memcpy = _lab_totals_us(t)
    assert compute > 0 and memcpy > 0
    assert abs(totals["COMPUTATION"] - compute) <= 0.01 * compute, (totals, compute)
    assert abs(totals["MEMORY"] - memcpy) <= max(0.01 * memcpy, 2.0), (totals, memcpy)  # 2 copies: 1 us each
    assert "aten::addmm" in set(per_kernel["name"]) and "aten::mm" in set(per_kernel["name"])
    assert set(kinds["kernel_type"]) >= {"COMPUTATION", "MEMORY"} and "COMMUNICATION" not in totals


def test_hta_temporal_and_idle_time_breakdowns_count_the_same_device_time(exported):
    _, _, analysis = exported
    kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    totals = dict(zip(kinds["kernel_type"], kinds["sum"], strict=True))
    temporal = analysis.get_temporal_breakdown(visualize=False)
    assert temporal["rank"].tolist() == [0]
    row = temporal.iloc[0]  # kernel_time: from the first kernel's start to the last one's end
    assert row["compute_time(us)"] == pytest.approx(totals["COMPUTATION"], abs=2)
    assert row["non_compute_time(us)"] == pytest.approx(totals["MEMORY"], abs=2)  # one stream: no overlap
    assert row["idle_time(us)"] > 0
    parts = row["idle_time(us)"] + row["compute_time(us)"] + row["non_compute_time(us)"]
    assert parts == row["kernel_time(us)"]
    idle, _ = analysis.get_idle_time_breakdown(visualize=False)
    assert set(idle["stream"]) == {1}  # the compute stream
    assert idle["idle_time"].sum() == pytest.approx(row["idle_time(us)"], abs=2)


def test_hta_launch_statistics_pair_every_kernel_with_its_launch(exported):
    _, _, analysis = exported
    stats = analysis.get_cuda_kernel_launch_stats(visualize=False)[0]
    kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    assert len(stats) > 0 and stats["correlation"].is_unique
    assert (stats["launch_delay"] == 0).all()  # openreg runs the work where its op asks for it
    assert stats["gpu_duration"].sum() == pytest.approx(kinds["sum"].sum(), abs=2)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # 0 / 0: no communication
def test_hta_reads_the_rank_and_steps_and_no_communication_on_one_rank(exported):
    t, _, analysis = exported
    assert analysis.t.meta_data[0]["distributedInfo"] == {"backend": "ogloo", "rank": 0, "world_size": 1}
    assert analysis.t.get_iterations(0) == list(range(STEPS))
    assert analysis.t.meta_data[0]["openreg"] == {"dropped_events": 0, "capacity": t.capacity}
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    assert overlap["rank"].tolist() == [0]  # its value is NaN: no communication to overlap


def test_hta_trace_diff_finds_the_extra_layer(exported, tmp_path):
    _, folder, _ = exported
    _train(layers=3).to_kineto(tmp_path / "rank0.json")
    traces = []
    for f in (folder, tmp_path):
        tr = hta_trace.Trace(trace_dir=str(f))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr.load_traces(include_last_profiler_step=True)
        traces.append(tr)
    cpu = trace_diff.TraceDiff.compare_traces(traces[0], traces[1], device_type=trace_diff.DeviceType.CPU)
    # One more Linear and ReLU in the forward of the first step: one more of each op of theirs.
    for name in ("aten::linear", "aten::addmm", "aten::relu", "AddmmBackward0", "ReluBackward0"):
        assert cpu.at[name, "diff_counts"] == 1, cpu.loc[name]
    assert cpu.at["aten::sum", "diff_counts"] == 0


def test_the_export_is_the_trace_event_format_perfetto_and_chrome_read(exported):
    _, folder, _ = exported
    doc = trace_event_format.load_strict(folder / "rank0.json")
    phases = trace_event_format.check(doc)
    assert phases["s"] == phases["f"] > 0  # one ac2g flow a kernel or memcpy, launch to work
    kernels = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")]
    launches = {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"}
    assert len(kernels) == len(launches) == phases["s"]
    for k in kernels:
        assert k["pid"] == k["args"]["device"] == 0 and k["tid"] == k["args"]["stream"] == 1
        assert launches[k["args"]["correlation"]]["args"]["External id"] == k["args"]["External id"]
    steps = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]
    assert steps == [f"ProfilerStep#{i}" for i in range(STEPS)]


def test_a_trace_with_dropped_events_says_so_in_both_json_exports(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TraceDroppedEventsWarning: the point of this test
        with openreg_lab.trace(capacity=20) as t:
            for _ in range(5):
                torch.ones(4, device="openreg").add_(1)
    assert t.dropped > 0
    t.to_kineto(tmp_path / "k.json")
    meta = json.loads((tmp_path / "k.json").read_text())["openreg"]
    assert meta["dropped_events"] == t.dropped and meta["capacity"] == 20
    assert f"{t.dropped:,} events were dropped" in meta["warning"] and "larger capacity" in meta["warning"]
    t.export_chrome_trace(tmp_path / "c.json")
    other = json.loads((tmp_path / "c.json").read_text())["otherData"]
    assert other["openreg dropped events"] == t.dropped and "were dropped" in other["openreg warning"]


def test_hostile_names_stay_valid_json_and_readable(tmp_path):
    hostile_module = type(PAYLOAD, (torch.nn.Module,), {"forward": lambda self, x: x * 2})
    with openreg_lab.trace(stack=True) as t:
        openreg_lab.mark(PAYLOAD)
        openreg_lab.mark("lone \ud800 surrogate")
        hostile_module()(torch.ones(2, device="openreg"))
    t.to_kineto(tmp_path / "h.json")
    doc = trace_event_format.load_strict(tmp_path / "h.json")  # ASCII, strict JSON, no lone surrogate
    trace_event_format.check(doc)
    names = {e["name"] for e in doc["traceEvents"]}
    assert "lone \\ud800 surrogate" in names  # the surrogate as its escape
    named = [e["cat"] for e in doc["traceEvents"] if e["name"] == PAYLOAD]
    assert sorted(named) == ["mark", "python_function"]  # the mark and the module's span


def test_a_name_hta_would_not_read_is_refused_and_gz_is_compressed(tmp_path):
    t = _train(layers=1)
    with pytest.raises(ValueError, match=r"ends with \.json or \.json\.gz.*got .*k\.trace.*e\.g\. k\.json"):
        t.to_kineto(tmp_path / "k.trace")
    assert not list(tmp_path.iterdir())
    t.to_kineto(tmp_path / "k.json.gz")
    doc = json.loads(gzip.decompress((tmp_path / "k.json.gz").read_bytes()))
    assert doc["distributedInfo"]["rank"] == 0 and any(e.get("cat") == "kernel" for e in doc["traceEvents"])
