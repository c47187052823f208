"""torch.distributed on openreg: the "ogloo" backend (csrc/distributed/) across 2 and 4 ranks.

The ranks are spawned once per module (``RankPool``) and run many bodies (tests/distributed_bodies.py)
over 127.0.0.1; every wait is bounded and no process outlives the module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from distributed_pool import RankPool, free_port

import openreg_lab
import openreg_lab.cli

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)


@pytest.fixture(scope="module")
def pool() -> Iterator[RankPool]:
    p = RankPool(2)
    yield p
    p.close()
    assert p.alive() == [], "rank processes outlived the pool"


@pytest.fixture(scope="module")
def pool4() -> Iterator[RankPool]:
    p = RankPool(4)
    yield p
    p.close()
    assert p.alive() == [], "rank processes outlived the pool"


def test_registered_for_openreg_and_cpu() -> None:
    assert "ogloo" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["openreg"] == "ogloo"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"  # CPU users keep Gloo
    assert dist.Backend.backend_capability["ogloo"] == ["openreg", "cpu"]


def test_pool_backend(pool: RankPool) -> None:
    assert pool.run("ready") == ["ogloo", "ogloo"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_every_collective_2_ranks(pool: RankPool, dtype: str) -> None:
    done = pool.run("every_collective", dtype)
    expected = {
        "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
        "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "all_to_all_single uneven",
        "scatter", "send/recv", "isend/irecv", "batch_isend_irecv", "coalesced all_reduce",
        "coalesced all_gather_into_tensor",
    }  # fmt: skip
    for checks in done:
        assert expected <= set(checks), expected - set(checks)
        assert checks["all_gather"] == 2 and checks["all_to_all"] == 2
        reduce_ops = {k for k in checks if k.startswith("all_reduce ")}
        if dtype == "int64":
            assert len(reduce_ops) == 7 and checks["avg refused"] == 1  # SUM..BXOR; AVG refused
        else:
            assert len(reduce_ops) == 5  # SUM, MAX, MIN, PRODUCT, AVG
    assert "reduce" in done[0] and "gather" in done[0]  # the root's checks
    assert "reduce" not in done[1]


def test_every_collective_4_ranks(pool4: RankPool) -> None:
    done = pool4.run("every_collective", "float32")
    assert all(d["all_gather"] == 4 and d["batch_isend_irecv"] == 1 for d in done)


def test_ddp_and_fsdp2_4_ranks(pool4: RankPool) -> None:
    ddp = pool4.run("ddp_parity", 0.0001, False, False)  # parity asserted on each rank
    assert all(r["bytes"] == 4 * r["params_bytes"] for r in ddp)
    assert all(r["in_backward"] == r["allreduces"] > 4 for r in ddp)  # a bucket per parameter
    counts = pool4.run("fsdp_parity")
    assert all(c == counts[0] for c in counts)


def test_subgroups_4_ranks(pool4: RankPool) -> None:
    # evens all-reduce 0 + 2, odds 1 + 3; the world broadcast from rank 3
    assert pool4.run("subgroups") == [[2.0, 3.0], [4.0, 3.0], [2.0, 3.0], [4.0, 3.0]]


def test_async_work(pool: RankPool) -> None:
    assert pool.run("async_work") == [{"result": "openreg"}] * 2


def test_mixed_cpu_and_openreg(pool: RankPool) -> None:
    errors = pool.run("mixed_devices")
    for e in errors:
        assert "tensors on two devices" in e["two devices"]
        assert "openreg:" in e["two devices"] and "cpu" in e["two devices"]


@pytest.mark.parametrize("what", ["shape", "dtype", "root", "reduce op"])
def test_mismatch_is_a_clear_error_on_every_rank(pool: RankPool, what: str) -> None:
    messages = pool.run("mismatch", what)
    assert messages[0] == messages[1]
    assert "the ranks of the group passed different tensors" in messages[0]
    assert messages[0].endswith("; nothing was sent")
    expected = {
        "shape": "rank 0: one Float tensor of shape [4]; rank 1: one Float tensor of shape [5]",
        "dtype": "rank 0: one Float tensor of shape [4]; rank 1: one Long tensor of shape [4]",
        "root": "rank 0: one Float tensor of shape [4], root 0; rank 1: one Float tensor of shape [4], "
        "root 1",
        "reduce op": "rank 0: one Float tensor of shape [4], SUM; rank 1: one Float tensor of shape [4], MAX",
    }
    assert expected[what] in messages[0]


def test_a_rank_running_ahead_meets_the_disagreement(pool: RankPool) -> None:
    errors = pool.run("mismatch_ahead", timeout=30)
    message = errors[0]["mismatch"]
    assert errors[1]["mismatch"] == message
    assert "rank 0: one Float tensor of shape [4]; rank 1: one Float tensor of shape [5]" in message
    assert message.endswith("the ranks that had issued it ahead of this check hold no result")
    assert errors[0]["after"] == errors[1]["after"] == [2.0, 2.0, 2.0]  # (0 + 1) * 2: it lives on


def test_ranks_running_ahead_meet_the_disagreement_4_ranks(pool4: RankPool) -> None:
    errors = pool4.run("mismatch_ahead", timeout=30)
    assert len({e["mismatch"] for e in errors}) == 1
    assert (
        "rank 0: one Float tensor of shape [4]; rank 1: one Float tensor of shape [4]; "
        "rank 2: one Float tensor of shape [5]; rank 3: one Float tensor of shape [5]"
    ) in errors[0]["mismatch"]
    assert all(e["after"] == [24.0] * 3 for e in errors)  # (0 + 1 + 2 + 3) * 4


def test_a_slow_rank_behind_a_predicted_call_is_no_disagreement(pool: RankPool) -> None:
    assert pool.run("slow_rank_behind_a_predicted_call", timeout=30) == [32.0, 32.0]  # 2**5


def test_a_predicted_collective_does_not_wait_for_the_agreement(pool: RankPool) -> None:
    assert pool.run("predicted_call_runs_ahead", timeout=60) == [True, True]


@pytest.mark.parametrize(
    ("bucket_cap_mb", "find_unused", "no_sync"),
    [(25.0, False, False), (0.0001, False, False), (0.0001, True, True)],
    ids=["one-bucket", "bucket-per-param", "unused-and-no_sync"],
)
def test_ddp_equals_one_process(
    pool: RankPool, bucket_cap_mb: float, find_unused: bool, no_sync: bool
) -> None:
    results = pool.run("ddp_parity", bucket_cap_mb, find_unused, no_sync)
    for r in results:
        # one all-reduce per synced step and bucket, each issued inside backward
        steps = 2 if no_sync else 4
        if bucket_cap_mb > 1:
            assert r["allreduces"] == steps, r
        else:
            assert r["allreduces"] > steps, r  # several buckets a step
        assert r["in_backward"] == r["allreduces"]
        assert r["nodes"] == ["torch::autograd::AccumulateGrad"] and r["issued_by"] == ["c10d::allreduce_"]
        assert r["completed"]
        # every gradient byte crosses once per synced step (find_unused adds the unused flags' bitmap)
        if not find_unused:
            assert r["bytes"] == steps * r["params_bytes"]


def test_ddp_runtime_stats_are_collected_without_a_warning(pool: RankPool) -> None:
    # openreg registers a c10d reducer Timer for PrivateUse1 (csrc/distributed/ReducerTimer.cpp):
    # without one DDP warns "Time stats are currently only collected for CPU and CUDA devices" on
    # every rank and leaves these averages at 0.
    for r in pool.run("ddp_timer"):
        assert r["warnings"] == []
        assert all(t > 0 for t in r["times"].values()), r
        assert r["overlap_key"]


def test_fsdp2_equals_one_process(pool: RankPool) -> None:
    counts = pool.run("fsdp_parity")
    assert counts[0] == counts[1]
    assert counts[0].get("allgather_into_tensor", 0) >= 3 * 2  # two FSDP units, each step
    assert counts[0].get("reduce_scatter_tensor", 0) >= 3 * 2


def test_dtensor_op(pool: RankPool) -> None:
    a, b = pool.run("dtensor_op")
    assert a == b


@pytest.mark.parametrize(
    ("form", "name"), [("none", "undefined"), ("device_id", "ogloo"), ("pairs", "cpu:gloo,openreg:ogloo")]
)
def test_destroy_and_init_again(pool: RankPool, form: str, name: str) -> None:
    # no backend named: torch calls it "undefined" and asks the accelerator's default, ogloo
    assert pool.run("reinit", free_port(), form) == [[2.0, 2.0, name]] * 2


def test_collective_events_and_merged_ranks(pool: RankPool, tmp_path: object) -> None:
    r0, r1 = pool.run("traced_collectives", str(tmp_path))
    assert r0["rows"] == [
        ["allreduce", "0", r0["rows"][0][2], 0, -1, 2, 1024, "float32", "openreg:0"],
        ["broadcast", "0", r0["rows"][0][2] + 1, 0, 0, 2, 32, "bfloat16", "openreg:0"],
        ["send", "0", r0["rows"][2][2], 0, 1, 2, 64, "int64", "openreg:0"],
        ["allreduce", "0", r0["rows"][0][2] + 2, 0, -1, 2, 16, "float32", "openreg:0"],
    ]
    assert [row[0] for row in r1["rows"]] == ["allreduce", "broadcast", "recv", "allreduce"]
    assert r1["rows"][2][3:5] == [1, 0]  # rank 1 received from rank 0
    # point-to-point calls count apart from group collectives (from 0 in a fresh pool, but the
    # pool's earlier tests may have sent already): the send and its recv carry one number
    assert r1["rows"][2][2] == r0["rows"][2][2]
    assert r0["issued_by"] == ["c10d::allreduce_", "c10d::broadcast_", "c10d::send", "c10d::allreduce_"]
    assert r0["issued_in"] == r1["issued_in"] == [None] * 4  # no autograd node around them
    assert r0["completed"] and r1["completed"]
    assert all(r0["waited"]) and all(r1["waited"])  # blocking calls wait; the async one was waited on
    assert r0["kinds"]["collective"] == 8  # 4 collectives and their 4 waits
    traces = [openreg_lab.load_trace(os.path.join(str(tmp_path), f"r{r}.trace")) for r in (0, 1)]
    merged = openreg_lab.views.ranks(traces).table
    assert len(merged) == 8
    assert merged.groupby("key").size().tolist() == [2, 2, 2, 2]  # each collective on both ranks
    assert set(merged["global_rank"]) == {0, 1}
    one = merged[merged["name"] == "allreduce"].groupby("key")
    assert (one["late_ns"].min() == 0).all() and (one["last"].sum() == 1).all()
    send = merged[merged["name"].isin(["send", "recv"])]
    assert send["key"].nunique() == 1 and sorted(send["global_rank"]) == [0, 1]  # the send met its recv


def test_ranks_view_and_report_of_several_traces(
    pool: RankPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool.run("traced_collectives", str(tmp_path))
    files = [str(tmp_path / f"r{r}.trace") for r in (0, 1)]
    view = openreg_lab.views.ranks([openreg_lab.load_trace(f) for f in files])
    assert repr(view) == "<RanksView: 2 ranks, 4 collectives>"
    table = view.collectives()
    assert table["name"].tolist() == ["allreduce", "broadcast", "send/recv", "allreduce"]
    assert table["bytes"].tolist() == [1024, 32, 64, 16] and (table["ranks"] == 2).all()
    page = view.html()
    assert page.count('class="collective"') == 8 and page.count("<tr>") == 5
    assert set(view.activity["rank"]) == {0, 1} and "c10d::allreduce_" in set(view.activity["name"])
    assert page.count('class="activity"') >= 8  # each rank's c10d ops at least
    view.table.loc[0, "name"] = "<script>alert(1)</script>"  # every string reaching the page is escaped
    page = view.html()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    out = str(tmp_path / "ranks.html")
    assert openreg_lab.cli.main(["report", *files, "--html", out]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("2 traces, 2 ranks, 4 collectives")
    assert Path(out).read_text(encoding="utf-8").count('class="collective"') == 8


def test_torchrun_launch_writes_one_trace_per_rank(tmp_path: Path) -> None:
    script = os.path.join(str(tmp_path), "train.py")
    with open(script, "w") as f:
        f.write(
            textwrap.dedent(
                """
                import torch, torch.distributed as dist
                from torch.nn.parallel import DistributedDataParallel as DDP
                dist.init_process_group("nccl")
                rank = dist.get_rank()
                torch.cuda.set_device(rank)
                model = DDP(torch.nn.Linear(4, 2).cuda(rank))
                model(torch.randn(3, 4, device="cuda")).sum().backward()
                with open(f"grad{rank}.txt", "w") as f:
                    f.write(repr(float(model.module.weight.grad.sum())))
                dist.destroy_process_group()
                """
            )
        )
    out = os.path.join(str(tmp_path), "run.trace")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", "-m", "openreg_lab", "run", "--from-cuda", "--trace", out, script,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    grads = [(tmp_path / f"grad{r}.txt").read_text() for r in (0, 1)]
    assert grads[0] == grads[1]  # DDP averaged the ranks' gradients
    names = sorted(os.listdir(str(tmp_path)))
    assert "run.rank0.trace" in names and "run.rank1.trace" in names
    assert proc.stderr.count("openreg-lab run: train.py finished") == 1  # only rank 0 prints the summary
    assert proc.stderr.count("no op fell back") == 1
    traces = [openreg_lab.load_trace(os.path.join(str(tmp_path), f"run.rank{r}.trace")) for r in (0, 1)]
    for t in traces:
        assert (t.collectives()["name"] == "allreduce").sum() >= 1


def test_a_dead_rank_is_an_error_within_the_timeout() -> None:
    code = textwrap.dedent(
        f"""
        import datetime, os, sys, time
        import torch, torch.distributed as dist
        sys.path.insert(0, {REPO!r})
        import openreg_lab
        rank = int(sys.argv[1])
        dist.init_process_group("ogloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank,
                                world_size=2, timeout=datetime.timedelta(seconds=int(sys.argv[3])))
        x = torch.ones(4, device="openreg:" + str(rank))
        dist.all_reduce(x)
        if rank == 1:
            os._exit(0) if sys.argv[4] == "dies" else time.sleep(60)
        if sys.argv[4] == "hangs":  # Work.wait(timeout): raises after the timeout given to wait
            start = time.monotonic()
            try:
                dist.irecv(x, 1).wait(timeout=datetime.timedelta(seconds=1))
            except Exception as e:
                print("wait", type(e).__name__, round(time.monotonic() - start, 1), str(e).splitlines()[0])
        start = time.monotonic()
        try:
            dist.all_reduce(x)
        except Exception as e:
            print(type(e).__name__, round(time.monotonic() - start), str(e).splitlines()[0])
        """
    )
    quiet = {"text": True, "stderr": subprocess.DEVNULL}
    runs = {}  # both scenarios at once: rank 0 and rank 1 of each
    for how in ("dies", "hangs"):
        args = [sys.executable, "-c", code, "0", str(free_port()), "5", how]
        rank0 = subprocess.Popen(args, stdout=subprocess.PIPE, **quiet)
        rank1 = subprocess.Popen([*args[:3], "1", *args[4:]], stdout=subprocess.DEVNULL, **quiet)
        runs[how] = (rank0, rank1)
    try:
        outs = {how: rank0.communicate(timeout=60)[0] for how, (rank0, _) in runs.items()}
    finally:
        for rank0, rank1 in runs.values():
            for p in (rank0, rank1):
                p.kill()
                p.wait(10)
    wait, _, outs["hangs"] = outs["hangs"].partition("\n")
    assert wait.startswith("wait DistBackendError"), wait
    assert 1.0 <= float(wait.split()[2]) < 3.0, wait  # the 1 s given to wait(), not the group's 5 s
    assert "openreg recv (group '0', rank 0 of 2, 16 bytes of Float on openreg:0) failed" in wait
    for how, out in outs.items():
        assert out.startswith("DistBackendError"), (how, out)
        seconds = int(out.split()[1])
        # within the 5 s timeout (this call is not predicted: it waits for the ranks' rows in the store)
        assert seconds <= 6, out
        assert "openreg allreduce (group '0', rank 0 of 2, 16 bytes of Float on openreg:0) failed" in out


def test_cpu_users_init_with_no_backend() -> None:
    """With openreg_lab imported, a CPU-only program's init_process_group() still works (Gloo), and
    destroy_process_group ends the groups' threads."""
    ports = free_port(), free_port()
    code = textwrap.dedent(
        f"""
        import gc, os, sys, torch, torch.distributed as dist
        sys.path.insert(0, {REPO!r})
        import openreg_lab
        def gloo_workers():
            tasks = os.listdir("/proc/self/task")
            names = [open(f"/proc/self/task/{{t}}/comm").read().strip() for t in tasks]
            return names.count("pt_gloo_runloop")
        dist.init_process_group(init_method="tcp://127.0.0.1:{ports[0]}", rank=0, world_size=1)
        x = torch.ones(3); dist.all_reduce(x)
        y = torch.ones(2, device="openreg"); dist.all_reduce(y)
        print("workers while the group lives:", gloo_workers())
        dist.destroy_process_group()
        gc.collect()
        print("workers after destroy:", gloo_workers())
        dist.init_process_group(init_method="tcp://127.0.0.1:{ports[1]}", rank=0, world_size=1)
        from torch.distributed.fsdp import fully_shard
        m = fully_shard(torch.nn.Linear(2, 2))
        print(dist.get_backend(), x.tolist(), type(m.weight).__name__)
        dist.destroy_process_group()
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "workers while the group lives: 2"  # one Gloo group, its two workers
    assert lines[1] == "workers after destroy: 0"
    assert lines[2] == "undefined [1.0, 1.0, 1.0] DTensor"


def test_from_cuda_maps_nccl() -> None:
    from openreg_lab.device._distributed import cuda_backend_name

    assert cuda_backend_name("nccl") == "ogloo"
    assert cuda_backend_name("cpu:gloo,cuda:nccl") == "cpu:gloo,openreg:ogloo"
    assert cuda_backend_name("gloo") == "gloo"
    with openreg_lab.from_cuda():
        assert dist.is_nccl_available()
    assert not dist.is_nccl_available()
    assert torch.distributed.init_process_group is dist.distributed_c10d.init_process_group
