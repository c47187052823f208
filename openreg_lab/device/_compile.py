"""``torch.compile`` on openreg: which backends work, and a clear error for the one that cannot.

``torch.compile(fn, backend="eager")`` and ``backend="aot_eager"`` work on openreg: Dynamo captures
the graph (and AOTAutograd its backward) and runs it through openreg's kernels. The default backend,
Inductor, generates Triton or C++ kernels for the devices it has a code generator for, and has
none for openreg: it failed with a bare ``KeyError: 'openreg'``.

Inductor asks a PrivateUse1 device module for the code generator of its device
(``torch._inductor.codegen.common.init_backend_registration`` reads ``torch.openreg.Scheduling``,
``PythonWrapperCodegen``, ``CppWrapperCodegen`` and ``WrapperFxCodegen``). openreg answers with
stand-ins that raise :class:`InductorUnsupportedError`, naming the backends that work, as soon as
Inductor starts generating code for an openreg graph. They are looked up only by Inductor, so
importing openreg_lab does not import Inductor (which takes seconds).
"""

from __future__ import annotations

from typing import Any, NoReturn

#: The names Inductor reads from a PrivateUse1 device module.
INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")

#: The torch.compile backends that run on openreg, named by the error for the one that does not.
WORKING_BACKENDS = ("eager", "aot_eager")


class InductorUnsupportedError(RuntimeError):
    """torch.compile's default backend (Inductor) cannot generate code for openreg tensors."""


def _refuse() -> NoReturn:
    working = " or ".join(f"backend={name!r}" for name in WORKING_BACKENDS)
    raise InductorUnsupportedError(
        "torch.compile's default backend, Inductor, cannot generate code for openreg tensors: it "
        f"has no code generator for this device. Compile with {working} (e.g. torch.compile(model, "
        f"backend={WORKING_BACKENDS[-1]!r})), which capture the graph and run it through openreg's "
        "kernels, or move the model to the CPU to use Inductor."
    )


class _Scheduling:
    """Inductor's kernel code generator for openreg: there is none (see the module docstring)."""

    def __init__(self, scheduler: Any = None) -> None:
        _refuse()


class _WrapperCodegen:
    """Inductor's host-side wrapper code generator for openreg: there is none."""

    supports_caching = False  # Inductor asks first; there is no output to cache

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse()


def inductor_hook(name: str) -> type:
    """Return the stand-in for ``torch.openreg.<name>`` that Inductor asks for (``INDUCTOR_HOOKS``).

    Inductor reads the device's op overrides before its wrapper code generator; registering
    generic ones for openreg lets it reach the stand-ins instead of a ``KeyError``. Inductor is
    already imported when it asks.
    """
    from torch._inductor.codegen.common import DeviceOpOverrides, register_device_op_overrides

    register_device_op_overrides("openreg", DeviceOpOverrides())
    return _Scheduling if name == "Scheduling" else _WrapperCodegen
