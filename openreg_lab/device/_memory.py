"""Device memory for ``torch.openreg``: statistics, the cache and the per-device capacity.

The statistics use the same keys as ``torch.cuda.memory_stats`` and are also what
``torch.accelerator.memory_stats`` reports for openreg.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from openreg_lab import _C
from openreg_lab.device._devices import DeviceLike, device_index


def memory_stats(device: DeviceLike = None) -> OrderedDict[str, Any]:
    """Return the allocator statistics of ``device`` (keys as in ``torch.cuda.memory_stats``)."""
    return torch.accelerator.memory_stats(device_index(device))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes held by live tensors on ``device`` (rounded to the allocator's 512-byte blocks)."""
    return torch.accelerator.memory_allocated(device_index(device))


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last :func:`reset_peak_memory_stats`."""
    return torch.accelerator.max_memory_allocated(device_index(device))


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes the allocator holds on ``device``: live tensors plus its cache of freed blocks."""
    return torch.accelerator.memory_reserved(device_index(device))


def max_memory_reserved(device: DeviceLike = None) -> int:
    """Peak of :func:`memory_reserved`."""
    return torch.accelerator.max_memory_reserved(device_index(device))


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Set every peak statistic of ``device`` to its current value."""
    torch.accelerator.reset_peak_memory_stats(device_index(device))


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Zero the cumulative counters (allocated/freed totals, allocation and OOM counts) of ``device``."""
    torch.accelerator.reset_accumulated_memory_stats(device_index(device))


def empty_cache() -> None:
    """Return every cached (freed but reserved) block of every device to the host.

    Like ``torch.accelerator.empty_cache()``, but other Python threads run while it frees.
    """
    _C.empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """Return ``(free, total)`` bytes of ``device``: total is its limit, or host RAM when unlimited."""
    return torch.accelerator.get_memory_info(device_index(device))


def set_memory_limit(nbytes: int | None, device: DeviceLike = None) -> None:
    """Cap the memory ``device`` may reserve at ``nbytes`` (None removes the cap).

    An allocation that would exceed the cap first releases the device's cache, then raises
    ``torch.OutOfMemoryError`` naming the device, the request and the usage. The initial cap of every
    device comes from ``OPENREG_MEMORY_LIMIT`` (e.g. ``512M``).
    """
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int)):
        raise TypeError(f"set_memory_limit: expected a number of bytes or None, got {nbytes!r}")
    _C.set_memory_limit(device_index(device), nbytes)


def get_memory_limit(device: DeviceLike = None) -> int | None:
    """Return the memory cap of ``device`` in bytes, or None when it has none."""
    return _C.memory_limit(device_index(device))
