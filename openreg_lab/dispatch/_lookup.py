"""Dispatcher queries by operator name that work for every namespace ``torch.library`` accepts.

Note [Operator names torch cannot parse]
``torch.library.Library("my-lib", "DEF")`` is accepted, and so are its operators
(``my-lib::twice``), but torch's queries by name (``_dispatch_has_kernel_for_dispatch_key`` and
``_dispatch_has_computed_kernel_for_dispatch_key``) parse the name as TorchScript would and raise
``expected eof but found '-'``: one such operator made ``coverage()`` and every report fail for the
whole process. A name outside TorchScript's grammar is answered from the dispatcher's list of the
operators that have a kernel for the key (``_dispatch_get_registrations_for_dispatch_key``, which
takes no name): the same answer, at the cost of one pass over the operators. The computed kernel
for the CPU follows the dispatcher's order for a backend key: its own kernel, then a composite one,
then the backend fallback.
"""

from __future__ import annotations

import re

import torch

# What torch's name parser accepts: ``namespace::name`` and an optional ``.overload``.
_PARSEABLE = re.compile(r"[A-Za-z_]\w*::[A-Za-z_]\w*(\.\w+)?", re.ASCII)

_COMPOSITES = (
    "CompositeExplicitAutogradNonFunctional",
    "CompositeExplicitAutograd",
    "CompositeImplicitAutograd",
)


def parseable(op: str) -> bool:
    """Whether torch's queries by name can parse ``op`` (Note [Operator names torch cannot parse])."""
    return _PARSEABLE.fullmatch(op) is not None


def has_kernel(op: str, key: str) -> bool:
    """Whether ``op`` has a kernel registered for dispatch key ``key`` (an alias key's own too)."""
    if parseable(op):
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op, key))
    return registered(op, key)


def registered(op: str, key: str) -> bool:
    """``has_kernel`` for any name, from the dispatcher's list of the operators registered for ``key``."""
    return op in torch._C._dispatch_get_registrations_for_dispatch_key(key)


def has_computed_kernel(op: str, key: str) -> bool:
    """Whether a call of ``op`` for backend key ``key`` (e.g. ``"CPU"``) finds a kernel."""
    if parseable(op):
        return bool(torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, key))
    return (
        registered(op, key)
        or any(registered(op, k) for k in _COMPOSITES)
        or torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, key))
    )
