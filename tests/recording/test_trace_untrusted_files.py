"""A trace file from anyone costs in proportion to its size (Note [Reading an
untrusted trace file]). Declared sizes and shapes are checked against the file before anything is
inflated or allocated; a file that is not a trace is named "not an openreg-lab trace", never with
numpy's advice to load it with ``allow_pickle``."""

from __future__ import annotations

import functools
import io
import json
import pickle
import random
import time
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import openreg_lab
from openreg_lab.cli import main
from openreg_lab.recording import files
from openreg_lab.recording.events import EVENT_DTYPE
from tests.support.hostile_data import small_trace

COLUMNS = (*EVENT_DTYPE.names, "id", "thread")
HEADER = {
    "magic": files.MAGIC,
    "version": files.VERSION,
    "capacity": 10,
    "dropped": 0,
    "record_shapes": False,
    "stack": False,
    "t0": 0,
    "threads": {"0": 1},
    "strings": [""],
}


def _npy_header(dtype: object, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header of an array of ``dtype`` and ``shape`` (the data is up to the caller)."""
    buf = io.BytesIO()
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, d)
    return buf.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=True)
    return buf.getvalue()


def _header(header: object = HEADER) -> bytes:
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    return _npy_header(np.uint8, (len(text),)) + text


def _dtype(column: str) -> np.dtype:
    return EVENT_DTYPE[column] if column in EVENT_DTYPE.names else np.dtype(np.int64)


def _deflated_zeros(head: bytes, megabytes: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``head`` then ``megabytes`` MB (10**6 bytes) of zeros, and its CRC,
    made without deflating them all: after a sync flush, each further megabyte of zeros (its window
    all zeros) deflates to the same bytes."""
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    mb = bytes(10**6)
    first = c.compress(head + mb) + c.flush(zlib.Z_SYNC_FLUSH)
    same = c.compress(mb) + c.flush(zlib.Z_SYNC_FLUSH)
    crc = zlib.crc32(head)
    for _ in range(megabytes):
        crc = zlib.crc32(mb, crc)
    return first + same * (megabytes - 1) + c.flush(), crc


def _deflated_bomb(path: Path) -> None:
    """The issue's file: a valid header, then every column deflated with a declared length of 10M
    entries (zeros), about 0.8 MB in all; numpy's reader inflated them all (1.2 GB)."""
    path.write_bytes(_bomb())


@functools.cache
def _bomb(entries: int = 10_000_000) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("header.npy", _header())
        for column in COLUMNS:
            head = _npy_header(_dtype(column), (entries,))
            size = entries * _dtype(column).itemsize
            data, crc = _deflated_zeros(head, size // 10**6)
            z.writestr(f"f_{column}.npy", data)  # stored as it is, then declared deflated:
            info = z.filelist[-1]
            info.compress_type, info.file_size, info.CRC = zipfile.ZIP_DEFLATED, len(head) + size, crc
        z.writestr("pool.npy", _npy_header(np.int64, (0,)))
    return out.getvalue()


def _shape_lie(path: Path) -> None:
    """Stored members whose ``.npy`` headers declare 10M entries over a few bytes of data."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.npy", _header())
        for column in COLUMNS:
            z.writestr(f"f_{column}.npy", _npy_header(_dtype(column), (10_000_000,)) + bytes(8))
        z.writestr("pool.npy", _npy_header(np.int64, (0,)))


def _size_lie(path: Path) -> None:
    """A member whose directory entry declares 10 GB stored, in a file of a few hundred bytes."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.npy", _header())
        z.writestr("pool.npy", _npy_header(np.int64, (0,)))
        z.filelist[1].file_size = z.filelist[1].compress_size = 10 << 30


def _overlapping(path: Path) -> None:
    """One stored 64 KB member listed 200 times in the directory (each would read the same bytes)."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.npy", _header())
        z.writestr("f_kind.npy", _npy(np.zeros(8192, np.int64)))
        first = z.filelist[1]
        for i in range(200):
            copy = zipfile.ZipInfo(f"f_x{i}.npy", first.date_time)
            copy.header_offset, copy.file_size, copy.compress_size = (
                first.header_offset,
                first.file_size,
                first.compress_size,
            )
            copy.CRC = first.CRC
            z.filelist.append(copy)


def _write(content: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(content)


def _zip(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with zipfile.ZipFile(path, "w", compression) as z:
            for name, data in members.items():
                z.writestr(name, data)

    return make


def _encrypted(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.npy", _header())
        z.filelist[0].flag_bits |= 0x1  # as the directory says when the member is encrypted


def _truncated(path: Path) -> None:
    small_trace().save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _object_column(path: Path) -> None:
    small_trace().save(path)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("f_extra.npy", _npy(np.array([{"a": 1}, None], dtype=object)))


#: (how the file is made, what the error says after "<path> ").
NOT_A_TRACE: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty": (_write(b""), "is not an openreg-lab trace: the file is empty"),
    "random bytes": (
        _write(random.Random(0).randbytes(4096)),
        "is not an openreg-lab trace: it is not a zip archive (it starts with",
    ),
    "html": (
        _write(b"<!DOCTYPE html>\n<html><body>a report</body></html>\n"),
        "is not an openreg-lab trace: it is not a zip archive (it starts with b'<!DOCTYPE html>\\n')",
    ),
    "pickle": (
        _write(pickle.dumps({"events": [1, 2]}, protocol=4)),
        "is not an openreg-lab trace: it is a Python pickle",
    ),
    "npy": (_write(_npy(np.arange(5))), "is not an openreg-lab trace: it is a single numpy array (.npy)"),
    "object npy": (
        _write(_npy(np.array([None], dtype=object))),
        "is not an openreg-lab trace: it is a single numpy array (.npy)",
    ),
    "zip of text": (
        _zip({"notes.txt": b"hello"}),
        "is not an openreg-lab trace: it is a zip without an openreg-lab header (header.npy)",
    ),
    "other npz": (
        _zip({"a.npy": _npy(np.arange(3))}),
        "is not an openreg-lab trace: it is a zip without an openreg-lab header",
    ),
    "header not json": (
        _zip({"header.npy": _header("{not json")}),
        "is not an openreg-lab trace: its header is not JSON text",
    ),
    "header nested": (
        _zip({"header.npy": _header("[" * 100_000)}),
        "is not an openreg-lab trace: its header is not JSON text",
    ),
    "header no magic": (
        _zip({"header.npy": _header({"magic": "other"})}),
        "is not an openreg-lab trace: its header has no 'openreg-lab trace' magic",
    ),
    "header of objects": (
        _zip({"header.npy": _npy(np.array(["x"], dtype=object))}),
        "is not an openreg-lab trace: its member 'header.npy' holds object values, not numbers",
    ),
    "deflated header": (
        _zip({"header.npy": _header()}, zipfile.ZIP_DEFLATED),
        "is not an openreg-lab trace: its member 'header.npy' is compressed (method 8); Trace.save stores",
    ),
    "encrypted": (_encrypted, "is not an openreg-lab trace: its member 'header.npy' is encrypted"),
    "truncated trace": (
        _truncated,
        "is not an openreg-lab trace: it starts as a zip archive but its end is missing or damaged (a "
        "truncated file?)",
    ),
    "deflated bomb": (
        _deflated_bomb,
        "is not an openreg-lab trace: its member 'f_start_ns.npy' is compressed",
    ),
    "size lie": (
        _size_lie,
        "is not an openreg-lab trace: its member 'pool.npy' declares 10,737,418,240 bytes, more than "
        "the file's",
    ),
    "overlapping members": (
        _overlapping,
        "is not an openreg-lab trace: its members declare 13,198,753 bytes in all, more than its ",
    ),
    "shape lie": (
        _shape_lie,
        "is a damaged openreg-lab trace: its member 'f_start_ns.npy' declares 10,000,000 values of shape "
        "(10000000,) (80,000,000 bytes) but holds 8 bytes",
    ),
    "object column": (
        _object_column,
        "is a damaged openreg-lab trace: its member 'f_extra.npy' holds object values, not numbers",
    ),
}


@pytest.mark.parametrize("case", list(NOT_A_TRACE))
def test_a_file_that_is_not_a_trace_is_named_as_such(tmp_path, case):
    make, message = NOT_A_TRACE[case]
    path = tmp_path / "x.trace"
    make(path)
    with pytest.raises(ValueError) as e:
        openreg_lab.load_trace(path)
    text = str(e.value)
    assert text.startswith(f"{str(path)!r} {message}"), text
    assert "allow_pickle" not in text and "\n" not in text


@pytest.mark.parametrize("case", ["deflated bomb", "shape lie", "size lie", "overlapping members"])
def test_a_crafted_file_is_refused_in_a_second_and_100_mb(tmp_path, case):
    path = tmp_path / "crafted.trace"
    NOT_A_TRACE[case][0](path)
    small_trace().save(tmp_path / "warm.trace")
    openreg_lab.load_trace(tmp_path / "warm.trace")  # the readers' imports, before measuring
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ValueError, match="openreg-lab trace"):
            openreg_lab.load_trace(path)
        seconds = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert seconds <= 1.0, f"{case}: {seconds:.2f} s for a file of {size:,} bytes"
    assert peak <= 100 << 20, f"{case}: {peak / 2**20:.0f} MB for a file of {size:,} bytes"
    if case == "deflated bomb":
        assert 600_000 < size < 1_000_000  # the 0.8 MB file of the issue
        assert peak < 4 * size  # the file's own size, about: nothing inflated


def test_a_trace_still_loads_and_a_deflated_copy_is_refused(tmp_path):
    path = tmp_path / "t.trace"
    small_trace().save(path)
    assert openreg_lab.load_trace(path).events.equals(small_trace().events)
    with zipfile.ZipFile(path) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}  # what save writes
        members = {name: z.read(name) for name in z.namelist()}
    copy = tmp_path / "deflated.trace"
    _zip(members, zipfile.ZIP_DEFLATED)(copy)
    with pytest.raises(
        ValueError, match=r"is compressed \(method 8\); Trace.save stores every member uncompressed"
    ):
        openreg_lab.load_trace(copy)


def test_report_names_a_file_that_is_not_a_trace_in_one_line(tmp_path, capsys):
    path = tmp_path / "x.trace"
    _write(pickle.dumps([1, 2]))(path)
    code = main(["report", str(path)], prog="openreg-lab")
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert (
        err
        == f"openreg-lab report: error: {str(path)!r} is not an openreg-lab trace: it is a Python pickle. "
        + ("Trace files are written by Trace.save(); the file may be truncated or of another kind\n")
    )


def test_a_member_that_is_not_an_array_is_never_read_so_a_newer_format_is_still_named(tmp_path):
    path = tmp_path / "t.trace"
    small_trace().save(path)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("notes.json", b"{}" * 1000, zipfile.ZIP_DEFLATED)  # what a later format may add
    assert openreg_lab.load_trace(path).events.equals(small_trace().events)
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    header = json.loads(np.load(io.BytesIO(members["header.npy"])).tobytes())
    members["header.npy"] = _header({**header, "version": files.VERSION + 1})
    newer = tmp_path / "newer.trace"
    _zip(members)(newer)
    with pytest.raises(ValueError, match=rf"format version {files.VERSION + 1}.*upgrade openreg-lab"):
        openreg_lab.load_trace(newer)
