"""``Trace.save`` (and the Chrome and Kineto exports and the HTML report) write whole or not at
all: a write that fails part way leaves the good file that was there, and nothing else."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import openreg_lab
from tests.support.hostile_data import small_trace

WRITERS: dict[str, Callable[[Path], None]] = {
    "save": lambda p: small_trace().save(p),
    "chrome": lambda p: small_trace().export_chrome_trace(p),
    "kineto.json": lambda p: small_trace().to_kineto(p),
    "html": lambda p: small_trace().to_html(p),
}


@contextlib.contextmanager
def file_size_limit(nbytes: int) -> Iterator[None]:
    """No file of this process may grow past ``nbytes`` (a write beyond fails with EFBIG, as on a
    full disk or quota), for the block only."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death by signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_write_that_fails_part_way_keeps_the_old_file(tmp_path, writer):
    small_trace().events  # noqa: B018  (computed before the limit: only the write is under it)
    path = tmp_path / f"out.{writer}"
    path.write_bytes(b"the good file")
    with file_size_limit(4096), pytest.raises(OSError) as e:
        WRITERS[writer](path)
    assert e.value.errno == errno.EFBIG or "File too large" in str(e.value)
    assert path.read_bytes() == b"the good file"
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no partial file left beside it
    WRITERS[writer](path)  # without the limit, the same write replaces it
    assert path.stat().st_size > 4096


def test_a_saved_file_keeps_its_permissions_and_its_link(tmp_path):
    target = tmp_path / "real.trace"
    target.write_bytes(b"old")
    target.chmod(0o640)
    link = tmp_path / "link.trace"
    link.symlink_to(target)
    small_trace().save(link)
    assert link.is_symlink() and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert len(openreg_lab.load_trace(link)) == len(small_trace())
    assert sorted(os.listdir(tmp_path)) == ["link.trace", "real.trace"]


def test_a_missing_folder_names_the_path_asked_for(tmp_path):
    path = tmp_path / "no" / "such" / "t.trace"
    with pytest.raises(FileNotFoundError) as e:
        small_trace().save(path)
    assert e.value.filename == str(path)


def test_a_writable_file_in_a_folder_that_refuses_new_files_is_still_saved(tmp_path, monkeypatch):
    path = tmp_path / "t.trace"
    path.write_bytes(b"old")
    real_open = os.open

    def refuse_new_files(name, flags, *args):  # a read-only folder (as a non-root user sees it)
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", name)
        return real_open(name, flags, *args)

    monkeypatch.setattr(os, "open", refuse_new_files)
    small_trace().save(path)
    monkeypatch.undo()
    assert len(openreg_lab.load_trace(path)) == len(small_trace())
    with pytest.raises(PermissionError) as e:  # and a new file there names the path asked for
        monkeypatch.setattr(os, "open", refuse_new_files)
        small_trace().save(tmp_path / "new.trace")
    assert e.value.filename == str(tmp_path / "new.trace")
