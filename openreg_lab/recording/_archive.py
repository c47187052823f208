"""The zip of numpy arrays a trace file is (Note [Reading an untrusted trace file]): written as
``numpy.savez`` writes it, read with every declared size checked before anything is allocated.

Note [Reading an untrusted trace file]
A trace file may come from anyone (a colleague's run, a bug report), so reading one must cost in
proportion to its size, whatever it declares. numpy's own reader (``np.load``) inflates a deflated
member and allocates the array its header declares before it looks at how much data there is: a
0.8 MB file of deflated members declaring 10M entries each cost 1.2 GB and 6 s before it was
refused. ``Trace.save`` stores every member uncompressed, so here, before a byte is inflated:

* the zip's directory is read (zipfile bounds it by the file's size); every member must lie inside
  the file, and the members' sizes together must fit in it (stored members cannot overlap, so no
  region is read twice); every ``.npy`` member must be stored (not compressed, not encrypted), and
  other members (a later format's) are never read;
* a member's ``.npy`` header (format 1.0 or 2.0, at most 10,000 bytes, parsed by numpy without
  evaluating code) must declare a plain numeric array whose bytes are exactly what the member holds
  after the header; no object array (pickle) is ever read;
* only then is the array allocated and filled from the member, at most the file's size in all.

What is not a zip of such arrays is "not an openreg-lab trace" (``NotATrace``), never numpy's
advice to load it with ``allow_pickle``; what the arrays hold is checked by ``files.read``.
"""

from __future__ import annotations

import math
import os
import stat
import zipfile
from typing import IO

import numpy as np

_NPY_MAGIC = b"\x93NUMPY"
_MAX_NPY_HEADER = 10_000  # numpy's own bound for headers it parses safely
_CHUNK = 1 << 20  # bytes read at once into an array (small: reused in cache; 16 MB read 2x slower)


class NotATrace(Exception):
    """The file is not a zip of stored numpy arrays as ``Trace.save`` writes (the reason)."""


class DamagedMember(Exception):
    """A member's ``.npy`` header or data does not agree with its size (the reason)."""


def write(f: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``f`` as ``numpy.savez`` would: a zip of stored ``<name>.npy`` members.

    ``f`` may be a stream that cannot seek (a device or a FIFO): zipfile then writes each member's
    sizes after it, which every zip reader (and ``Archive``) reads the same."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, value in arrays.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


class Archive:
    """The members of a trace file, checked as Note [Reading an untrusted trace file] says; read
    one array at a time with ``array``. Raises ``NotATrace`` when opened on anything else."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        kind = _kind(os.stat(path).st_mode)  # FileNotFoundError, as open() would raise
        if kind is not None:
            raise NotATrace(f"it is {kind}, not a file")
        self._file = open(path, "rb")  # closed by close()
        try:
            self._zip, self._members = _members(self._file)
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file."""
        self._zip.close()
        self._file.close()

    @property
    def names(self) -> list[str]:
        """The arrays held (each member's name without ``.npy``), in the file's order."""
        return list(self._members)

    def array(self, name: str) -> np.ndarray:
        """The array ``name``: its header checked against the member's size before it is read.

        Raises:
            KeyError: no such member.
            DamagedMember: its header is not a plain numeric array's, or disagrees with its size.
        """
        info = self._members[name]
        try:
            with self._zip.open(info) as member:
                return _read_npy(member, info.file_size, info.filename)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            what = f"{type(e).__name__}: {e}"
            raise DamagedMember(f"its member {info.filename!r} cannot be read ({what})") from None


def _kind(mode: int) -> str | None:
    """What a node that is not a regular file is (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (a named pipe)"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket or another special node"


def _members(f: IO[bytes]) -> tuple[zipfile.ZipFile, dict[str, zipfile.ZipInfo]]:
    """The zip ``f`` and its ``.npy`` members by name, after checking each lies stored inside the file."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise NotATrace("the file is empty")
    start = f.read(16)
    f.seek(0)
    try:
        z = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as e:
        raise NotATrace(_what_it_is(start, e)) from None
    try:
        return z, _checked(z.infolist(), size)
    except BaseException:
        z.close()
        raise


def _checked(infos: list[zipfile.ZipInfo], size: int) -> dict[str, zipfile.ZipInfo]:
    """The ``.npy`` members by name (without ``.npy``), each stored inside a file of ``size`` bytes.
    Other members (a later format's) are never read; they must lie inside the file all the same."""
    total = 0
    members: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        name = info.filename
        total += info.compress_size
        if info.header_offset + info.compress_size > size:
            raise NotATrace(
                f"its member {name!r} declares {info.compress_size:,} bytes, more than the file's "
                f"{size:,} bytes can hold"
            )
        if not name.endswith(".npy"):
            continue
        if name[:-4] in members:
            raise NotATrace(f"it holds {name!r} twice")
        if info.compress_type != zipfile.ZIP_STORED:
            raise NotATrace(
                f"its member {name!r} is compressed (method {info.compress_type}); Trace.save stores "
                "every member uncompressed"
            )
        if info.flag_bits & 0x1:
            raise NotATrace(f"its member {name!r} is encrypted")
        if info.file_size != info.compress_size:
            raise NotATrace(
                f"its stored member {name!r} declares {info.file_size:,} bytes of data in "
                f"{info.compress_size:,}"
            )
        members[name[:-4]] = info
    if total > size:
        raise NotATrace(f"its members declare {total:,} bytes in all, more than its {size:,} bytes")
    return members


def _what_it_is(start: bytes, error: Exception) -> str:
    """What a file that is not a zip looks like, from its first bytes (for the error message)."""
    if start.startswith(_NPY_MAGIC):
        return "it is a single numpy array (.npy), not a zip of them"
    if start[:1] == b"\x80" and start[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "it is a Python pickle"
    if start.startswith(b"PK\x03\x04"):
        return f"it starts as a zip archive but its end is missing or damaged (a truncated file?): {error}"
    return f"it is not a zip archive (it starts with {start!r})"


def _read_npy(member: IO[bytes], size: int, name: str) -> np.ndarray:
    """The numeric array of the ``.npy`` ``member`` of ``size`` bytes (Note [Reading an untrusted
    trace file])."""
    if member.read(6) != _NPY_MAGIC:
        raise DamagedMember(f"its member {name!r} is not a numpy array (.npy)")
    version = tuple(member.read(2))
    if version not in ((1, 0), (2, 0)):
        raise DamagedMember(f"its member {name!r} is a .npy of format {version}, not 1.0 or 2.0")
    fmt = np.lib.format
    read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    try:
        shape, fortran, dtype = read_header(member, max_header_size=_MAX_NPY_HEADER)
    except (ValueError, SyntaxError, RecursionError, MemoryError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DamagedMember(f"its member {name!r} has a .npy header numpy cannot read: {first}") from None
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        # Never an object array (a pickle); numbers of the wrong kind are named by files.read.
        raise DamagedMember(f"its member {name!r} holds {dtype} values, not numbers")
    data = size - member.tell()  # the bytes after the header
    count = math.prod(shape)
    if any(d < 0 for d in shape) or count * dtype.itemsize != data:
        raise DamagedMember(
            f"its member {name!r} declares {count:,} values of shape {shape} "
            f"({count * dtype.itemsize:,} bytes) but holds {max(data, 0):,} bytes"
        )
    out = np.empty(count, dtype)
    view = memoryview(out).cast("B")
    done = 0
    while done < data:
        chunk = member.read(min(_CHUNK, data - done))
        if not chunk:
            raise DamagedMember(f"its member {name!r} ends early")
        view[done : done + len(chunk)] = chunk
        done += len(chunk)
    return out.reshape(shape, order="F" if fortran else "C")
