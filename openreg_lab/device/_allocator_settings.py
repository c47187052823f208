"""CUDA's allocator settings (``PYTORCH_CUDA_ALLOC_CONF``'s ``key:value,...``) on openreg's allocator.

``torch.cuda.memory._set_allocator_settings("expandable_segments:True")`` configures CUDA's caching
allocator; ``from_cuda()`` maps it here. openreg's allocator has one block per segment, never
split, each rounded to 512 bytes and cached by size, and an optional cap per device (Note in
``csrc/runtime/DeviceAllocator.h``). A setting is accepted where it means something for that
allocator, and refused by name, before any is applied, where it does not:

- ``per_process_memory_fraction:F`` caps every device at F of its memory (as
  ``set_per_process_memory_fraction`` does, device by device);
- ``max_split_size_mb:N`` is accepted: it keeps blocks above N MiB whole, and openreg splits none;
- ``expandable_segments:False`` and ``backend:native`` say what openreg does already;
- ``expandable_segments:True``, ``backend:cudaMallocAsync``, ``garbage_collection_threshold``,
  ``roundup_power2_divisions``, ``max_non_split_rounding_mb`` and the pinned-memory, lock and CUDA
  graph settings have nothing to act on: ``CudaNotMappedError`` says which and why.
"""

from __future__ import annotations

import math

import torch

from openreg_lab.device._cuda_errors import CudaNotMappedError
from openreg_lab.device._devices import device_index
from openreg_lab.device._properties import get_device_properties

#: Settings of CUDA's allocator openreg's has no counterpart for, and why.
REFUSED = {
    "garbage_collection_threshold": "openreg's allocator frees its cache only when a device's cap is reached",
    "roundup_power2_divisions": "openreg rounds every request up to 512 bytes",
    "max_non_split_rounding_mb": "openreg reuses a cached block only for a request of its rounded size",
    "large_segment_size_mb": "openreg's segments are one block each, of the request's size",
    "release_lock_on_cudamalloc": "openreg takes its memory from the host, not cudaMalloc",
    "release_lock_on_hipmalloc": "openreg takes its memory from the host, not hipMalloc",
    "pinned_use_cuda_host_register": "openreg's pinned memory is host memory of its own",
    "pinned_use_hip_host_register": "openreg's pinned memory is host memory of its own",
    "pinned_num_register_threads": "openreg's pinned memory is host memory of its own",
    "pinned_use_background_threads": "openreg's pinned memory is host memory of its own",
    "pinned_reserve_segment_size_mb": "openreg's pinned memory is host memory of its own",
    "pinned_free_catch_all": "openreg's pinned memory is host memory of its own",
    "graph_capture_record_stream_reuse": "openreg captures no CUDA graphs",
    "throw_on_cudamalloc_oom": "openreg raises torch.OutOfMemoryError whenever an allocation fails",
}
ACCEPTED = ("per_process_memory_fraction", "max_split_size_mb", "expandable_segments", "backend")

_SIZES: dict[int, int] = {}  # device index -> its memory before a fraction first capped it


def set_memory_fraction(fraction: object, device: int) -> None:
    """Cap ``device`` at ``fraction`` (0 to 1) of its memory before the first such call (its
    ``OPENREG_MEMORY_LIMIT``, or host RAM), so that calls do not compound (openreg reports a cap
    as the device's total)."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
        raise ValueError(f"the memory fraction must be within [0, 1], got {fraction!r}")
    size = _SIZES.setdefault(device, get_device_properties(device).total_memory)
    torch.openreg.set_memory_limit(max(int(fraction * size), 1), device)  # 0: every allocation fails


def _items(env: str) -> list[tuple[str, str]]:
    """``"a:1,b:[64:8,>:1]"`` -> ``[("a", "1"), ("b", "[64:8,>:1]")]``; ValueError when malformed."""
    items, depth, part = [], 0, ""
    for ch in env + ",":
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            key, colon, value = part.partition(":")
            if part.strip() and (not colon or not key.strip() or not value.strip()):
                raise ValueError(f"allocator settings: expected key:value, got {part.strip()!r} in {env!r}")
            if part.strip():
                items.append((key.strip(), value.strip()))
            part = ""
        else:
            part += ch
    if depth:
        raise ValueError(f"allocator settings: unbalanced brackets in {env!r}")
    return items


def _flag(key: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ValueError(f"allocator settings: {key} is True or False, got {value!r}")
    return value.lower() == "true"


def set_allocator_settings(env: str) -> None:
    """Apply CUDA allocator settings (``"key:value,key:value"``) to openreg's allocator, as
    ``torch.cuda.memory._set_allocator_settings`` does to CUDA's: every setting is checked first
    (``ValueError`` for a malformed one or an unknown key, ``CudaNotMappedError`` naming one that
    has no meaning here, see the module's docstring), then the accepted ones apply."""
    if not isinstance(env, str):
        raise TypeError(
            f"_set_allocator_settings takes a string such as 'max_split_size_mb:128', got {env!r}"
        )
    fraction = None
    for key, value in _items(env):
        if key in REFUSED:
            raise _refused(key, value, REFUSED[key])
        if key == "expandable_segments" and _flag(key, value):
            raise _refused(key, value, "openreg's segments are fixed blocks that never grow")
        if key == "backend" and value != "native":
            if value != "cudaMallocAsync":
                raise ValueError(f"allocator settings: backend is native or cudaMallocAsync, got {value!r}")
            raise _refused(key, value, "openreg has one allocator, its own caching one")
        if key == "max_split_size_mb":
            try:
                mb = float(value)
            except ValueError:
                mb = math.nan
            if not mb > 0:
                raise ValueError(
                    f"allocator settings: max_split_size_mb is a positive size in MiB, got {value!r}"
                )
        if key == "per_process_memory_fraction":
            try:
                fraction = float(value)
            except ValueError:
                fraction = math.nan
            if not 0 <= fraction <= 1:
                raise ValueError(
                    f"allocator settings: per_process_memory_fraction is within [0, 1], got {value!r}"
                )
        if key not in ACCEPTED:
            known = ", ".join((*ACCEPTED, *REFUSED))
            raise ValueError(f"allocator settings: unknown key {key!r} in {env!r}; CUDA's keys are {known}")
    if fraction is not None:
        for index in range(torch.openreg.device_count()):
            set_memory_fraction(fraction, device_index(index))


def _refused(key: str, value: str, why: str) -> CudaNotMappedError:
    return CudaNotMappedError(
        f"the allocator setting {key}:{value} has no meaning for openreg's allocator ({why}); "
        f"openreg accepts {', '.join(ACCEPTED)} (expandable_segments:False, backend:native): drop the "
        "setting to run on openreg"
    )
