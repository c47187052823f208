"""``torch.compile`` on openreg: when openreg registers with Dynamo and Inductor, and what it refuses.

Every backend works on openreg tensors: ``"eager"`` and ``"aot_eager"`` run the captured graph
through openreg's kernels, and the default, Inductor, generates C++ kernels that compute on
openreg memory (``_inductor.py``). Importing :mod:`openreg_lab` does not import Dynamo or
Inductor (a second or more).

Note [One registration entry point]
:func:`register` is the one entry point: it registers the device interface with Dynamo, the
device's op overrides and code generators with Inductor, the backend name ``"openreg"``, and
attaches the lab (Note [The lab's seam in Python] in ``_seam.py``). It runs, once, from the first
of the lookups torch makes of a PrivateUse1 device, and one path of ours where torch has none:

- Inductor's lookup of ``torch.openreg.Scheduling`` and the other :data:`INDUCTOR_HOOKS`
  (``init_backend_registration`` in ``torch/_inductor/codegen/common.py``, before Inductor
  compiles anything): torch's own mechanism; openreg's module answers it by registering all.
- Dynamo's lookup of the backend ``"openreg"`` (the ``torch_dynamo_backends`` entry point, whose
  target :func:`openreg_backend` registers first).
- Dynamo in the process (:func:`register_if_dynamo_loaded`, from ``torch.openreg._lazy_init``,
  which torch calls at the device's first use, and from ``import openreg_lab`` when Dynamo came
  first): Dynamo in torch 2.13 has no lookup of a PrivateUse1 device's interface
  (``init_device_reg`` in ``torch/_dynamo/device_interface.py`` registers cuda, xpu, mtia, cpu,
  mps and tpu only), and a frame Dynamo traces with ``backend="eager"`` never reaches Inductor's
  lookup, yet needs the interface (openreg's streams and events in the graph). The same call puts
  back the lab's compile callbacks, which ``torch._dynamo.reset()`` clears.

``torch.openreg.get_device_interface()`` returns the interface and so registers first; opening a
trace registers nothing (the recording layer installs its own callbacks).

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

from openreg_lab.device import _seam

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

    The one entry point (Note [One registration entry point]); the lab attaches here (Note [The
    lab's seam in Python]). Idempotent and thread-safe; imports Inductor.
    """
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        _seam.load()
        from openreg_lab.device import _inductor

        _inductor.register()
        _register_backend()
        _seam.registered()
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

    Also runs what the lab attached for each registration (its compile callbacks, which
    ``torch._dynamo.reset()`` clears).
    """
    if "torch._dynamo" in sys.modules:
        register()
        _seam.registered()


def inductor_hook(name: str) -> Any:
    """Return ``torch.openreg.<name>`` (one of ``INDUCTOR_HOOKS``) for Inductor, registering first."""
    register()
    from openreg_lab.device import _inductor

    return {
        "Scheduling": _seam.subclass("Scheduling", _inductor.OpenRegScheduling),
        "PythonWrapperCodegen": _seam.subclass("PythonWrapperCodegen", _inductor.OpenRegWrapperCodegen),
        "CppWrapperCodegen": _inductor.OpenRegCppWrapperCodegen,
        "WrapperFxCodegen": None,
    }[name]
