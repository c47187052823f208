"""Sending openreg tensors under a race and under the open-file limit (tests/device/test_ipc_limits.py).

Each scenario runs in a fresh interpreter, so that a crash or a hang fails its test instead of
ending pytest: ``python -m tests.support.sharing_stress race 40`` or ``... fd_limit 80 64``. The
sender forks its receiver first, then sends through ``torch.multiprocessing`` SimpleQueues, which
pickle in ``put`` (the send happens in the calling thread, where the scenario can time it and catch
its error). Results are JSON lines on stdout.

- ``race``: a thread of the sender adds 1 to a tensor in a loop while the main thread sends it; the
  writer is then stopped and the receiver says what it sees. One line per round: the writer's
  counts around the send and both sides' values.
- ``fd_limit``: the sender lowers its open-file limit, then sends tensors (keeping them) until a
  send is refused; one line: how many went, the refusal, and what the receiver got.
- ``fd_edge``: with every descriptor but ``free`` taken, whether pickling a tensor for
  ``torch.multiprocessing`` goes ("sent") or what it raises; one line per count given.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import sys
import threading
from typing import Any

import torch

#: Elements per round of ``race``, in turn: 256 float32 (1 KiB, a small block, which moves to a new
#: address) and 262144 (1 MiB, a large block, a mapping of its own, which moves in place).
RACE_SIZES = (256, 262144)
#: Seconds any wait of a scenario lasts at most.
TIMEOUT = 20.0


class Writer:
    """A thread that adds 1 to ``tensor`` until stopped, counting the adds it began and finished."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.started = 0
        self.done = 0
        self.running = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.started += 1
            self.tensor.add_(1)
            self.done += 1
            self.running.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT)


def _hold_and_read(inbox: Any, outbox: Any) -> None:
    """The race's receiver: hold each tensor; on "read", answer what it holds now."""
    held: Any = None
    while (message := inbox.get()) is not None:
        if isinstance(message, str):
            outbox.put(held.cpu().tolist())
            held = None
        else:
            held = message
            outbox.put(str(held.device))


def _take_all(inbox: Any, outbox: Any) -> None:
    """The fd_limit receiver: hold every tensor until None; answer their first elements."""
    held = []
    while (message := inbox.get()) is not None:
        held.append(message)
    outbox.put([t[0].item() for t in held])


def race(rounds: int) -> None:
    ctx = torch.multiprocessing.get_context("fork")
    inbox, outbox = ctx.SimpleQueue(), ctx.SimpleQueue()
    receiver = ctx.Process(target=_hold_and_read, args=(inbox, outbox), daemon=True)
    receiver.start()
    for r in range(rounds):
        t = torch.zeros(RACE_SIZES[r % len(RACE_SIZES)], device="openreg")
        ptr = t.data_ptr()
        writer = Writer(t)
        writer.running.wait(TIMEOUT)
        done_before = writer.done
        inbox.put(t)  # pickled here: the storage moves to a shared segment
        started_after = writer.started
        device = outbox.get()
        writer.stop()
        inbox.put("read")
        seen = outbox.get()
        mine = t.cpu().tolist()
        row = {
            "n": t.numel(),
            "device": device,
            "same_address": t.data_ptr() == ptr,
            "done_before": done_before,
            "started_after": started_after,
            "total": writer.done,
            "low": min(mine),
            "high": max(mine),
            "same_values": seen == mine,
        }
        print(json.dumps(row), flush=True)
    inbox.put(None)
    receiver.join(TIMEOUT)


def fd_limit(count: int, limit: int) -> None:
    ctx = torch.multiprocessing.get_context("fork")
    inbox, outbox = ctx.SimpleQueue(), ctx.Queue()
    receiver = ctx.Process(target=_take_all, args=(inbox, outbox), daemon=True)
    receiver.start()  # before the limit: only the sender runs short
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    kept: list[torch.Tensor] = []
    error: str | None = None
    for i in range(count):
        t = torch.full((256,), float(i), device="openreg")
        try:
            inbox.put(t)
        except Exception as e:  # the refusal, whatever raises it
            error = f"{type(e).__name__}: {e}"
            break
        kept.append(t)
    inbox.put(None)
    try:
        received = outbox.get(timeout=TIMEOUT)
    except queue.Empty:
        received = None
    print(json.dumps({"sent": len(kept), "error": error, "received": received}), flush=True)
    receiver.join(TIMEOUT)


def fd_edge(*counts: int) -> None:
    from multiprocessing.reduction import ForkingPickler

    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    for free in counts:
        t = torch.ones(4, device="openreg")
        taken = [os.open(os.devnull, os.O_RDONLY)]
        try:
            while True:
                taken.append(os.dup(taken[0]))
        except OSError:
            pass
        for fd in taken[len(taken) - free :]:
            os.close(fd)
        del taken[len(taken) - free :]
        try:
            ForkingPickler.dumps(t)
            outcome = "sent"
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"
        for fd in taken:
            os.close(fd)
        print(json.dumps({"free": free, "outcome": outcome}), flush=True)


if __name__ == "__main__":
    import openreg_lab  # noqa: F401  (the device and its reducers)

    scenario, *numbers = sys.argv[1:]
    {"race": race, "fd_limit": fd_limit, "fd_edge": fd_edge}[scenario](*map(int, numbers))
