"""What a trace sees of the model while it runs, for the memory categories (Note [Memory categories]).

An allocation event says how many bytes were taken and where, not what they hold. Parameters,
gradients, optimizer state and a model's inputs are told apart by identity instead: while a trace
is open, this module notes, at a few moments, which storage addresses hold which of them (an
*observation*: time, address, category), and ``allocations`` later names the allocation live at
that address at that time. The moments:

- the outermost module's forward returning (``modules.py`` calls ``saw_root``): the tensors it was
  called with are inputs; the first time a module is seen, its parameters and buffers;
- an optimizer's step (torch's global optimizer step pre hook): its parameters, the first time;
- each training step's end (the recorder's step call, ``_C._trace_step``) and the trace's end:
  every known parameter's ``.grad``; the optimizer's state when it gained entries (state is made at
  the first step and updated in place after).

Parameters, buffers and optimizer state are noted once: a storage replaced later in the trace (a
model cast with ``.to(dtype)`` inside it, state an optimizer makes anew each step) is not.

The blocks every device holds when the trace opens (``_C._memory_block_rows``) are kept too: the memory
allocated before the trace, which the allocations live at its peak include.

The observations at a step's end run no Python: the recorder's step call sweeps each open trace's
``_C._ParamWatch`` in C++ (parameters and optimizers held weakly: Note [Gradients seen at each step]
in ``csrc/python/ParamWatch.cpp``). The rest costs some tens of microseconds a trace, and a dict
lookup in the optimizer hook when no trace is open. They are plain arrays (``Observed``), saved in
the trace file.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from openreg_lab import _C

#: The memory categories, in PyTorch's terms, in the order the tables list them: the first four
#: are found by identity (observed), the others from when and where the memory was made and freed.
CATEGORIES = (
    "parameter", "gradient", "optimizer_state", "input", "activation", "autograd_detail", "temporary",
    "unknown",
)  # fmt: skip
PARAMETER, GRADIENT, OPTIMIZER_STATE, INPUT, ACTIVATION, AUTOGRAD_DETAIL, TEMPORARY, UNKNOWN = range(8)
#: The columns of the blocks held when a trace opened (``_C._memory_block_rows``).
BLOCK_FIELDS = ("device", "address", "size", "requested", "allocated")


@dataclass(frozen=True)
class Observed:
    """A trace's observations (raw clock ns, storage address, category code) and the blocks every
    device held when it opened (``BLOCK_FIELDS``; taken after recording began, at ``snapshot_ns``)."""

    time: np.ndarray
    address: np.ndarray
    category: np.ndarray
    blocks: dict[str, np.ndarray]
    snapshot_ns: int

    def __len__(self) -> int:
        return len(self.time)


class Watch:
    """One open trace's observations so far, and the modules and optimizers it has seen."""

    def __init__(self) -> None:
        self.notes: list[tuple[int, int, list[int]]] = []  # (time, category, storage addresses)
        self.roots: dict[int, weakref.ref[torch.nn.Module]] = {}
        # Parameters and optimizers, held weakly; it notes gradients and optimizer state at each
        # step's end, in C++ (Note [Gradients seen at each step]).
        self.params = _C._ParamWatch(gradient=GRADIENT, optimizer_state=OPTIMIZER_STATE)
        self.blocks = b""  # as taken: int64 rows of BLOCK_FIELDS (``_C._memory_block_rows``)
        self.snapshot_ns = 0
        self._observed: Observed | None = None

    def add(self, now: int, tensors: list[Any], category: int) -> None:
        """Note the storages of ``tensors`` (openreg tensors only: others, and tensors with no
        storage of their own, are skipped) as ``category`` at ``now``."""
        self.notes.append((now, category, _C._storage_addresses(tensors)))

    def add_module(self, now: int, module: torch.nn.Module) -> None:
        """A module seen for the first time: keep it, and note its new parameters and its buffers."""
        self.roots[id(module)] = weakref.ref(module)
        params, buffers = _tensors_of(module)
        self.add(now, [*self.params.add(params), *buffers], PARAMETER)

    def add_optimizer(self, now: int, optimizer: Any) -> None:
        """An optimizer at its step: if this watch had not seen it, keep it (weakly), note its new
        parameters, and its state at each step's end that finds it with new entries."""
        if self.params.add_optimizer(optimizer):
            params = [p for group in optimizer.param_groups for p in group["params"]]
            self.add(now, self.params.add(params), PARAMETER)

    def observed(self) -> Observed:
        """What was noted, as arrays (made at the first call: a trace's tables may never be read)."""
        if self._observed is None:
            rows = np.frombuffer(self.blocks, dtype=np.int64).reshape(-1, len(BLOCK_FIELDS))
            # The step ends' notes (from C++), then the others (observations are matched one by
            # one: their order does not matter).
            times, categories, counts, addresses = self.params.notes()
            times += [n[0] for n in self.notes]
            categories += [n[1] for n in self.notes]
            counts += [len(found) for _, _, found in self.notes]
            addresses += [a for _, _, found in self.notes for a in found]
            self._observed = Observed(
                time=np.repeat(np.array(times, dtype=np.int64), counts),
                address=np.array(addresses, dtype=np.int64),
                category=np.repeat(np.array(categories, dtype=np.int8), counts),
                blocks={k: rows[:, i].copy() for i, k in enumerate(BLOCK_FIELDS)},
                snapshot_ns=self.snapshot_ns,
            )
        return self._observed


def _dead() -> None:
    return None


def _tensors_of(module: torch.nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The parameters and buffers of ``module`` and its submodules, read from their dicts: what
    ``parameters()`` and ``buffers()`` give (repeats included), at a tenth of their cost."""
    params: list[torch.Tensor] = []
    buffers: list[torch.Tensor] = []
    todo, seen = [module], set()
    while todo:
        m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        params += [p for p in m._parameters.values() if p is not None]
        buffers += [b for b in m._buffers.values() if b is not None]
        todo += [c for c in m._modules.values() if c is not None]
    return params, buffers


_lock = threading.Lock()
_watches: list[Watch] = []
_known_to_all: dict[int, weakref.ref[Any]] = {}  # optimizers every open watch knows (id -> ref)


def open_watch() -> Watch:
    """Start observing for a trace that has just begun recording; take the blocks held now."""
    w = Watch()
    w.blocks = _C._memory_block_rows()
    w.snapshot_ns = int(_C._trace_now_ns())
    with _lock:
        _watches.append(w)
        _known_to_all.clear()  # the new watch knows none
        w.params.start()  # swept at each step's end from now on
    return w


def close_watch(w: Watch) -> Watch:
    """Stop observing for ``w``'s trace: note the gradients and new optimizer state once more
    (``w.observed()`` is the result)."""
    with _lock:
        if w in _watches:
            _watches.remove(w)
        w.params.stop()
        w.params.sweep(int(_C._trace_now_ns()))
    return w


def saw_root(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The outermost module's forward returned (``modules.py``): note its inputs, and its
    parameters if it is new to a trace."""
    if not _watches:
        return
    tensors = [*args, *kwargs.values()]
    tensors += [x for v in tensors if isinstance(v, (list, tuple)) for x in v]
    now = int(_C._trace_now_ns())
    with _lock:
        for w in _watches:
            if w.roots.get(id(module), _dead)() is not module:
                w.add_module(now, module)
            w.add(now, tensors, INPUT)


def _before_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _known_to_all.get(id(optimizer), _dead)() is optimizer or not _watches:
        return  # every step but a trace's first (Note [Gradients seen at each step])
    now = int(_C._trace_now_ns())
    with _lock:
        for w in _watches:
            w.add_optimizer(now, optimizer)
        _known_to_all[id(optimizer)] = weakref.ref(optimizer)


_hook = register_optimizer_step_pre_hook(_before_optimizer_step)
