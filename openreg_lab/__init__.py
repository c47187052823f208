"""openreg_lab: a dispatcher explorer and profiler for PyTorch PrivateUse1 backends.

Importing the package registers ``openreg``, a simulated accelerator whose memory lives in host RAM,
as PyTorch's PrivateUse1 backend::

    import torch, openreg_lab
    x = torch.randn(3, 3).to("openreg")
    torch.openreg.device_count()
"""

from __future__ import annotations

import torch  # noqa: F401  (loads libtorch before our extension)

from openreg_lab import _C  # noqa: F401
from openreg_lab._native import native_ops, native_ops_by_family, via_cpu_ops
from openreg_lab._register import register as _register
from openreg_lab.autocast import autocast_rules
from openreg_lab.coverage import coverage
from openreg_lab.explain import Explanation, explain
from openreg_lab.export import load_trace
from openreg_lab.fallback import fallback_policy, get_fallback_policy, set_fallback_policy
from openreg_lab.from_cuda import CudaNotMappedError, from_cuda
from openreg_lab.profiles import get_profile, profile_ops, set_profile, use_profile
from openreg_lab.trace import Trace, TraceDroppedEventsWarning, trace

_register()

__version__ = "0.1.0"

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
    "native_ops",
    "native_ops_by_family",
    "profile_ops",
    "set_fallback_policy",
    "set_profile",
    "trace",
    "use_profile",
    "via_cpu_ops",
]
