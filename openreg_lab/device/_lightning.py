"""PyTorch Lightning on openreg: ``Trainer(accelerator="openreg")`` and ``Fabric(accelerator="openreg")``.

Note [Lightning on openreg]
Lightning 2.6 knows the accelerators of its own registries, filled from its own classes when it is
imported: no entry point names another package's accelerator (the callbacks' entry point is read
after the Trainer has refused an unknown accelerator name). So openreg-lab adapts Lightning as it is
imported, importing none of it itself (Note [Acting on a module when it is imported] in
``_after_import.py``): when Lightning's accelerator connector is imported (the module that turns the
Trainer's or Fabric's arguments into an accelerator, a strategy and a precision, and imports the
registry, the strategies and the precision plugins first), ``_lightning_pytorch.py`` (the Trainer)
or ``_lightning_fabric.py`` (Fabric) registers the accelerator ``"openreg"`` and makes for openreg
the choices Lightning makes by name for CUDA and MPS only:

- one device gets the single-device strategy on that openreg device (Lightning puts the
  single-device strategy of any other accelerator on the CPU, so a custom accelerator needed an
  explicit strategy);
- ``precision="16-mixed"`` or ``"bf16-mixed"`` autocasts on openreg (Lightning autocasts on
  ``"cuda"`` for every accelerator but the CPU and MPS: on openreg tensors nothing was cast);
- DDP wraps the model without ``device_ids`` (Lightning builds DDP under a new CUDA stream when it
  passes them, which fails without CUDA): DDP takes the device from the module, as it does for any
  single-device module, and Lightning moves each batch to it itself. Its process group gets
  openreg's backend, ``ogloo``, as torch's default for the device type.

``devices="auto"`` is one openreg device, as on MPS: the simulated devices share one host, so a
script asking for openreg trains in its own process unless it asks for more (``devices=2``).

``accelerator="auto"`` stays Lightning's choice, and when that is the CPU while openreg is there,
:func:`say_auto_is_cpu` says once per process, in one line, how to ask for openreg. It does not pick
openreg: torch's autoload imports openreg-lab in every ``import torch`` of an environment where it
is installed, and ``"auto"`` is the Trainer's default, so picking it would move every Lightning
script of that environment, including those that never mention openreg, onto a simulated device
that is slower than the CPU it runs on; openreg is a device a user asks for by name.

A model whose parameters are not all on the Trainer's device fails with one line naming the first
such parameter (:func:`check_one_device`), checked right after Lightning moves the model and again
after the hooks that run before the first batch (``on_fit_start``, ``on_train_start``).
"""

from __future__ import annotations

import sys
import threading
import warnings

import torch
from torch import nn

from openreg_lab.device import _after_import

DEVICE = "openreg"

#: Lightning's module -> the action run right after it is imported (Note [Lightning on openreg]).
WATCHES = {
    "pytorch_lightning.trainer.connectors.accelerator_connector": f"{__package__}._lightning_pytorch:adapt",
    "lightning_fabric.connector": f"{__package__}._lightning_fabric:adapt",
}

_said_auto = threading.Event()


def install() -> None:
    """Adapt Lightning to openreg when it is imported, or now if it is (idempotent)."""
    for module, action in WATCHES.items():
        _after_import.when_imported(module, action)


def say_auto_is_cpu(owner: str) -> None:
    """Say once per process that ``accelerator="auto"`` chose the CPU and how to ask for openreg."""
    if _said_auto.is_set() or torch.openreg.device_count() == 0:
        return
    _said_auto.set()
    warnings.warn(
        f'openreg-lab: {owner}(accelerator="auto") chose the CPU; openreg is used only when named: '
        f'{owner}(accelerator="openreg") trains on it, accelerator="cpu" keeps the CPU without this warning',
        UserWarning,
        stacklevel=_user_frame(),
    )


def _user_frame() -> int:
    """The ``stacklevel`` of the first caller outside Lightning and openreg-lab (the user's line)."""
    frame, level = sys._getframe(2), 2  # the caller of say_auto_is_cpu's caller is the first candidate
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_OURS):
        frame, level = frame.f_back, level + 1
    return level


_OURS = ("pytorch_lightning.", "lightning_fabric.", "lightning.", "openreg_lab.")


def check_one_device(module: nn.Module, device: torch.device) -> None:
    """Raise a RuntimeError naming the first parameter (or buffer) of ``module`` not on ``device``."""
    for kind, tensors in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, tensor in tensors:
            if tensor.device != device:
                raise RuntimeError(
                    f"openreg-lab: {kind} {name!r} of {type(module).__name__} is on {tensor.device}, but "
                    f"the Trainer trains the model on {device}, one device per process: keep every "
                    f'parameter and buffer on {device}, or train on the CPU with accelerator="cpu"'
                )
