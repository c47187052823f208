"""openreg_lab: a dispatcher explorer and profiler for PyTorch PrivateUse1 backends.

Importing the package registers ``openreg``, a simulated accelerator whose memory lives in host RAM,
as PyTorch's PrivateUse1 backend::

    import torch, openreg_lab
    x = torch.randn(3, 3).to("openreg")
    torch.openreg.device_count()

The package has the layers of ``csrc/``: ``device`` (``torch.openreg``), ``dispatch`` (coverage,
profiles, explain, fallback policy), ``recording`` (trace and its tables) and ``views`` (the
dashboard, compare, coverage and dispatch explorers). Arrows point down only.
"""

from __future__ import annotations

import torch  # noqa: F401  (loads libtorch before our extension)

from openreg_lab import _C  # noqa: F401
from openreg_lab.device._register import register as _register
from openreg_lab.device.from_cuda import CudaNotMappedError, from_cuda
from openreg_lab.dispatch.autocast import autocast_rules
from openreg_lab.dispatch.coverage import coverage
from openreg_lab.dispatch.explain import Explanation, explain
from openreg_lab.dispatch.fallback import fallback_policy, get_fallback_policy, set_fallback_policy
from openreg_lab.dispatch.native import native_ops, native_ops_by_family, via_cpu_ops
from openreg_lab.dispatch.profiles import get_profile, profile_ops, set_profile, use_profile
from openreg_lab.recording.session import Trace, TraceDroppedEventsWarning, load_trace, mark, trace
from openreg_lab.recording.steps import step

_register()

from openreg_lab import views  # noqa: E402  (installs the trace renderer; imports plotly lazily)

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
    "mark",
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
