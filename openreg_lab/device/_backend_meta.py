"""The per-tensor format tag of openreg tensors (``c10::BackendMeta``), saved by ``torch.save``.

See Note [Backend metadata] in ``csrc/runtime/BackendMeta.h``: the template for a backend whose
tensors carry device-side layout information. openreg's kernels do not read the tag.
"""

from __future__ import annotations

import torch

from openreg_lab import _C


def _backend_formats() -> list[str]:
    """The format tags openreg knows, ``"plain"`` (the default) first."""
    return list(_C.backend_formats())


def _backend_format(tensor: torch.Tensor) -> str:
    """The format tag of an openreg tensor: ``"plain"`` unless :func:`_set_backend_format` set one."""
    return _C.backend_format(tensor)


def _set_backend_format(tensor: torch.Tensor, format: str) -> None:
    """Tag an openreg tensor with a device-side format (one of :func:`_backend_formats`).

    The tag stays with this tensor object and its shallow copies (``detach()``), survives
    ``torch.save`` / ``torch.load`` onto openreg, and is not inherited by views or op results.
    """
    _C.set_backend_format(tensor, format)
