"""``run`` and memory snapshots: an out of memory writes PyTorch's snapshot of that moment beside the
trace and its message names it (cli/_oom.py); a CUDA script's own memory debugging runs under
``--from-cuda`` as written."""

from __future__ import annotations

import argparse
import os
import pickle

import pytest
import torch
from torch.cuda import _memory_viz

from openreg_lab import _C
from openreg_lab.cli import _oom
from tests.support.cli_helpers import openreg_lab as run_openreg_lab


def _ns(**given: str | None) -> argparse.Namespace:
    values = {"trace": None, "html": None, "chrome": None, "module": None, "script": "train.py"}
    return argparse.Namespace(**{**values, **given})


def test_the_snapshot_goes_beside_the_trace_else_the_report_else_the_scripts_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _oom.path_for(_ns(trace="/out/run.trace", html="/out/r.html"), None) == "/out/run.oom.pickle"
    assert _oom.path_for(_ns(html="/out/report.html"), None) == "/out/report.oom.pickle"
    assert _oom.path_for(_ns(chrome="/out/c.json"), 1) == "/out/c.rank1.oom.pickle"
    assert _oom.path_for(_ns(), None) == str(tmp_path / "train.oom.pickle")
    assert _oom.path_for(_ns(script=None, module="pkg.train"), None) == str(tmp_path / "pkg.train.oom.pickle")


def _hold(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8, device="openreg")  # what holds the memory


def test_an_out_of_memory_writes_the_snapshot_and_its_message_names_it(tmp_path):
    path = str(tmp_path / "run.oom.pickle")
    torch.openreg.empty_cache()
    torch.openreg.set_memory_limit(torch.openreg.memory_reserved() + 256 * 1024)
    with _oom.snapshots(path) as written:
        held = _hold(200_000)
        with pytest.raises(
            torch.OutOfMemoryError, match=rf"wrote a memory snapshot of this moment to {path} "
        ):
            _hold(100_000)
        assert written == [path]
    assert not _C._memory_history_on()  # the history run started is stopped
    with open(path, "rb") as f:
        snap = pickle.load(f)
    (block,) = [s["blocks"][0] for s in snap["segments"] if s["address"] == held.data_ptr()]
    assert block["state"] == "active_allocated" and block["frames"][0]["name"] == "_hold"
    (oom,) = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
    assert oom["size"] == 100_000 and oom["frames"][0]["name"] == "_hold"
    assert "raise OutOfMemoryError # 97.7KiB requested" in _memory_viz.trace(snap)
    del held


CUDA_SCRIPT = """
import torch
from torch import nn

torch.cuda.memory._record_memory_history(max_entries=100000)
model = nn.Linear(64, 64).cuda()
x = torch.randn(32, 64, device="cuda")
model(x).sum().backward()
torch.cuda.memory._dump_snapshot("step.pickle")
print("dumped", torch.cuda.memory_allocated())
big = torch.empty(1 << 28, device="cuda")  # more than the device has
"""


def test_a_cuda_script_dumps_its_snapshot_and_an_out_of_memory_leaves_one_under_run(tmp_path):
    (tmp_path / "train.py").write_text(CUDA_SCRIPT)
    limit = {"OPENREG_MEMORY_LIMIT": "64M"}
    p = run_openreg_lab(
        "run", "--from-cuda", "--trace", "cuda.trace", "train.py", cwd=tmp_path, extra_env=limit
    )
    assert p.returncode == 1, p.stderr
    allocated = int(p.stdout.split()[1])
    oom = tmp_path / "cuda.oom.pickle"
    assert f"wrote a memory snapshot of this moment to {oom} " in p.stderr  # in the error's message
    assert f"openreg-lab run: out of memory: a memory snapshot of that moment is in {oom}" in p.stderr
    with open(tmp_path / "step.pickle", "rb") as f:
        step = pickle.load(f)
    held = [b for s in step["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert sum(b["size"] for b in held) == allocated
    script = str(tmp_path / "train.py")
    framed = [b for b in held if b["frames"]]
    assert len(held) - len(framed) == 2  # the gradients, made on the autograd engine's thread: no Python
    for b in framed:  # the script's line, with no frame of openreg-lab's own (run, from_cuda)
        files = [
            os.path.join(tmp_path, f["filename"]) for f in b["frames"]
        ]  # the script's as run_path runs it
        assert script in files and not any("openreg_lab" in f for f in files)
    with open(oom, "rb") as f:
        snap = pickle.load(f)
    (entry,) = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
    innermost = entry["frames"][0]
    assert entry["size"] == 4 << 28 and (
        os.path.join(tmp_path, innermost["filename"]),
        innermost["line"],
    ) == (script, 11)
    assert "total_reserved" in _memory_viz.segsum(snap)
