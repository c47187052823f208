"""The lab's checked collectives around PyTorch's Gloo: ``init_process_group("checked_gloo")`` gives a
CPU job the same one-line errors as openreg's backend (Note [Checked collectives] in
csrc/checked/CheckedBackend.h), where bare Gloo aborts a rank or sums bit patterns.

Two CPU rank processes, spawned once for the module (``RankPool``), run the same bodies as the
openreg tests (tests/support/distributed_bodies.py) on CPU tensors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import torch.distributed as dist

import openreg_lab  # noqa: F401  (registers the backends)
from tests.support import distributed_bodies
from tests.support.distributed_pool import RankPool

# What test_distributed.py's test_mismatch_is_a_clear_error_on_every_rank asserts of openreg's.
RANKS_PASSED = {
    "shape": "rank 0: one Float tensor of shape [4]; rank 1: one Float tensor of shape [5]",
    "dtype": "rank 0: one Float tensor of shape [4]; rank 1: one Long tensor of shape [4]",
    "root": "rank 0: one Float tensor of shape [4], root 0; rank 1: one Float tensor of shape [4], root 1",
    "reduce op": "rank 0: one Float tensor of shape [4], SUM; rank 1: one Float tensor of shape [4], MAX",
}


@pytest.fixture(scope="module")
def cpu_pool() -> Iterator[RankPool]:
    p = RankPool(2, backend="checked_gloo")
    yield p
    p.close()
    assert p.alive() == [], "rank processes outlived the pool"


def test_checked_gloo_is_registered_for_cpu() -> None:
    assert "checked_gloo" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["checked_gloo"] == ["cpu"]
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"  # bare Gloo stays the default


@pytest.mark.parametrize("what", list(RANKS_PASSED))
def test_a_cpu_mismatch_is_openreg_s_one_line_error_on_every_rank(cpu_pool: RankPool, what: str) -> None:
    messages = cpu_pool.run("mismatch", what, "cpu")  # the body checks that the group lives on
    assert messages[0] == messages[1]
    call = "broadcast" if what == "root" else "allreduce"
    expected = (
        rf"openreg {call} \(group '\d+'\): the ranks of the group passed different tensors \("
        + re.escape(RANKS_PASSED[what])
        + r"\)\. Every rank must call the same collective with tensors of the same shape, dtype and "
        r"device type; nothing was sent"
    )
    assert re.fullmatch(expected, messages[0]), messages[0]


def test_a_cpu_send_and_its_recv_must_agree(cpu_pool: RankPool) -> None:
    r0, r1 = cpu_pool.run("p2p_mismatch", "cpu", timeout=40)
    distributed_bodies.check_p2p_mismatch(r0, r1)
