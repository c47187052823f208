"""``from_cuda()``: run code written for CUDA on openreg, unchanged.

::

    with openreg_lab.from_cuda():
        model = Net().cuda()                                  # on openreg:0
        x = torch.randn(8, 64, device="cuda")                 # on openreg:0
        with torch.autocast("cuda", dtype=torch.bfloat16):    # autocast on openreg
            loss = model(x).sum()
        torch.cuda.synchronize()                              # torch.openreg.synchronize()

Inside the block:

* ``"cuda"`` / ``"cuda:N"`` device strings and ``torch.device("cuda", N)`` objects given to torch
  functions (``device=`` arguments, ``Tensor.to``, ``Module.to``) mean ``openreg:N``; ``.cuda()``
  moves to openreg and ``Tensor.is_cuda`` is true for openreg tensors. This part is a
  ``TorchFunctionMode``, so it applies to the thread that entered the block.
* ``torch.cuda`` is replaced by a module whose devices, streams, events, memory statistics and
  random functions are ``torch.openreg``'s; ``torch.cuda.amp`` (autocast, GradScaler) works.
* ``torch.autocast("cuda")``, ``torch.amp.autocast("cuda")`` and ``torch.amp.GradScaler("cuda")``
  (and their ``torch.cuda.amp`` spellings) use openreg.
* ``torch.compile`` works inside the block: Dynamo traces this translation in compiled code, and
  ``torch.cuda.streams.Stream`` (which its guards read) is openreg's ``Stream``.
* A public ``torch.cuda`` function with no openreg counterpart (``get_device_capability``, CUDA
  graphs, NVTX, ...) raises ``CudaNotMappedError`` naming the call when it is called.
* ``torch.distributed``: ``init_process_group("nccl")`` (and ``new_group``, ``"cuda:nccl"`` pairs,
  a ``device_id`` on ``cuda``) uses openreg's backend ``"ogloo"``; ``is_nccl_available()`` is True.

Not mapped: a ``torch.device("cuda")`` object keeps ``type == "cuda"`` (it is translated when a
torch function receives it), ``torch.Generator(device="cuda")``, ``torch.load(map_location="cuda")``,
and threads or processes the block did not start from.
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from openreg_lab.device import _distributed


class CudaNotMappedError(NotImplementedError):
    """A CUDA call that ``from_cuda()`` cannot send to openreg."""


def _map_device(value: Any) -> Any:
    """``"cuda:1"`` or ``torch.device("cuda", 1)`` -> ``torch.device("openreg", 1)``; others unchanged."""
    if isinstance(value, torch.device):
        return torch.device("openreg", value.index) if value.type == "cuda" else value
    if isinstance(value, str) and (value == "cuda" or value.startswith("cuda:")):
        return _map_device(torch.device(value))
    return value


def _map_device_type(value: Any) -> Any:
    """``"cuda"`` as a device *type* (autocast, GradScaler) -> ``"openreg"``."""
    return "openreg" if value == "cuda" else value


_IS_CUDA = torch._C.TensorBase.__dict__["is_cuda"]
# Torch functions whose positional arguments may be device strings. A tuple compared by identity:
# Dynamo traces this mode inside compiled code, and cannot hash builtins (a graph break per op).
_TO_FUNCS = (torch._C.TensorBase.to, torch._C._nn._parse_to)
# Functions of the torch module taking an autocast device type first (not torch functions: patched).
_DEVICE_TYPE_FUNCS = (
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
)


class _CudaToOpenreg(TorchFunctionMode):
    """Translate CUDA devices in the arguments of every torch function called on this thread."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch._C.TensorBase.cuda:
            return _to_openreg(*args, **kwargs)
        if getattr(func, "__self__", None) is _IS_CUDA and getattr(func, "__name__", "") == "__get__":
            return args[0].device.type == "openreg"
        if any(func is f for f in _TO_FUNCS):
            args = tuple(_map_device(a) for a in args)
        elif any(type(a) is torch.device for a in args):
            args = tuple(_map_device(a) for a in args)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": _map_device(kwargs["device"])}
        if "device_type" in kwargs:
            kwargs = {**kwargs, "device_type": _map_device_type(kwargs["device_type"])}
        return func(*args, **kwargs)


def _to_openreg(
    tensor: torch.Tensor,
    device: Any = None,
    non_blocking: bool = False,
    memory_format: torch.memory_format = torch.preserve_format,
) -> torch.Tensor:
    """``Tensor.cuda(device)`` on openreg (an int ``device`` is an openreg device index)."""
    if device is None:
        target = torch.device("openreg", torch.openreg.current_device())
    elif isinstance(device, int):
        target = torch.device("openreg", device)
    else:
        target = _map_device(torch.device(device) if isinstance(device, str) else device)
    return tensor.to(target, non_blocking=non_blocking, memory_format=memory_format)


def _with_mapped_devices(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with CUDA devices in its arguments translated (``torch.cuda.set_device("cuda:1")``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args = tuple(_map_device(a) for a in args)
        kwargs = {k: _map_device(v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    return wrapper


class _Unmapped:
    """Stands for a ``torch.cuda`` attribute without an openreg counterpart: using it raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _fail(self, what: str) -> CudaNotMappedError:
        return CudaNotMappedError(
            f"{what} has no openreg counterpart, so openreg_lab.from_cuda() (run --from-cuda) cannot "
            "map it; it maps devices, streams, events, memory statistics, random seeds and amp. "
            "Guard or remove the call to run the script on openreg"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._fail(f"torch.cuda.{self._name}()")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise self._fail(f"torch.cuda.{self._name}.{attr}")

    def __repr__(self) -> str:
        return f"<torch.cuda.{self._name}: not mapped to openreg>"


class _StreamsModule(types.ModuleType):
    """``torch.cuda.streams`` inside ``from_cuda()``: openreg's Stream and Event (Dynamo's guards
    read ``torch.cuda.streams.Stream``); its other names are unmapped."""

    def __init__(self) -> None:
        super().__init__("torch.cuda.streams")
        self.Stream = torch.openreg.Stream
        self.Event = torch.openreg.Event

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unmapped(f"streams.{name}")


def _reset_peak() -> None:
    torch.openreg.reset_peak_memory_stats()


#: torch.cuda names with an openreg counterpart that is not simply torch.openreg's function.
_EXTRA: dict[str, Callable[[], Any]] = {
    "get_device_name": lambda: _with_mapped_devices(lambda device=None: "openreg (simulated by openreg-lab)"),
    "is_tf32_supported": lambda: lambda: False,
    "reset_max_memory_allocated": lambda: _with_mapped_devices(lambda device=None: _reset_peak()),
    "OutOfMemoryError": lambda: torch.OutOfMemoryError,
    "amp": lambda: _REAL_CUDA.amp,
    "streams": _StreamsModule,
    # CUDA's answers (major, minor); torch.openreg's is torch.accelerator's dict of dtypes: not the same call.
    "get_device_capability": lambda: _Unmapped("get_device_capability"),
}

_REAL_CUDA: types.ModuleType = torch.cuda


class _CudaModule(types.ModuleType):
    """What ``torch.cuda`` is inside ``from_cuda()``: ``torch.openreg`` under CUDA's names."""

    def __init__(self) -> None:
        super().__init__("torch.cuda", "torch.cuda, mapped to torch.openreg by openreg_lab.from_cuda()")
        self.__dict__["_cache"] = {}

    def __getattr__(self, name: str) -> Any:
        cache = self.__dict__["_cache"]
        if name not in cache:
            cache[name] = self._resolve(name)
        return cache[name]

    def _resolve(self, name: str) -> Any:
        openreg = torch.openreg
        if name in _EXTRA:
            return _EXTRA[name]()
        if name in openreg.__all__:
            value = getattr(openreg, name)
            return value if isinstance(value, type) or not callable(value) else _with_mapped_devices(value)
        real = getattr(_REAL_CUDA, name)  # AttributeError, as torch.cuda would raise
        if name.startswith("_") or (isinstance(real, type) and issubclass(real, BaseException)):
            return real  # torch's internals and CUDA's exception types
        if isinstance(real, types.ModuleType) and not real.__name__.startswith("torch.cuda"):
            return real  # modules torch.cuda imports (os, threading, ...)
        if getattr(real, "__module__", "").startswith("typing"):
            return real
        return _Unmapped(name)


def _with_mapped_device_type(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a first argument ``"cuda"`` read as ``"openreg"`` (``torch.is_autocast_enabled``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = (_map_device_type(args[0]), *args[1:])
        if "device_type" in kwargs:
            kwargs["device_type"] = _map_device_type(kwargs["device_type"])
        return fn(*args, **kwargs)

    return wrapper


def _load_to_openreg(load: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.load`` with a CUDA ``map_location`` (a string, a device, or a dict of them) sent to
    openreg; a checkpoint saved on CUDA with no ``map_location`` lands on openreg too."""

    @functools.wraps(load)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        where = kwargs.get("map_location", args[1] if len(args) > 1 else None)
        if isinstance(where, dict):
            where = {k: str(_map_device(v)) for k, v in where.items()}  # location strings
        elif where is None:
            where = _cuda_storages_to_openreg
        elif not callable(where):
            where = _map_device(where)
        if len(args) > 1:
            args = (args[0], where, *args[2:])
        else:
            kwargs["map_location"] = where
        return load(*args, **kwargs)

    return wrapper


_REAL_GENERATOR = torch.Generator


class _AnyGenerator(type(_REAL_GENERATOR)):  # type: ignore[misc]
    """Metaclass: every real generator is an instance, so ``isinstance`` checks keep working."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _REAL_GENERATOR)


class _Generator(_REAL_GENERATOR, metaclass=_AnyGenerator):  # type: ignore[misc]
    """``torch.Generator`` inside ``from_cuda()``: ``device="cuda"`` makes an openreg generator."""

    def __new__(cls, device: Any = "cpu") -> Any:
        return _REAL_GENERATOR(device=_map_device(device))


def _cuda_storages_to_openreg(storage: Any, location: str) -> Any:
    """``map_location`` for checkpoints saved on CUDA: their storages restored on openreg."""
    if location.startswith("cuda"):
        index = int(location.partition(":")[2] or 0)
        return storage.to(torch.device("openreg", index))
    return storage


def _patched_init(cls: type, map_default: bool) -> Callable[..., None]:
    """``cls.__init__`` with a CUDA device type (first argument) read as openreg."""
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        key = "device_type" if "device_type" in kwargs else "device"
        if args:
            args = (_map_device_type(args[0]), *args[1:])
        elif key in kwargs:
            kwargs[key] = _map_device_type(kwargs[key])
        elif map_default:  # GradScaler's device defaults to "cuda"
            kwargs["device"] = "openreg"
        original(self, *args, **kwargs)

    return __init__


_lock = threading.Lock()
_depth = 0
_undo: Callable[[], None] | None = None


def _install() -> Callable[[], None]:
    """Replace ``torch.cuda``; patch autocast, GradScaler and the autocast state functions.

    Returns the function that undoes it all.
    """
    autocast, scaler = torch.amp.autocast_mode.autocast, torch.amp.GradScaler
    inits = {autocast: autocast.__init__, scaler: scaler.__init__}
    functions = {name: getattr(torch, name) for name in _DEVICE_TYPE_FUNCS}
    load = torch.load
    saved_module = sys.modules.get("torch.cuda")
    autocast.__init__ = _patched_init(autocast, map_default=False)  # type: ignore[method-assign]
    scaler.__init__ = _patched_init(scaler, map_default=True)  # type: ignore[method-assign]
    for name, fn in functions.items():
        setattr(torch, name, _with_mapped_device_type(fn))
    torch.load = _load_to_openreg(load)  # type: ignore[assignment]
    torch.Generator = _Generator  # type: ignore[misc]
    shim = _CudaModule()
    sys.modules["torch.cuda"] = shim
    torch.cuda = shim  # type: ignore[assignment]
    undo_distributed = _distributed.map_cuda_backends(_map_device)  # "nccl" -> "ogloo"

    def undo() -> None:
        undo_distributed()
        for cls, init in inits.items():
            cls.__init__ = init  # type: ignore[method-assign]
        for name, fn in functions.items():
            setattr(torch, name, fn)
        torch.load = load  # type: ignore[assignment]
        torch.Generator = _REAL_GENERATOR  # type: ignore[misc]
        sys.modules["torch.cuda"] = saved_module if saved_module is not None else _REAL_CUDA
        torch.cuda = _REAL_CUDA  # type: ignore[assignment]

    return undo


@contextmanager
def from_cuda() -> Iterator[None]:
    """Context manager: code written for CUDA runs on openreg inside the block (see the module doc).

    Blocks may nest; ``torch.cuda`` and the autocast / GradScaler patches are process-wide while
    the outermost block runs, the device translation applies to the thread that entered it.
    """
    global _depth, _undo
    with _lock:
        if _depth == 0:
            _undo = _install()
        _depth += 1
    try:
        with _CudaToOpenreg():
            yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _undo is not None:
                _undo()
                _undo = None
