"""Where CUDA devices enter torch, mapped to openreg while ``from_cuda()`` is on.

Note [Devices mapped where they enter]
A device reaches a kernel through a few entry points only: the ``device=`` of factory functions
(``torch.zeros``, ``torch.randn``, ``Tensor.new_zeros``, ...), ``Tensor.to`` / ``.cuda`` /
``.pin_memory``, ``Module.to`` (``torch._C._nn._parse_to``) and ``.cuda``, the device context
(``with torch.device("cuda")``, ``torch.set_default_device``), ``torch.Generator``, autocast and
GradScaler's device type, ``torch.load``'s ``map_location``, ``torch.distributed``'s backends and
the ``device_ids`` of DataParallel and DistributedDataParallel. ``from_cuda()`` replaces exactly
those by wrappers that turn ``"cuda"`` into ``"openreg"`` (and CUDA's ordinals into openreg's
indices: Note [CUDA_VISIBLE_DEVICES under from_cuda]) and call the original; every other call
(``F.linear``, ``torch.add``, autograd, the optimizers' foreach kernels) runs as without it, with
no Python in between. A ``TorchFunctionMode`` did the same per call, which cost a small-op training
step 1.8x-2.0x.

The factory functions are found from the operator schemas (every public ``torch`` function or
``Tensor`` method whose schema has a ``device`` argument), so new factories are covered too.
Patches are process-wide while the outermost block runs, and undone in reverse order on exit.
Inside a compiled region Dynamo traces these wrappers like any Python function, except
``Tensor.to``/``.cuda``, which it reads from the tensor itself: a compiled function takes its
devices from its tensors (``device=x.device``), as compiled code usually does.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch

from openreg_lab.device import _cuda_visible, _distributed
from openreg_lab.device._cuda_module import map_device


class Patches:
    """Attributes replaced on modules and classes, restored by ``undo()`` in reverse order."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        """Set ``owner.name = value``, remembering what was there (or that nothing was)."""
        own = vars(owner)
        had, old = name in own, own.get(name)
        setattr(owner, name, value)
        self.on_undo(lambda: setattr(owner, name, old) if had else delattr(owner, name))

    def on_undo(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` when undoing (after what was patched later is undone)."""
        self._undo.append(fn)

    def undo(self) -> None:
        """Undo every patch, last first."""
        while self._undo:
            self._undo.pop()()


def map_device_type(value: Any) -> Any:
    """``"cuda"`` as a device *type* (autocast, GradScaler) -> ``"openreg"``."""
    return "openreg" if value == "cuda" else value


def _device_keyword(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its ``device=`` mapped (factory functions: the device is keyword-only)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = map_device(kwargs["device"], ints=True)
        return fn(*args, **kwargs)

    return wrapper


def _device_anywhere(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with devices mapped in any position (``Tensor.to("cuda")``, ``_parse_to``): an int
    there is a device (``x.to(1)``; dtypes are not ints, and ``non_blocking`` is a bool)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        args = tuple(map_device(a, ints=True) for a in args)
        if "device" in kwargs:
            kwargs["device"] = map_device(kwargs["device"], ints=True)
        return fn(*args, **kwargs)

    return wrapper


def _to_openreg(
    tensor: torch.Tensor,
    device: Any = None,
    non_blocking: bool = False,
    memory_format: torch.memory_format = torch.preserve_format,
) -> torch.Tensor:
    """``Tensor.cuda(device)`` on openreg (an int ``device`` is a CUDA ordinal)."""
    if device is None:
        target = torch.device("openreg", _cuda_visible.current_index())
    elif isinstance(device, int):
        target = torch.device("openreg", _cuda_visible.to_openreg(device))
    else:
        target = map_device(torch.device(device) if isinstance(device, str) else device)
    return torch._C.TensorBase.to(tensor, target, non_blocking=non_blocking, memory_format=memory_format)


_IS_CUDA = torch._C.TensorBase.__dict__["is_cuda"]


def _is_cuda(tensor: torch.Tensor) -> bool:
    """``Tensor.is_cuda``: True on openreg."""
    return tensor.device.type == "openreg" or _IS_CUDA.__get__(tensor)


#: Tensor methods whose devices may be positional.
_TENSOR_ANYWHERE = ("to", "pin_memory", "is_pinned")


@functools.cache
def _factory_names() -> frozenset[str]:
    """Public operator names with a ``device`` argument (``zeros``, ``fft_fftfreq``, ``new_zeros``)."""
    names = {
        "tensor",
        "as_tensor",
        "asarray",
        "scalar_tensor",
        "new_tensor",
        "nested_tensor",
        "as_nested_tensor",
    }
    for schema in torch._C._jit_get_all_schemas():
        if any(a.name == "device" for a in schema.arguments):
            names.add(schema.name.partition("::")[2])
    return frozenset(n for n in names if n[0].islower())  # not _internals, not Generator (mapped apart)


@functools.cache
def _factory_targets() -> tuple[tuple[Any, str], ...]:
    """``(owner, name)`` of every factory to wrap: ``torch``'s, ``torch.fft``'s, ``torch.nested``'s
    and ``Tensor``'s (computed once: entering a block stays cheap)."""
    names = _factory_names()
    targets = []
    for owner, prefix in ((torch, ""), (torch.fft, "fft_"), (torch.nested, ""), (torch.Tensor, "")):
        for name in sorted(vars(owner) if owner is not torch.Tensor else dir(owner)):
            if prefix + name in names and name not in _TENSOR_ANYWHERE and callable(getattr(owner, name)):
                targets.append((owner, name))
    return tuple(targets)


#: Wrappers made so far, by (owner, name): the same wrapper while the original is the same.
_WRAPPERS: dict[tuple[int, str], tuple[Any, Any]] = {}


def _wrapped(owner: Any, name: str, wrap: Callable[[Any], Any]) -> Any:
    original = getattr(owner, name)
    key = (id(owner), name)
    if key not in _WRAPPERS or _WRAPPERS[key][0] is not original:
        _WRAPPERS[key] = (original, wrap(original))
    return _WRAPPERS[key][1]


def _factories(patches: Patches) -> None:
    for owner, name in _factory_targets():
        patches.set(owner, name, _wrapped(owner, name, _device_keyword))


def _tensors_and_modules(patches: Patches) -> None:
    for name in _TENSOR_ANYWHERE:
        patches.set(torch.Tensor, name, _wrapped(torch.Tensor, name, _device_anywhere))
    patches.set(torch.Tensor, "cuda", _to_openreg)
    patches.set(torch.Tensor, "is_cuda", property(_is_cuda, doc=_IS_CUDA.__doc__))
    patches.set(torch._C._nn, "_parse_to", _wrapped(torch._C._nn, "_parse_to", _device_anywhere))  # Module.to


def _device_context(patches: Patches) -> None:
    """``with torch.device("cuda"):`` and ``torch.set_default_device("cuda")`` mean openreg."""
    from torch.utils import _device

    original = _device.DeviceContext.__init__

    @functools.wraps(original)
    def __init__(self: Any, device: Any) -> None:
        original(self, map_device(device))

    patches.set(_device.DeviceContext, "__init__", __init__)


def _patched_init(cls: type, map_default: bool) -> Callable[..., None]:
    """``cls.__init__`` with a CUDA device type (first argument) read as openreg."""
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        key = "device_type" if "device_type" in kwargs else "device"
        if args:
            args = (map_device_type(args[0]), *args[1:])
        elif key in kwargs:
            kwargs[key] = map_device_type(kwargs[key])
        elif map_default:  # GradScaler's device defaults to "cuda"
            kwargs["device"] = "openreg"
        original(self, *args, **kwargs)

    return __init__


def _with_mapped_device_type(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a first argument ``"cuda"`` read as ``"openreg"`` (``torch.is_autocast_enabled``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = (map_device_type(args[0]), *args[1:])
        if "device_type" in kwargs:
            kwargs["device_type"] = map_device_type(kwargs["device_type"])
        return fn(*args, **kwargs)

    return wrapper


#: Functions taking an autocast device type first.
_DEVICE_TYPE_FUNCS = (
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
)


def _amp(patches: Patches) -> None:
    autocast, scaler = torch.amp.autocast_mode.autocast, torch.amp.GradScaler
    patches.set(autocast, "__init__", _patched_init(autocast, map_default=False))
    patches.set(scaler, "__init__", _patched_init(scaler, map_default=True))
    for name in _DEVICE_TYPE_FUNCS:
        patches.set(torch, name, _wrapped(torch, name, _with_mapped_device_type))
    available = _with_mapped_device_type(torch.amp.autocast_mode.is_autocast_available)
    patches.set(torch.amp.autocast_mode, "is_autocast_available", available)
    patches.set(torch.amp, "is_autocast_available", available)


def _cuda_storages_to_openreg(storage: Any, location: str) -> Any:
    """``map_location`` for checkpoints saved on CUDA: their storages restored on openreg."""
    if location.startswith("cuda"):
        ordinal = int(location.partition(":")[2] or 0)
        return storage.to(torch.device("openreg", _cuda_visible.to_openreg(ordinal)))
    return storage


def _load_to_openreg(load: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.load`` with a CUDA ``map_location`` (a string, a device, or a dict of them) sent to
    openreg; a checkpoint saved on CUDA with no ``map_location`` lands on openreg too."""

    @functools.wraps(load)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        where = kwargs.get("map_location", args[1] if len(args) > 1 else None)
        if isinstance(where, dict):
            where = {k: str(map_device(v)) for k, v in where.items()}  # location strings
        elif where is None:
            where = _cuda_storages_to_openreg
        elif not callable(where):
            where = map_device(where)
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
        return _REAL_GENERATOR(device=map_device(device, ints=True))


def _openreg_index(device: Any) -> Any:
    """A device of ``device_ids`` or ``output_device`` as openreg's index: an int is a CUDA ordinal
    (Note [CUDA_VISIBLE_DEVICES under from_cuda]); negatives (the CPU) and others unchanged."""
    mapped = map_device(device, ints=True)
    return mapped.index if isinstance(mapped, torch.device) and mapped.type == "openreg" else mapped


def _openreg_ids(ids: Any, output: Any, every_by_default: bool) -> tuple[Any, Any]:
    """``device_ids`` and ``output_device`` as openreg's indices; with ``every_by_default``, no
    ``device_ids`` means every device CUDA sees (DataParallel's default)."""
    if ids is None and every_by_default and _cuda_visible.device_count() > 0:
        ids = range(_cuda_visible.device_count())
    return (
        None if ids is None else [_openreg_index(d) for d in ids],
        None if output is None else _openreg_index(output),
    )


def _with_openreg_ids(init: Callable[..., None], every_by_default: bool) -> Callable[..., None]:
    """``init(self, module, device_ids=None, output_device=None, ...)`` (DataParallel's and
    DistributedDataParallel's) given openreg's indices for CUDA's devices."""

    @functools.wraps(init)
    def wrapped(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        ids = args[0] if args else kwargs.pop("device_ids", None)
        output = args[1] if len(args) > 1 else kwargs.pop("output_device", None)
        init(self, module, *_openreg_ids(ids, output, every_by_default), *args[2:], **kwargs)

    return wrapped


def _parallel(patches: Patches) -> None:
    """``nn.DataParallel`` and ``data_parallel`` run over the openreg devices CUDA sees, and
    DistributedDataParallel's ``device_ids`` are CUDA's ordinals: their device type is openreg
    (not the ``"cuda"`` that ``torch.cuda.is_available()`` suggests, whose devices are not the
    tensors'), and their device indices openreg's. The copies between devices are openreg's
    (Note [DataParallel's primitives] in ``_comm.py``)."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    module = importlib.import_module("torch.nn.parallel.data_parallel")
    functional = module.data_parallel

    def device_type() -> str | None:
        return "openreg" if _cuda_visible.device_count() > 0 else None  # none visible: no device

    @functools.wraps(functional)
    def data_parallel(
        module: Any,
        inputs: Any,
        device_ids: Any = None,
        output_device: Any = None,
        dim: int = 0,
        module_kwargs: Any = None,
    ) -> Any:
        ids, output = _openreg_ids(device_ids, output_device, every_by_default=True)
        return functional(module, inputs, ids, output, dim, module_kwargs)

    patches.set(module, "_get_available_device_type", device_type)
    patches.set(module, "data_parallel", data_parallel)
    patches.set(torch.nn.parallel, "data_parallel", data_parallel)
    patches.set(DataParallel, "__init__", _with_openreg_ids(DataParallel.__init__, True))
    ddp_init = _with_openreg_ids(DistributedDataParallel.__init__, False)
    patches.set(DistributedDataParallel, "__init__", ddp_init)


def install(patches: Patches) -> None:
    """Map CUDA devices at every entry point (Note [Devices mapped where they enter])."""
    from torch.utils import _device

    _device._device_constructors()  # cached now: the real constructors, not our wrappers
    _factories(patches)
    _tensors_and_modules(patches)
    _device_context(patches)
    _amp(patches)
    patches.set(torch, "load", _load_to_openreg(torch.load))
    patches.set(torch, "Generator", _Generator)
    _parallel(patches)
    patches.on_undo(_distributed.map_cuda_backends(map_device))  # "nccl" -> "ogloo"
