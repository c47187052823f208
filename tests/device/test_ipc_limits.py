"""Sharing openreg tensors under a race and under the open-file limit.

Note [Sharing device memory across processes] in ``csrc/runtime/DeviceAllocator.cpp`` says what a
write racing the first send may do; Note [Sending within the open-file limit] in
``openreg_lab/device/_sharing.py`` why a send is refused near the limit. Each scenario runs in a
fresh interpreter in a session of its own (``tests/support/sharing_stress.py``), so a crash or a hang
fails the test and nothing it started outlives it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from openreg_lab.device import _sharing

ROOT = Path(__file__).resolve().parents[2]


def _scenario(*args: object, timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``tests.support.sharing_stress`` with ``args``; the result and its wall seconds."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.sharing_stress", *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its receiver, if the sender died first
        except ProcessLookupError:
            pass
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done, time.monotonic() - start


def _rows(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_tensor_sent_while_another_thread_writes_it_never_crashes_the_sender() -> None:
    # Before, the old block was freed under the writer: the sender died of SIGSEGV or glibc's heap
    # checks within 31 rounds (9 runs).
    rounds = 60
    done, _ = _scenario("race", rounds)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(done)
    assert len(rows) == rounds
    for row in rows:
        assert row["device"] == "openreg:0"
        # The receiver sees the sender's memory, byte for byte, after the writer stopped ...
        assert row["same_values"], row
        # ... where every add that ended before the send began, or began after it returned, is
        # kept; only the adds running across the send may have lost their write.
        racing = row["started_after"] - row["done_before"]
        assert row["total"] - racing <= row["low"] <= row["high"] <= row["total"], row
    # A large block keeps its address: a kernel running across the send writes its pages.
    assert [row["same_address"] for row in rows if row["n"] == 262144] == [True] * (rounds // 2)


def test_a_send_near_the_open_file_limit_is_refused_and_nothing_spins() -> None:
    # Before the check: openreg's error or the duplicate's OSError at the limit, then the
    # receiver waited while multiprocessing's fd-sharing thread printed a traceback per failed
    # accept() (648 MB in 90 s).
    done, seconds = _scenario("fd_limit", 80, 64)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout) + len(done.stderr) < 4096, done.stderr[-2000:]
    assert seconds < 60
    (report,) = _rows(done)
    error, sent = report["error"], report["sent"]
    assert error.startswith(
        "RuntimeError: openreg: cannot send an openreg storage of 1024 bytes on openreg:0 to "
        "another process: fewer than 7 file descriptors are free in this process (its open-file "
        "limit, ulimit -n, is 64)"
    ), error
    assert "Raise the limit" in error and "\n" not in error
    # Every storage sent kept its memory file: the refusal came well before 80 ...
    assert 20 < sent < 80
    # ... and the receiver got every tensor that went, in order.
    assert report["received"] == [float(i) for i in range(sent)]


def test_a_send_goes_with_seven_descriptors_free_and_is_refused_with_six() -> None:
    # Note [Sending within the open-file limit]: the first send of a storage takes three (its
    # memory file, the duplicate, the fd-sharing thread's listening socket); the check wants 7.
    done, _ = _scenario("fd_edge", 6, 7)
    assert done.returncode == 0, done.stderr[-2000:]
    six, seven = _rows(done)
    assert six["outcome"].startswith("RuntimeError: openreg: cannot send an openreg storage of 16 bytes")
    assert "fewer than 7 file descriptors are free" in six["outcome"]
    assert seven["outcome"] == "sent"


class _NoDescriptorLeft:
    """What ``DupFd.detach`` raises in a receiver at its open-file limit."""

    def detach(self) -> int:
        raise OSError(errno.EMFILE, "Too many open files")


def test_a_receiver_without_a_free_descriptor_says_so_in_one_line() -> None:
    with pytest.raises(RuntimeError) as raised:
        _sharing._rebuild_storage(_NoDescriptorLeft(), 1024, 1, ("openreg", 0, 0))
    message = str(raised.value)
    assert message.startswith(
        "openreg: cannot receive an openreg storage of 1024 bytes on openreg:1 from another "
        "process: no file descriptor is free in this process (its open-file limit, ulimit -n, is "
    )
    assert "Raise the limit" in message and "\n" not in message


def test_counting_the_free_descriptors_opens_none(monkeypatch: pytest.MonkeyPatch) -> None:
    # Note [Sending within the open-file limit]: the count had opened seven descriptors and closed
    # them, which near the limit left none to the fd-sharing thread beside it (twenty failed
    # accepts in a loaded run). It now reads the process's list of descriptors: no pipe, no dup.
    def refuse(*args: object) -> None:
        raise AssertionError("the count opened a descriptor")

    monkeypatch.setattr(os, "pipe", refuse)
    monkeypatch.setattr(os, "dup", refuse)
    _sharing._check_free_fds(16, 0)  # this process has far more than seven free
    soft = 64
    below = sum(1 for name in os.listdir("/proc/self/fd") if int(name) < soft) - 1
    assert _sharing._free_fds(soft) == soft - below
