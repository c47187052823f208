"""``torch.compile`` on openreg: when openreg registers with Dynamo and Inductor, and what it refuses.

Every backend works on openreg tensors: ``"eager"`` and ``"aot_eager"`` run the captured graph
through openreg's kernels, and the default, Inductor, generates C++ kernels that compute on
openreg memory (``_inductor.py``). Importing :mod:`openreg_lab` does not import Dynamo or
Inductor (a second or more): openreg registers with them (:func:`register`) as soon as Dynamo is
in the process, at the first of

- ``import openreg_lab`` when Dynamo was imported before,
- Dynamo's first use of the device (it calls ``torch.openreg._lazy_init`` when it traces a frame),
- Inductor's lookup of ``torch.openreg.Scheduling`` and the other :data:`INDUCTOR_HOOKS`,
- opening a trace (so that compilations inside it are recorded),
- ``torch.openreg.get_device_interface()``.

Options openreg cannot honour raise ``InductorUnsupportedError`` naming the option and what works
instead (``_compile_options.py``).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from openreg_lab.device import _compile_events

#: The names Inductor reads from a PrivateUse1 device module.
INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")

_lock = threading.Lock()
_registered = False


def register() -> None:
    """Register openreg with Dynamo (its device interface) and Inductor (its code generator).

    Also installs the Dynamo callbacks that record compilations in traces (``_compile_events``).
    Idempotent and thread-safe; imports Inductor.
    """
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        from openreg_lab.device import _inductor

        _inductor.register()
        _compile_events.install()
        _registered = True


def register_if_dynamo_loaded() -> None:
    """:func:`register` if Dynamo is already imported (cheap otherwise: one dict lookup).

    Also puts back the compile callbacks, which ``torch._dynamo.reset()`` clears.
    """
    if "torch._dynamo" in sys.modules:
        register()
        _compile_events.install()


def inductor_hook(name: str) -> Any:
    """Return ``torch.openreg.<name>`` (one of ``INDUCTOR_HOOKS``) for Inductor, registering first."""
    register()
    from openreg_lab.device import _inductor

    return {
        "Scheduling": _inductor.OpenRegScheduling,
        "PythonWrapperCodegen": _inductor.OpenRegWrapperCodegen,
        "CppWrapperCodegen": _inductor.OpenRegCppWrapperCodegen,
        "WrapperFxCodegen": None,
    }[name]
