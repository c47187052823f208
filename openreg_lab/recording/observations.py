"""What a trace sees of the model while it runs, for the memory categories (Note [Memory categories]).

An allocation event says how many bytes were taken and where, not what they hold. Parameters,
gradients, optimizer state and a model's inputs are told apart by identity instead: while a trace
is open, this module notes, at a few moments, which storage addresses hold which of them (an
*observation*: time, address, category), and ``allocations`` later names the allocation live at
that address at that time. The moments:

- the outermost module's forward returning (``modules.py`` calls ``saw_root``): the tensors it was
  called with are inputs; the first time a module is seen, its parameters and buffers;
- an optimizer's step (torch's global optimizer step pre hook): its parameters, the first time;
- each training step's end (``steps.listen``) and the trace's end: every known parameter's
  ``.grad``; the optimizer's state when it gained entries (state is made at the first step and
  updated in place after).

Parameters, buffers and optimizer state are noted once: a storage replaced later in the trace (a
model cast with ``.to(dtype)`` inside it, state an optimizer makes anew each step) is not.

The blocks every device holds when the trace opens (``_C._memory_blocks``) are kept too: the memory
allocated before the trace, which the allocations live at its peak include.

The observations cost about a microsecond a parameter a step (its ``.grad`` and an address), some
tens of microseconds a trace, and nothing when no trace is open. They are plain arrays
(``Observed``), saved in the trace file.
"""

from __future__ import annotations

import threading
import weakref
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from openreg_lab import _C
from openreg_lab.recording import steps

#: The memory categories, in PyTorch's terms, in the order the tables list them: the first four
#: are found by identity (observed), the others from when and where the memory was made and freed.
CATEGORIES = (
    "parameter", "gradient", "optimizer_state", "input", "activation", "autograd_detail", "temporary",
    "unknown",
)  # fmt: skip
PARAMETER, GRADIENT, OPTIMIZER_STATE, INPUT, ACTIVATION, AUTOGRAD_DETAIL, TEMPORARY, UNKNOWN = range(8)
#: The columns of the blocks held when a trace opened (``_C._memory_blocks`` of every device).
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
        self.time = array("q")
        self.address = array("q")
        self.category = array("b")
        self.roots: dict[int, weakref.ref[torch.nn.Module]] = {}
        self.params: dict[int, weakref.ref[torch.Tensor]] = {}
        self.optimizers: dict[int, tuple[weakref.ref[Any], int]] = {}  # ref, state entries seen
        self.blocks: list[tuple[int, list[tuple[int, int, int, bool]]]] = []  # per device, as taken
        self.snapshot_ns = 0
        self._observed: Observed | None = None

    def add(self, now: int, tensors: list[Any], category: int) -> None:
        """Note the storages of ``tensors`` (openreg tensors only) as ``category`` at ``now``."""
        found = []
        for t in tensors:
            if isinstance(t, torch.Tensor) and not t.is_cpu:
                try:
                    found.append(t.untyped_storage().data_ptr())
                except (RuntimeError, NotImplementedError, TypeError):  # no storage (a subclass)
                    continue
        self.address.extend(found)
        self.time.extend([now] * len(found))
        self.category.extend([category] * len(found))

    def add_module(self, now: int, module: torch.nn.Module) -> None:
        """A module seen for the first time: keep it, and note its new parameters and its buffers."""
        self.roots[id(module)] = weakref.ref(module)
        params, buffers = _tensors_of(module)
        self.add(now, [*self._new(params), *buffers], PARAMETER)

    def add_optimizer(self, now: int, optimizer: Any) -> None:
        """An optimizer seen for the first time: keep it, and note its new parameters."""
        self.optimizers[id(optimizer)] = (weakref.ref(optimizer), -1)
        self.add(now, self._new([p for group in optimizer.param_groups for p in group["params"]]), PARAMETER)

    def _new(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """The parameters of ``params`` not known yet, now known."""
        out = []
        for p in params:
            if self.params.get(id(p), _dead)() is not p:
                self.params[id(p)] = weakref.ref(p)
                out.append(p)
        return out

    def sweep(self, now: int) -> None:
        """A step (or the trace) ended: note the gradients, and the optimizers' state if it has new
        entries."""
        grads = []
        for ref in self.params.values():
            p = ref()
            if p is not None:
                g = p.grad
                if g is not None:
                    grads.append(g)
        self.add(now, grads, GRADIENT)
        for key, (ref, seen) in list(self.optimizers.items()):
            opt = ref()
            if opt is None or len(opt.state) == seen:  # made at the first step, updated in place
                continue
            self.optimizers[key] = (ref, len(opt.state))
            self.add(now, [v for state in opt.state.values() for v in state.values()], OPTIMIZER_STATE)

    def observed(self) -> Observed:
        """What was noted, as arrays (made at the first call: a trace's tables may never be read)."""
        if self._observed is None:
            rows = [(d, *b) for d, blocks in self.blocks for b in blocks]
            columns = list(zip(*rows, strict=True)) if rows else [()] * len(BLOCK_FIELDS)
            self._observed = Observed(
                time=np.frombuffer(self.time, dtype=np.int64).copy(),
                address=np.frombuffer(self.address, dtype=np.int64).copy(),
                category=np.frombuffer(self.category, dtype=np.int8).copy(),
                blocks={k: np.asarray(v, dtype=np.int64) for k, v in zip(BLOCK_FIELDS, columns, strict=True)},
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


def open_watch() -> Watch:
    """Start observing for a trace that has just begun recording; take the blocks held now."""
    w = Watch()
    w.blocks = [(device, _C._memory_blocks(device)) for device in range(torch.openreg.device_count())]
    w.snapshot_ns = int(_C._trace_now_ns())
    with _lock:
        if not _watches:
            steps.listen(_step_ended)
        _watches.append(w)
    return w


def close_watch(w: Watch) -> Watch:
    """Stop observing for ``w``'s trace: note the gradients and new optimizer state once more
    (``w.observed()`` is the result)."""
    with _lock:
        if w in _watches:
            _watches.remove(w)
            if not _watches:
                steps.unlisten(_step_ended)
        w.sweep(int(_C._trace_now_ns()))
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
    if not _watches:
        return
    now = int(_C._trace_now_ns())
    with _lock:
        for w in _watches:
            if w.optimizers.get(id(optimizer), (_dead, 0))[0]() is not optimizer:
                w.add_optimizer(now, optimizer)


def _step_ended(ended: int) -> None:
    now = int(_C._trace_now_ns())
    with _lock:
        for w in _watches:
            w.sweep(now)


_hook = register_optimizer_step_pre_hook(_before_optimizer_step)
