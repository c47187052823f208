"""Lightning Fabric on openreg: the accelerator ``"openreg"`` and the choices Fabric makes for it.

Imported only once Lightning is (Note [Lightning on openreg] in ``_lightning.py``): :func:`adapt`
runs right after ``lightning_fabric.connector`` is imported, which has imported every module used
here. The Trainer's accelerator (``_lightning_pytorch.py``) derives from :class:`OpenRegAccelerator`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from lightning_fabric.accelerators import ACCELERATOR_REGISTRY
from lightning_fabric.accelerators.accelerator import Accelerator
from lightning_fabric.accelerators.registry import _AcceleratorRegistry
from lightning_fabric.utilities.exceptions import MisconfigurationException

from openreg_lab.device import _after_import
from openreg_lab.device._lightning import DEVICE, say_auto_is_cpu

MIXED = ("16-mixed", "bf16-mixed")


class OpenRegAccelerator(Accelerator):
    """Lightning Fabric's accelerator for openreg: ``Fabric(accelerator="openreg")``."""

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` (an openreg device) current for this process."""
        if device.type != DEVICE:
            raise MisconfigurationException(
                f'accelerator="openreg" was given the device {device}: give the strategy an openreg device, '
                'or let Lightning choose one (strategy="auto")'
            )
        torch.openreg.set_device(device)

    def teardown(self) -> None:
        """Nothing to undo (the device's memory stays cached, as the Trainer's CPU accelerator leaves it)."""

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        """The openreg device indices ``devices`` asks for (Lightning's forms, as for GPUs)."""
        return parse_devices(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """The openreg devices ``devices`` asks for."""
        return [torch.device(DEVICE, i) for i in parse_devices(devices)]

    @staticmethod
    def auto_device_count() -> int:
        """One device for ``devices="auto"`` (Note [Lightning on openreg])."""
        return 1

    @staticmethod
    def is_available() -> bool:
        """True when openreg has a device."""
        return torch.openreg.device_count() > 0

    @staticmethod
    def name() -> str:
        """``"openreg"``."""
        return DEVICE

    @classmethod
    def register_accelerators(cls, accelerator_registry: _AcceleratorRegistry) -> None:
        """Register the class as ``"openreg"`` (again: a registry may hold it from an earlier import)."""
        accelerator_registry.register(cls.name(), cls, description=cls.__name__, override=True)

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """The allocator's statistics of ``device`` (``torch.openreg.memory_stats``, keys as CUDA's)."""
        return dict(torch.openreg.memory_stats(device))


def parse_devices(devices: Any) -> list[int]:
    """Lightning's forms of ``devices`` as openreg indices: a count (``2``, ``"2"``; ``-1`` or
    ``"-1"`` for every device) or indices (``[0, 1]``, ``"0,1"``, ``"1,"``)."""
    count = torch.openreg.device_count()
    wanted: list[int] | int
    if isinstance(devices, str):
        text = devices.strip()
        if "," in text:
            wanted = [int(part) for part in text.split(",") if part.strip()]
        else:
            wanted = int(text) if text.lstrip("-").isdigit() else _bad(devices, count)
    elif isinstance(devices, bool):
        wanted = _bad(devices, count)
    elif isinstance(devices, int):
        wanted = devices
    elif isinstance(devices, (list, tuple)) and all(isinstance(i, int) for i in devices):
        wanted = list(devices)
    else:
        wanted = _bad(devices, count)
    if isinstance(wanted, int):
        if wanted == -1:
            return list(range(count))
        if not 1 <= wanted <= count:
            _bad(devices, count)
        return list(range(wanted))
    if not wanted or len(set(wanted)) != len(wanted) or not all(0 <= i < count for i in wanted):
        _bad(devices, count)
    return wanted


def _bad(devices: Any, count: int) -> Any:
    raise MisconfigurationException(
        f"devices={devices!r} is not a set of openreg devices: openreg has {count} (openreg:0 to "
        f"openreg:{count - 1}); give a count from 1 to {count}, -1 for all, or distinct indices such as "
        "[0, 1] (OPENREG_DEVICE_COUNT sets how many devices there are)"
    )


def is_openreg(accelerator: Any) -> bool:
    """Whether a connector's accelerator flag (a name or an instance) is openreg's."""
    return accelerator == DEVICE or isinstance(accelerator, OpenRegAccelerator)


def wrap(owner: type, name: str, make: Callable[[Any], Any], *, static: bool = False) -> None:
    """Replace ``owner.name`` by ``make(original)``, once (a second call leaves it)."""
    original = owner.__dict__[name]
    if getattr(original, "__openreg__", False):
        return
    function = original.__func__ if static else original
    replacement = functools.wraps(function)(make(function))
    replacement.__openreg__ = True
    setattr(owner, name, staticmethod(replacement) if static else replacement)


def adapt(connector: ModuleType) -> None:
    """Register ``"openreg"`` with Fabric and make its connector's choices for openreg (Note
    [Lightning on openreg]); ``connector`` is ``lightning_fabric.connector``."""
    from lightning_fabric.plugins import MixedPrecision
    from lightning_fabric.strategies import DDPStrategy, SingleDeviceStrategy
    from lightning_fabric.utilities import rank_zero_info

    OpenRegAccelerator.register_accelerators(ACCELERATOR_REGISTRY)
    plain = (SingleDeviceStrategy, DDPStrategy)
    flags = ("_precision_input", "_precision_instance")
    adapt_connector(connector._Connector, "Fabric", flags, plain, MixedPrecision, rank_zero_info)
    wrap(DDPStrategy, "_determine_ddp_device_ids", no_device_ids_on_openreg)


def no_device_ids_on_openreg(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """DDP's ``device_ids``: None for a model on openreg (Note [Lightning on openreg])."""

    def device_ids(self: Any) -> Any:
        return None if self.root_device.type == DEVICE else original(self)

    return device_ids


def adapt_connector(
    cls: type,
    owner: str,
    flags: tuple[str, str],
    plain: tuple[type, type],
    mixed_precision: Callable[[str, str], Any],
    info: Callable[[str], None],
) -> None:
    """Make a connector class's three choices for openreg (Fabric's and the Trainer's have the same
    methods): ``auto``, the single-device strategy and the mixed precision's autocast device.
    ``owner`` is what the user constructs (``"Trainer"``, ``"Fabric"``), ``flags`` the connector's
    attributes holding the precision asked for and the precision plugin given, ``plain`` the
    single-device and DDP strategy classes (with any other strategy Lightning's own choice stands),
    ``mixed_precision`` the plugin class and ``info`` Lightning's ``rank_zero_info``."""
    single = plain[0]

    def auto(original: Callable[[], str]) -> Callable[[], str]:
        def choose() -> str:
            chosen = original()
            if chosen == "cpu":
                say_auto_is_cpu(owner)
            return chosen

        return choose

    def strategy(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def choose(self: Any) -> Any:
            chosen = original(self)
            devices = self._parallel_devices
            if is_openreg(self._accelerator_flag) and isinstance(chosen, single) and len(devices) == 1:
                return single(device=devices[0])
            return chosen

        return choose

    def mixed(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def choose(self: Any) -> Any:
            flag, given = (getattr(self, name) for name in flags)
            ours = is_openreg(self._accelerator_flag) and isinstance(self.strategy, plain)
            if ours and flag in MIXED and given is None:
                kind = "16-bit" if flag == "16-mixed" else "bfloat16"
                info(f"Using {kind} Automatic Mixed Precision (AMP) on openreg")
                return mixed_precision(flag, DEVICE)
            return original(self)

        return choose

    wrap(cls, "_choose_auto_accelerator", auto, static=True)
    wrap(cls, "_choose_strategy", strategy)
    wrap(cls, "_check_and_init_precision", mixed)


# Imported before Lightning, this module adapts it now (Note [Acting on a module when it is imported]).
_after_import.done(__name__)
