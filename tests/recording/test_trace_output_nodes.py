"""Every output replaces only a regular file (Note [Where an output may go]).

A character device or a FIFO is written through, as ``torch.save`` does, and stays what it was; a
directory, a block device or a socket is refused by name; nothing is renamed over anything but a
regular file. The nodes are made in a scratch directory (``os.mknod`` of the null device's numbers
needs root; those tests skip without it): the machine's own ``/dev`` is never touched.
"""

from __future__ import annotations

import errno
import io
import os
import socket
import stat
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

import openreg_lab
from openreg_lab.recording import atomic
from openreg_lab.recording.distributed import Job
from tests.support.hostile_data import small_trace


def _ranks_report(path: Path) -> None:
    """The merged report of one rank: ``small_trace()``'s events as rank 0 of a job of one."""
    s = small_trace()
    t = openreg_lab.Trace(record_shapes=True, stack=True, columns=s.columns)
    t._t0 = s._t0
    t.job = Job("run", 0, 1)
    openreg_lab.views.ranks([t]).to_html(path)


#: Every writer of a user-named output, and the suffix that selects its format.
WRITERS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "save": ("", lambda p: small_trace().save(p)),
    "chrome": ("", lambda p: small_trace().export_chrome_trace(p)),
    "perfetto": (".pftrace", lambda p: small_trace().export_chrome_trace(p)),
    "report": ("", lambda p: small_trace().to_html(p)),
    "ranks report": ("", _ranks_report),
}


def _node(path: Path, kind: int, device: tuple[int, int]) -> Path:
    try:
        os.mknod(path, 0o666 | kind, os.makedev(*device))
    except PermissionError:
        pytest.skip("os.mknod of a device node needs root (CAP_MKNOD)")
    return path


def _left_beside(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_character_device_is_written_through_and_stays(tmp_path, writer):
    suffix, write = WRITERS[writer]
    null = _node(tmp_path / f"null{suffix}", stat.S_IFCHR, (1, 3))
    write(null)
    st = null.lstat()
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)  # still the null device
    assert _left_beside(null) == [null.name]  # no temporary file left beside it
    # The bytes go to the device itself: the full device (1, 7) refuses them, as it refuses
    # torch.save; a file renamed over it would have taken them without a word.
    full = _node(tmp_path / f"full{suffix}", stat.S_IFCHR, (1, 7))
    with pytest.raises(OSError) as e:
        write(full)
    assert e.value.errno == errno.ENOSPC or "No space left on device" in str(e.value)
    assert stat.S_ISCHR(full.lstat().st_mode) and full.lstat().st_rdev == os.makedev(1, 7)
    assert _left_beside(null) == sorted([null.name, full.name])


def _through_a_fifo(fifo: Path, write: Callable[[Path], None]) -> bytes:
    """What a reader of the FIFO ``fifo`` gets while ``write`` writes to it (a child copies it to a
    file, so that neither waits for the other)."""
    os.mkfifo(fifo)
    copy = fifo.with_name("read")
    with open(copy, "wb") as out:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=out)
    try:
        write(fifo)
        reader.wait(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait(timeout=10)
    data = copy.read_bytes()
    copy.unlink()
    return data


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_fifo_is_written_through_and_its_reader_gets_what_a_file_gets(tmp_path, writer):
    suffix, write = WRITERS[writer]
    fifo = tmp_path / f"pipe{suffix}"
    got = _through_a_fifo(fifo, write)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert _left_beside(fifo) == [fifo.name]
    file = tmp_path / "elsewhere" / f"file{suffix}"
    file.parent.mkdir()
    write(file)
    if writer != "save":
        assert got == file.read_bytes()  # the same text or protobuf, byte for byte
        return
    # A zip streamed to a FIFO (which cannot seek) gives each member's sizes after its data:
    # the same members, the same arrays, the same trace.
    with zipfile.ZipFile(io.BytesIO(got)) as z, zipfile.ZipFile(file) as f:
        assert [(i.filename, i.file_size) for i in z.infolist()] == [
            (i.filename, i.file_size) for i in f.infolist()
        ]
        assert all(z.read(i) == f.read(i) for i in f.namelist())
    back = tmp_path / "back.trace"
    back.write_bytes(got)
    assert openreg_lab.load_trace(back).events.equals(openreg_lab.load_trace(file).events)


def test_a_link_to_a_device_is_followed_and_kept(tmp_path):
    null = _node(tmp_path / "null", stat.S_IFCHR, (1, 3))
    link = tmp_path / "out.trace"
    link.symlink_to(null)
    small_trace().save(link)
    assert link.is_symlink() and stat.S_ISCHR(null.lstat().st_mode)
    assert _left_beside(link) == ["null", "out.trace"]


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def _socket(path: Path) -> Path:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # the node stays
    return path


def _block(path: Path) -> Path:
    return _node(path, stat.S_IFBLK, (7, 200))  # a loop device's numbers: the node is never opened


def _link_to_directory(path: Path) -> Path:
    path.symlink_to(_directory(path.with_name("dir")))
    return path


REFUSED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "directory": (_directory, "Is a directory"),
    "socket": (_socket, "Is a socket, not a file"),
    "block device": (_block, "Is a block device (a disk), not a file"),
    "link to a directory": (_link_to_directory, "Is a directory"),
}


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("kind", list(REFUSED))
def test_what_no_output_may_replace_is_refused_by_name(tmp_path, writer, kind):
    make, message = REFUSED[kind]
    suffix, write = WRITERS[writer]
    path = make(tmp_path / f"out{suffix}")
    before = [(p.name, p.lstat().st_mode, p.lstat().st_ino) for p in tmp_path.iterdir()]
    with pytest.raises(OSError) as e:
        write(path)
    assert message in str(e.value) and str(path) in str(e.value)
    assert [(p.name, p.lstat().st_mode, p.lstat().st_ino) for p in tmp_path.iterdir()] == before


def test_a_node_made_while_the_output_was_written_is_not_renamed_over(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    message = "Became a device or a FIFO while the output was written: nothing is renamed over it"
    with pytest.raises(OSError, match=message):
        with atomic.replacing(path, "w") as f:
            f.write("new")
            path.unlink()
            os.mkfifo(path)  # another program puts a FIFO there meanwhile
    assert stat.S_ISFIFO(path.lstat().st_mode)
    assert _left_beside(path) == ["out.json"]  # the new file removed, nothing renamed


def test_refusal_names_what_a_path_is(tmp_path):
    assert atomic.refusal(tmp_path) == "is a directory"
    assert atomic.refusal(_socket(tmp_path / "s")) == "is a socket, not a file"
    assert atomic.refusal(tmp_path / "new") is None
    os.mkfifo(tmp_path / "f")
    assert atomic.refusal(tmp_path / "f") is None
