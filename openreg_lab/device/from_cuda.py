"""``from_cuda()``: run code written for CUDA on openreg, unchanged.

::

    with openreg_lab.from_cuda():
        model = Net().cuda()                                  # on openreg:0
        x = torch.randn(8, 64, device="cuda")                 # on openreg:0
        with torch.autocast("cuda", dtype=torch.bfloat16):    # autocast on openreg
            loss = model(x).sum()
        torch.cuda.synchronize()                              # torch.openreg.synchronize()

Inside the block:

* ``"cuda"`` / ``"cuda:N"`` device strings and ``torch.device("cuda", N)`` objects mean
  ``openreg:N`` where a device enters torch: the ``device=`` of factory functions, ``Tensor.to``,
  ``Module.to``, ``with torch.device("cuda")``, ``torch.set_default_device``,
  ``torch.Generator(device=...)`` and ``torch.load(map_location=...)`` (a checkpoint saved on CUDA
  lands on openreg); ``.cuda()`` moves to openreg and ``Tensor.is_cuda`` is true for openreg
  tensors. Only these entry points are wrapped: every other torch call runs as without the block
  (Note [Devices mapped where they enter] in ``_cuda_entries.py``).
* ``torch.cuda`` is replaced by a module whose devices, streams, events, memory statistics, device
  properties and random functions are ``torch.openreg``'s; ``torch.cuda.amp`` (autocast,
  GradScaler) works; ``torch.cuda.nvtx``'s ranges and marks are marks in an open trace (Note
  [NVTX labels] in ``_cuda_nvtx.py``). Every other ``torch.cuda`` name still resolves, classes as
  classes, and raises ``CudaNotMappedError`` naming the call only when called (CUDA graphs,
  ``tunable``, ...): Note [Every torch.cuda name resolves] in ``_cuda_module.py``.
* ``torch.autocast("cuda")``, ``torch.amp.autocast("cuda")`` and ``torch.amp.GradScaler("cuda")``
  (and their ``torch.cuda.amp`` spellings) use openreg.
* ``torch.compile`` works inside the block: Dynamo traces the device wrappers in compiled code,
  and ``torch.cuda.streams.Stream`` (which its guards read) is openreg's ``Stream``.
* ``torch.distributed``: ``init_process_group("nccl")`` (and ``new_group``, ``"cuda:nccl"`` pairs,
  a ``device_id`` on ``cuda``) uses openreg's backend ``"ogloo"``; ``is_nccl_available()`` is True.
* ``nn.DataParallel`` raises ``CudaNotMappedError`` at once: its scatter and gather are CUDA
  kernels. Use one device (``OPENREG_DEVICE_COUNT=1``) or torchrun (DistributedDataParallel).

The mapping is process-wide (all threads) while the outermost block runs, and undone on its exit.
Not mapped: a ``torch.device("cuda")`` object keeps ``type == "cuda"`` (it is mapped where it
enters), ``Tensor.to("cuda")`` inside a compiled function (Dynamo reads it from the tensor), and
processes the block did not start.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from openreg_lab.device import _cuda_entries, _cuda_module, _devices
from openreg_lab.device._cuda_module import CudaNotMappedError

__all__ = ["CudaNotMappedError", "from_cuda"]

_lock = threading.Lock()
_depth = 0
_patches: _cuda_entries.Patches | None = None


def _install() -> _cuda_entries.Patches:
    """Replace ``torch.cuda`` and map CUDA devices at their entry points; return what undoes it."""
    patches = _cuda_entries.Patches()
    saved_module = sys.modules.get("torch.cuda")
    shim = _cuda_module.CudaModule()
    sys.modules["torch.cuda"] = shim
    torch.cuda = shim  # type: ignore[assignment]

    def restore_cuda() -> None:
        real = _cuda_module.REAL_CUDA
        sys.modules["torch.cuda"] = saved_module if saved_module is not None else real
        torch.cuda = real  # type: ignore[assignment]

    patches.on_undo(restore_cuda)
    _devices.ALIASES.add("cuda")  # openreg's own classes take "cuda:N" (torch.cuda.device, Stream)
    patches.on_undo(lambda: _devices.ALIASES.discard("cuda"))
    try:
        _cuda_entries.install(patches)
    except BaseException:
        patches.undo()
        raise
    return patches


@contextmanager
def from_cuda() -> Iterator[None]:
    """Context manager: code written for CUDA runs on openreg inside the block (see the module doc).

    Blocks may nest; the mapping is process-wide while the outermost block runs and undone when it
    ends. Nothing runs per torch call: only the places where a device enters torch are wrapped.
    """
    global _depth, _patches
    with _lock:
        if _depth == 0:
            _patches = _install()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _patches is not None:
                _patches.undo()
                _patches = None
