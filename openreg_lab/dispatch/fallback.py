"""The CPU fallback policy: what happens when an operator has no openreg kernel.

* ``"allow"`` (default): run it on the CPU, copying its tensors to the host and back.
* ``"warn"``: the same, with a ``UserWarning`` once per operator.
* ``"error"``: raise ``NotImplementedError`` naming the operator, before any data moves.

The initial policy comes from the ``OPENREG_FALLBACK`` environment variable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

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
