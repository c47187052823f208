"""Random number generation for ``torch.openreg``: one default generator per device.

``torch.manual_seed`` reaches :func:`manual_seed_all` through PyTorch's PrivateUse1 support. Each
generator draws with a CPU engine, so a seed yields the same numbers on openreg as on CPU.
"""

from __future__ import annotations

import torch

from openreg_lab import _C
from openreg_lab.device._devices import DeviceLike, device_count, device_index

default_generators: tuple[torch.Generator, ...] = tuple(
    _C.default_generator(i) for i in range(_C.device_count())
)


def _generator(device: DeviceLike) -> torch.Generator:
    return default_generators[device_index(device)]


def manual_seed(seed: int) -> None:
    """Seed the current device's default generator."""
    _generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed the default generator of every openreg device."""
    for gen in default_generators:
        gen.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a non-deterministic number."""
    _generator(None).seed()


def seed_all() -> None:
    """Seed every device's generator with one non-deterministic number."""
    value = default_generators[0].seed()
    for gen in default_generators[1:]:
        gen.manual_seed(value)


def initial_seed() -> int:
    """Return the seed the current device's generator was last seeded with."""
    return _generator(None).initial_seed()


def get_rng_state(device: DeviceLike = "openreg") -> torch.Tensor:
    """Return the generator state of ``device`` as a CPU ``uint8`` tensor."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "openreg") -> None:
    """Restore a state from :func:`get_rng_state` on ``device``."""
    _generator(device).set_state(new_state.clone())


def get_rng_state_all() -> list[torch.Tensor]:
    """Return the generator state of every device."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """Restore the states from :func:`get_rng_state_all`."""
    if len(new_states) != device_count():
        raise ValueError(f"expected {device_count()} states (one per openreg device), got {len(new_states)}")
    for i, state in enumerate(new_states):
        set_rng_state(state, i)
