"""Autocast on openreg: which operators ``torch.autocast("openreg", ...)`` casts, and how.

The rules are PyTorch's own CUDA lists, compiled into the backend (``csrc/aten/Autocast.cpp``).
"""

from __future__ import annotations

from openreg_lab import _C


def autocast_rules() -> dict[str, str]:
    """Return ``{op: policy}`` for every operator with an openreg autocast kernel.

    Policies: ``lower_precision_fp`` (cast to the autocast dtype), ``fp32`` (cast to float32),
    ``fp32_set_opt_dtype`` (compute in float32 through the op's ``dtype`` argument), ``promote``
    (cast to the widest floating type among the arguments) and ``banned`` (refused).
    """
    return dict(_C.autocast_rules())
