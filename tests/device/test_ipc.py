"""openreg tensors and storages across processes.

Note [Sharing device memory across processes] in ``csrc/runtime/DeviceAllocator.cpp``: a tensor sent
through ``torch.multiprocessing`` arrives on the same device over the sender's memory. One peer
process per start method (``tests/support/ipc_peer.py``) runs every check in turn; each wait is bounded and
each test module fixture asserts that no child process outlives it.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import pickle
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import openreg_lab
from tests.support import ipc_peer

TIMEOUT = 120.0
BLOCK = 4096  # 1024 float32, already a multiple of the allocator's 512-byte rounding


def _children() -> set[int]:
    """Processes whose parent is this one, except multiprocessing's resource tracker (it lives as
    long as the interpreter, whoever starts it)."""
    me = str(os.getpid())
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            found.add(int(stat.parent.name))
    found.discard(getattr(multiprocessing.resource_tracker._resource_tracker, "_pid", None))
    return found


def _memory(device: int = 0) -> tuple[int, int]:
    return torch.openreg.memory_allocated(device), torch.openreg.memory_reserved(device)


class Peer:
    """A process started with ``method`` that runs ``ipc_peer`` bodies on request."""

    def __init__(self, method: str) -> None:
        ctx = torch.multiprocessing.get_context(method)
        self.inbox, self.outbox, self.mailbox = ctx.Queue(), ctx.Queue(), ctx.SimpleQueue()
        self.proc = ctx.Process(
            target=ipc_peer.serve, args=(self.inbox, self.outbox, self.mailbox), daemon=True
        )
        self.proc.start()
        self.run("memory")  # started and imported

    def run(self, body: str, *args: Any) -> Any:
        self.inbox.put((body, args))
        status, value = self.outbox.get(timeout=TIMEOUT)
        assert status == "ok", value
        return value

    def close(self) -> None:
        self.inbox.put(None)
        self.proc.join(TIMEOUT)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
        for q in (self.inbox, self.outbox):
            q.close()
            q.join_thread()
        self.mailbox.close()


@pytest.fixture(scope="module", params=["spawn", "forkserver"])
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    before = _children()
    p = Peer(request.param)
    yield p
    p.close()
    if request.param == "forkserver":
        multiprocessing.forkserver._forkserver._stop()  # type: ignore[attr-defined]
    assert p.proc.exitcode == 0
    assert _children() - before == set(), "a process outlived the test"


def test_a_received_tensor_is_on_the_same_device_over_the_same_memory(peer: Peer) -> None:
    t = torch.arange(6.0, device="openreg:1")
    got = peer.run("describe", t)
    assert (got["device"], got["size"], got["values"]) == ("openreg:1", (6,), [0, 1, 2, 3, 4, 5])
    # A write on the receiving side is seen by the sender...
    assert peer.run("add_in_place", t, 10.0) == [10, 11, 12, 13, 14, 15]
    assert t.tolist() == [10, 11, 12, 13, 14, 15]
    # ... and one on the sending side by a receiver still holding the tensor.
    peer.run("hold", t)
    t.mul_(2)
    assert peer.run("read_held") == [[20, 22, 24, 26, 28, 30]]
    peer.run("drop_held")


def test_views_keep_offset_sizes_and_strides_over_one_storage(peer: Peer) -> None:
    base = torch.arange(24.0, device="openreg").view(4, 6)
    view = base[1:, ::2]
    got = peer.run("describe", view)
    assert (got["size"], got["stride"], got["offset"]) == ((3, 3), (6, 2), 6)
    assert got["values"] == view.tolist()
    assert peer.run("views_share_storage", base, view) is True
    peer.run("add_in_place", view, 100.0)
    expected = torch.arange(24.0).view(4, 6)
    expected[1:, ::2] += 100
    assert torch.equal(base.cpu(), expected)


def test_parameters_and_storages_cross_too(peer: Peer) -> None:
    param = torch.nn.Parameter(torch.ones(3, device="openreg"))
    back = peer.run("echo", param)
    assert isinstance(back, torch.nn.Parameter) and back.requires_grad
    storage = torch.arange(4, dtype=torch.uint8, device="openreg").untyped_storage()
    back_storage = peer.run("echo", storage)
    assert back_storage.device == storage.device and back_storage.tolist() == [0, 1, 2, 3]
    assert back_storage.data_ptr() == storage.data_ptr()  # the very storage, not a copy
    empty = peer.run("echo", torch.empty(0, device="openreg:1"))
    assert (empty.device, empty.shape) == (torch.device("openreg:1"), (0,))


def test_a_received_storage_cannot_grow_past_the_shared_memory(peer: Peer) -> None:
    t = torch.ones(4, device="openreg")
    assert "not resizable" in peer.run("resize", t)
    assert t.tolist() == [1.0] * 4


def test_a_models_parameters_shared_with_the_peer_are_updated_there(peer: Peer) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).to("openreg")
    before = [p.detach().cpu().clone() for p in model.parameters()]
    assert peer.run("step", list(model.parameters()), 0.5) == [True, True]
    for p, old in zip(model.parameters(), before, strict=True):
        assert torch.equal(p.detach().cpu(), old + 0.5)


def test_a_tensor_sent_back_by_a_receiver_is_the_senders_own_storage(peer: Peer) -> None:
    t = torch.arange(4.0, device="openreg")
    back = peer.run("echo", t)
    assert back.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    back.add_(1)
    assert t.tolist() == [1, 2, 3, 4]


def test_the_sender_drops_its_tensor_before_the_receiver_maps_it(peer: Peer) -> None:
    gc.collect()
    allocated, _ = _memory()
    t = torch.full((1024,), 7.0, device="openreg")
    peer.mailbox.put(t)  # pickled here: the storage moves to a shared segment
    assert _memory()[0] == allocated + BLOCK
    reserved = _memory()[1]
    del t
    gc.collect()
    # Freed at once and not cached (a receiver may map it): both statistics drop by the block.
    assert _memory() == (allocated, reserved - BLOCK)
    reuse = [torch.full((1024,), -1.0, device="openreg") for _ in range(4)]
    held_memory = peer.run("take_from_mailbox")
    assert peer.run("read_held") == [[7.0] * 1024]
    assert held_memory == peer.run("drop_held")  # the receiver counts none of it
    assert all(r.eq(-1).all() for r in reuse)


def test_statistics_on_both_sides_when_the_peer_sends(peer: Peer) -> None:
    gc.collect()
    mine = _memory()
    t, (allocated, reserved) = peer.run("make", 1024)
    assert _memory() == mine  # received memory is the sender's
    assert (t.device, t.tolist()) == (torch.device("openreg:0"), list(range(1024)))
    # The sender frees its tensor: its block leaves its statistics at once ...
    assert tuple(peer.run("drop_held")) == (allocated - BLOCK, reserved - BLOCK)
    # ... while this side keeps reading and writing the memory.
    t.add_(1)
    assert t.sum().item() == sum(range(1, 1025))
    assert _memory() == mine


# Spawned workers cost ~25 s on two busy cores (each imports torch); the spawn and forkserver peers
# above already cover how a spawned process receives and sends.
@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_dataloader_whose_workers_return_device_tensors_delivers_every_batch(method: str) -> None:
    gc.collect()
    before, mine = _children(), _memory()
    loader = DataLoader(
        ipc_peer.Batches(),
        batch_size=2,
        num_workers=2,
        multiprocessing_context=method,
        timeout=TIMEOUT,
    )
    batches = list(loader)
    del loader
    gc.collect()
    assert _children() - before == set(), "a DataLoader worker outlived the loader"
    # The workers are gone; their batches stay readable here, and counted on their side only.
    assert [(b.device.type, b.shape) for b in batches] == [("openreg", (2, 4))] * 4
    assert torch.equal(torch.cat([b.cpu() for b in batches]), torch.arange(8.0)[:, None].expand(8, 4))
    assert _memory() == mine


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(6.0, device="openreg").view(2, 3)[:, 1:],
        lambda: torch.nn.Parameter(torch.ones(2, device="openreg:1")),
        lambda: torch.ones(5, device="openreg").untyped_storage(),
    ],
    ids=["view", "parameter", "storage"],
)
def test_pickling_for_multiprocessing_in_one_process_gives_the_same_memory(make: Any) -> None:
    obj = make()
    ptr = obj.data_ptr()
    back = pickle.loads(ForkingPickler.dumps(obj))
    # The first send moved the storage to a shared segment; the copy maps to that same storage.
    assert back.data_ptr() == obj.data_ptr() != ptr
    assert back.device == obj.device


def test_the_first_send_moves_the_storage_and_keeps_its_contents() -> None:
    t = torch.arange(1024.0, device="openreg")
    allocated, reserved = _memory()
    ForkingPickler.dumps(t)
    assert _memory() == (allocated, reserved)
    assert t.tolist() == list(range(1024))
    ptr = t.data_ptr()
    ForkingPickler.dumps(t[3:])  # already shared: no second move
    assert t.data_ptr() == ptr


def test_a_large_block_moves_in_place_and_a_small_one_to_a_new_address() -> None:
    # Note [Sharing device memory across processes]: a block of 1 MiB or more keeps its address, so
    # a kernel writing it across the first send writes the shared pages; statistics do not move.
    n = (1 << 18) + 100  # 1 MiB + 400 bytes: a block of 1 MiB + 512, 257 pages mapped
    large = torch.arange(float(n), device="openreg")
    small = torch.arange(100.0, device="openreg")  # 400 bytes: a block of 512
    ptrs = large.data_ptr(), small.data_ptr()
    before = _memory(), torch.openreg.memory_stats()["segment.all.current"]
    ForkingPickler.dumps(large)
    ForkingPickler.dumps(small)
    assert large.data_ptr() == ptrs[0] and small.data_ptr() != ptrs[1]
    assert (_memory(), torch.openreg.memory_stats()["segment.all.current"]) == before
    assert torch.equal(large.cpu(), torch.arange(float(n))) and small.tolist() == list(range(100))
    back = pickle.loads(ForkingPickler.dumps(large[n - 2 :]))
    back.add_(1)  # the last page, through the one storage per segment
    assert large[n - 3 :].tolist() == [n - 3, n - 1, n]


def test_a_queue_in_one_process_delivers_the_tensor() -> None:
    queue = torch.multiprocessing.get_context("fork").Queue()
    t = torch.ones(3, device="openreg")
    queue.put(t)
    got = queue.get(timeout=TIMEOUT)
    queue.close()
    queue.join_thread()
    got.add_(1)
    assert t.tolist() == [2, 2, 2]


def test_memory_the_allocator_did_not_allocate_is_refused_in_one_line() -> None:
    # Under the "cpu" profile a result is a CPU kernel's storage presented as openreg memory
    # (Note [Generic native path]): the allocator cannot move it, so sending it is refused.
    x = torch.ones(4, device="openreg")
    with openreg_lab.use_profile("cpu"):
        foreign = torch.atan2(x, x)
    with pytest.raises(RuntimeError) as raised:
        ForkingPickler.dumps(foreign)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("an openreg storage of 16 bytes on openreg:0 over memory")
    assert message.endswith("cannot be shared between processes: send a clone() of the tensor instead")
    back = pickle.loads(ForkingPickler.dumps(foreign.clone()))
    assert back.tolist() == foreign.tolist()
