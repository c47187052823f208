"""Device selection for ``torch.openreg``: count, current device, the ``device`` context, whether the
device has been used yet (Note [Lazy initialisation] in ``csrc/runtime/Device.h``) and what it can hold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from openreg_lab import _C

DeviceLike = torch.device | str | int | None


def is_available() -> bool:
    """Return True: the simulated devices are always present."""
    return _C.device_count() > 0


def device_count() -> int:
    """Return the number of simulated devices (``OPENREG_DEVICE_COUNT``, default 2)."""
    return _C.device_count()


def current_device() -> int:
    """Return the index of this thread's current openreg device (this initialises openreg, as on CUDA)."""
    _C.mark_initialized()
    return _C.current_device()


#: Device types that name openreg besides ``"openreg"``, each with the function that turns its index
#: (None: its current device) into openreg's: ``from_cuda()`` adds ``"cuda"`` while its block runs,
#: so openreg's own classes under CUDA's names take CUDA's device strings
#: (``torch.cuda.device("cuda:1")``, ``torch.cuda.Stream(device="cuda:1")``), numbered as
#: ``CUDA_VISIBLE_DEVICES`` says (Note [CUDA_VISIBLE_DEVICES under from_cuda] in ``_cuda_visible.py``).
ALIASES: dict[str, Callable[[int | None], int]] = {}


def device_index(device: DeviceLike, optional: bool = True) -> int:
    """Turn ``device`` (an index, ``"openreg:1"``, a ``torch.device`` or None) into a checked index.

    None, and ``"openreg"`` without an index, mean the current device when ``optional`` is True.
    Raises ValueError for another device type and, for an index out of range, CUDA's
    ``torch.AcceleratorError`` (a RuntimeError) "openreg error: invalid device ordinal (...)".
    """
    if device is None:
        if not optional:
            raise ValueError("expected an openreg device, got None")
        return _C.current_device()  # a query: does not initialise openreg
    if isinstance(device, str | torch.device):
        dev = torch.device(device)
        if dev.type in ALIASES:
            index = ALIASES[dev.type](dev.index)
        elif dev.type != "openreg":
            raise ValueError(f"expected an openreg device, got {dev}: use 'openreg' or 'openreg:N'")
        elif dev.index is None:
            return _C.current_device()
        else:
            index = dev.index
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        raise TypeError(f"expected a device index, 'openreg:N' or torch.device, got {device!r}")
    _C.check_device_index(index)
    return index


def set_device(device: DeviceLike) -> None:
    """Make ``device`` this thread's current openreg device."""
    _C.set_device(device_index(device, optional=False))


def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work on ``device``.

    openreg runs every kernel to completion before returning (see Note [Synchronous execution] in
    ``csrc/runtime/Stream.h``), so this only checks the device index.
    """
    torch._C._accelerator_synchronizeDevice(device_index(device))


class device:
    """Context manager that makes ``device`` current and restores the previous device on exit.

    A negative index or None leaves the current device unchanged, as in ``torch.cuda.device``.
    """

    def __init__(self, device: DeviceLike) -> None:
        self.idx = -1 if device is None or (isinstance(device, int) and device < 0) else device_index(device)
        self.prev_idx = -1

    def __enter__(self) -> device:
        self.prev_idx = _C.current_device()  # selecting no device (-1) does not initialise openreg
        if self.idx >= 0:
            _C.set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> None:
        _C.set_device(self.prev_idx)


def device_of(obj: torch.Tensor) -> device:
    """Context manager selecting the device of tensor ``obj`` (no-op for a CPU tensor)."""
    return device(obj.get_device() if obj.device.type == "openreg" else -1)


def init() -> None:
    """Initialise openreg, as ``torch.cuda.init()``: afterwards :func:`is_initialized` is True.

    The simulated runtime needs no set-up; this only records that the device is in use.
    """
    _C.mark_initialized()


def is_initialized() -> bool:
    """Whether openreg has been used in this process, as ``torch.cuda.is_initialized()``.

    False after import; True once a tensor was created on openreg, a device was selected
    (:func:`set_device`, ``torch.accelerator.set_device_index``), a stream created or
    :func:`init` / :func:`current_device` called (Note [Lazy initialisation] in
    ``csrc/runtime/Device.h``). ``DeviceMesh`` reads it: while it is False, it selects the device
    from ``LOCAL_RANK``.
    """
    return bool(_C.is_initialized())


def get_device_capability(device: DeviceLike = None) -> dict[str, Any]:
    """What ``device`` (default: the current one) supports, as ``torch.accelerator.get_device_capability``.

    A dict whose ``"supported_dtypes"`` is the set of dtypes an openreg tensor can be created
    with, copied to and from the host, and computed with as on the CPU:

    * computed by openreg's own kernels: ``float32``, ``float64``, ``float16``, ``bfloat16``,
      ``bool``, ``uint8``, ``int8``, ``int16``, ``int32``, ``int64``;
    * computed only through the CPU fallback, with its copies (casts excepted, which are copies):
      ``complex32``/``64``/``128``, the five ``float8`` types, ``uint16``/``32``/``64``, ``qint8``,
      ``quint8``, ``qint32``.

    Left out: the bit containers (``bits8``, ``bits16``, ``bits1x8``, ...) and
    ``float4_e2m1fn_x2``, which copy but which nothing computes with, not even the CPU; the sub-byte
    integers (``uint1`` to ``int7``) and ``quint4x2`` / ``quint2x4``, which the host's copy kernel
    cannot copy. Unlike ``torch.cuda.get_device_capability``, there is no ``(major, minor)``
    compute capability: the device is simulated.
    """
    return dict(torch._C._accelerator_getDeviceCapability(device_index(device)))


def _is_in_bad_fork() -> bool:
    # Simulated devices hold no driver state, so a forked child may use them.
    return False
