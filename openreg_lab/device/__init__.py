"""``torch.openreg``: the device module of the simulated openreg accelerator.

Importing :mod:`openreg_lab` registers this module as ``torch.openreg``, the counterpart of
``torch.cuda`` (where openreg-lab is installed, ``import torch`` does it: torch's autoload,
``_openreg_lab_autoload.py``): devices, streams and events, memory statistics and limits, random
seeds, the dtypes the device creates, copies and computes with (:func:`get_device_capability`)
and those autocast may use, and the devices' properties under CUDA's field names
(:func:`get_device_properties`).

As on CUDA, a device index out of range raises ``torch.AcceleratorError`` (a RuntimeError,
"openreg error: invalid device ordinal", then "The device index is out of range" as PyTorch's
reference backend words it), ``torch.Stream(device="openreg")`` and friends without an
index mean the current device, and the device initialises lazily: :func:`is_initialized` is False
until its first use (Note [Lazy initialisation] in ``csrc/runtime/Device.h``).

``torch.compile`` works with every backend, Inductor included: openreg registers with Dynamo and
Inductor once Dynamo is loaded (``_compile.py``, ``_inductor.py``), and ``backend="openreg"`` is
Inductor with openreg's settings.
"""

from __future__ import annotations

from typing import Any

import torch

from openreg_lab import _C
from openreg_lab.device import _compile
from openreg_lab.device._backend_meta import _backend_format, _backend_formats, _set_backend_format
from openreg_lab.device._compile_options import InductorUnsupportedError
from openreg_lab.device._devices import (
    _is_in_bad_fork,
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from openreg_lab.device._memory import (
    empty_cache,
    get_memory_limit,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_memory_limit,
)
from openreg_lab.device._properties import DeviceProperties, get_device_properties
from openreg_lab.device._random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from openreg_lab.device._streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)


def _lazy_init() -> None:
    """Mark openreg as used (Note [Lazy initialisation] in ``csrc/runtime/Device.h``).

    torch calls it before the first tensor is created on openreg, and Dynamo when it traces a
    frame, when openreg registers with Dynamo if it is loaded.
    """
    _C.mark_initialized()
    _compile.register_if_dynamo_loaded()


def get_device_interface() -> type:
    """openreg's ``torch._dynamo.device_interface.DeviceInterface`` (registers with Dynamo first)."""
    _compile.register()
    from openreg_lab.device import _inductor

    return _inductor.OpenRegInterface


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The lower-precision dtypes ``torch.autocast("openreg", dtype=...)`` accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    """Return True: openreg computes bfloat16."""
    return True


def __getattr__(name: str) -> Any:
    """Inductor's code generator (``openreg_lab/device/_inductor.py``), looked up only by Inductor."""
    if name in _compile.INDUCTOR_HOOKS:
        return _compile.inductor_hook(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DeviceProperties",
    "Event",
    "InductorUnsupportedError",
    "Stream",
    "StreamContext",
    "_backend_format",
    "_backend_formats",
    "_is_in_bad_fork",
    "_lazy_init",
    "_set_backend_format",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_interface",
    "get_device_properties",
    "get_memory_limit",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_memory_limit",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]
