"""openreg_lab: a dispatcher explorer and profiler for PyTorch PrivateUse1 backends.

Importing the package registers ``openreg``, a simulated accelerator whose memory lives in host RAM,
as PyTorch's PrivateUse1 backend::

    import torch, openreg_lab
    x = torch.randn(3, 3).to("openreg")
    torch.openreg.device_count()

Where openreg-lab is installed, ``import torch`` alone does it (torch's ``torch.backends`` entry
point, ``_openreg_lab_autoload.py``; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` switches it off), and
``import openreg_lab`` stays valid: it returns the registered package.

The package has the layers of ``csrc/``: ``device`` (``torch.openreg``), ``dispatch`` (coverage,
profiles, explain, fallback policy), ``recording`` (trace and its tables) and ``views`` (the
dashboard, compare, coverage and dispatch explorers). Arrows point down only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import torch  # noqa: F401  (loads libtorch before our extension)

from openreg_lab._extension import C as _C  # noqa: F401  Note [The extension is checked before it is loaded]
from openreg_lab.device import _seam
from openreg_lab.device._register import register as _register
from openreg_lab.dispatch.fallback import fallback_policy, get_fallback_policy, set_fallback_policy


def _attach_the_lab() -> None:
    """The recorder's Scheduling, wrapper and compile callbacks (Note [The lab's seam in Python])."""
    from openreg_lab.recording import compiled

    compiled.attach()


def _label(name: str) -> None:
    """A label the script names for a profiler (NVTX under from_cuda()): an instant in every open
    trace (Note [NVTX labels] in device/_cuda_nvtx.py)."""
    from openreg_lab.recording.session import mark

    mark(name)


def _memory_function(name: str) -> Any:
    """openreg_lab.memory's ``name`` for torch.cuda.memory under from_cuda() (Note [torch.cuda.memory's
    private names] in device/_cuda_memory.py); imported at the first call that needs it."""
    memory = importlib.import_module("openreg_lab.memory")
    return getattr(memory, name, None)


_seam.use_lab(_attach_the_lab)  # run at the device's first registration with Dynamo, not now
_seam.on_label(_label)
_seam.on_memory(_memory_function)
_register()

__version__ = "0.1.0"

if TYPE_CHECKING:
    from openreg_lab import memory, views
    from openreg_lab.device.from_cuda import CudaNotMappedError, from_cuda
    from openreg_lab.dispatch.autocast import autocast_rules
    from openreg_lab.dispatch.coverage import coverage
    from openreg_lab.dispatch.explain import Explanation, explain
    from openreg_lab.dispatch.native import native_ops, native_ops_by_family, via_cpu_ops
    from openreg_lab.dispatch.profiles import get_profile, profile_ops, set_profile, use_profile
    from openreg_lab.recording.session import Trace, TraceDroppedEventsWarning, load_trace, mark, trace
    from openreg_lab.recording.steps import step

# Note [The package loads its API on first use]
# `import openreg_lab` registers the device and nothing else: torch's autoload runs it inside every
# `import torch` (benchmarks/bench_autoload.py), and pandas, yaml and the recording layer would cost
# that a second or more. The first access to any other public name loads the whole API at once, the
# views included, so that a trace can always draw itself (Note [Views are plugged in] in
# recording/session.py); `from openreg_lab import trace` is such an access.
_LAZY = {
    "CudaNotMappedError": "openreg_lab.device.from_cuda",
    "from_cuda": "openreg_lab.device.from_cuda",
    "autocast_rules": "openreg_lab.dispatch.autocast",
    "coverage": "openreg_lab.dispatch.coverage",
    "Explanation": "openreg_lab.dispatch.explain",
    "explain": "openreg_lab.dispatch.explain",
    "native_ops": "openreg_lab.dispatch.native",
    "native_ops_by_family": "openreg_lab.dispatch.native",
    "via_cpu_ops": "openreg_lab.dispatch.native",
    "get_profile": "openreg_lab.dispatch.profiles",
    "profile_ops": "openreg_lab.dispatch.profiles",
    "set_profile": "openreg_lab.dispatch.profiles",
    "use_profile": "openreg_lab.dispatch.profiles",
    "Trace": "openreg_lab.recording.session",
    "TraceDroppedEventsWarning": "openreg_lab.recording.session",
    "load_trace": "openreg_lab.recording.session",
    "mark": "openreg_lab.recording.session",
    "trace": "openreg_lab.recording.session",
    "step": "openreg_lab.recording.steps",
}


#: Public modules of the API: ``views`` (the widgets) and ``memory`` (torch.cuda.memory's for openreg).
_MODULES = ("views", "memory")


def _load_api() -> None:
    """Import the whole public API into the package's namespace (Note [The package loads its API on
    first use]); the views first, which install the trace renderer."""
    for module in _MODULES:
        globals()[module] = importlib.import_module(f"openreg_lab.{module}")
    for name, module in _LAZY.items():
        globals()[name] = getattr(importlib.import_module(module), name)


def __getattr__(name: str) -> Any:
    """Load the public API at the first access of one of its names (``views`` and ``memory``
    included)."""
    if name in _LAZY or name in _MODULES:
        _load_api()
        return globals()[name]
    raise AttributeError(f"module 'openreg_lab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "CudaNotMappedError",
    "Explanation",
    "Trace",
    "TraceDroppedEventsWarning",
    "autocast_rules",
    "coverage",
    "explain",
    "fallback_policy",
    "from_cuda",
    "get_fallback_policy",
    "get_profile",
    "load_trace",
    "mark",
    "memory",
    "native_ops",
    "native_ops_by_family",
    "profile_ops",
    "set_fallback_policy",
    "set_profile",
    "step",
    "trace",
    "use_profile",
    "via_cpu_ops",
    "views",
]
