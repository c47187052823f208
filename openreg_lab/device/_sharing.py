"""Sending openreg tensors and storages to another process, the way CUDA's cross.

``torch.multiprocessing`` pickles a tensor as its storage plus offset, sizes and strides, and a
storage through the reducer registered for ``torch.UntypedStorage`` (torch 2.13 has no PrivateUse1
hook there: its CPU path would fail on device memory). The reducer below sends an openreg storage
as the memory file of its shared segment (duplicated through ``multiprocessing``'s ``DupFd``, as
torch sends a CPU storage); the receiver maps the same pages on the same device, so a write on
either side is seen by the other. Note [Sharing device memory across processes] in
``csrc/runtime/DeviceAllocator.cpp`` says where the memory comes from, how long it lives and how
it is counted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import torch
import torch.multiprocessing.reductions as _reductions

from openreg_lab import _C

_Reduced = tuple[Callable[..., Any], tuple[Any, ...]]


def _segment_key(fd: int) -> tuple[str, int, int]:
    """One key per shared segment in every process: the memory file's inode."""
    st = os.fstat(fd)
    return ("openreg", st.st_dev, st.st_ino)


def _rebuild_empty_storage(device: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device("openreg", device))


def _rebuild_storage(dup: Any, nbytes: int, device: int, key: tuple[str, int, int]) -> torch.UntypedStorage:
    """Map a storage sent by ``_reduce_storage``; one storage per segment in each process."""
    fd = dup.detach()
    cached = _reductions.storage_from_cache(torch.UntypedStorage, key)
    if cached is not None:
        os.close(fd)
        return cached
    storage = _C._import_storage(fd, nbytes, device)
    _reductions.shared_cache[key] = _reductions.StorageWeakRef(storage)
    return storage


def _reduce_storage(storage: Any) -> _Reduced:
    if storage.device.type != "openreg":
        return _reductions.reduce_storage(storage)
    if storage.nbytes() == 0:
        return _rebuild_empty_storage, (storage.device.index,)
    fd, nbytes, device = _C._share_storage(storage)
    key = _segment_key(fd)
    # A storage that comes back to this process is this very storage.
    _reductions.shared_cache[key] = _reductions.StorageWeakRef(storage)
    return _rebuild_storage, (DupFd(fd), nbytes, device, key)


def install() -> None:
    """Wrap torch's multiprocessing storage reducer so openreg storages (and tensors) are shared."""
    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    for cls, reduce in list(reducers.items()):
        if reduce is _reductions.reduce_storage:
            ForkingPickler.register(cls, _reduce_storage)
