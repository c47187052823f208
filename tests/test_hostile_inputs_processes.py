"""Hostile inputs: openreg across processes (issue 13, point 3).

- fork while another thread holds the allocator's lock: the child must not inherit it locked
  (Note [Fork safety] in ``csrc/runtime/DeviceAllocator.cpp``);
- a DataLoader with worker processes whose dataset returns openreg tensors, or any openreg tensor
  sent through ``torch.multiprocessing``: a clear error in the receiving process, never a hang
  (``openreg_lab/device/_sharing.py``).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
NOT_SHAREABLE = r"openreg memory cannot be shared between processes"


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


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
@pytest.mark.parametrize(
    ("batch_size", "shape"), [(2, "(2, 4)"), (None, "(4,)")], ids=["collated", "unbatched"]
)
def test_dataloader_workers_returning_openreg_tensors_raise_in_the_main_process(
    start_method, batch_size, shape, tmp_path
):
    # A file, not -c: spawned workers import the dataset class from the main module.
    script = tmp_path / "loader.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import torch, openreg_lab
            from torch.utils.data import DataLoader, Dataset

            class OnDevice(Dataset):
                def __len__(self):
                    return 8
                def __getitem__(self, i):
                    return torch.full((4,), float(i), device="openreg")

            if __name__ == "__main__":
                loader = DataLoader(OnDevice(), batch_size={batch_size}, num_workers=2,
                                    multiprocessing_context="{start_method}")
                try:
                    next(iter(loader))
                except RuntimeError as e:
                    print("RAISED", e)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"RAISED an openreg tensor of shape {shape} and dtype torch.float32 on openreg:0"
    )
    assert "Return CPU tensors from the Dataset and move each batch to openreg" in done.stdout


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


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(6.0, device="openreg").view(2, 3),
        lambda: torch.nn.Parameter(torch.ones(2, device="openreg")),
        lambda: torch.ones(5, device="openreg").untyped_storage(),
    ],
    ids=["tensor", "parameter", "storage"],
)
def test_openreg_objects_pickle_for_multiprocessing_as_an_error_raised_on_receipt(make):
    payload = ForkingPickler.dumps(make())
    with pytest.raises(RuntimeError, match=NOT_SHAREABLE):
        pickle.loads(payload)


def test_cpu_tensors_still_share_through_torch_multiprocessing():
    payload = ForkingPickler.dumps(torch.arange(4.0))
    assert pickle.loads(payload).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_multiprocessing_queue_delivers_the_error_instead_of_losing_the_item():
    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    queue = ctx.Queue()
    queue.put(torch.ones(3, device="openreg"))
    with pytest.raises(RuntimeError, match=NOT_SHAREABLE):
        queue.get(timeout=60)
