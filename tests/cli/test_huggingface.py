"""Hugging Face transformers and accelerate on openreg: a CUDA-written GPT-2 training script run by
``openreg-lab run --from-cuda``, and a ``Trainer`` with default arguments under ``openreg-lab run``,
``--from-cuda`` on one and two devices, and ``torchrun ... --from-cuda`` (DDP over ogloo).

Every model is a tiny random-initialised GPT-2 (no download: HF_HUB_OFFLINE); every run is a
subprocess, as a user would start it, compared with the same script on the CPU.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import openreg_lab
from tests.support.cli_helpers import env
from tests.support.distributed_pool import free_port
from tests.support.processes import running_in

# Found, not imported: the scripts import them in their own processes.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("accelerate") is None,
    reason="transformers and accelerate (the test extra) are not installed",
)

CONFIG = """\
config = GPT2Config(
    n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0,
    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
)
"""

# Written for CUDA, with the CPU as the way it runs without a GPU (as such scripts usually are).
GPT2_SCRIPT = (
    """\
import torch
import torch.utils.data, torch.distributed.fsdp, accelerate  # what training scripts import
from transformers import GPT2Config, GPT2LMHeadModel

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
"""
    + CONFIG
    + """\
model = GPT2LMHeadModel(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
ids = torch.randint(0, 64, (4, 16))
mask = torch.ones(4, 16, dtype=torch.long)
mask[1, 12:] = 0
mask[3, 10:] = 0
ids, mask = ids.to(device, non_blocking=True), mask.to(device)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.6f}")
if device == "cuda":
    print("peak", torch.cuda.max_memory_allocated() > 0, next(model.parameters()).device)
"""
)

TRAINER_SCRIPT = (
    """\
import sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


torch.manual_seed(0)
"""
    + CONFIG
    + """\
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4  # per device
args = TrainingArguments(
    output_dir=sys.argv[1], max_steps=2, per_device_train_batch_size=batch, report_to=[], save_strategy="no",
    disable_tqdm=True, logging_strategy="no", seed=0,
)
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens())
result = trainer.train()
weight = trainer.model.transformer.wte.weight
# One write, not print's two: under PYTHONUNBUFFERED torchrun's ranks share a pipe, and rank 0's
# Trainer log line could otherwise land between another rank's text and its newline.
sys.stdout.write(
    f"rank {args.process_index} of {args.world_size}: {type(trainer.model_wrapped).__name__} "
    f"on {args.device}, "
    f"weights on {weight.device}, optimizer {args.optim.value}, loss {result.training_loss:.6f}, "
    f"weight sum {weight.detach().float().sum().item():.6f}\\n"
)
"""
)

RESULT = re.compile(
    r"rank (\d) of (\d): (\w+) on ([\w:]+), weights on ([\w:]+), optimizer (\w+), "
    r"loss ([-\d.]+), weight sum ([-\d.]+)$"
)


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in env().items() if k not in ("ACCELERATE_TORCH_DEVICE", "OPENREG_DEVICE_COUNT")}
    return {**base, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", **extra}


def _run(cmd: list[str], cwd: Path, timeout: float = 240, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=timeout)


def _openreg_lab(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "openreg_lab", *args], cwd, **extra)


def _results(stdout: str) -> list[tuple[str, ...]]:
    # A line may begin with another rank's unfinished print (see the script): the result ends it.
    return [m.groups() for m in map(RESULT.search, stdout.splitlines()) if m]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hf")
    (d / "gpt2.py").write_text(GPT2_SCRIPT)
    (d / "trainer.py").write_text(TRAINER_SCRIPT)
    return d


def test_a_cuda_written_gpt2_script_imports_and_trains_under_from_cuda_as_on_the_cpu(scripts: Path) -> None:
    # transformers evaluates `torch.cuda.CUDAGraph | None` at import: under from_cuda it is a class.
    cpu = _run([sys.executable, "gpt2.py"], scripts)
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    ported = _openreg_lab("run", "--from-cuda", "--trace", "gpt2.trace", "gpt2.py", cwd=scripts)
    assert ported.returncode == 0, ported.stderr[-3000:]
    want = [float(line.split()[-1]) for line in cpu.stdout.splitlines()]
    lines = ported.stdout.splitlines()
    assert [line.rsplit(" ", 1)[0] for line in lines] == [
        "step 0 loss",
        "step 1 loss",
        "step 2 loss",
        "peak True",
    ]
    assert lines[-1] == "peak True openreg:0"  # torch.cuda.max_memory_allocated() is openreg's
    got = [float(line.split()[-1]) for line in lines[:3]]
    assert len(want) == 3 and got == pytest.approx(want, rel=2e-3)  # bfloat16 autocast on both
    assert got != want[:1] * 3  # it trained: the loss moved
    ev = openreg_lab.load_trace(scripts / "gpt2.trace").events
    ops = ev[ev.kind == "op"]
    assert (ops.name == "aten::addmm").sum() + (ops.name == "aten::mm").sum() > 0
    assert (ev.kind == "step").sum() == 3  # three optimizer steps


def test_the_trainer_trains_on_openreg_under_run_as_on_the_cpu(scripts: Path) -> None:
    # Under `run`, accelerate is told to use openreg (ACCELERATE_TORCH_DEVICE); a user's other choice
    # is kept and said: the Trainer never lands on the CPU silently.
    on_cpu = _openreg_lab("run", "trainer.py", "out", cwd=scripts, ACCELERATE_TORCH_DEVICE="cpu")
    assert on_cpu.returncode == 0, on_cpu.stderr[-3000:]
    assert (
        "openreg-lab run: ACCELERATE_TORCH_DEVICE=cpu: accelerate and the Hugging Face Trainer will use cpu, "
        "not openreg (unset it to train on openreg)"
    ) in on_cpu.stderr.splitlines()
    on_openreg = _openreg_lab("run", "--trace", "t.trace", "trainer.py", "out", cwd=scripts)
    assert on_openreg.returncode == 0, on_openreg.stderr[-3000:]
    assert "ACCELERATE_TORCH_DEVICE" not in on_openreg.stderr
    [cpu] = _results(on_cpu.stdout)
    [ours] = _results(on_openreg.stdout)
    assert cpu[:6] == ("0", "1", "GPT2LMHeadModel", "cpu", "cpu", "adamw_torch_fused")
    assert ours[:6] == ("0", "1", "GPT2LMHeadModel", "openreg", "openreg:0", "adamw_torch_fused")
    assert float(ours[6]) == pytest.approx(float(cpu[6]), rel=1e-5)  # loss
    assert float(ours[7]) == pytest.approx(float(cpu[7]), rel=1e-5, abs=1e-5)  # the trained weights
    ev = openreg_lab.load_trace(scripts / "t.trace").events
    assert (ev.kind == "step").sum() == 2  # the Trainer's two optimizer steps ran on openreg
    # nothing fell back: the batches have no attention mask, and GPT-2's check for packed sequences
    # (a cumsum) runs natively
    assert (ev.kind == "fallback").sum() == 0, sorted(ev[ev.kind == "fallback"].name)
    assert ((ev.kind == "op") & (ev.name == "aten::cumsum")).any()


def test_the_trainer_under_from_cuda_trains_with_data_parallel_as_on_one_device(scripts: Path) -> None:
    # With two devices the Trainer wraps the model in nn.DataParallel (4 rows on each device): it
    # trains as one device does with the whole batch of 8 (Note [DataParallel's primitives]).
    one = _openreg_lab("run", "--from-cuda", "trainer.py", "out", "8", cwd=scripts, OPENREG_DEVICE_COUNT="1")
    assert one.returncode == 0, one.stderr[-3000:]
    [r] = _results(one.stdout)
    assert r[:6] == ("0", "1", "GPT2LMHeadModel", "cuda:0", "openreg:0", "adamw_torch_fused")
    two = _openreg_lab("run", "--from-cuda", "trainer.py", "out", cwd=scripts)
    assert two.returncode == 0, two.stderr[-3000:]
    [dp] = _results(two.stdout)
    assert dp[:6] == ("0", "1", "DataParallel", "cuda:0", "openreg:0", "adamw_torch_fused")
    assert float(dp[6]) == pytest.approx(float(r[6]), rel=1e-5)  # loss
    assert float(dp[7]) == pytest.approx(float(r[7]), rel=1e-5, abs=1e-5)  # the trained weights


def test_the_trainer_under_torchrun_from_cuda_trains_with_ddp_over_ogloo(scripts: Path) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", "-m", "openreg_lab", "run", "--from-cuda", "--trace", "ddp.trace",
        "trainer.py", "out",
    ]  # fmt: skip
    proc = _run(cmd, scripts, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = sorted(_results(proc.stdout))
    assert [r[:6] for r in results] == [
        ("0", "2", "DistributedDataParallel", "cuda:0", "openreg:0", "adamw_torch_fused"),
        ("1", "2", "DistributedDataParallel", "cuda:1", "openreg:1", "adamw_torch_fused"),
    ]
    assert results[0][7] == results[1][7]  # the same weights on both ranks: gradients all-reduced
    assert results[0][6] != results[1][6]  # ... from different batches
    for rank in (0, 1):
        collectives = openreg_lab.load_trace(scripts / f"ddp.rank{rank}.trace").collectives()
        assert (collectives["name"] == "allreduce").sum() >= 2  # recorded by openreg's backend, ogloo
    assert running_in(scripts) == [], "rank processes outlived torchrun"
