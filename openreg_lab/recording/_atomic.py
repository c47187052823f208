"""Writing a file whole or not at all: what ``Trace.save``, the Chrome export and the HTML report
write goes to a new file beside the target, which replaces the target only once it is complete.

A write that fails part way (disk full, quota, file-size limit, an exception while encoding)
leaves the file that was there as it was, and no partial file behind. The rename is atomic on
POSIX and Windows (``os.replace``); the data is not fsync'ed, so this guards against failed
writes, not against a power cut.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from typing import IO, Any


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], mode: str = "wb", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing (``mode`` ``"wb"`` or ``"w"``); when the
    block ends without an exception it replaces ``path``, otherwise it is removed.

    The new file gets the old one's permission bits, or the usual ones (0o666 less the umask).
    A symbolic link at ``path`` is kept: its target is replaced. Errors opening the file name
    ``path``, not the temporary file. A writable file in a folder where no file may be created
    is written in place (the one case that is not atomic).
    """
    target = os.fspath(path)
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
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
