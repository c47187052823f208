"""The other process of tests/device/test_ipc.py: one peer per start method, reused by every check.

The peer runs the bodies it is sent (``BODIES``) in order and answers each with its result, so
starting a torch process (seconds on two busy cores) is paid once per start method. Bodies that
receive tensors get them through ``torch.multiprocessing`` pickling (the queues), which is what is
under test. ``Batches`` is the DataLoader dataset the tests use: it must be importable by spawned
workers.
"""

from __future__ import annotations

import traceback
from typing import Any

import torch

HELD: list[Any] = []


def _memory() -> tuple[int, int]:
    return torch.openreg.memory_allocated(0), torch.openreg.memory_reserved(0)


def describe(t: torch.Tensor) -> dict[str, Any]:
    """What the peer received: device, layout, values and its own memory statistics."""
    return {
        "device": str(t.device),
        "size": tuple(t.shape),
        "stride": t.stride(),
        "offset": t.storage_offset(),
        "values": t.cpu().tolist(),
        "memory": _memory(),
    }


def add_in_place(t: torch.Tensor, value: float) -> list[Any]:
    t.add_(value)
    return t.cpu().tolist()


def step(params: list[torch.nn.Parameter], delta: float) -> list[bool]:
    """A Hogwild-style update of parameters shared by the test process; which ones require grad."""
    with torch.no_grad():
        for p in params:
            p.add_(delta)
    return [p.requires_grad for p in params]


def resize(t: torch.Tensor) -> str:
    """Try to grow a received storage; what torch says."""
    try:
        t.untyped_storage().resize_(t.untyped_storage().nbytes() * 2)
    except RuntimeError as e:
        return str(e)
    return "resized"


def views_share_storage(base: torch.Tensor, view: torch.Tensor) -> bool:
    return base.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()


def hold(t: Any) -> tuple[int, int]:
    HELD.append(t)
    return _memory()


def read_held() -> list[Any]:
    return [t.cpu().tolist() for t in HELD]


def drop_held() -> tuple[int, int]:
    HELD.clear()
    return _memory()


def take_from_mailbox() -> tuple[int, int]:
    """Receive the tensor waiting in the mailbox (a SimpleQueue handed over at start); hold it."""
    HELD.append(MAILBOX[0].get())
    return _memory()


def echo(obj: Any) -> Any:
    """Send what was received straight back (a re-share by the receiver)."""
    return obj


def make(n: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """A tensor made here, kept here too, and sent to the test process with this side's statistics."""
    t = torch.arange(float(n), device="openreg")
    HELD.append(t)
    return t, _memory()


def memory() -> tuple[int, int]:
    return _memory()


BODIES = {
    f.__name__: f
    for f in (
        describe,
        add_in_place,
        step,
        resize,
        views_share_storage,
        hold,
        read_held,
        drop_held,
        take_from_mailbox,
        echo,
        make,
        memory,
    )
}
MAILBOX: list[Any] = []


def serve(inbox: Any, outbox: Any, mailbox: Any) -> None:
    """Run ``(body, args)`` messages from ``inbox`` until ``None``; answer each on ``outbox``."""
    import openreg_lab  # noqa: F401  (registers the device and the reducers)

    MAILBOX.append(mailbox)
    while True:
        message = inbox.get()
        if message is None:
            return
        name, args = message
        try:
            outbox.put(("ok", BODIES[name](*args)))
        except BaseException:  # the test process reports it
            outbox.put(("error", traceback.format_exc()))


class Batches(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Eight openreg tensors made in the DataLoader's worker processes."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        import openreg_lab  # noqa: F401

        return torch.full((4,), float(i), device="openreg")
