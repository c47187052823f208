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
  [NVTX labels] in ``_cuda_nvtx.py``); ``torch.cuda.memory``'s history and snapshots
  (``_record_memory_history``, ``_snapshot``, ``_dump_snapshot``) are ``openreg_lab.memory``'s and
  ``_set_allocator_settings`` applies what openreg's allocator can (Note [torch.cuda.memory's
  private names] in ``_cuda_memory.py``). Every other ``torch.cuda`` name still resolves, classes as
  classes, and raises ``CudaNotMappedError`` naming the call only when called (CUDA graphs,
  ``tunable``, ...): Note [Every torch.cuda name resolves] in ``_cuda_module.py``.
* ``torch.autocast("cuda")``, ``torch.amp.autocast("cuda")`` and ``torch.amp.GradScaler("cuda")``
  (and their ``torch.cuda.amp`` spellings) use openreg.
* ``torch.compile`` works inside the block: Dynamo traces the device wrappers in compiled code,
  and ``torch.cuda.streams.Stream`` (which its guards read) is openreg's ``Stream``.
* ``torch.distributed``: ``init_process_group("nccl")`` (and ``new_group``, ``"cuda:nccl"`` pairs,
  a ``device_id`` on ``cuda``) uses openreg's backend ``"ogloo"``; ``is_nccl_available()`` is True.
* ``nn.DataParallel`` and ``nn.parallel.data_parallel`` run over the openreg devices CUDA sees
  (openreg's scatter and gather: Note [DataParallel's primitives] in ``_comm.py``), and
  DistributedDataParallel's ``device_ids`` are CUDA's ordinals.
* ``CUDA_VISIBLE_DEVICES`` selects and renumbers openreg's devices as it does CUDA's: with ``=1``
  the script sees one device, cuda:0, which is openreg:1 (Note [CUDA_VISIBLE_DEVICES under
  from_cuda] in ``_cuda_visible.py``, which gives CUDA's rule for the value).

The mapping is process-wide (all threads) while the outermost block runs, and undone on its exit.
Not mapped: a ``torch.device("cuda")`` object keeps ``type == "cuda"`` (it is mapped where it
enters), ``Tensor.to("cuda")`` inside a compiled function (Dynamo reads it from the tensor), and
processes the block did not start. Under ``CUDA_VISIBLE_DEVICES``, what openreg reports keeps
openreg's indices: a tensor's ``device`` and ``get_device()``, ``torch.openreg`` and
``torch.accelerator``, and an int given to ``torch.cuda.Stream`` (openreg's own class).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from openreg_lab.device import _cuda_entries, _cuda_module, _cuda_visible, _devices
from openreg_lab.device._cuda_errors import CudaNotMappedError

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
    patches.on_undo(_cuda_visible.reset)  # the next block reads CUDA_VISIBLE_DEVICES again
    _devices.ALIASES["cuda"] = _cuda_visible.alias_index  # openreg's classes take "cuda:N" (Stream)
    patches.on_undo(lambda: _devices.ALIASES.pop("cuda", None))
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
