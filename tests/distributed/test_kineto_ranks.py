"""``openreg-lab run --kineto DIR`` under torchrun writes one Kineto trace per
rank, and Holistic Trace Analysis reads the directory as a 2-rank job: ranks 0 and 1 from each
file's ``distributedInfo``, the collectives as communication kernels whose time per rank equals the
lab's collectives table within 1%, and a communication/computation overlap per rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import openreg_lab
from tests.support import trace_event_format
from tests.support.distributed_pool import free_port
from tests.support.processes import run_python, running_in

pytest.importorskip("hta")
REPO = str(Path(__file__).resolve().parents[2])

SCRIPT = """
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).cuda(rank))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 32, device="cuda")
for _ in range(3):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""

# Run in a fresh interpreter: HTA parses several ranks in a forked pool, which a process with
# openreg's threads must not fork.
ANALYSIS = """
import json, logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
from hta.trace_diff import TraceDiff
ta = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
ranks = ta.t.get_ranks()
out = {"ranks": [int(r) for r in ranks]}
out["info"] = {int(r): ta.t.meta_data[r]["distributedInfo"] for r in ranks}
_, per = ta.get_gpu_kernel_breakdown(visualize=False)
comm = per[per["kernel_type"] == "COMMUNICATION"]
out["comm_us"] = {int(r): float(v) for r, v in comm.groupby("rank")["sum (us)"].sum().items()}
out["comm_names"] = sorted(set(comm["name"]))
overlap = ta.get_comm_comp_overlap(visualize=False)
out["overlap"] = {int(r): float(v) for r, v in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"])}
out["temporal"] = [int(r) for r in ta.get_temporal_breakdown(visualize=False)["rank"]]
idle, _ = ta.get_idle_time_breakdown(ranks=[0, 1], visualize=False)
out["idle_streams"] = sorted({(int(r), int(s)) for r, s in zip(idle["rank"], idle["stream"])})
launches = ta.get_cuda_kernel_launch_stats(ranks=[0, 1], visualize=False)
out["launches"] = {int(r): len(v) for r, v in launches.items()}
diff = TraceDiff.compare_traces(ta.t, ta.t, control_rank=0, test_rank=1)
out["diff_counts"] = int(diff["diff_counts"].abs().sum())
print("RESULT " + json.dumps(out))
"""


def test_hta_reads_a_torchrun_job_as_two_ranks_with_communication(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", "-m", "openreg_lab", "run", "--from-cuda", "--kineto", "kineto",
        "--trace", "run.trace", "train.py",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert running_in(tmp_path) == []  # nothing of the job left running
    assert sorted(os.listdir(tmp_path / "kineto")) == ["rank0.json", "rank1.json"]
    for r in (0, 1):
        written = tmp_path / "kineto" / f"rank{r}.json"
        assert f"openreg-lab: wrote the Kineto trace to {written}" in proc.stderr
        trace_event_format.check(trace_event_format.load_strict(written))  # Perfetto opens it

    analysis = run_python(ANALYSIS.replace("sys.argv[1]", repr(str(tmp_path / "kineto"))))
    assert analysis.returncode == 0, analysis.stderr[-3000:]
    out = json.loads(analysis.stdout.split("RESULT ", 1)[1])
    assert out["ranks"] == [0, 1] and out["temporal"] == [0, 1]
    assert out["info"] == {str(r): {"backend": "ogloo", "rank": r, "world_size": 2} for r in (0, 1)}
    assert {"ncclKernel_allreduce (ogloo)", "ncclKernel_broadcast (ogloo)"} <= set(out["comm_names"])
    for r in (0, 1):
        lab = openreg_lab.load_trace(tmp_path / f"run.rank{r}.trace").collectives()
        lab_us = lab.loc[lab["device"] == f"openreg:{r}", "dur_ns"].sum() / 1000
        assert (lab["name"] == "allreduce").sum() == 3  # DDP's bucket, once a step
        assert abs(out["comm_us"][str(r)] - lab_us) <= 0.01 * lab_us, (r, out["comm_us"], lab_us)
        assert 0 <= out["overlap"][str(r)] <= 100  # a number, no longer NaN
        assert out["launches"][str(r)] > 0
    assert {(0, 1), (0, 2), (1, 1), (1, 2)} <= set(map(tuple, out["idle_streams"]))  # compute, collectives
    assert out["diff_counts"] == 0  # both ranks ran the same ops and kernels in their first step
