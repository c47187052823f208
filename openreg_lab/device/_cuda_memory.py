"""``torch.cuda.memory``'s memory debugging inside ``from_cuda()``: openreg's.

Note [torch.cuda.memory's private names]
PyTorch's memory debugging is private API that scripts call by name:
``torch.cuda.memory._record_memory_history()``, ``_snapshot()``, ``_dump_snapshot("snap.pickle")``
and ``_set_allocator_settings("...")``. Torch's internals are otherwise passed through as the real
objects (Note [Every torch.cuda name resolves]), and there these reach CUDA's bindings, which a
build without CUDA lacks: ``AttributeError: module 'torch._C' has no attribute
'_cuda_record_memory_history'``. So in ``torch.cuda.memory``:

* the memory history and snapshots are openreg's (``openreg_lab.memory``, the lab's, attached
  through the seam: Note [The lab's seam in Python]); ``_set_allocator_settings`` applies what
  openreg's allocator can (``_allocator_settings.py``);
* every other function defined there, and the placeholder classes torch makes for its CUDA
  bindings, is a stand-in that raises ``CudaNotMappedError`` naming it;
* what ``torch.cuda.memory`` imports for itself (``_get_device_index``, ``_C``, ...) stays real.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openreg_lab.device import _seam
from openreg_lab.device._allocator_settings import set_allocator_settings
from openreg_lab.device._cuda_errors import not_mapped

#: torch.cuda.memory's names the lab provides (its own names in openreg_lab.memory).
LAB = {
    "_record_memory_history": "_record_memory_history",
    "_record_memory_history_impl": "_record_memory_history",
    "_record_memory_history_legacy": "_record_memory_history",
    "_snapshot": "_snapshot",
    "_dump_snapshot": "_dump_snapshot",
}

#: What to use instead of some unmapped names (``_cuda_module._INSTEAD``).
INSTEAD = {
    "_save_segment_usage": "write torch.cuda._memory_viz.segments(torch.cuda.memory._snapshot())",
    "_save_memory_usage": "write torch.cuda._memory_viz.memory(torch.cuda.memory._snapshot())",
    "_allocation_traceback": "look the block up in torch.cuda.memory._snapshot()['segments']",
}


def mapped(name: str) -> Callable[..., Any] | None:
    """openreg's ``torch.cuda.memory.<name>``, or None when it has none."""
    if name == "_set_allocator_settings":
        return set_allocator_settings
    if name in LAB:
        return _seam.memory_function(LAB[name])
    return None


def is_cuda_call(real: Any) -> bool:
    """Whether ``torch.cuda.memory``'s private ``real`` is CUDA's to call: a function defined there, or
    a placeholder class torch made for a CUDA binding this build lacks."""
    module = getattr(real, "__module__", "") or ""
    if isinstance(real, type):
        return module in ("torch.cuda.memory", "torch._utils")
    return callable(real) and module == "torch.cuda.memory"


def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """``torch.cuda.memory_snapshot()``: the segments of openreg's memory snapshot."""
    snapshot = _seam.memory_function("_snapshot")
    if snapshot is None:
        raise not_mapped("torch.cuda.memory_snapshot()")
    return snapshot()["segments"]
