"""Hostile inputs: openreg across processes.

- fork while another thread holds the allocator's lock: the child must not inherit it locked
  (Note [Fork safety] in ``csrc/runtime/DeviceAllocator.cpp``);
- DataLoader workers returning CPU tensors, and CPU tensors through ``torch.multiprocessing``, still
  work with openreg imported (openreg tensors are shared: tests/device/test_ipc.py).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_fork_while_another_thread_holds_the_allocator_gives_a_working_child():
    # A thread frees 2000 cached blocks under the allocator's lock (empty_cache, which releases
    # the GIL) just as the main thread forks: the child would inherit that lock held by a thread it
    # does not have. Each child allocates on openreg and exits; one that hangs is killed after
    # 10 s and counted. Before the fork handlers about 4 children in 10 hung.
    done = _run(
        """
        import os, threading, time, signal
        import torch, openreg_lab

        about_to_free, forked = threading.Event(), threading.Event()
        last = False
        def churn():
            while True:
                blocks = [torch.ones(65536 + 64 * i, dtype=torch.uint8, device="openreg")
                          for i in range(2000)]
                del blocks  # 2000 cached blocks of distinct sizes, their pages touched
                about_to_free.set()
                torch.openreg.empty_cache()
                forked.wait()
                forked.clear()
                if last:
                    return
        t = threading.Thread(target=churn)
        t.start()
        hung = ok = 0
        for i in range(12):
            about_to_free.wait()
            about_to_free.clear()
            last = i == 11
            pid = os.fork()
            if pid == 0:
                y = torch.ones(1024, device="openreg") * 2
                os._exit(0 if y.sum().item() == 2048 else 3)
            forked.set()
            deadline = time.monotonic() + 10
            while True:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got:
                    ok += os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    hung += 1
                    break
                time.sleep(0.005)
        t.join()
        print(ok, hung)
        """,
        timeout=900,
    )
    assert (done.returncode, done.stdout.split()) == (0, ["12", "0"]), done.stderr


def test_dataloader_workers_returning_cpu_tensors_still_work():
    done = _run(
        """
        import torch, openreg_lab
        from torch.utils.data import DataLoader, TensorDataset
        torch.ones(1, device="openreg")  # the parent used openreg before forking its workers
        loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, num_workers=2)
        print(sum(float(b.to("openreg").sum()) for (b,) in loader))
        """
    )
    assert (done.returncode, done.stdout.strip()) == (0, "28.0"), done.stderr


def test_cpu_tensors_still_share_through_torch_multiprocessing():
    payload = ForkingPickler.dumps(torch.arange(4.0))
    assert pickle.loads(payload).tolist() == [0.0, 1.0, 2.0, 3.0]
