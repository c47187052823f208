"""A script that ran a backward on openreg exits cleanly.

The autograd worker thread of an openreg device may drop its last graph task, whose thread-local
state holds a Python object, while the main thread finalizes Python: SIGABRT ("terminate called
without an active exception"). See Note [Autograd workers at exit] in
``csrc/python/device/AutogradExit.cpp``. Before the fix, 4 concurrent processes aborted in 4 runs out of
60 (6.7%); the fix must give none.

Each run starts a fresh interpreter (about 2 s of CPU for ``import torch``), so the suite runs 24
(before the fix, 24 clean runs had a chance of about 19%: 40 cost a minute of the suite's budget);
the issue's 200 are run with
``.venv/bin/python tests/device/test_exit.py 200``, which prints the exit codes.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import torch, openreg_lab
x = torch.randn(8, device="openreg", requires_grad=True)
(x * 2).sum().backward()
"""


def _run_once(_: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, timeout=300, check=False
    )
    return done.returncode


def exit_codes(runs: int, concurrent: int = 4) -> Counter[int]:
    """The exit codes of ``runs`` runs of SCRIPT, ``concurrent`` at a time (-6: SIGABRT)."""
    with ThreadPoolExecutor(max_workers=concurrent) as pool:
        return Counter(pool.map(_run_once, range(runs)))


def test_backward_script_exits_cleanly_24_times_with_4_concurrent_processes():
    codes = exit_codes(24)
    assert codes == Counter({0: 24}), f"exit codes of 24 runs (-6: SIGABRT): {dict(codes)}"


@pytest.mark.parametrize("devices", [1, 2])
def test_drain_returns_once_every_device_ran_a_probe(devices):
    # The exit handler itself: it must finish (True) well within its timeout.
    code = f"""
import torch, openreg_lab
from openreg_lab import _C
for d in range({devices}):
    x = torch.ones(3, device=f"openreg:{{d}}", requires_grad=True)
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]
print(_C._drain_autograd_workers(60.0))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr


def test_drain_is_a_no_op_when_openreg_was_never_used():
    code = "import openreg_lab\nfrom openreg_lab import _C\nprint(_C._drain_autograd_workers(0.0))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    print(f"exit codes of {runs} runs, 4 at a time:", dict(exit_codes(runs)))
