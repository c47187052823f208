"""A pool of rank processes that run many test bodies (tests/support/distributed_bodies.py) each.

Starting a process and importing torch costs seconds on two busy cores, so a test module starts its
ranks once (``RankPool``, used as a module-scoped fixture): each rank joins one process group over
127.0.0.1 on a free port, then runs the bodies it is sent, in order, and returns their results.
Every wait is bounded; a rank that does not answer in time makes the pool kill all its processes
and fail the test. ``close()`` leaves no process behind (checked by the tests).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import sys
import traceback
from typing import Any

DEFAULT_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RankError(AssertionError):
    """A body raised on some rank; the message holds each failing rank's traceback."""


class RankPool:
    """``world`` rank processes in one process group (backend ``backend``), reused across bodies."""

    def __init__(self, world: int, backend: str = "ogloo", timeout: float = DEFAULT_TIMEOUT) -> None:
        ctx = mp.get_context("spawn")
        self.world = world
        self.port = free_port()
        self.conns: list[Any] = []
        self.procs: list[Any] = []
        for rank in range(world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(rank, world, self.port, backend, child), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        self.run("ready", timeout=timeout)

    def run(self, body: str, *args: Any, timeout: float = DEFAULT_TIMEOUT) -> list[Any]:
        """Run ``distributed_bodies.<body>(rank, world, *args)`` on every rank; its results by rank."""
        for conn in self.conns:
            conn.send((body, args))
        results: list[Any] = []
        errors: list[str] = []
        for rank, conn in enumerate(self.conns):
            if not conn.poll(timeout):
                self.close()
                raise TimeoutError(f"rank {rank} did not finish {body!r} within {timeout} s")
            status, value = conn.recv()
            results.append(value)
            if status != "ok":
                errors.append(f"--- rank {rank} ---\n{value}")
        if errors:
            raise RankError(f"{body} failed:\n" + "\n".join(errors))
        return results

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in self.conns:
            conn.close()

    def alive(self) -> list[int]:
        return [p.pid for p in self.procs if p.is_alive()]


def _serve(rank: int, world: int, port: int, backend: str, conn: Any) -> None:
    os.environ.setdefault("OPENREG_DEVICE_COUNT", str(max(2, world)))
    import datetime

    import torch.distributed as dist

    import openreg_lab  # noqa: F401
    from tests.support import distributed_bodies

    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=30),
    )
    while True:
        message = conn.recv()
        if message is None:
            break
        body, args = message
        try:
            conn.send(("ok", getattr(distributed_bodies, body)(rank, world, *args)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
    if dist.is_initialized():
        dist.destroy_process_group()
    conn.close()
    # Nothing is left to release: skip the interpreter's teardown (seconds on busy cores).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
