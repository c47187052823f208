"""Registration of the openreg device with PyTorch (run once, on import of :mod:`openreg_lab`)."""

from __future__ import annotations

import atexit

import torch

from openreg_lab import _C, device
from openreg_lab.device import _comm, _compile, _distributed, _lightning, _sharing

BACKEND = "openreg"


def register() -> None:
    """Rename PrivateUse1 to ``openreg``, install ``torch.openreg`` and generate the tensor methods.

    Also registers openreg's ``torch.distributed`` backend (``_distributed``), adapts PyTorch
    Lightning to openreg when it is imported (``_lightning``: Note [Lightning on openreg]), shares openreg
    tensors and storages sent to another process (``_sharing``), gives ``torch.nn.parallel`` the
    copies ``nn.DataParallel`` needs (``_comm``: Note [DataParallel's primitives]), and
    registers the exit handler of Note [Autograd workers at exit] (``csrc/python/device/AutogradExit.cpp``).
    Safe to call again: each step is skipped when already done.
    """
    _C._init()
    _sharing.install()
    _comm.install()
    atexit.unregister(_C._drain_autograd_workers)
    atexit.register(_C._drain_autograd_workers)
    current = torch._C._get_privateuse1_backend_name()
    if current != BACKEND:
        if current != "privateuseone":
            raise RuntimeError(
                f"PrivateUse1 is already registered as {current!r} by another extension; "
                "openreg_lab needs it for 'openreg' (one PrivateUse1 backend per process)"
            )
        torch.utils.rename_privateuse1_backend(BACKEND)
    if getattr(torch, BACKEND, None) is not device:
        torch._register_device_module(BACKEND, device)
    if not hasattr(torch.Tensor, f"is_{BACKEND}"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    _compile.register_if_dynamo_loaded()
    _distributed.register()
    _lightning.install()
