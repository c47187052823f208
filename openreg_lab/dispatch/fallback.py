"""The CPU fallback policy: what happens when an operator has no openreg kernel.

* ``"allow"`` (default): run it on the CPU, copying its tensors to the host and back.
* ``"warn"``: the same, with a ``UserWarning`` once per operator.
* ``"error"``: raise ``NotImplementedError`` naming the operator, before any data moves.

The initial policy comes from the ``OPENREG_FALLBACK`` environment variable.

Printing a tensor is exempt: the operators PyTorch's formatter runs on the device to print an
openreg tensor run under every policy, without a warning, and are still traced (Note [Printing is
exempt from the fallback policy] in ``csrc/aten/fallback/FallbackPolicy.h``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import torch
import torch._tensor_str

from openreg_lab import _C

Policy = Literal["allow", "warn", "error"]
_POLICIES = ("allow", "warn", "error")


def get_fallback_policy() -> Policy:
    """Return the current fallback policy."""
    return _C.fallback_policy()  # type: ignore[no-any-return]


def set_fallback_policy(policy: Policy) -> None:
    """Set the fallback policy for every thread: ``"allow"``, ``"warn"`` or ``"error"``."""
    if policy not in _POLICIES:
        raise ValueError(f"unknown fallback policy {policy!r}: choose 'allow', 'warn' or 'error'")
    _C.set_fallback_policy(policy)


@contextmanager
def fallback_policy(policy: Policy) -> Iterator[None]:
    """Context manager: apply ``policy`` inside the block and restore the previous one after."""
    previous = get_fallback_policy()
    set_fallback_policy(policy)
    try:
        yield
    finally:
        set_fallback_policy(previous)


def _exempt_printing() -> None:
    """Wrap PyTorch's tensor formatter so that its fallback calls are exempt from the policy.

    Note [Printing is exempt from the fallback policy]. ``Tensor.__repr__`` (and so ``print``,
    ``str``, ``Parameter.__repr__``) looks ``torch._tensor_str._str`` up at each call; the wrapper
    sets this thread's exemption around it and restores the previous setting. Idempotent.
    """
    original: Callable[..., str] = torch._tensor_str._str
    if getattr(original, "_openreg_exempt", False):
        return

    @functools.wraps(original)
    def _str(self: torch.Tensor, *args: Any, **kwargs: Any) -> str:
        previous = _C._set_policy_exempt(True)
        try:
            return original(self, *args, **kwargs)
        finally:
            _C._set_policy_exempt(previous)

    _str._openreg_exempt = True  # type: ignore[attr-defined]
    torch._tensor_str._str = _str


_exempt_printing()
