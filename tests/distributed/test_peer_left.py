"""A collective after a peer left is an error within seconds, naming it.

Note [A rank that left] in ``csrc/checked/Agreement.h``: a rank that leaves (its process exits,
or it destroys its group) says so in the group's store, so the rank still calling collectives fails
at once instead of waiting the group's timeout (30 minutes by default, left at that here). Two ranks
per scenario in fresh interpreters over 127.0.0.1, as in test_distributed.py's dead-rank test, every
wait bounded, every process killed at the end.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.distributed_pool import free_port

REPO = str(Path(__file__).resolve().parents[2])

# argv: rank, port, scenario. Rank 0 prints one line per failing call: its error's type, seconds,
# and the error's first line.
RANKS = textwrap.dedent(
    f"""
    import os, sys, time
    import torch, torch.distributed as dist
    sys.path.insert(0, {REPO!r})
    import openreg_lab
    rank, how = int(sys.argv[1]), sys.argv[3]
    dist.init_process_group("ogloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank,
                            world_size=2)  # the default timeout: 30 minutes
    x = torch.ones(4, device="openreg:" + str(rank))

    def attempt(call):
        start = time.monotonic()
        try:
            call()
            print("completed", round(time.monotonic() - start, 1), flush=True)
        except Exception as e:
            print(type(e).__name__, round(time.monotonic() - start, 1), str(e).splitlines()[0],
                  flush=True)

    dist.all_reduce(x)
    if how == "exit":
        dist.all_reduce(x)  # the history now predicts all_reduce after all_reduce
        if rank == 1:
            sys.exit(0)  # a clean exit, without destroy_process_group
        attempt(lambda: dist.all_reduce(x))  # runs ahead: Gloo sees the closed connection
        attempt(lambda: dist.recv(x, 1))
    else:
        if rank == 1:
            time.sleep(3)  # a slow peer is not one that left
        attempt(lambda: dist.all_reduce(x))
        if rank == 1:
            dist.destroy_process_group()
            time.sleep(120)  # alive, its group gone
        attempt(lambda: dist.broadcast(x, 0))  # not predicted: waits for the ranks' rows
    """
)


def test_a_collective_after_a_peer_left_fails_within_seconds_naming_it() -> None:
    quiet = {"text": True, "stderr": subprocess.DEVNULL}
    runs = {}  # both scenarios at once
    for how in ("exit", "destroy"):
        args = [sys.executable, "-c", RANKS, "0", str(free_port()), how]
        rank0 = subprocess.Popen(args, stdout=subprocess.PIPE, **quiet)
        rank1 = subprocess.Popen([*args[:3], "1", *args[4:]], stdout=subprocess.DEVNULL, **quiet)
        runs[how] = (rank0, rank1)
    try:
        outs = {how: rank0.communicate(timeout=120)[0].splitlines() for how, (rank0, _) in runs.items()}
    finally:
        for rank0, rank1 in runs.values():
            for p in (rank0, rank1):
                p.kill()
                p.wait(10)

    def failed(line: str, call: str, message: str) -> None:
        kind, seconds, text = line.split(" ", 2)
        assert kind == "DistBackendError", line
        assert float(seconds) < 20, line  # seconds, not the 30 minutes of the group's timeout
        prefix = f"openreg {call} (group '0', rank 0 of 2, 16 bytes of Float on openreg:0) failed: "
        assert text.startswith(prefix), line
        assert message in text, line

    ahead, recv = outs["exit"]
    failed(ahead, "allreduce", "rank 1 left the group (its process exited) before this collective")
    failed(recv, "recv", "rank 1 left the group (its process exited) before sending what this recv expects")
    slow, destroyed = outs["destroy"]
    assert slow.startswith("completed") and float(slow.split()[1]) >= 2, slow  # rank 1 computed 3 s
    destroy = "rank 1 left the group (it called destroy_process_group) before this collective"
    failed(destroyed, "broadcast", destroy)
    assert "every rank of a group must issue the same collectives before it leaves" in destroyed
