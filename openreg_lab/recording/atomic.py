"""Writing an output file whole or not at all, and never over what is not a file: what
``Trace.save``, the Chrome and Perfetto exports and the HTML reports write goes through
``replacing`` (Note [Where an output may go]).

A write that fails part way (disk full, quota, file-size limit, an exception while encoding)
leaves the file that was there as it was, and no partial file behind. The rename is atomic on
POSIX and Windows (``os.replace``); the data is not fsync'ed, so this guards against failed
writes, not against a power cut.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import stat
from collections.abc import Iterator
from typing import IO, Any

# Note [Where an output may go]
# An output path is, after following symbolic links (a link is kept: its target is written):
# * a regular file or nothing yet: the output is written to a new file beside it, which then
#   replaces it (os.replace), so a failed write leaves the old file as it was;
# * a character device (/dev/null, a terminal) or a FIFO (a named pipe, /dev/stdout on a pipe):
#   the output is written through it, as torch.save and the standard library's open() do; the
#   node stays. Nothing may seek there, so a zip (Trace.save) is streamed with its sizes after
#   each member (a reader of the stream gets a trace load_trace reads). A FIFO waits for a reader;
#   a write that fails part way has sent what it sent (a stream cannot be taken back);
# * a directory, a block device (a disk), a socket or another kind of node: refused by name,
#   before anything is written. Writing a trace over a disk is never what was meant.
# A rename never lands on anything but a regular file: the target is looked at again just before
# it, and a node that appeared there meanwhile is refused, the new file removed.
# The command line refuses the same paths before a script runs (cli/_common.py: check_output).


def refusal(path: str | os.PathLike[str]) -> str | None:
    """Why no output may be written at ``path`` (Note [Where an output may go]): ``"is a
    directory"``, ``"is a block device"``, ...; None when it may (a file, a character device, a
    FIFO, nothing yet, or a path whose problem writing it will name)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return _refused(mode)


def _refused(mode: int) -> str | None:
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISBLK(mode):
        return "is a block device (a disk), not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is neither a file, a character device nor a FIFO"


_WHERE = "an output goes to a file, a character device or a FIFO"


def _error(what: str, target: str, why: str = _WHERE) -> OSError:
    """The ``OSError`` naming ``target`` and what it is (``IsADirectoryError`` for a directory)."""
    if what == "is a directory":
        return IsADirectoryError(errno.EISDIR, "Is a directory", target)
    return OSError(errno.EINVAL, f"{what[0].upper()}{what[1:]}: {why}", target)


def check(path: str | os.PathLike[str]) -> None:
    """Raise the ``OSError`` ``replacing`` would raise for ``path`` when no output may go there,
    before the output is made (a report takes seconds to draw)."""
    what = refusal(path)
    if what is not None:
        raise _error(what, os.fspath(path))


class _Stream:
    """A device or a FIFO being written through: it writes and flushes, and cannot seek or tell its
    position, so that zipfile streams a zip to it (Note [Where an output may go])."""

    def __init__(self, f: IO[Any]) -> None:
        self._f = f

    def write(self, data: Any) -> int:
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        raise io.UnsupportedOperation("a device or a FIFO has no position")

    def seek(self, offset: int, whence: int = 0) -> int:
        raise io.UnsupportedOperation("a device or a FIFO cannot seek")


def _through(target: str) -> int | None:
    """An fd open for writing on ``target`` when it is a character device or a FIFO (None when it
    is a regular file or nothing yet); a node no output may go to is refused by name."""
    try:
        mode = os.stat(target).st_mode
    except (OSError, ValueError):
        return None  # nothing there yet (or a problem the atomic path's open names)
    what = _refused(mode)
    if what is not None:
        raise _error(what, target)
    if stat.S_ISREG(mode):
        return None
    # Neither created nor truncated: a device or FIFO is written as it is. A FIFO waits for a reader.
    try:
        fd = os.open(target, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise type(e)(e.errno, e.strerror, target) from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return fd
    os.close(fd)  # replaced by a file meanwhile: that file is replaced atomically
    return None


def _check_still_a_file(real: str, target: str) -> None:
    """Refuse to rename over ``real`` unless it is a regular file or nothing (a node made there
    while the output was written)."""
    try:
        mode = os.lstat(real).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        what = _refused(mode)
        if what is not None:
            raise _error(what, target)
        what = "became a device or a FIFO while the output was written"
        raise _error(what, target, "nothing is renamed over it (write again to write through it)")


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], mode: str = "wb", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Open ``path`` for writing (``mode`` ``"wb"`` or ``"w"``) as Note [Where an output may go]
    says: a regular file (or a new path) gets a temporary file beside it, which replaces it when
    the block ends without an exception and is removed otherwise; a character device or a FIFO is
    written through; a directory, a block device or a socket is refused (``OSError`` naming it).

    The new file gets the old one's permission bits, or the usual ones (0o666 less the umask).
    A symbolic link at ``path`` is kept: its target is replaced. Errors opening the file name
    ``path``, not the temporary file. A writable file in a folder where no file may be created
    is written in place (the one case that is not atomic).
    """
    target = os.fspath(path)
    fd = _through(target)
    if fd is not None:
        with os.fdopen(fd, mode, **open_kwargs) as stream:
            yield _Stream(stream)  # type: ignore[misc]
        return
    real = os.path.realpath(target) if os.path.islink(target) else target
    directory, name = os.path.split(real)
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except PermissionError:
        if not (os.path.isfile(real) and os.access(real, os.W_OK)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), target) from None
        # A writable file in a folder we may not add to: written in place, as before (not atomic).
        with open(real, mode, **open_kwargs) as f:
            yield f
        return
    except OSError as e:
        raise type(e)(e.errno, e.strerror, target) from None
    try:
        with contextlib.suppress(OSError):
            os.chmod(fd, os.stat(real).st_mode & 0o7777)
        with os.fdopen(fd, mode, **open_kwargs) as f:
            yield f
        _check_still_a_file(real, target)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
