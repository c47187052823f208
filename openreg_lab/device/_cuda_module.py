"""What ``torch.cuda`` is inside ``from_cuda()``: ``torch.openreg`` under CUDA's names.

Note [Every torch.cuda name resolves]
Libraries touch ``torch.cuda`` at import: annotations such as ``torch.cuda.CUDAGraph | None``,
``isinstance(x, torch.cuda.Event)``, subclasses of CUDA classes, ``from torch.cuda import nvtx``.
So every name that ``torch.cuda`` (or one of its submodules) has resolves to something of the same
kind, and only *calling* what has no openreg meaning fails:

* a name with an openreg meaning is openreg's (``Stream``, ``Event``, ``device_count``,
  ``get_device_properties``, ``mem_get_info``, ...), its device arguments mapped from ``cuda``;
  ``nvtx``'s ranges and marks are labels in the trace (Note [NVTX labels] in ``_cuda_nvtx.py``);
* a class without one is a stand-in class of the same name: annotations, ``isinstance`` (always
  False) and subclassing work, instantiating raises ``CudaNotMappedError``;
* a function without one is a function of the same name that raises ``CudaNotMappedError``;
* a submodule is a view of the same kind over the real one; torch's internals (``_``-names),
  exception types, constants and the modules ``torch.cuda`` imports are the real objects.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

from openreg_lab.device import _cuda_memory, _cuda_nvtx, _cuda_visible
from openreg_lab.device._allocator_settings import set_memory_fraction
from openreg_lab.device._cuda_errors import not_mapped
from openreg_lab.device._devices import device as openreg_device
from openreg_lab.device._devices import device_index
from openreg_lab.device._properties import get_device_properties

REAL_CUDA: types.ModuleType = torch.cuda


#: What to use instead of some unmapped names (the default advice is to guard the call).
_INSTEAD = {
    "CUDAGraph": "run the captured code eagerly (or torch.compile it without mode='reduce-overhead')",
    "graph": "run the captured code eagerly (or torch.compile it without mode='reduce-overhead')",
    "make_graphed_callables": "call the module itself",
    "jiterator": "write the elementwise function as torch operations (torch.compile fuses them)",
    **_cuda_memory.INSTEAD,
}

#: Submodules whose API has names with a leading underscore: ``torch.cuda.jiterator._create_jit_fn``
#: is what scripts call, so its functions and classes are stand-ins too, not torch's internals.
_UNDERSCORED_API = ("jiterator.",)


def map_device(value: Any, ints: bool = False) -> Any:
    """``"cuda:1"`` or ``torch.device("cuda", 1)`` -> ``torch.device("openreg", 1)``, or the device
    ``CUDA_VISIBLE_DEVICES`` makes cuda:1 (Note [CUDA_VISIBLE_DEVICES under from_cuda]); others
    unchanged. With ``ints``, for an argument known to be a device (``.cuda(1)``, ``device=1``,
    ``torch.cuda.set_device(1)``), an int is a CUDA ordinal too."""
    if isinstance(value, torch.device):
        if value.type != "cuda":
            return value
        if value.index is None:
            if not _cuda_visible.is_identity():
                _cuda_visible.current_index()  # a hidden current device: the first visible one
            return torch.device("openreg")
        return torch.device("openreg", _cuda_visible.to_openreg(value.index))
    if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
        return map_device(torch.device(value))
    if ints and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return _cuda_visible.to_openreg(value)
    return value


def with_mapped_devices(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with CUDA devices in its arguments translated (``torch.cuda.set_device("cuda:1")``);
    its ``device`` parameter, if it has one, also takes CUDA ordinals."""
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        names = []
    position = names.index("device") if "device" in names else None

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args = tuple(map_device(a) for a in args)
        kwargs = {k: map_device(v) for k, v in kwargs.items()}
        if not _cuda_visible.is_identity():  # Note [CUDA_VISIBLE_DEVICES under from_cuda]
            if position is not None and position < len(args):
                args = (*args[:position], map_device(args[position], ints=True), *args[position + 1 :])
            elif "device" in kwargs:
                kwargs["device"] = map_device(kwargs["device"], ints=True)
            _cuda_visible.current_index()  # the default device (None) is a visible one
        return fn(*args, **kwargs)

    return wrapper


def _instead(qualname: str) -> str:
    """The advice for ``qualname`` (``nvtx.range_push``: the advice for ``nvtx``), or ""."""
    return next((_INSTEAD[part] for part in qualname.split(".") if part in _INSTEAD), "")


def _unmapped_function(qualname: str, real: Any) -> Callable[..., Any]:
    """A function named as ``real`` that raises ``CudaNotMappedError`` when called."""

    def unmapped(*args: Any, **kwargs: Any) -> Any:
        raise not_mapped(f"torch.cuda.{qualname}()", _instead(qualname))

    unmapped.__name__ = getattr(real, "__name__", qualname.rpartition(".")[2])
    unmapped.__qualname__ = unmapped.__name__
    unmapped.__module__ = getattr(real, "__module__", "torch.cuda")
    unmapped.__doc__ = f"torch.cuda.{qualname}: not mapped to openreg by from_cuda(); calling it raises."
    return unmapped


class _UnmappedClassMeta(type):
    """Metaclass of the stand-ins: a class attribute they lack names the class in the error."""

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise not_mapped(f"torch.cuda.{cls.__qualname__}.{attr}", _instead(cls.__qualname__))


def _unmapped_class(qualname: str, real: type) -> type:
    """A class named as ``real`` whose instantiation raises ``CudaNotMappedError``."""
    name = real.__name__

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        raise not_mapped(f"torch.cuda.{qualname}()", _instead(qualname))

    return _UnmappedClassMeta(
        name,
        (),
        {
            "__new__": __new__,
            "__module__": getattr(real, "__module__", "torch.cuda"),
            "__qualname__": qualname,
            "__doc__": f"torch.cuda.{qualname}: not mapped to openreg by from_cuda(); making one raises.",
        },
    )


def _device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def _device_capability(device: Any = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def _current_device() -> int:
    """``torch.cuda.current_device()``: CUDA's ordinal of this thread's current device."""
    index = _cuda_visible.current_index()
    torch.openreg.init()  # as torch.openreg.current_device(): asking initialises the device
    return _cuda_visible.to_cuda(index)


class _CudaDevice(openreg_device):
    """``torch.cuda.device`` under ``from_cuda()``: openreg's context, whose int is a CUDA ordinal."""

    def __init__(self, device: Any) -> None:
        super().__init__(map_device(device, ints=True))

    def __enter__(self) -> _CudaDevice:
        _cuda_visible.current_index()  # the thread's CUDA device is cuda:0 until this one
        super().__enter__()
        return self


_CudaDevice.__name__ = _CudaDevice.__qualname__ = "device"
_CudaDevice.__module__ = "torch.cuda"


def _default_generators() -> tuple[torch.Generator, ...]:
    shown = _cuda_visible.ordinals()
    generators = torch.openreg.default_generators
    return generators if shown is None else tuple(generators[i] for i in shown)


def _reset_max_memory_allocated(device: Any = None) -> None:
    torch.openreg.reset_peak_memory_stats(device)


def _current_blas_handle() -> int:
    """openreg's matrix products call the host's BLAS, which has no handle: 0, as CUDA's "none"."""
    return 0


def _set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """CUDA's cap as a share of the device's memory: openreg's memory limit at that many bytes
    (``_allocator_settings.set_memory_fraction``)."""
    try:
        set_memory_fraction(fraction, device_index(device))
    except ValueError:
        raise ValueError(
            f"set_per_process_memory_fraction: the fraction must be within [0, 1], got {fraction!r}"
        ) from None


@functools.cache
def _memory_summary() -> Callable[..., Any]:
    """CUDA's own ``memory_summary`` (its code and table) over openreg's allocator statistics, which
    have CUDA's keys: the function's globals with ``memory_stats`` and the device lookup openreg's."""
    real = REAL_CUDA.memory.memory_summary
    names = dict(real.__globals__)
    names["memory_stats"] = torch.openreg.memory_stats
    names["_get_device_index"] = lambda device, optional=False: device_index(device, optional)
    summary = types.FunctionType(real.__code__, names, real.__name__, real.__defaults__, real.__closure__)
    functools.update_wrapper(summary, real)
    return with_mapped_devices(summary)


#: torch.cuda names (in any submodule) with an openreg meaning that is not torch.openreg's name.
_EXTRA: dict[str, Callable[[], Any]] = {
    # Note [CUDA_VISIBLE_DEVICES under from_cuda]: the devices CUDA sees, by CUDA's ordinals
    "device_count": lambda: _cuda_visible.device_count,
    "is_available": lambda: lambda: _cuda_visible.device_count() > 0,
    "current_device": lambda: _current_device,
    "device": lambda: _CudaDevice,
    "default_generators": _default_generators,
    "get_device_name": lambda: with_mapped_devices(_device_name),
    "get_device_capability": lambda: with_mapped_devices(_device_capability),
    "get_device_properties": lambda: with_mapped_devices(get_device_properties),
    "current_blas_handle": lambda: _current_blas_handle,
    "is_tf32_supported": lambda: lambda: False,
    "reset_max_memory_allocated": lambda: with_mapped_devices(_reset_max_memory_allocated),
    "memory_summary": _memory_summary,
    "set_per_process_memory_fraction": lambda: with_mapped_devices(_set_per_process_memory_fraction),
    "is_current_stream_capturing": lambda: lambda: False,  # no CUDA graph is ever captured
    "get_arch_list": lambda: lambda: [],  # no CUDA architecture, as a build without CUDA says
    "OutOfMemoryError": lambda: torch.OutOfMemoryError,
    "memory_snapshot": lambda: _cuda_memory.memory_snapshot,
    "amp": lambda: REAL_CUDA.amp,
}


#: The stand-ins made so far, by the real object: one per CUDA class or function, in every block,
#: so ``torch.cuda.CUDAGraph is torch.cuda.graphs.CUDAGraph`` as without ``from_cuda()``.
_STAND_INS: dict[int, tuple[Any, Any]] = {}  # id(real) -> (real, stand-in); real kept alive


def _stand_in(qualname: str, real: Any) -> Any:
    if id(real) not in _STAND_INS:
        make = _unmapped_class if isinstance(real, type) else _unmapped_function
        _STAND_INS[id(real)] = (real, make(qualname, real))
    return _STAND_INS[id(real)][1]


def _resolve(real_module: types.ModuleType, prefix: str, name: str) -> Any:
    """The value of ``name`` in the shim of ``real_module`` (Note [Every torch.cuda name resolves])."""
    openreg = torch.openreg
    if name in _EXTRA:
        return _EXTRA[name]()
    if prefix == "nvtx." and name in _cuda_nvtx.__all__:
        return getattr(_cuda_nvtx, name)  # Note [NVTX labels]
    if name == "_lazy_init":
        return openreg._lazy_init
    if name in openreg.__all__ or name == "get_device_properties":
        value = getattr(openreg, name)
        return value if isinstance(value, type) or not callable(value) else with_mapped_devices(value)
    real = getattr(real_module, name)  # AttributeError, as torch.cuda would raise
    qualname = prefix + name
    if prefix in _UNDERSCORED_API and getattr(real, "__module__", "") == real_module.__name__:
        return _stand_in(qualname, real)  # the jiterator compiles CUDA C++: nothing to map it to
    if prefix == "memory." and name.startswith("_"):  # Note [torch.cuda.memory's private names]
        mapped = _cuda_memory.mapped(name)
        if mapped is not None:
            return mapped
        return _stand_in(qualname, real) if _cuda_memory.is_cuda_call(real) else real
    if name.startswith("_") or (isinstance(real, type) and issubclass(real, BaseException)):
        return real  # torch's internals and CUDA's exception types
    if isinstance(real, types.ModuleType):
        if real.__name__.startswith("torch.cuda."):
            return CudaSubmodule(real, qualname + ".")
        return real  # modules torch.cuda imports (os, threading, ...)
    if getattr(real, "__module__", "").startswith("typing"):
        return real
    if isinstance(real, type) or callable(real):
        return _stand_in(qualname, real)
    return real  # constants


class CudaSubmodule(types.ModuleType):
    """A submodule of ``torch.cuda`` (``torch.cuda.graphs``, ``torch.cuda.nvtx``, ...) inside
    ``from_cuda()``: resolved as ``torch.cuda`` is; ``streams.Stream`` (which Dynamo's guards read)
    is openreg's."""

    def __init__(self, real: types.ModuleType, prefix: str) -> None:
        super().__init__(real.__name__, real.__doc__)
        self.__dict__["_real"] = real
        self.__dict__["_prefix"] = prefix

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _resolve(self.__dict__["_real"], self.__dict__["_prefix"], name)
        self.__dict__[name] = value  # found directly next time: no __getattr__
        return value


class CudaModule(types.ModuleType):
    """``torch.cuda`` inside ``from_cuda()`` (Note [Every torch.cuda name resolves])."""

    def __init__(self) -> None:
        super().__init__("torch.cuda", "torch.cuda, mapped to torch.openreg by openreg_lab.from_cuda()")
        self.__path__ = list(REAL_CUDA.__path__)  # so that `import torch.cuda.<submodule>` still works

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _resolve(REAL_CUDA, "", name)
        self.__dict__[name] = value  # found directly next time: no __getattr__
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        # `import torch.cuda.comm` inside the block sets the submodule on us: it belongs to the real
        # package too, which is torch.cuda again once the block ends.
        if isinstance(value, types.ModuleType) and value.__name__ == f"torch.cuda.{name}":
            setattr(REAL_CUDA, name, value)
        super().__setattr__(name, value)
