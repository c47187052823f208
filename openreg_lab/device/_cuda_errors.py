"""The error of a CUDA call ``from_cuda()`` cannot send to openreg (its own module, so that every
module of the CUDA mapping can raise it)."""

from __future__ import annotations


class CudaNotMappedError(NotImplementedError):
    """A CUDA call that ``from_cuda()`` cannot send to openreg."""


CudaNotMappedError.__module__ = "openreg_lab"


def not_mapped(what: str, instead: str = "") -> CudaNotMappedError:
    """The error for ``what`` (a call, named as written), with what to use instead if anything."""
    advice = instead or "guard or remove the call to run the script on openreg"
    return CudaNotMappedError(
        f"{what} has no openreg counterpart, so openreg_lab.from_cuda() (run --from-cuda) cannot map it "
        "(it maps devices, streams, events, memory statistics and snapshots, device properties, random "
        f"seeds, amp and NVTX labels): {advice}"
    )
