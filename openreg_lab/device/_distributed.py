"""openreg's communication backend for ``torch.distributed`` (``csrc/distributed/``).

``register()`` (run on import of :mod:`openreg_lab`) registers the backend ``"ogloo"`` for the device
type ``openreg``: ``init_process_group(backend="ogloo")``, ``"cpu:gloo,openreg:ogloo"``,
``init_process_group(device_id=torch.device("openreg", rank))`` and ``init_process_group()`` with no
backend all route openreg tensors to it. Each group gets a Gloo group of its own (shipped with
torch) as its transport; the C++ backend hands Gloo host views of the openreg tensors, so no byte
is staged (Note [Collectives on host views]).

The lab wraps it in its checked collectives (Note [Checked collectives] in
``csrc/checked/CheckedBackend.h``): the ranks compare each call before Gloo runs, and the lab
records it. It also registers ``"checked_gloo"``, PyTorch's Gloo in the same wrapper, for CPU
tensors: ``init_process_group("checked_gloo")`` gives a CPU-only job the same one-line errors.
A build without the lab (no ``_C._CheckedBackend``) registers the plain backend.
"""

from __future__ import annotations

import atexit
import functools
import uuid
from collections.abc import Callable
from typing import Any

import torch

from openreg_lab import _C

BACKEND = "ogloo"
#: PyTorch's Gloo in the lab's checked collectives, for CPU tensors.
CHECKED_GLOO = "checked_gloo"
DEVICE = "openreg"
#: The job this process joined, learnt when its world group was made: ``run_id``, ``rank``,
#: ``world_size`` (empty before; Note [A run id for every trace] in recording/distributed.py).
JOB: dict[str, Any] = {}
_RUN_ID_KEY = "openreg-lab/run-id"


def register() -> None:
    """Register ``"ogloo"`` with ``torch.distributed`` for ``openreg`` tensors (once; no-op without
    ``torch.distributed``). At exit, every group of the process tells its other ranks that this one
    left, so none of them waits the group's timeout for it (Note [A rank that left] in
    ``csrc/checked/Agreement.h``)."""
    if not torch.distributed.is_available():
        return
    backend = torch.distributed.Backend
    if BACKEND.upper() in backend._plugins:
        return
    backend.register_backend(BACKEND, _create_group, extended_api=True, devices=[DEVICE, "cpu"])
    if hasattr(_C, "_CheckedBackend"):
        backend.register_backend(CHECKED_GLOO, _create_checked_gloo, extended_api=True, devices=["cpu"])
        atexit.register(_C._leave_groups_at_exit)
    _refuse_openreg_on_other_backends()


GLOO_REFUSAL = (
    "this group's backend (such as init_process_group('gloo')) serves CPU tensors only, so openreg "
    "tensors have none; use openreg's backend, init_process_group('ogloo'), or name none, "
    "init_process_group(), which picks it for openreg tensors and Gloo's for CPU ones"
)


def _refuse_openreg_on_other_backends() -> None:
    """Give a group built without openreg's backend (``"gloo"``) one that refuses openreg tensors.

    Note [A group without openreg's backend]
    torch answers an openreg tensor on a ``"gloo"`` group with "No backend type associated with
    device type openreg", which names no fix. So every group torch builds with a CPU backend and
    none for openreg gets, for openreg tensors, openreg's backend over that same Gloo group in its
    refusing form: each collective raises one ValueError naming the call and the fix
    (``GLOO_REFUSAL``). It moves nothing and costs nothing until called. torch 2.13 builds every
    group in ``_new_process_group_helper`` (init_process_group, new_group, device meshes), the one
    place to attach it.
    """
    c10d = torch.distributed.distributed_c10d
    helper = c10d._new_process_group_helper
    if getattr(helper, "_openreg_refusal", False):
        return

    @functools.wraps(helper)
    def with_refusal(*args: Any, **kwargs: Any) -> Any:
        pg, store = helper(*args, **kwargs)
        if isinstance(pg, torch.distributed.ProcessGroup):
            devices = {d.type for d in pg._device_types}
            if DEVICE not in devices and "cpu" in devices:
                transport = pg._get_backend(torch.device("cpu"))
                name = kwargs.get("group_name", args[5] if len(args) > 5 else "")
                refusing = _C._DistributedBackend(transport, str(name), GLOO_REFUSAL)
                pg._register_backend(
                    torch.device(DEVICE), torch.distributed.ProcessGroup.BackendType.CUSTOM, refusing
                )
        return pg, store

    with_refusal._openreg_refusal = True  # type: ignore[attr-defined]
    c10d._new_process_group_helper = with_refusal


def _create_group(options: Any, backend_options: Any = None) -> Any:
    """The creator ``torch.distributed`` calls for each group.

    Note [One group for openreg and CPU tensors]
    It returns a whole ``ProcessGroup`` rather than a backend: a Gloo group over the group's store is
    the transport of openreg's C++ backend, which serves both openreg and CPU tensors (CPU tensors
    pass to Gloo unchanged). torch keeps a creator's ``ProcessGroup`` as the group itself, so every
    way of asking for the backend gets both devices, including ``init_process_group()`` with no
    backend, where torch would otherwise register a backend for the accelerator only and a CPU
    user's tensors would find none. CPU tensors go through openreg's backend too, not straight to
    Gloo, so that the ranks compare every call before Gloo runs (Note [Ranks agree before Gloo
    runs]): a rank passing a CPU tensor where another passes an openreg one gets a ValueError, as
    the others do, instead of a Gloo transfer that never meets its peer. Sparse CPU tensors, which
    only Gloo reduces, go to Gloo unchanged.
    """
    from torch.distributed import ProcessGroup, ProcessGroupGloo

    rank, size = options.group_rank, options.group_size
    store = _incarnation_store(options.store, size)
    gloo = ProcessGroupGloo(store, rank, size, options.timeout)
    ours = _checked(_C._DistributedBackend(gloo, str(options.group_id)), str(options.group_id), store)
    group = ProcessGroup(options.store, rank, size)
    group._set_default_backend(ProcessGroup.BackendType.CUSTOM)
    group._register_backend(torch.device(DEVICE), ProcessGroup.BackendType.CUSTOM, ours)
    group._register_backend(torch.device("cpu"), ProcessGroup.BackendType.CUSTOM, ours)
    if str(options.group_id) == "0":  # the world group: every rank of the job
        remember_job(options.store, rank, size)
    return group


def _create_checked_gloo(options: Any, backend_options: Any = None) -> Any:
    """The creator of ``"checked_gloo"``: PyTorch's Gloo group for CPU tensors, in the lab's checked
    collectives (the same comparisons and errors as openreg's backend, and its records)."""
    from torch.distributed import ProcessGroupGloo

    rank, size = options.group_rank, options.group_size
    store = _incarnation_store(options.store, size)
    gloo = ProcessGroupGloo(store, rank, size, options.timeout)
    if str(options.group_id) == "0":
        remember_job(options.store, rank, size)
    return _C._CheckedBackend(gloo, str(options.group_id), store)


def _checked(backend: Any, group_name: str, store: Any) -> Any:
    """``backend`` in the lab's checked collectives (Note [Checked collectives]), or as it is in a
    build without the lab. To drop the layer, return ``backend``."""
    wrap = getattr(_C, "_CheckedBackend", None)
    return backend if wrap is None else wrap(backend, group_name, store)


def _incarnation_store(store: Any, size: int) -> Any:
    """The keys of this incarnation of the group: ``store`` under ``"openreg/<incarnation>/"``.

    Note [A group's incarnations]
    torch names groups by their order of creation (``"0"`` for the default group) and gives each the
    prefix of its name in the store, so ``destroy_process_group()`` then ``init_process_group()`` over
    the same store (torchrun's, or one the caller passes) gives the new group the keys of the old one,
    whose values are still there: Gloo's rendezvous addresses (a rank that reads its peer's old
    address before the peer overwrites it connects to the destroyed group's listener, still alive
    while that group is referenced, and both ranks wait out the timeout; one run in four under load)
    and the agreement's rows (Agreement.h), numbered from 0 like the new calls. So every group takes
    an incarnation number when it is built, before Gloo's rendezvous: every rank adds 1 to
    ``"openreg/joined"``, and the count before it, divided by the group size, is the same on every
    rank (the ranks of incarnation k all add before any finishes its rendezvous, so before any adds
    for k + 1). Gloo and the agreement both work under that prefix, never reading an older group's
    keys.
    """
    from torch.distributed import PrefixStore

    incarnation = (int(store.add("openreg/joined", 1)) - 1) // max(1, int(size))
    return PrefixStore(f"openreg/{incarnation}/", store)


def remember_job(store: Any, rank: int, size: int) -> None:
    """Agree on one run id with the job's other ranks through its store: the first rank to ask
    sets it (``compare_set`` from empty), every other one reads that (Note [A run id for every trace])."""
    try:
        value = store.compare_set(_RUN_ID_KEY, "", uuid.uuid4().hex)
    except RuntimeError:  # a store without compare_set: this process's own id, said as such
        value = f"process-{uuid.uuid4().hex}"
    run_id = value.decode() if isinstance(value, bytes) else str(value)
    JOB.clear()
    JOB.update(run_id=run_id, rank=int(rank), world_size=int(size))


def cuda_backend_name(backend: Any) -> Any:
    """``"nccl"`` as openreg's backend (``"ogloo"``), ``"cuda:nccl"`` pairs as ``"openreg:ogloo"``;
    anything else unchanged (``from_cuda``)."""
    if not isinstance(backend, str):
        return backend
    pairs = []
    for part in backend.split(","):
        device, sep, name = part.rpartition(":")
        name = BACKEND if name.strip().lower() == "nccl" else name
        device = DEVICE if device.strip().lower() == "cuda" else device
        pairs.append(f"{device}{sep}{name}")
    return ",".join(pairs)


_CUDA_ENTRY_POINTS = ("init_process_group", "new_group", "new_subgroups_by_enumeration")


def map_cuda_backends(map_device: Callable[[Any], Any]) -> Callable[[], None]:
    """While ``from_cuda`` is on: ``torch.distributed``'s group constructors take ``"nccl"`` as
    ``"ogloo"`` and a ``device_id`` on ``cuda`` as ``openreg``, and ``is_nccl_available()`` is True.
    Returns the function that undoes it."""
    dist = torch.distributed
    c10d = dist.distributed_c10d
    saved = {name: getattr(c10d, name) for name in (*_CUDA_ENTRY_POINTS, "is_nccl_available")}

    def mapped(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if args:
                args = (cuda_backend_name(args[0]), *args[1:])
            if "backend" in kwargs:
                kwargs["backend"] = cuda_backend_name(kwargs["backend"])
            if kwargs.get("device_id") is not None:
                kwargs["device_id"] = map_device(kwargs["device_id"])
            return fn(*args, **kwargs)

        return wrapper

    patched: dict[str, Any] = {name: mapped(saved[name]) for name in _CUDA_ENTRY_POINTS}
    patched["is_nccl_available"] = lambda: True
    for module in (dist, c10d):
        for name, fn in patched.items():
            setattr(module, name, fn)

    def undo() -> None:
        for module in (dist, c10d):
            for name, fn in saved.items():
                setattr(module, name, fn)

    return undo
