"""Dynamo and Inductor on openreg: the device interface, the code generator, the wrapper.

Imported by :func:`openreg_lab.device._compile.register` once Dynamo is in the process (importing
this module imports Inductor, which takes a second). Everything goes through PyTorch's
registration points, nothing in Dynamo or Inductor is patched:

- ``register_interface_for_device("openreg", OpenRegInterface)``: Dynamo's and Inductor's view of
  the device (current device, count, synchronize, streams, events, memory, capabilities).
- ``register_device_op_overrides("openreg", ...)``: the lines the wrapper writes to select a device.
- ``register_backend_for_device("openreg", OpenRegScheduling, OpenRegWrapperCodegen, ...)``:
  Inductor's own C++ code generator for CPUs (``CppScheduling``) writes openreg's kernels. They
  compute on device memory in place, as openreg's native kernels do (Note [Device memory is host
  memory] in ``csrc/aten/HostView.h``): no copies and no compiler of ours.

Nothing here records: openreg-lab derives its traced Scheduling and wrapper from these classes
through the seam (Note [The lab's seam in Python] in ``_seam.py``; ``openreg_lab/recording/compiled.py``).
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import torch
from torch._dynamo.device_interface import CpuDeviceProperties, DeviceInterface
from torch._inductor import config as inductor_config
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files
from torch._inductor.virtualized import V

from openreg_lab.device import _devices, _layouts, _memory, _seam, _streams
from openreg_lab.device._compile_options import InductorUnsupportedError, check_options

DEVICE = "openreg"


class OpenRegInterface(DeviceInterface):
    """Dynamo's and Inductor's view of openreg (``torch._dynamo.device_interface``)."""

    device = _devices.device  # type: ignore[assignment]
    Event = torch.Event  # type: ignore[assignment]
    Stream = _streams.Stream  # type: ignore[assignment]

    class Worker:
        """Device queries that work in Inductor's compile workers (no device state needed)."""

        @staticmethod
        def set_device(device: int) -> None:
            _devices.set_device(device)

        @staticmethod
        def current_device() -> int:
            return _devices.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> CpuDeviceProperties:
            # openreg's kernels run on the host's cores.
            return CpuDeviceProperties(multiprocessing.cpu_count())

    current_device = staticmethod(_devices.current_device)
    set_device = staticmethod(_devices.set_device)  # type: ignore[assignment]
    device_count = staticmethod(_devices.device_count)
    is_available = staticmethod(_devices.is_available)
    synchronize = staticmethod(_devices.synchronize)  # type: ignore[assignment]
    stream = staticmethod(_streams.stream)  # type: ignore[assignment]
    current_stream = staticmethod(_streams.current_stream)  # type: ignore[assignment]
    set_stream = staticmethod(_streams.set_stream)
    memory_allocated = staticmethod(_memory.memory_allocated)  # type: ignore[assignment]

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = _devices.current_device()
        if device >= 0:
            _devices.set_device(device)
        return previous

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return OpenRegInterface.exchange_device(device)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _streams.set_stream(
            _streams.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        )

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0  # Note [Synchronous execution]: there is no queue to hand a kernel

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        return ""  # like the CPU: Inductor keys its caches on it

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False


class OpenRegDeviceOpOverrides(DeviceOpOverrides):
    """The Python lines Inductor's wrapper writes to select, guard and synchronize openreg."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"def {name}(_):\n    return 0\n"

    def set_device(self, device_idx: int) -> str:
        return f"torch.openreg.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.openreg.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.openreg.device({device_idx})"

    def cpp_kernel_type(self) -> str:
        return "void*"


# Note [openreg kernels are C++ kernels to Inductor]
# Inductor's kernel code generators ask which language they write through
# get_current_backend(device type): "cpp" for the CPU, but config.cuda_backend ("triton") for any
# device it does not know, openreg included. The C++ code generator then misses the rules it keeps
# for C++ (it fills in the dtype of a CSE variable its ops leave unset only for "cpp": an arange
# failed with an AssertionError; dtype propagation also upcasts bfloat16 / float16 for "triton").
# openreg's Scheduling generates each kernel with that answer made "cpp" through Inductor's own
# config.patch, only while it writes openreg kernels.


def _as_cpp_kernels(method: Any) -> Any:
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        with inductor_config.patch(cuda_backend="cpp"):
            return method(self, *args, **kwargs)

    wrapped.__name__ = method.__name__
    wrapped.__doc__ = method.__doc__
    return wrapped


class OpenRegScheduling(CppScheduling):
    """Inductor's C++ kernels for CPUs, for openreg memory."""

    codegen_node = _as_cpp_kernels(CppScheduling.codegen_node)
    codegen_template = _as_cpp_kernels(CppScheduling.codegen_template)
    flush = _as_cpp_kernels(CppScheduling.flush)


class OpenRegWrapperCodegen(PythonWrapperCodegen):
    """Inductor's Python wrapper for openreg graphs: refuses the options openreg cannot honour,
    allocates on the graph's device and calls each kernel as Inductor calls a CPU kernel."""

    def __init__(self) -> None:
        check_options()
        super().__init__()

    @classmethod
    def create(
        cls,
        is_subgraph: bool,
        subgraph_name: str | None,
        parent_wrapper: PythonWrapperCodegen | None,
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return cls()  # the class registered with Inductor (Note [The lab's seam in Python])

    def write_header(self) -> None:
        super().write_header()
        self.header.writeline("from openreg_lab.device._layouts import check as openreg_layout")

    def _codegen_assert_size_stride(self, code: Any, name: str, size: str, stride: str, op_name: str) -> None:
        # Note [A layout compilation did not predict]
        code.writeline(f"openreg_layout({name}, {size}, {stride}, {op_name!r})")

    def make_allocation(
        self,
        name: str,
        device: torch.device,
        dtype: torch.dtype,
        shape: Any,
        stride: Any,
        allocation_shape: Any = None,
        is_pinned: bool = False,
    ) -> str:
        line = super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
        if device.type == DEVICE and device.index is not None:
            # Inductor names the device type only, which would allocate on the current device.
            line = line.replace(f"device='{DEVICE}'", f"device='{device}'")
        return line

    def _generate_kernel_call_helper(
        self, kernel_name: str, call_args: Any, *, device: Any = None, **kwargs: Any
    ) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if device.type == DEVICE:
            # The kernel is C++ for CPUs on host memory: Inductor calls it as it calls a CPU kernel.
            device = torch.device("cpu")
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)


class OpenRegCppWrapperCodegen:
    """``cpp_wrapper=True`` for openreg: refused with a clear error (see ``_compile.py``)."""

    supports_caching = False  # Inductor asks before it creates the wrapper

    @staticmethod
    def create(*args: Any, **kwargs: Any) -> Any:
        raise InductorUnsupportedError(
            "options={'cpp_wrapper': True}",
            "Inductor's C++ wrapper has no openreg variant; leave cpp_wrapper off (openreg runs "
            "Inductor's Python wrapper around the same C++ kernels)",
        )


# Note [Inductor's GPU-only loop transforms]
# Inductor's scheduler skips a few loop rewrites for nodes on the CPU ("not validated for CPU
# codegen yet") by testing device.type == "cpu". openreg's nodes are not "cpu" to it, yet its
# kernels are the CPU's C++ kernels, and the rewrites fail on them (a TypeError inside
# fusion: they read a node's group as Triton's (numel, rnumel), where the C++ scheduling keeps
# tuples of sizes). openreg switches these rewrites off, as the CPU skips them; they only ever ran
# for GPU (Triton) kernels.
#
# The switch must hold in every thread. Assigning `inductor_config.flag = False` does not: torch
# keeps a config assignment in a ContextVar (a user override, per thread), so a compile in a
# thread pool or a serving thread still ran the rewrites and failed. openreg changes the entries'
# *defaults* instead, which every thread reads when it has no override of its own: the layer of
# Inductor's config meant for process-wide values (the one its environment variables such as
# TORCHINDUCTOR_LOOP_REINDEXING_AFTER_FUSION feed). A thread that assigns a flag itself still
# gets what it assigned.
GPU_ONLY_LOOP_TRANSFORMS = ("loop_reindexing_after_fusion", "loop_index_inversion_in_fusion")


def _set_process_default(name: str, value: object) -> None:
    """Make ``value`` the default of Inductor config entry ``name`` for every thread of the process."""
    entry = getattr(inductor_config, "_config", {}).get(name)
    if entry is None or not hasattr(entry, "default"):
        raise RuntimeError(
            f"torch {torch.__version__}: Inductor's config has no entry {name!r} with a default; "
            "openreg's Inductor registration (Note [Inductor's GPU-only loop transforms]) needs updating"
        )
    entry.default = value
    # The module caches its dict and hash per context: mark them stale in this one; other threads
    # have not read a value yet or recompute on their first assignment.
    inductor_config._hash_dirty_var.set(True)
    inductor_config._mark_get_dict_dirty(name)


# Note [Inductor's cache knows openreg's code generators]
# Inductor caches the code it generates for a graph (its FX graph cache, on disk, across processes)
# under a key made of the graph, torch's own code and configuration, and each device's custom pass
# (its uuid). Nothing else of a backend's is in the key: after a change to openreg's Scheduling or
# wrapper, a process loaded the code the old version wrote (once a module the old code imported
# had moved, every cached graph failed with ModuleNotFoundError). openreg registers a custom pass
# that changes nothing and whose uuid hashes the files of its code generators: this module, the
# layouts its fake kernels predict (``_layouts.py``: the generated code asserts them) and the lab's
# subclasses of its classes (Note [The lab's seam in Python]); any change to them is a new key.
# The lab's wrapper also writes what the graph knows beyond its code into the code (the user's line
# of each buffer's node: Note [The node an allocation is for]); the uuid adds the lab's key of the
# graph being compiled (_seam.cache_key), so a graph from other lines is not served stale code.


class CodegenVersion(CustomGraphModulePass):
    """A pass that changes nothing: keys Inductor's caches on openreg's code generators (Note
    [Inductor's cache knows openreg's code generators])."""

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        return None

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__, _layouts.__file__, *_seam.code_files())) + _seam.cache_key()


def register() -> None:
    """Register openreg with Dynamo and Inductor (idempotent)."""
    from torch._dynamo.device_interface import register_interface_for_device

    _layouts.register()  # Note [Fake convolution on openreg]
    register_interface_for_device(DEVICE, OpenRegInterface)
    for i in range(_devices.device_count()):
        register_interface_for_device(f"{DEVICE}:{i}", OpenRegInterface)
    register_device_op_overrides(DEVICE, OpenRegDeviceOpOverrides())
    register_backend_for_device(
        DEVICE,
        _seam.subclass("Scheduling", OpenRegScheduling),
        _seam.subclass("PythonWrapperCodegen", OpenRegWrapperCodegen),
        OpenRegCppWrapperCodegen,  # type: ignore[arg-type]
        device_custom_pass=CodegenVersion(),
    )
    for flag in GPU_ONLY_LOOP_TRANSFORMS:
        _set_process_default(flag, False)
