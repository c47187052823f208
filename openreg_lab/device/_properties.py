"""``torch.openreg.get_device_properties``: an openreg device described with CUDA's fields.

Libraries read a device's properties by CUDA's field names (``name``, ``total_memory``,
``major``, ``minor``, ``multi_processor_count``, ...): DataParallel checks the balance of its
devices, transformers and accelerate pick precisions and batch sizes from them. openreg answers
with the same fields so that code runs unchanged (``from_cuda()`` maps
``torch.cuda.get_device_properties`` and ``torch.cuda.get_device_capability`` here).

Note [openreg's CUDA properties]
openreg simulates an accelerator on the host, so a field is either measured on the host or a
fixed value chosen to keep CUDA-written arithmetic sane:

* ``total_memory`` is the device's memory limit, or host RAM when it has none (``mem_get_info``);
  ``multi_processor_count`` is the number of threads openreg's kernels use (``torch.get_num_threads``).
* ``major, minor`` is ``(8, 0)``: the first CUDA capability with bfloat16, which openreg computes,
  so scripts that gate bfloat16 (or TF32 flags, harmless here) on the capability take the path
  openreg runs. It is not a claim about speed.
* The rest (warp size 32, 1024 threads a block, 48 KiB of shared memory, ...) are CUDA's common
  values; clocks and bus widths, which nothing simulated has, are 0. ``is_integrated`` is 1: the
  memory is the host's.
"""

from __future__ import annotations

import dataclasses
import uuid

import torch

from openreg_lab.device._devices import DeviceLike, device_index

#: The CUDA capability openreg reports (Note [openreg's CUDA properties]).
CAPABILITY = (8, 0)


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """An openreg device's properties, under the names of ``torch.cuda``'s ``_CudaDeviceProperties``."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    index: int
    is_integrated: int = 1
    is_multi_gpu_board: int = 0
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    warp_size: int = 32
    regs_per_multiprocessor: int = 65536
    shared_memory_per_block: int = 48 * 1024
    shared_memory_per_block_optin: int = 48 * 1024
    shared_memory_per_multiprocessor: int = 48 * 1024
    L2_cache_size: int = 0  # CUDA's spellings
    clock_rate: int = 0
    memory_clock_rate: int = 0
    memory_bus_width: int = 0
    gcnArchName: str = ""
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0

    @property
    def uuid(self) -> str:
        """A stable identifier of the device: the same index gives the same uuid."""
        return str(uuid.UUID(int=self.index + 1))

    def __repr__(self) -> str:
        return (
            f"_OpenRegDeviceProperties(name={self.name!r}, major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid})"
        )


def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
    """Return the properties of an openreg ``device`` (the current one by default) with CUDA's fields.

    >>> props = torch.openreg.get_device_properties(0)
    >>> props.name, props.total_memory > 0, (props.major, props.minor)
    ('openreg (simulated by openreg-lab)', True, (8, 0))
    """
    index = device_index(device)
    _, total = torch.accelerator.get_memory_info(index)
    major, minor = CAPABILITY
    return DeviceProperties(
        name="openreg (simulated by openreg-lab)",
        major=major,
        minor=minor,
        total_memory=int(total),
        multi_processor_count=torch.get_num_threads(),
        index=index,
    )
