"""The Lightning Trainer on openreg: ``Trainer(accelerator="openreg")``.

Imported only once Lightning is (Note [Lightning on openreg] in ``_lightning.py``): :func:`adapt`
runs right after ``pytorch_lightning.trainer.connectors.accelerator_connector`` is imported, which
has imported every module used here (Fabric's side, ``_lightning_fabric.py``, was adapted before:
``pytorch_lightning`` imports ``lightning_fabric`` first).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from pytorch_lightning.accelerators import AcceleratorRegistry
from pytorch_lightning.accelerators.accelerator import Accelerator

from openreg_lab.device import _after_import
from openreg_lab.device import _lightning_fabric as fabric
from openreg_lab.device._lightning import check_one_device


class OpenRegAccelerator(fabric.OpenRegAccelerator, Accelerator):
    """The Lightning Trainer's accelerator for openreg: ``Trainer(accelerator="openreg")``."""


def adapt(connector: ModuleType) -> None:
    """Register ``"openreg"`` with the Trainer, make its connector's choices for openreg and check
    that the model is on its device (Note [Lightning on openreg]); ``connector`` is
    ``pytorch_lightning.trainer.connectors.accelerator_connector``."""
    from pytorch_lightning.plugins import MixedPrecision
    from pytorch_lightning.strategies import DDPStrategy, SingleDeviceStrategy, Strategy
    from pytorch_lightning.utilities.rank_zero import rank_zero_info

    OpenRegAccelerator.register_accelerators(AcceleratorRegistry)
    flags = ("_precision_flag", "_precision_plugin_flag")
    plain = (SingleDeviceStrategy, DDPStrategy)
    cls = connector._AcceleratorConnector
    fabric.adapt_connector(cls, "Trainer", flags, plain, MixedPrecision, rank_zero_info)
    fabric.wrap(DDPStrategy, "determine_ddp_device_ids", fabric.no_device_ids_on_openreg)
    for strategy in plain:
        fabric.wrap(strategy, "model_to_device", _checked_after)
    fabric.wrap(Strategy, "on_train_start", _checked_before)


def _check(strategy: Any) -> None:
    if isinstance(strategy.accelerator, fabric.OpenRegAccelerator) and strategy.lightning_module is not None:
        check_one_device(strategy.lightning_module, strategy.root_device)


def _checked_after(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """``model_to_device``, then every parameter and buffer checked on the strategy's device."""

    def model_to_device(self: Any) -> None:
        original(self)
        _check(self)

    return model_to_device


def _checked_before(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """``on_train_start`` (after the user's hooks, before the first batch), checked first."""

    def on_train_start(self: Any) -> None:
        _check(self)
        original(self)

    return on_train_start


# Imported before Lightning, this module adapts it now (Note [Acting on a module when it is imported]).
_after_import.done(__name__)
