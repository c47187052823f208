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

``torch.compile(backend="openreg")`` is Inductor with openreg's settings (:func:`openreg_backend`,
:data:`OPENREG_INDUCTOR_OPTIONS`): the global Inductor configuration cannot make it pick an option
openreg refuses. Dynamo finds it by name through the ``torch_dynamo_backends`` entry point
(``pyproject.toml``: ``torch._dynamo.list_backends()`` lists it), or through :func:`register`
where openreg-lab is not installed.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from openreg_lab.device import _compile_events

#: The Dynamo backend's name: the device's.
BACKEND = "openreg"

#: Inductor's options under ``backend="openreg"``: its C++ kernels for CPUs, the Python wrapper,
#: no CUDA graphs (``_compile_options.py`` says why each other value is refused).
OPENREG_INDUCTOR_OPTIONS: dict[str, Any] = {
    "cpu_backend": "cpp",
    "cpp_wrapper": False,
    "triton.cudagraphs": False,
}

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
        _register_backend()
        _compile_events.install()
        _registered = True


def _register_backend() -> None:
    """Register :func:`openreg_backend` with Dynamo as ``"openreg"``, unless its entry point already did."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if BACKEND not in _COMPILER_FNS:
        register_backend(compiler_fn=openreg_backend, name=BACKEND)


def openreg_backend(
    gm: Any, example_inputs: Any, *, mode: str | None = None, options: dict[str, Any] | None = None
) -> Any:
    """The Dynamo backend ``"openreg"``: Inductor with :data:`OPENREG_INDUCTOR_OPTIONS` over the global
    configuration. ``mode`` and ``options`` given to ``torch.compile`` come last, so an option
    openreg cannot honour is refused with ``InductorUnsupportedError``, never silently replaced."""
    register()
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx

    patches = {**OPENREG_INDUCTOR_OPTIONS, **(list_mode_options(mode) if mode else {}), **(options or {})}
    return compile_fx(gm, example_inputs, config_patches=patches)


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
