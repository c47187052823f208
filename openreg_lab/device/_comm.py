"""``torch.nn.parallel``'s copies between devices (scatter, gather, broadcast) on openreg, so that
``nn.DataParallel`` and ``torch.cuda.comm`` run over openreg devices.

Note [DataParallel's primitives]
``nn.DataParallel`` is device-generic Python (its replicas run in threads under
``torch.accelerator``'s device and stream) except for the copies that ``torch.nn.parallel.comm``
asks of ``torch._C``: ``_scatter``, ``_gather``, ``_broadcast``, ``_broadcast_coalesced`` and the
``_out`` forms of the first three. torch builds them only with CUDA, so on a CPU build
DataParallel over any other accelerator stops with "module 'torch._C' has no attribute
'_scatter'", with one device too (the inputs are scattered first). comm looks the names up on
``torch._C`` when it is called, and torch offers a backend no other place to register them, so
:func:`install` (run when openreg registers) adds the ones this torch lacks (a CUDA build keeps its
own). Only comm calls them, so all they change is a call that raised ``AttributeError``.

Integer devices are openreg device indices, as in DataParallel's ``device_ids`` (``from_cuda()``
turns CUDA's ordinals into them first: ``_cuda_entries.py``). openreg runs every kernel before
returning (Note [Synchronous execution] in ``csrc/runtime/Stream.h``): a stream given to a copy is
the stream it is issued on, nothing more. The results keep CUDA's contract: a broadcast leaves the
tensors already on a target device as they are (replica 0's parameters are the module's own), the
coalesced broadcast's copies are detached, and a scatter's chunk already on its device is a view.
When DataParallel sums the replicas' gradients, torch's comm warns once that PyTorch "is not
compiled with NCCL support" and adds them on openreg, as CUDA does without NCCL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

Streams = Sequence[torch.Stream | None] | None


def _target(index: int) -> torch.device:
    """openreg device ``index`` (-1: the CPU, as comm's gather destination)."""
    return torch.device("cpu") if index == -1 else torch.device("openreg", index)


def _on_openreg(tensors: Sequence[torch.Tensor], what: str) -> None:
    for i, t in enumerate(tensors):
        if t.device.type != "openreg":
            raise RuntimeError(f"{what}: expected openreg tensors, but tensor {i} is on {t.device}")


def _stream(streams: Streams, i: int) -> contextlib.AbstractContextManager[Any]:
    stream = streams[i] if streams else None
    return stream if stream is not None else contextlib.nullcontext()


def scatter(
    tensor: torch.Tensor,
    devices: Sequence[int],
    chunk_sizes: Sequence[int] | None = None,
    dim: int = 0,
    streams: Streams = None,
) -> list[torch.Tensor]:
    """``torch._C._scatter``: ``tensor`` split along ``dim`` (by ``chunk_sizes``, or in
    ``len(devices)`` chunks), chunk ``i`` on openreg device ``devices[i]``."""
    if not devices:
        raise RuntimeError("scatter: expected at least one device to scatter to")
    if chunk_sizes is not None and len(chunk_sizes) != len(devices):
        raise RuntimeError(
            f"scatter: expected one chunk size per device, got {len(chunk_sizes)} sizes for "
            f"{len(devices)} devices"
        )
    if streams is not None and len(streams) != len(devices):
        raise RuntimeError(f"scatter: expected one stream per device, got {len(streams)} for {len(devices)}")
    chunks = (
        tensor.split_with_sizes(list(chunk_sizes), dim)
        if chunk_sizes is not None
        else tensor.chunk(len(devices), dim)
    )
    out = []
    for i, chunk in enumerate(chunks):
        with _stream(streams, i):
            out.append(chunk.to(_target(devices[i]), non_blocking=True))
    return out


def scatter_out(
    tensor: torch.Tensor, out: Sequence[torch.Tensor], dim: int = 0, streams: Streams = None
) -> list[torch.Tensor]:
    """``torch._C._scatter_out``: ``tensor`` split along ``dim`` into the openreg tensors ``out``."""
    _on_openreg(out, "scatter")
    chunks = tensor.split_with_sizes([o.size(dim) for o in out], dim)
    for i, (chunk, o) in enumerate(zip(chunks, out, strict=True)):
        with _stream(streams, i):
            o.copy_(chunk, non_blocking=True)
    return list(out)


def gather(tensors: Sequence[torch.Tensor], dim: int = 0, destination: int | None = None) -> torch.Tensor:
    """``torch._C._gather``: the openreg ``tensors`` concatenated along ``dim`` on openreg device
    ``destination`` (-1: the CPU; None: the current device)."""
    if not tensors:
        raise RuntimeError("gather: expected at least one tensor to gather from")
    _on_openreg(tensors, "gather")
    index = torch.accelerator.current_device_index() if destination is None else destination
    target = _target(index)
    return torch.cat([t.to(target) for t in tensors], dim)


def gather_out(tensors: Sequence[torch.Tensor], out: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """``torch._C._gather_out``: the openreg ``tensors`` concatenated along ``dim`` into ``out``."""
    if not tensors:
        raise RuntimeError("gather: expected at least one tensor to gather from")
    _on_openreg(tensors, "gather")
    return torch.cat([t.to(out.device) for t in tensors], dim, out=out)


def broadcast(tensor: torch.Tensor, devices: Sequence[int]) -> list[torch.Tensor]:
    """``torch._C._broadcast``: ``tensor`` on each openreg device of ``devices`` (itself where it
    already is)."""
    return [tensor if tensor.device == _target(d) else tensor.to(_target(d), copy=True) for d in devices]


def broadcast_out(tensor: torch.Tensor, out: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``torch._C._broadcast_out``: ``tensor`` copied into each openreg tensor of ``out``."""
    _on_openreg(out, "broadcast")
    for o in out:
        o.copy_(tensor)
    return list(out)


def broadcast_coalesced(
    tensors: Sequence[torch.Tensor], devices: Sequence[int], buffer_size: int = 0
) -> list[list[torch.Tensor]]:
    """``torch._C._broadcast_coalesced``: for each device of ``devices``, ``tensors`` on it (the
    first device's are ``tensors`` themselves, the others detached copies). ``buffer_size`` is
    CUDA's coalescing; openreg copies tensor by tensor."""
    if not devices:
        raise RuntimeError("broadcast_coalesced: expected at least one device")
    first = _target(devices[0])
    for i, t in enumerate(tensors):
        if t.device != first:
            raise RuntimeError(
                f"broadcast_coalesced: every tensor must be on devices[0] ({first}), but tensor {i} is "
                f"on {t.device}"
            )
    outputs = [list(tensors)]
    with torch.no_grad():
        outputs += [[t.to(_target(d), copy=True) for t in tensors] for d in devices[1:]]
    return outputs


#: The ``torch._C`` names ``torch.nn.parallel.comm`` calls, and openreg's functions for them.
PRIMITIVES = {
    "_scatter": scatter,
    "_scatter_out": scatter_out,
    "_gather": gather,
    "_gather_out": gather_out,
    "_broadcast": broadcast,
    "_broadcast_out": broadcast_out,
    "_broadcast_coalesced": broadcast_coalesced,
}


def install() -> None:
    """Give ``torch._C`` the primitives this torch was built without (Note [DataParallel's primitives])."""
    for name, fn in PRIMITIVES.items():
        if not hasattr(torch._C, name):
            setattr(torch._C, name, fn)
