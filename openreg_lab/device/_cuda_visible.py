"""``CUDA_VISIBLE_DEVICES`` under ``from_cuda()``: which openreg devices a CUDA script sees, in which order.

Note [CUDA_VISIBLE_DEVICES under from_cuda]
CUDA numbers the devices a process may use from 0, in the order ``CUDA_VISIBLE_DEVICES`` lists
them: with ``CUDA_VISIBLE_DEVICES=1`` a script sees one device, cuda:0, which is the machine's
device 1. Under ``from_cuda()`` the variable selects and renumbers openreg's devices the same way:
cuda:0 is then openreg:1. The variable is read as CUDA reads it (PyTorch's own parser of it,
``torch.cuda._parse_visible_devices``, follows the driver):

* unset: every openreg device, in order (cuda:N is openreg:N);
* a comma-separated list of indices, each entry's leading integer (surrounding spaces and a ``+``
  sign allowed, trailing characters ignored: ``1gpu`` is 1); the list ends at the first entry that
  is not a number, is negative or names no device (``0,2,-1,1`` shows openreg:0 and openreg:2 when
  there are 3 devices; ``5`` with 2 devices shows none);
* an index listed twice shows no device at all;
* ``GPU-<uuid>`` entries name devices by the ``uuid`` of their properties (a unique prefix is
  enough), and end the list at one that matches no device or several; ``MIG-`` entries name no
  openreg device;
* empty, or ``-1``: no device (``torch.cuda.is_available()`` is False, ``device_count()`` 0, and
  using a CUDA device raises "No CUDA GPUs are available").

As CUDA reads it when it initialises, the value is read at the block's first use of a device (a
script may set ``os.environ["CUDA_VISIBLE_DEVICES"]`` at its top) and kept until the outermost
block ends. The translation happens where a CUDA device enters (``map_device`` and the
``torch.cuda`` functions of ``_cuda_module.py``, the entry points of ``_cuda_entries.py``, the
``device_ids`` of DataParallel and DistributedDataParallel): tensors keep openreg's own indices
(``x.device`` is openreg:1, ``x.get_device()`` 1), and so do ``torch.openreg``, ``torch.accelerator``
and an int given to ``torch.cuda.Stream`` (openreg's class).

CUDA's current device is per thread and starts at cuda:0; openreg's starts at openreg:0, which may
be hidden or another ordinal. So while the variable renumbers, a thread's first CUDA use in the
block makes the first visible device current, and so does a use while openreg's own API has made a
hidden device current (:func:`current_index`).
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

import torch

from openreg_lab import _C
from openreg_lab.device._properties import get_device_properties

_UNREAD = object()
#: The openreg index of each CUDA ordinal; None: every device in order (the variable is unset).
_ordinals: Any = _UNREAD
_value = ""  # the variable's value, for the errors
_generation = 0  # one per reading: a thread's first CUDA use under it selects cuda:0
_thread = threading.local()
_LEADING_INT = re.compile(r"[+-]?\d+")


def parse(value: str | None, count: int, uuids: list[str]) -> list[int] | None:
    """The openreg indices ``CUDA_VISIBLE_DEVICES=value`` shows, in CUDA's order, among ``count``
    devices whose uuids are ``uuids`` (None: the variable is unset, every device)."""
    if value is None:
        return None
    entries = [e.strip() for e in value.split(",")]
    shown: list[int] = []
    for entry in entries:
        if entries[0].startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if entry.startswith("GPU-") and u.startswith(entry[4:])]
            index = matches[0] if len(matches) == 1 and entry[4:] else -1
        else:
            number = _LEADING_INT.match(entry)
            index = int(number.group()) if number else -1
        if index < 0 or index >= count:
            break
        if index in shown:
            return []
        shown.append(index)
    return shown


def reset() -> None:
    """Forget the value read (the outermost ``from_cuda()`` block ended)."""
    global _ordinals, _generation
    _ordinals = _UNREAD
    _generation += 1


def ordinals() -> list[int] | None:
    """The openreg index of each CUDA ordinal (None: all devices, in order), read at first use."""
    global _ordinals, _value
    if _ordinals is _UNREAD:
        value = os.environ.get("CUDA_VISIBLE_DEVICES")
        count = _C.device_count()
        uuids = [get_device_properties(i).uuid for i in range(count)] if value and "GPU-" in value else []
        _value = value or ""
        _ordinals = parse(value, count, uuids)
    return _ordinals


def _none_visible() -> RuntimeError:
    return RuntimeError(
        f"No CUDA GPUs are available: CUDA_VISIBLE_DEVICES={_value!r} shows no openreg device to "
        "openreg_lab.from_cuda() (unset it, or list openreg device indices such as 0,1)"
    )


def to_openreg(ordinal: int) -> int:
    """The openreg index of CUDA device ``ordinal`` (an ordinal out of range: CUDA's error)."""
    shown = ordinals()
    if shown is None:
        return ordinal  # openreg checks it, as without the variable
    if not shown:
        raise _none_visible()
    if not 0 <= ordinal < len(shown):
        mapping = ", ".join(f"cuda:{i} = openreg:{d}" for i, d in enumerate(shown))
        raise torch.AcceleratorError(
            f"openreg error: invalid device ordinal (cuda:{ordinal} is out of range: "
            f"CUDA_VISIBLE_DEVICES={_value!r} shows {len(shown)} openreg devices to CUDA: {mapping})"
        )
    return shown[ordinal]


def current_index() -> int:
    """The openreg index of CUDA's current device in this thread. At the thread's first CUDA use
    (and when openreg's own API made a hidden device current) that is the first visible device,
    which becomes openreg's current device: CUDA starts every thread at cuda:0."""
    shown = ordinals()
    index = _C.current_device()
    if shown is None:
        return index
    if getattr(_thread, "generation", None) == _generation and index in shown:
        return index
    if not shown:
        raise _none_visible()
    _thread.generation = _generation
    _C.set_device(shown[0])
    return shown[0]


def alias_index(ordinal: int | None) -> int:
    """The openreg index of ``torch.device("cuda", ordinal)`` (None: CUDA's current device), for
    openreg's own classes under CUDA's names (``_devices.ALIASES``)."""
    return current_index() if ordinal is None else to_openreg(ordinal)


def to_cuda(index: int) -> int:
    """The CUDA ordinal of the visible openreg device ``index``."""
    shown = ordinals()
    return index if shown is None else shown.index(index)


def device_count() -> int:
    """How many devices CUDA sees."""
    shown = ordinals()
    return _C.device_count() if shown is None else len(shown)


def is_identity() -> bool:
    """True when cuda:N is openreg:N for every N (the variable is unset)."""
    return ordinals() is None
