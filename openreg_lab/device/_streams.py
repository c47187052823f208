"""Streams and events for ``torch.openreg``.

openreg runs work synchronously (Note [Synchronous execution] in ``csrc/runtime/Stream.h``): streams
are always idle and events complete when recorded, but the whole API behaves as on CUDA.
"""

from __future__ import annotations

from typing import Any

import torch

from openreg_lab import _C
from openreg_lab.device._devices import DeviceLike, device_index


def _as_device(device: DeviceLike) -> torch.device:
    return torch.device("openreg", device_index(device))


class Stream(torch.Stream):
    """An openreg stream. ``priority`` is 0 (default) or -1 (high): :meth:`priority_range`."""

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> Stream:
        if kwargs:  # rebuilding from stream_id / device_index / device_type
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_as_device(device), priority=priority)

    @property
    def priority(self) -> int:
        """The priority the stream was created with."""
        return _C.stream_priority(self.stream_id, self.device_index)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """The priorities a stream may have, as ``torch.cuda.Stream.priority_range()``: (least,
        greatest) = (0, -1). Lower numbers are higher priorities, as on CUDA (which gives (0, -N));
        openreg has one high priority, and runs every stream's work at once (Note [Synchronous
        execution] in ``csrc/runtime/Stream.h``), so a priority is recorded, not scheduled."""
        return (0, -1)

    def __repr__(self) -> str:
        return f"<torch.openreg.Stream device=openreg:{self.device_index} stream_id={self.stream_id}>"


class _OpenRegEventType(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "openreg"


class Event(metaclass=_OpenRegEventType):
    """An event on the current openreg device; ``enable_timing=True`` makes ``elapsed_time`` available.

    Calling ``Event(...)`` returns a plain ``torch.Event``: PyTorch's event methods accept only that
    exact type as their argument (``e1.elapsed_time(e2)``), so openreg events are not a subclass.
    ``isinstance(e, torch.openreg.Event)`` is True for any ``torch.Event`` on openreg.
    """

    def __new__(  # type: ignore[misc]
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        return torch.Event(
            device=torch.device("openreg", _C.current_device()),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: DeviceLike = None) -> Stream:
    """Return this thread's current stream on ``device``."""
    return _wrap(torch.accelerator.current_stream(_as_device(device)))


def default_stream(device: DeviceLike = None) -> Stream:
    """Return the default stream (id 0) of ``device``."""
    current = torch.accelerator.current_stream(_as_device(device))
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current on its device (and its device current), as ``torch.accelerator.set_stream``."""
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that selects ``stream`` (and its device) and restores both on exit."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._prev_device = -1
        self._prev_stream: torch.Stream | None = None

    def __enter__(self) -> StreamContext:
        if self.stream is None:
            return self
        self._prev_device = _C.current_device()
        self._prev_stream = torch.accelerator.current_stream(self.stream.device)
        torch.accelerator.set_stream(self.stream)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.stream is None or self._prev_stream is None:
            return
        torch.accelerator.set_stream(self._prev_stream)
        _C.set_device(self._prev_device)


def stream(stream: torch.Stream | None) -> StreamContext:
    """Context manager: run the block with ``stream`` current (None: no change)."""
    return StreamContext(stream)
