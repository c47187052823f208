"""Sending openreg tensors to another process: a clear error instead of a hang.

``torch.multiprocessing`` pickles a tensor for another process by sharing its storage (a file
descriptor for CPU memory, an IPC handle for CUDA). openreg memory cannot be shared between
processes, and torch's CPU path fails inside ``multiprocessing.Queue``'s feeder thread, which only
prints the error and drops the item: a ``DataLoader(num_workers>0)`` whose dataset returns openreg
tensors then waits for that batch forever. The reducers below pickle an openreg tensor or storage as
a call that raises our error where it is unpickled, so the receiving process (the DataLoader's main
process) gets the error and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any, NoReturn

import torch
import torch.multiprocessing.reductions as _reductions

_Reduced = tuple[Callable[..., Any], tuple[Any, ...]]


def _not_shareable(what: str) -> NoReturn:
    raise RuntimeError(
        f"{what} was sent to another process (a DataLoader worker or torch.multiprocessing): openreg "
        "memory cannot be shared between processes (openreg has no IPC, unlike CUDA). Return CPU "
        "tensors from the Dataset and move each batch to openreg in the main process "
        "(batch.to('openreg'); DataLoader(pin_memory=True) stages it in pinned memory), or send "
        "tensor.cpu() through the queue."
    )


def _reduce_tensor(tensor: torch.Tensor) -> _Reduced:
    if tensor.device.type == "openreg":
        what = f"an openreg tensor of shape {tuple(tensor.shape)} and dtype {tensor.dtype} on {tensor.device}"
        return _not_shareable, (what,)
    return _reductions.reduce_tensor(tensor)


def _reduce_storage(storage: Any) -> _Reduced:
    if storage.device.type == "openreg":
        return _not_shareable, (f"an openreg storage of {storage.nbytes()} bytes on {storage.device}",)
    return _reductions.reduce_storage(storage)


def install() -> None:
    """Wrap torch's multiprocessing reducers so openreg tensors and storages fail where received."""
    wrappers = {_reductions.reduce_tensor: _reduce_tensor, _reductions.reduce_storage: _reduce_storage}
    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    for cls, reduce in list(reducers.items()):
        if reduce in wrappers:
            ForkingPickler.register(cls, wrappers[reduce])
