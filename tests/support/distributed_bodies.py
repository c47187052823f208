"""Test bodies run on every rank of a ``RankPool`` (tests/support/distributed_pool.py).

Each takes ``(rank, world, *args)``, runs inside the pool's process group and asserts on its own
rank; what it returns is sent back to the test (plain Python values only).
"""

from __future__ import annotations

import copy
import datetime
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import openreg_lab

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int64": torch.int64}


def ready(rank: int, world: int) -> str:
    return dist.get_backend()


def _dev(rank: int) -> torch.device:
    return torch.device("openreg", rank % torch.openreg.device_count())


def _value(rank: int, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Rank-dependent small integers (exact in every dtype): rank + 1 + arange(n) % 3."""
    return (torch.arange(n) % 3 + rank + 1).to(dtype).to(device)


def every_collective(rank: int, world: int, dtype_name: str) -> dict[str, int]:
    """Every collective of the public API on openreg tensors, checked against the same on CPU."""
    dtype = DTYPES[dtype_name]
    dev = _dev(rank)
    n = 6
    vals = [_value(r, n, dtype, torch.device("cpu")) for r in range(world)]
    total = torch.stack(vals).sum(0)
    done: dict[str, int] = {}

    def same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
        assert got.device == dev, (what, got.device)
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, msg=what)
        done[what] = done.get(what, 0) + 1

    x = _value(rank, n, dtype, dev)
    dist.all_reduce(x)
    same(x, total, "all_reduce")
    ops = {
        dist.ReduceOp.SUM: total,
        dist.ReduceOp.MAX: torch.stack(vals).amax(0),
        dist.ReduceOp.MIN: torch.stack(vals).amin(0),
        dist.ReduceOp.PRODUCT: torch.stack(vals).prod(0),
    }
    if not dtype.is_floating_point:
        ops[dist.ReduceOp.BAND] = vals[0].clone()
        ops[dist.ReduceOp.BOR] = vals[0].clone()
        ops[dist.ReduceOp.BXOR] = vals[0].clone()
        for v in vals[1:]:
            ops[dist.ReduceOp.BAND] &= v
            ops[dist.ReduceOp.BOR] |= v
            ops[dist.ReduceOp.BXOR] ^= v
    for op, want in ops.items():
        x = _value(rank, n, dtype, dev)
        dist.all_reduce(x, op=op)
        same(x, want.to(dtype), f"all_reduce {op}")
    if dtype.is_floating_point:
        x = _value(rank, n, dtype, dev)
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        same(x, (total.double() / world).to(dtype), "all_reduce avg")
    else:
        try:
            dist.all_reduce(_value(rank, n, dtype, dev), op=dist.ReduceOp.AVG)
        except (RuntimeError, ValueError) as e:
            assert "AVG needs floating-point tensors" in str(e), e
            done["avg refused"] = 1
    x = _value(rank, n, dtype, dev)
    dist.broadcast(x, src=world - 1)
    same(x, vals[world - 1], "broadcast")
    x = _value(rank, n, dtype, dev)
    dist.reduce(x, dst=0)
    if rank == 0:
        same(x, total, "reduce")
    outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)]
    dist.all_gather(outs, _value(rank, n, dtype, dev))
    for r in range(world):
        same(outs[r], vals[r], "all_gather")
    out = torch.empty(world * n, dtype=dtype, device=dev)
    dist.all_gather_into_tensor(out, _value(rank, n, dtype, dev))
    same(out, torch.cat(vals), "all_gather_into_tensor")
    # reduce_scatter: rank r gets the sum over ranks of their chunk r
    chunks = [_value(rank + r, n, dtype, dev) for r in range(world)]
    want = sum(_value(q + rank, n, dtype, torch.device("cpu")) for q in range(world))
    y = torch.empty(n, dtype=dtype, device=dev)
    dist.reduce_scatter(y, chunks)
    same(y, want, "reduce_scatter")
    y = torch.empty(n, dtype=dtype, device=dev)
    dist.reduce_scatter_tensor(y, torch.cat(chunks))
    same(y, want, "reduce_scatter_tensor")
    # all_to_all: rank r sends chunk q (value 10 * r + q) to rank q
    ins = [torch.full((n,), 10 * rank + q, dtype=dtype, device=dev) for q in range(world)]
    outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for q in range(world):
        same(outs[q], torch.full((n,), 10 * q + rank, dtype=dtype), "all_to_all")
    y = torch.empty(world * n, dtype=dtype, device=dev)
    dist.all_to_all_single(y, torch.cat(ins))
    same(
        y,
        torch.cat([torch.full((n,), 10 * q + rank, dtype=dtype) for q in range(world)]),
        "all_to_all_single",
    )
    # uneven splits: rank r sends q + 1 elements to rank q
    send = torch.cat([torch.full((q + 1,), 10 * rank + q, dtype=dtype) for q in range(world)]).to(dev)
    recv = torch.empty(world * (rank + 1), dtype=dtype, device=dev)
    dist.all_to_all_single(recv, send, [rank + 1] * world, [q + 1 for q in range(world)])
    same(
        recv,
        torch.cat([torch.full((rank + 1,), 10 * q + rank, dtype=dtype) for q in range(world)]),
        "all_to_all_single uneven",
    )
    gathered = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(_value(rank, n, dtype, dev), gathered, dst=0)
    if rank == 0:
        for r in range(world):
            same(gathered[r], vals[r], "gather")
    y = torch.empty(n, dtype=dtype, device=dev)
    dist.scatter(y, [_value(q, n, dtype, dev) for q in range(world)] if rank == 0 else None, src=0)
    same(y, vals[rank], "scatter")
    # point to point on a ring, blocking and async, and batched
    right, left = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        dist.send(_value(rank, n, dtype, dev), right)
        y = torch.empty(n, dtype=dtype, device=dev)
        dist.recv(y, left)
    else:
        y = torch.empty(n, dtype=dtype, device=dev)
        dist.recv(y, left)
        dist.send(_value(rank, n, dtype, dev), right)
    same(y, vals[left], "send/recv")
    y = torch.empty(n, dtype=dtype, device=dev)
    works = [dist.isend(_value(rank, n, dtype, dev), right), dist.irecv(y, left)]
    for w in works:
        w.wait()
    same(y, vals[left], "isend/irecv")
    y = torch.empty(n, dtype=dtype, device=dev)
    ops = [dist.P2POp(dist.isend, _value(rank, n, dtype, dev), right), dist.P2POp(dist.irecv, y, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(y, vals[left], "batch_isend_irecv")
    # coalesced forms
    xs = [_value(rank, n, dtype, dev), _value(rank, 3, dtype, dev)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for t in xs:
            dist.all_reduce(t)
    cm.wait()
    same(xs[0], total, "coalesced all_reduce")
    same(
        xs[1],
        torch.stack([_value(r, 3, dtype, torch.device("cpu")) for r in range(world)]).sum(0),
        "coalesced all_reduce",
    )
    outs = [torch.empty(world * n, dtype=dtype, device=dev) for _ in range(2)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o in outs:
            dist.all_gather_into_tensor(o, _value(rank, n, dtype, dev))
    cm.wait()
    for o in outs:
        same(o, torch.cat(vals), "coalesced all_gather_into_tensor")
    dist.barrier()
    return done


def async_work(rank: int, world: int) -> dict[str, Any]:
    """``async_op=True``: the Work's wait, is_completed, get_future (its value: the openreg tensors)."""
    dev = _dev(rank)
    x = torch.full((1000,), float(rank + 1), device=dev)
    work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    assert work.wait(timeout=datetime.timedelta(seconds=20))
    assert work.is_completed() and work.is_success()
    value = fut.value()
    assert value[0].device == dev and value[0].data_ptr() == x.data_ptr()
    expect = world * (world + 1) / 2
    assert torch.equal(x.cpu(), torch.full((1000,), expect))
    assert torch.equal(chained.wait().cpu(), torch.full((1000,), 2 * expect))
    # AVG finishes (divides) before the future completes
    y = torch.full((8,), float(rank), device=dev)
    w = dist.all_reduce(y, op=dist.ReduceOp.AVG, async_op=True)
    got = w.get_future().wait()[0]
    assert torch.equal(got.cpu(), torch.full((8,), (world - 1) / 2)), got
    return {"result": w.result()[0].device.type}


def subgroups(rank: int, world: int) -> list[float]:
    """``new_group``: a collective on a subgroup involves only its ranks; others skip it."""
    dev = _dev(rank)
    evens = dist.new_group([r for r in range(world) if r % 2 == 0])
    odds = dist.new_group([r for r in range(world) if r % 2 == 1])
    mine = evens if rank % 2 == 0 else odds
    x = torch.full((4,), float(rank), device=dev)
    dist.all_reduce(x, group=mine)
    y = torch.full((4,), float(rank), device=dev)
    dist.broadcast(y, src=world - 1, group=dist.group.WORLD)
    dist.destroy_process_group(evens)
    dist.destroy_process_group(odds)
    return [float(x[0]), float(y[0])]


def reinit(rank: int, world: int, port: int, form: str) -> list[Any]:
    """``destroy_process_group``, then ``init_process_group`` again on another port, in ``form``:
    no backend, ``device_id=`` an openreg device, or ``"cpu:gloo,openreg:ogloo"``."""
    dist.destroy_process_group()
    assert not dist.is_initialized()
    kwargs: dict[str, Any] = {
        "none": {},
        "device_id": {"device_id": _dev(rank)},
        "pairs": {"backend": "cpu:gloo,openreg:ogloo"},
    }[form]
    dist.init_process_group(
        init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=30), **kwargs,
    )  # fmt: skip
    x = torch.ones(3, device=_dev(rank))
    dist.all_reduce(x)
    c = torch.ones(2)
    dist.all_reduce(c)  # CPU tensors go to Gloo in every form
    return [float(x[0]), float(c[0]), dist.get_backend()]


def mixed_devices(rank: int, world: int) -> dict[str, str]:
    """CPU and openreg tensors in one program; a collective on two devices names both."""
    dev = _dev(rank)
    c = torch.full((3,), float(rank))
    o = torch.full((3,), float(rank), device=dev)
    dist.all_reduce(c)
    dist.all_reduce(o)
    assert c.device.type == "cpu" and torch.equal(c, o.cpu())
    errors = {}
    outs = [torch.empty(3, device=dev), torch.empty(3)]
    try:
        dist.all_gather(outs[:world], o)  # the second output is on the CPU
    except (RuntimeError, ValueError) as e:
        errors["two devices"] = str(e)
    dist.barrier()
    return errors


def mismatch(rank: int, world: int, what: str, device: str = "") -> str:
    """Ranks disagreeing on the call get the same clear error, and the group lives on.

    On a fresh group, whose first call nobody can have predicted: every rank waits for the
    agreement (Note [Ranks agree before Gloo runs]), so nothing is sent. On openreg tensors, or on
    ``device`` ("cpu": a "checked_gloo" group).
    """
    dev = torch.device(device) if device else _dev(rank)
    group = dist.new_group()
    x = torch.ones(4, device=dev)
    message = ""
    try:
        if what == "shape":
            dist.all_reduce(torch.ones(4 + rank, device=dev), group=group)
        elif what == "dtype":
            dist.all_reduce(x if rank == 0 else x.long(), group=group)
        elif what == "root":
            dist.broadcast(x, src=rank, group=group)
        else:  # the reduce op
            dist.all_reduce(x, op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX, group=group)
    except ValueError as e:
        message = str(e)
    y = torch.ones(2, device=dev)
    dist.all_reduce(y, group=group)  # the group still works
    assert float(y[0]) == world
    dist.destroy_process_group(group)
    return message


def mismatch_ahead(rank: int, world: int) -> dict[str, Any]:
    """A rank that makes the predicted call runs ahead; another rank disagreeing joins it with a
    decoy, so both get the same ValueError and the group lives on (Note [Ranks agree before Gloo
    runs])."""
    dev = _dev(rank)
    group = dist.new_group()
    x = torch.ones(4, device=dev)
    for _ in range(3):  # the group learns that all_reduce of 4 floats follows itself
        dist.all_reduce(x, group=group)
    errors: dict[str, Any] = {}
    try:
        # the first half repeats the predicted call (and issues it at once); the others do not
        dist.all_reduce(x if rank < max(1, world // 2) else torch.ones(5, device=dev), group=group)
    except ValueError as e:
        errors["mismatch"] = str(e)
    y = torch.full((3,), float(rank), device=dev)
    dist.all_reduce(y, group=group)  # the group still works, and predicts alike on every rank
    dist.all_reduce(y, group=group)
    errors["after"] = y.tolist()
    dist.destroy_process_group(group)
    return errors


def slow_rank_behind_a_predicted_call(rank: int, world: int) -> float:
    """A rank that makes the predicted call long after the others (past the watchdog's grace, so
    theirs post their rows and look for the others') is no disagreement: the call completes."""
    import time

    dev = _dev(rank)
    group = dist.new_group()
    x = torch.ones(8, device=dev)
    for _ in range(3):
        dist.all_reduce(x, group=group)
    if rank == world - 1:
        time.sleep(0.4)
    dist.all_reduce(x, group=group)
    dist.all_reduce(x, group=group)  # and the group goes on
    dist.destroy_process_group(group)
    return float(x[0])


def predicted_call_runs_ahead(rank: int, world: int) -> bool:
    """A predicted async collective returns before the other ranks call it (no exchange to wait
    for); an unpredicted one waits for them. Rank 1 calls only once rank 0 says it returned."""
    import gc

    dev = _dev(rank)
    store = dist.distributed_c10d._get_default_store()
    threads = len(os.listdir("/proc/self/task"))
    group = dist.new_group()
    x = torch.ones(8, device=dev)
    dist.all_reduce(x, group=group)
    dist.all_reduce(x, group=group)  # now predicted: all_reduce of 8 floats follows itself
    work = None
    if rank == 0:
        work = dist.all_reduce(x, group=group, async_op=True)
        store.set("ahead/returned", "1")  # only reached if the call did not wait for rank 1
        work.wait()
    else:
        store.wait(["ahead/returned"], datetime.timedelta(seconds=20))
        dist.all_reduce(x, group=group)
    dist.barrier(group=group)
    if rank == 0:
        store.delete_key("ahead/returned")
    assert float(x[0]) == world**3
    dist.destroy_process_group(group)
    del group, work
    gc.collect()
    # the group's threads (Gloo's and the agreement's watchdog) ended with it
    names = [Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task")]
    assert len(names) == threads, names
    return True


def _mlp(unused: bool = False) -> nn.Module:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 16)
            self.b = nn.Linear(16, 4)
            self.c = nn.Linear(16, 4) if unused else None  # never used in forward

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.relu(self.a(x)))

    torch.manual_seed(0)
    return Net()


def _batches(world: int, steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(4 * world, 8, generator=g), torch.randn(4 * world, 4, generator=g)) for _ in range(steps)
    ]


def ddp_parity(
    rank: int, world: int, bucket_cap_mb: float, find_unused: bool, no_sync: bool
) -> dict[str, Any]:
    """DDP on openreg equals one process training on the full batch (on the CPU)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _dev(rank)
    ref = _mlp(find_unused)
    model = DDP(copy.deepcopy(ref).to(dev), bucket_cap_mb=bucket_cap_mb, find_unused_parameters=find_unused)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    per = 4
    batches = _batches(world, 4)
    with openreg_lab.trace() as t:
        for i in range(0, len(batches), 2 if no_sync else 1):
            group = batches[i : i + 2] if no_sync else batches[i : i + 1]
            opt.zero_grad()
            ref_opt.zero_grad()
            for j, (x, y) in enumerate(group):
                xs, ys = x[rank * per : (rank + 1) * per].to(dev), y[rank * per : (rank + 1) * per].to(dev)
                if no_sync and j == 0:
                    with model.no_sync():
                        F.mse_loss(model(xs), ys).backward()
                else:
                    F.mse_loss(model(xs), ys).backward()
                F.mse_loss(ref(x), y).backward()
            opt.step()
            ref_opt.step()
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6, msg=name)
    coll = t.collectives()
    events = t.events
    allreduces = coll[coll["name"] == "allreduce"]
    # DDP's post hooks of the AccumulateGrad nodes issue the bucket all-reduces (c10d::allreduce_)
    # inside those nodes' backward events (Note [A backward node ends with its hooks])
    nodes = []
    for c in allreduces.itertuples():
        up = c.parent
        while up >= 0 and events.at[up, "kind"] != "backward":
            up = int(events.at[up, "parent"])
        nodes.append(events.at[up, "name"] if up >= 0 else None)
    assert allreduces["issued_in"].tolist() == nodes
    return {
        "allreduces": len(allreduces),
        "in_backward": sum(n is not None for n in nodes),
        "nodes": sorted({str(n) for n in nodes}),
        "issued_by": sorted(set(allreduces["issued_by"])),
        "bytes": int(allreduces["bytes"].sum()),
        "completed": bool((allreduces["dur_ns"] > 0).all()),
        "params_bytes": sum(p.numel() * 4 for p in model.module.parameters() if p.requires_grad),
    }


def ddp_timer(rank: int, world: int) -> dict[str, Any]:
    """DDP's runtime statistics on openreg: the reducer's Timer for PrivateUse1 fills them, silently.

    DDP's logger prints its warning from C++ straight to stderr, so the body reads file descriptor 2.
    """
    import tempfile
    import warnings

    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _dev(rank)
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as err, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(err.fileno(), 2)
        try:
            model = DDP(_mlp().to(dev))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in _batches(world, 3):
                opt.zero_grad()
                F.mse_loss(model(x[:4].to(dev)), y[:4].to(dev)).backward()
                opt.step()
            data = model._get_ddp_logging_data()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    keys = ("avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time")
    return {
        "warnings": [line for line in stderr.splitlines() if "Time stats" in line]
        + [str(w.message) for w in caught if "Time stats" in str(w.message)],
        "times": {k: int(data.get(k, 0)) for k in keys},
        "overlap_key": "avg_backward_compute_comm_overlap_time" in data,
    }


def fsdp_parity(rank: int, world: int) -> dict[str, int]:
    """FSDP2 (``fully_shard``) on openreg equals one process on the full batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dev = _dev(rank)
    torch.openreg.set_device(dev)
    ref = _mlp()
    model = copy.deepcopy(ref).to(dev)
    mesh = init_device_mesh("openreg", (world,))
    fully_shard(model.a, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    per = 4
    with openreg_lab.trace() as t:
        for x, y in _batches(world, 3):
            opt.zero_grad()
            ref_opt.zero_grad()
            xs, ys = x[rank * per : (rank + 1) * per].to(dev), y[rank * per : (rank + 1) * per].to(dev)
            F.mse_loss(model(xs), ys).backward()
            F.mse_loss(ref(x), y).backward()
            opt.step()
            ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        full = p.full_tensor().detach().cpu()
        torch.testing.assert_close(full, q.detach(), rtol=1e-5, atol=1e-6, msg=name)
    names = t.collectives()["name"].value_counts().to_dict()
    return {k: int(v) for k, v in names.items()}


def dtensor_op(rank: int, world: int) -> list[float]:
    """A DTensor matmul sharded over the ranks' openreg devices equals the CPU result."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    torch.openreg.set_device(_dev(rank))
    mesh = init_device_mesh("openreg", (world,))
    torch.manual_seed(3)
    a, b = torch.randn(4 * world, 6), torch.randn(6, 5)
    da = distribute_tensor(a, mesh, [Shard(0)])
    db = distribute_tensor(b, mesh, [Replicate()])
    out = (da @ db).full_tensor()
    assert out.device.type == "openreg"
    torch.testing.assert_close(out.cpu(), a @ b, rtol=1e-5, atol=1e-5)
    total = da.sum().full_tensor()
    torch.testing.assert_close(total.cpu(), a.sum(), rtol=1e-5, atol=1e-4)
    return [float(total)]


def traced_collectives(rank: int, world: int, path: str) -> dict[str, Any]:
    """Collective events: name, bytes, dtype, rank, peer, group size, parent, wait; saved per rank."""
    dev = _dev(rank)
    with openreg_lab.trace() as t:
        x = torch.ones(256, device=dev)
        dist.all_reduce(x)
        y = torch.ones(16, dtype=torch.bfloat16, device=dev)
        dist.broadcast(y, src=0)
        if rank == 0:
            dist.send(torch.ones(8, dtype=torch.int64, device=dev), 1)
        elif rank == 1:
            dist.recv(torch.empty(8, dtype=torch.int64, device=dev), 0)
        w = dist.all_reduce(torch.ones(4, device=dev), async_op=True)
        w.wait()
    t.save(os.path.join(path, f"r{rank}.trace"))
    c = t.collectives()
    return {
        "rows": c[
            ["name", "group", "seq", "rank", "peer", "group_size", "bytes", "dtype", "device"]
        ].values.tolist(),
        "issued_by": c["issued_by"].tolist(),
        "issued_in": c["issued_in"].tolist(),
        "waited": (c["wait_ns"] > 0).tolist(),
        "completed": bool((c["dur_ns"] > 0).all()),
        "kinds": t.events["kind"].value_counts().to_dict(),
    }


def straggler(rank: int, world: int, path: str, extra: int, late_start: float = 0.0) -> dict[str, Any]:
    """Rank 1 runs ``extra`` more 384x384 matrix products (a few ms each, so that the wait they
    cause outweighs a loaded machine's scheduling noise) than the others before the second
    all_reduce (its source line is returned): the straggler the merged view must name, with that op
    and line. Rank 0 sleeps ``late_start`` seconds before the first all_reduce: a slow start-up,
    which must not make it the straggler."""
    dev = _dev(rank)
    a = torch.randn(384, 384, device=dev)
    with openreg_lab.trace(stack=True) as t:
        x = torch.ones(64, device=dev)
        if rank == 0:
            time.sleep(late_start)
        dist.all_reduce(x)
        for _ in range(3):
            a = torch.tanh(a)
        if rank == 1:
            for _ in range(extra):
                b = a @ a  # the straggler's extra work
            a = a + b.mean()
        dist.all_reduce(x)
        dist.all_reduce(x)
    t.save(os.path.join(path, f"s{rank}.trace"))
    import inspect

    lines = inspect.getsource(straggler).splitlines()
    first = straggler.__code__.co_firstlineno
    at = next(i for i, text in enumerate(lines) if "the straggler's extra work" in text)
    return {"source": f"{__file__}:{first + at}", "job": t.job.as_dict()}


def traced_subgroup_only(rank: int, world: int, path: str) -> dict[str, Any]:
    """Collectives on a new group of the last rank only (its group rank 0 is not its rank), and a
    trace with no collective at all."""
    dev = _dev(rank)
    group = dist.new_group([world - 1])
    with openreg_lab.trace() as t:
        if rank == world - 1:
            dist.all_reduce(torch.ones(8, device=dev), group=group)
    t.save(os.path.join(path, f"g{rank}.trace"))
    with openreg_lab.trace() as quiet:
        torch.ones(4, device=dev).sum()
    quiet.save(os.path.join(path, f"q{rank}.trace"))
    dist.destroy_process_group(group)
    return {"group_ranks": t.collectives()["rank"].tolist(), "job": t.job.as_dict()}


def _refusal(fn: Any) -> str:
    """The ValueError ``fn()`` raises, as a string ("" if none)."""
    try:
        fn()
    except ValueError as e:
        return str(e)
    return ""


def mixed_device_ranks(rank: int, world: int) -> dict[str, Any]:
    """Rank 0 passes a CPU tensor, the others openreg tensors: a ValueError on every rank, at once,
    naming both devices; the group lives on (the device type is part of the agreement)."""
    group = dist.new_group()
    x = torch.ones(4) if rank == 0 else torch.ones(4, device=_dev(rank))
    message = _refusal(lambda: dist.all_reduce(x, group=group))
    y = torch.ones(2, device=_dev(rank))
    dist.all_reduce(y, group=group)
    c = torch.ones(2)
    dist.all_reduce(c, group=group)  # CPU tensors on every rank: fine
    dist.destroy_process_group(group)
    return {"message": message, "after": [float(y[0]), float(c[0])]}


def reinit_same_store(rank: int, world: int, port: int) -> list[float]:
    """destroy_process_group() then init_process_group() over one store, while the old group is still
    referenced (an un-waited Work): the new group never reads the old one's agreement rows
    (Note [A group's incarnations])."""
    import time

    dist.destroy_process_group()
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=datetime.timedelta(seconds=30))
    kwargs: dict[str, Any] = {"store": store, "rank": rank, "world_size": world}
    dist.init_process_group("ogloo", timeout=datetime.timedelta(seconds=20), **kwargs)
    dev = _dev(rank)
    x = torch.ones(4, device=dev)
    for _ in range(3):
        dist.all_reduce(x)
    old_group, work = dist.group.WORLD, dist.all_reduce(x, async_op=True)
    work.wait()
    dist.destroy_process_group()
    dist.init_process_group("ogloo", timeout=datetime.timedelta(seconds=20), **kwargs)
    if rank == world - 1:
        time.sleep(0.5)  # the others read this rank's slot before it posts in the new group
    y = torch.ones(5, device=dev)
    dist.all_reduce(y)
    del old_group, work
    return [float(x[0]), float(y[0])]


def p2p_mismatch(rank: int, world: int, device: str = "") -> dict[str, Any]:
    """A send and its recv that disagree (dtype, then size): the same ValueError on both ranks,
    the receiver's tensor untouched; then matching ones work, also with each rank's irecv posted
    before its send (Note [A send meets its recv]). On openreg tensors, or on ``device``."""
    assert world == 2
    dev, peer = torch.device(device) if device else _dev(rank), 1 - rank
    out: dict[str, Any] = {}
    for case, (dtype, n) in {"dtype": (torch.int32, 4), "size": (torch.float32, 8)}.items():
        if rank == 0:
            out[case] = _refusal(lambda: dist.send(torch.full((4,), 1.5, device=dev), 1))
        else:
            y = torch.full((n,), 7, dtype=dtype, device=dev)
            out[case] = _refusal(lambda y=y: dist.recv(y, 0))
            out[f"{case} untouched"] = bool((y == 7).all())
    x = torch.full((3,), float(rank + 1), device=dev)
    y = torch.empty(3, device=dev)
    first = dist.irecv(y, peer)  # both ranks post their recv first: no rank waits at its irecv
    dist.send(x, peer)
    first.wait()
    out["ring"] = y.tolist()
    return out


def check_p2p_mismatch(r0: dict[str, Any], r1: dict[str, Any]) -> None:
    """Assert what ``p2p_mismatch`` returned on ranks 0 and 1: each disagreement one line on both
    ranks naming the send, the recv and what differs, the receiver's tensor untouched, and the
    matching ring after them delivered."""
    sent = "rank 0 sends one Float tensor of 4 elements and rank 1 receives into one "
    core = {"dtype": sent + "Int tensor of 4 elements", "size": sent + "Float tensor of 8 elements"}
    for case, what in core.items():
        assert r0[case].startswith("openreg send (group '0', rank 0 of 2): "), r0[case]
        assert r1[case].startswith("openreg recv (group '0', rank 1 of 2): "), r1[case]
        for message in (r0[case], r1[case]):
            assert what in message and "\n" not in message, message
            assert message.endswith("the receiver's tensor was not written"), message
        assert r1[f"{case} untouched"]
    assert r0["ring"] == [2.0, 2.0, 2.0] and r1["ring"] == [1.0, 1.0, 1.0]


def alltoall_bad_splits(rank: int, world: int) -> dict[str, Any]:
    """all_to_all_single with split sizes that disagree: the same ValueError on every rank before
    Gloo runs; the group lives on. Rank 0 expects 1 element from rank 1, which sends it 2."""
    assert world == 2
    dev = _dev(rank)
    group = dist.new_group()
    send = torch.arange(4.0, device=dev)
    if rank == 0:
        recv, out_splits, in_splits = torch.empty(2, device=dev), [1, 1], [1, 3]
    else:
        recv, out_splits, in_splits = torch.empty(5, device=dev), [3, 2], [2, 2]
    message = _refusal(lambda: dist.all_to_all_single(recv, send, out_splits, in_splits, group=group))
    # the same with matching splits works
    good = torch.empty(4, device=dev)
    dist.all_to_all_single(good, send, [2, 2], [2, 2], group=group)
    dist.destroy_process_group(group)
    return {"message": message, "good": good.tolist()}


def non_dense(rank: int, world: int) -> dict[str, Any]:
    """A strided view (x[::2]) is refused with NCCL's rule, on every rank, and no byte outside the
    view (nor inside) is written; one rank's view against another's dense tensor is a
    disagreement on every rank. The group lives on."""
    dev = _dev(rank)
    group = dist.new_group()
    out: dict[str, Any] = {}
    base = torch.arange(8.0, device=dev) + 10 * rank
    before = base.clone()
    out["allreduce"] = _refusal(lambda: dist.all_reduce(base[::2], group=group))
    out["broadcast"] = _refusal(lambda: dist.broadcast(base[::2], src=0, group=group))
    out["reduce"] = _refusal(lambda: dist.reduce(base[::2], dst=0, group=group))
    chunks = [torch.ones(8, device=dev)[::2] for _ in range(world)] if rank == 0 else None
    out["scatter"] = _refusal(lambda: dist.scatter(base[::2], chunks, src=0, group=group))
    out["untouched"] = torch.equal(base.cpu(), before.cpu())
    one = base[::2] if rank == 0 else torch.ones(4, device=dev)
    out["one rank"] = _refusal(lambda: dist.all_reduce(one, group=group))
    y = base[::2].contiguous()
    dist.all_reduce(y, group=group)  # the fix the message gives
    out["contiguous"] = y.tolist()
    dist.destroy_process_group(group)
    return out


def half_avg(rank: int, world: int) -> dict[str, Any]:
    """AVG in float16/bfloat16 of [1.5, 60000] on every rank: the mean is representable, the sum
    (120000) is not (Note [Averaging half-precision tensors])."""
    dev = _dev(rank)
    out: dict[str, Any] = {}
    for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        x = torch.tensor([1.5, 60000.0], dtype=dtype, device=dev)
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        out[f"all_reduce {name}"] = x.float().tolist()
        # reduce_scatter divides copies: the caller's input is not changed
        inp = torch.tensor([1.5, 60000.0] * world, dtype=dtype, device=dev)
        y = torch.empty(2, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(y, inp, op=dist.ReduceOp.AVG)
        out[f"reduce_scatter {name}"] = y.float().tolist()
        out[f"input kept {name}"] = inp.float().tolist() == [1.5, float(inp[1])] * world
    return out


def one_line_errors(rank: int, world: int) -> dict[str, str]:
    """Errors a program can make, each one line naming the collective, the group, what was passed
    and the fix, with no C++ backtrace; every rank raises alike and the group lives on."""
    dev = _dev(rank)
    group = dist.new_group()
    x = torch.ones(4, device=dev)
    out: dict[str, str] = {}
    short = torch.empty(4, dtype=torch.int16, device=dev)
    out["int16"] = _refusal(lambda: dist.all_reduce(short, group=group))
    uint32 = torch.empty(4, dtype=torch.uint32, device=dev)
    out["uint32"] = _refusal(lambda: dist.broadcast(uint32, src=0, group=group))
    float8 = torch.empty(4, dtype=torch.float8_e4m3fn, device=dev)
    out["float8"] = _refusal(lambda: dist.all_reduce(float8, group=group))
    premul = dist._make_nccl_premul_sum(2.0)
    out["premul_sum"] = _refusal(lambda: dist.all_reduce(x, op=premul, group=group))
    out["band float"] = _refusal(lambda: dist.all_reduce(x, op=dist.ReduceOp.BAND, group=group))
    out["output list"] = _refusal(lambda: dist.all_gather([torch.empty(4, device=dev)], x, group=group))
    out["avg int"] = _refusal(lambda: dist.all_reduce(x.long(), op=dist.ReduceOp.AVG, group=group))
    if rank == 0:
        other = _refusal(lambda: dist.all_reduce(x, group=group))
    else:
        other = _refusal(lambda: dist.broadcast(x, src=0, group=group))
    out["other collective"] = other
    y = torch.ones(2, device=dev)
    dist.all_reduce(y, group=group)
    out["after"] = str(float(y[0]))
    dist.destroy_process_group(group)
    return out


def gloo_group_refuses_openreg(rank: int, world: int) -> dict[str, Any]:
    """A group built with backend "gloo" serves CPU tensors; an openreg tensor gets one ValueError
    saying to use openreg's backend or none (Note [A group without openreg's backend])."""
    group = dist.new_group(backend="gloo")
    c = torch.ones(3)
    dist.all_reduce(c, group=group)
    message = _refusal(lambda: dist.all_reduce(torch.ones(4, device=_dev(rank)), group=group))
    dist.all_reduce(c, group=group)  # the group lives on
    dist.destroy_process_group(group)
    return {"message": message, "cpu": c.tolist()}
