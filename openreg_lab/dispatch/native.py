"""The list of operators openreg implements natively (``native_ops.yaml``)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

VIA_CPU = "via_cpu"
VIA_FALLBACK = "via_fallback"


@cache
def _sections() -> dict[str, tuple[str, ...]]:
    text = resources.files("openreg_lab.dispatch").joinpath("native_ops.yaml").read_text()
    data = yaml.safe_load(text)
    return {family: tuple(ops or ()) for family, ops in data.items()}


def native_ops_by_family() -> dict[str, tuple[str, ...]]:
    """Return ``{family: (op, ...)}`` of the hand-written kernels in ``native_ops.yaml``, in file order."""
    return {family: ops for family, ops in _sections().items() if family not in (VIA_CPU, VIA_FALLBACK)}


def via_cpu_ops() -> list[str]:
    """Operators registered for openreg that compute on the CPU through the copy path.

    PyTorch prefers a few operators' composite kernels to the boxed fallback (``fallback_routes()``),
    so openreg registers the fallback for them explicitly; they behave like the fallback (policy,
    copies) and are not native. (Convolution, which PyTorch routes to hooks the fallback cannot
    reach, is native: the ``convolution`` family of ``native_ops.yaml``.)
    """
    return sorted(_sections().get(VIA_CPU, ()) + _sections().get(VIA_FALLBACK, ()))


def fallback_routes() -> list[str]:
    """The ``via_cpu_ops()`` whose openreg kernel is the boxed CPU fallback itself (``ViaFallback.cpp``).

    PyTorch's composite kernels for these go wrong on openreg and would preempt the fallback.
    Like any operator without an openreg kernel, they run generically under a profile that has them.
    """
    return sorted(_sections().get(VIA_FALLBACK, ()))


def native_ops() -> list[str]:
    """Return every operator (``aten::name.overload``) with a hand-written openreg kernel, sorted."""
    return sorted({op for ops in native_ops_by_family().values() for op in ops})
