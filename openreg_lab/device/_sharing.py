"""Sending openreg tensors and storages to another process, the way CUDA's cross.

``torch.multiprocessing`` pickles a tensor as its storage plus offset, sizes and strides, and a
storage through the reducer registered for ``torch.UntypedStorage`` (torch 2.13 has no PrivateUse1
hook there: its CPU path would fail on device memory). The reducer below sends an openreg storage
as the memory file of its shared segment (duplicated through ``multiprocessing``'s ``DupFd``, as
torch sends a CPU storage); the receiver maps the same pages on the same device, so a write on
either side is seen by the other. Note [Sharing device memory across processes] in
``csrc/runtime/DeviceAllocator.cpp`` says where the memory comes from, how long it lives, how it
is counted and what a write racing the first send may do.
"""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Callable
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import torch
import torch.multiprocessing.reductions as _reductions

from openreg_lab import _C

_Reduced = tuple[Callable[..., Any], tuple[Any, ...]]


#: File descriptors a send needs free (Note [Sending within the open-file limit]).
FREE_FDS = 7


def _fd_limit_error(what: str, nbytes: int, device: int) -> RuntimeError:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if what == "send":
        where, short = "to", f"fewer than {FREE_FDS} file descriptors are free"
    else:
        where, short = "from", "no file descriptor is free"
    return RuntimeError(
        f"openreg: cannot {what} an openreg storage of {nbytes} bytes on openreg:{device} {where} "
        f"another process: {short} in this process (its open-file limit, ulimit -n, is {soft}); each "
        "storage shared keeps one and each tensor in flight holds another until its receiver takes "
        "it. Raise the limit (ulimit -n, or resource.setrlimit(resource.RLIMIT_NOFILE, ...)), let "
        "the receivers take what was sent, or keep fewer shared storages alive"
    )


def _check_free_fds(nbytes: int, device: int) -> None:
    """Refuse the send unless ``FREE_FDS`` more file descriptors can be opened.

    Note [Sending within the open-file limit]
    ``DupFd`` duplicates the storage's memory file and registers it with ``multiprocessing``'s
    fd-sharing thread (``multiprocessing/resource_sharer.py``), which hands the duplicate over when
    the receiver connects: it accepts the connection, duplicates it to pass the descriptor, and
    imports ``hmac`` on its first one. When the process has no descriptor left, its ``accept()``
    fails and leaves the receiver's connection pending, so the next ``accept()`` fails the same way:
    the thread loops printing a traceback each time while the receiver waits forever. So before a
    send takes any descriptor, the reducer counts the free ones and refuses the send, with one line
    naming the limit, unless ``FREE_FDS`` are (the storage's memory file on its first send, the
    send's duplicate, four for the thread: its listening socket, the connection, its duplicate, a
    module file; and one spare). A send that goes takes at most two, so sends never take the
    thread's last ones, and a refused send takes none.
    The count must not take descriptors itself: it had opened ``FREE_FDS`` of them and closed them,
    and near the limit that left none, for a moment, to the fd-sharing thread serving the receiver
    beside it (on a loaded machine the moment lasted long enough for it to fail twenty accepts).
    So the free ones are counted from the process's list of its descriptors (``_free_fds``: one
    descriptor, the list's own, taken while it is read); only where no such list exists does it
    open and close them.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    free = _free_fds(soft)
    if free is None:
        free = _probe_free_fds()
    if free < FREE_FDS:
        raise _fd_limit_error("send", nbytes, device)


def _free_fds(soft: int) -> int | None:
    """How many more descriptors this process can open under the soft limit ``soft`` (descriptor
    numbers below it that are not in use), read from ``/proc/self/fd`` or ``/dev/fd``; None where
    neither lists them. Descriptors at or above ``soft`` (opened before a lower limit was set) do
    not count: the limit bounds a new descriptor's number."""
    if soft == resource.RLIM_INFINITY:
        return FREE_FDS
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(listing)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno == errno.EMFILE:
                return 0  # not even the list's own descriptor
            raise
        used = sum(1 for name in names if name.isdigit() and int(name) < soft)
        return soft - (used - 1)  # the list's own descriptor, closed again, is free
    return None


def _probe_free_fds() -> int:
    """``FREE_FDS`` if that many descriptors open (each closed again at once), else how many did."""
    taken: list[int] = []
    try:
        taken.extend(os.pipe())
        while len(taken) < FREE_FDS:
            taken.append(os.dup(taken[0]))
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
    finally:
        for probe in taken:
            os.close(probe)
    return len(taken)


def _segment_key(fd: int) -> tuple[str, int, int]:
    """One key per shared segment in every process: the memory file's inode."""
    st = os.fstat(fd)
    return ("openreg", st.st_dev, st.st_ino)


def _rebuild_empty_storage(device: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device("openreg", device))


def _rebuild_storage(dup: Any, nbytes: int, device: int, key: tuple[str, int, int]) -> torch.UntypedStorage:
    """Map a storage sent by ``_reduce_storage``; one storage per segment in each process."""
    try:
        fd = dup.detach()
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
        raise _fd_limit_error("receive", nbytes, device) from None
    cached = _reductions.storage_from_cache(torch.UntypedStorage, key)
    if cached is not None:
        os.close(fd)
        return cached
    storage = _C._import_storage(fd, nbytes, device)
    _reductions.shared_cache[key] = _reductions.StorageWeakRef(storage)
    return storage


def _reduce_storage(storage: Any) -> _Reduced:
    if storage.device.type != "openreg":
        return _reductions.reduce_storage(storage)
    if storage.nbytes() == 0:
        return _rebuild_empty_storage, (storage.device.index,)
    _check_free_fds(storage.nbytes(), storage.device.index)
    fd, nbytes, device = _C._share_storage(storage)
    key = _segment_key(fd)
    # A storage that comes back to this process is this very storage.
    _reductions.shared_cache[key] = _reductions.StorageWeakRef(storage)
    return _rebuild_storage, (DupFd(fd), nbytes, device, key)


def install() -> None:
    """Wrap torch's multiprocessing storage reducer so openreg storages (and tensors) are shared."""
    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    for cls, reduce in list(reducers.items()):
        if reduce is _reductions.reduce_storage:
            ForkingPickler.register(cls, _reduce_storage)
