"""``nn.DataParallel`` over openreg devices, and the copies it needs from ``torch._C`` (Note
[DataParallel's primitives] in ``openreg_lab/device/_comm.py``)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.parallel import comm

# torch's comm says so when DataParallel sums the replicas' gradients on a build without NCCL
NO_NCCL = "PyTorch is not compiled with NCCL support"


class Net(nn.Module):
    """A small model that notes where each replica ran and on how many rows."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
        self.seen: list[tuple[torch.device, int]] = []

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        self.seen.append((x.device, x.shape[0]))
        return self.layers(x) * scale


def test_data_parallel_scatters_over_two_devices_and_trains_as_on_the_cpu():
    # Without openreg's primitives: AttributeError: module 'torch._C' has no attribute '_scatter'.
    torch.manual_seed(0)
    cpu = Net()
    model = copy.deepcopy(cpu).to("openreg")
    dp = nn.DataParallel(model)
    assert dp.device_ids == [0, 1] and dp.src_device_obj == torch.device("openreg", 0)
    x = torch.randn(6, 4)
    y = dp(x, scale=2.0)  # the keyword argument is copied to each replica
    with pytest.warns(UserWarning, match=NO_NCCL):
        y.pow(2).sum().backward()
    want = cpu(x, scale=2.0)
    want.pow(2).sum().backward()
    assert y.device == torch.device("openreg", 0)
    torch.testing.assert_close(y.cpu(), want)
    for ours, theirs in zip(model.parameters(), cpu.parameters(), strict=True):
        assert ours.grad.device == torch.device("openreg", 0)
        torch.testing.assert_close(ours.grad.cpu(), theirs.grad)
    # each replica ran on its device, on its half of the batch (the replicas record into the
    # module they copy, whose list the replicas share)
    assert sorted(model.seen, key=str) == [(torch.device("openreg", 0), 3), (torch.device("openreg", 1), 3)]
    # the input on a device, the output gathered on the other
    out = nn.DataParallel(model, output_device=1)(x.to("openreg:1"))
    assert out.device == torch.device("openreg", 1)
    torch.testing.assert_close(out.cpu(), cpu(x))


def test_data_parallel_on_one_device_moves_the_module_there_and_runs_it():
    torch.manual_seed(0)
    cpu = nn.Linear(4, 2)
    dp = nn.DataParallel(copy.deepcopy(cpu), device_ids=[1])
    assert dp.module.weight.device == torch.device("openreg", 1)
    x = torch.randn(5, 4)
    y = dp(x)
    assert y.device == torch.device("openreg", 1)
    torch.testing.assert_close(y.cpu(), cpu(x))
    functional = nn.parallel.data_parallel(dp.module, x.to("openreg:1"), device_ids=[1])
    torch.testing.assert_close(functional.cpu(), cpu(x))


def test_comm_scatters_gathers_and_broadcasts_between_openreg_devices():
    x = torch.arange(12.0).reshape(6, 2)
    a, b = comm.scatter(x, [0, 1])
    assert (a.device, b.device) == (torch.device("openreg", 0), torch.device("openreg", 1))
    assert torch.equal(a.cpu(), x[:3]) and torch.equal(b.cpu(), x[3:])
    parts = comm.scatter(x.to("openreg:1"), [1, 0], chunk_sizes=[1, 5])
    assert [p.shape[0] for p in parts] == [1, 5] and parts[0].device == torch.device("openreg", 1)
    assert torch.equal(comm.gather(parts, destination="cpu"), x)  # the primitive's -1
    assert comm.gather([a, b], destination=1).device == torch.device("openreg", 1)
    w = torch.ones(3, device="openreg:0", requires_grad=True)
    [[w0], [w1]] = comm.broadcast_coalesced([w], [0, 1])
    assert w0 is w  # the first device's are the tensors themselves (DataParallel's replica 0)
    assert w1.device == torch.device("openreg", 1) and not w1.requires_grad and torch.equal(w1.cpu(), w.cpu())
    same, other = comm.broadcast(w, [0, 1])
    assert same is w and other.device == torch.device("openreg", 1)
    out = [torch.zeros(3, device="openreg:1"), torch.zeros(3, device="openreg:0")]
    comm.broadcast(torch.arange(3.0), out=out)
    assert all(torch.equal(o.cpu(), torch.arange(3.0)) for o in out)
    halves = [torch.empty(2, 2, device="openreg:1"), torch.empty(4, 2, device="openreg:0")]
    comm.scatter(x, out=halves)
    assert torch.equal(halves[0].cpu(), x[:2]) and torch.equal(halves[1].cpu(), x[2:])
    target = torch.empty(6, 2, device="openreg:0")
    comm.gather(halves, out=target)
    assert torch.equal(target.cpu(), x)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: comm.scatter(torch.ones(4), []), "scatter: expected at least one device to scatter to"),
        (
            lambda: comm.scatter(torch.ones(4), [0, 1], chunk_sizes=[4]),
            "scatter: expected one chunk size per device, got 1 sizes for 2 devices",
        ),
        (
            lambda: comm.broadcast_coalesced([torch.ones(1, device="openreg:1")], [0, 1]),
            r"broadcast_coalesced: every tensor must be on devices\[0\] \(openreg:0\), but tensor 0 is on "
            "openreg:1",
        ),
        (
            lambda: comm.gather([torch.ones(1), torch.ones(1)], destination=0),
            "gather: expected openreg tensors, but tensor 0 is on cpu",
        ),
    ],
)
def test_comm_refuses_what_cuda_refuses_naming_it(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()
