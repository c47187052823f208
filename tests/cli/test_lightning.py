"""PyTorch Lightning on openreg: ``Trainer(accelerator="openreg")`` eager and under ``bf16-mixed``,
``accelerator="auto"``, Fabric, a model that is not on one device, and ``torchrun`` with
``devices=2, strategy="ddp"`` (DDP over ogloo).

Every fit is the tiny model of ``tests/support/lightning_tiny.py`` (two steps), compared with the same
fit on the CPU; the torchrun job is the one subprocess.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

pl = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning (the test extra) is not installed")

from lightning_fabric import Fabric  # noqa: E402
from lightning_fabric.utilities.exceptions import MisconfigurationException  # noqa: E402

import openreg_lab  # noqa: E402
from openreg_lab.device import _lightning  # noqa: E402
from tests.support import lightning_tiny as tiny  # noqa: E402
from tests.support.cli_helpers import env  # noqa: E402
from tests.support.distributed_pool import free_port  # noqa: E402
from tests.support.processes import running_in  # noqa: E402


@pytest.fixture(scope="module")
def on_cpu() -> tuple[list[float], float]:
    _, model = tiny.fit(accelerator="cpu")
    return model.losses, tiny.weight_sum(model)


def test_the_trainer_trains_on_openreg_by_name_as_on_the_cpu(on_cpu):
    with openreg_lab.trace() as t:
        trainer, model = tiny.fit(accelerator="openreg")
    assert type(trainer.strategy).__name__ == "SingleDeviceStrategy"  # devices="auto": one device
    assert trainer.strategy.root_device == torch.device("openreg", 0)
    assert sorted(set(model.seen)) == [("openreg:0", "openreg:0", "Tiny")]  # batches and weights
    losses, weights = on_cpu
    assert len(model.losses) == tiny.STEPS and model.losses == pytest.approx(losses, rel=1e-6)
    assert tiny.weight_sum(model) == pytest.approx(weights, rel=1e-6)
    ev = t.events
    assert (ev.kind == "step").sum() == tiny.STEPS  # the optimizer's steps, on openreg
    assert ((ev.kind == "op") & (ev.name == "aten::addmm")).sum() == 2 * tiny.STEPS  # two linears
    assert t.casts().empty  # 32-bit: no autocast


def test_bf16_mixed_autocasts_on_openreg_as_on_the_cpu():
    _, cpu = tiny.fit(accelerator="cpu", precision="bf16-mixed")
    with openreg_lab.trace() as t:
        trainer, model = tiny.fit(accelerator="openreg", precision="bf16-mixed")
    assert (trainer.precision_plugin.device, trainer.precision) == ("openreg", "bf16-mixed")
    casts = t.casts()
    # Each step: the two linears' input, weights and biases to bfloat16, the loss's input back to fp32.
    args = ("input", "weight", "bias", "weight", "bias")
    linear = [("aten::linear", arg, "float32", "bfloat16") for arg in args]
    step = [*linear, ("aten::mse_loss", "self", "bfloat16", "float32")]
    assert list(casts[["op", "argument", "from_dtype", "to_dtype"]].itertuples(index=False, name=None)) == (
        step * tiny.STEPS
    )
    assert set(casts.device) == {"openreg:0"}
    assert model.losses == pytest.approx(cpu.losses, rel=1e-6)  # the same casts as the CPU's autocast
    assert tiny.weight_sum(model) == pytest.approx(tiny.weight_sum(cpu), rel=1e-6)


def test_16_mixed_autocasts_on_openreg_with_its_grad_scaler(on_cpu):
    with openreg_lab.trace() as t:
        trainer, model = tiny.fit(accelerator="openreg", precision="16-mixed")
    plugin = trainer.precision_plugin
    assert (plugin.device, plugin.scaler._device, plugin.scaler.is_enabled()) == ("openreg", "openreg", True)
    casts = t.casts()
    assert len(casts) == 6 * tiny.STEPS and set(casts.device) == {"openreg:0"}
    assert (casts.to_dtype == "float16").sum() == 5 * tiny.STEPS  # as bfloat16 above
    assert model.losses[0] == pytest.approx(on_cpu[0][0], rel=1e-3)  # float16 against float32, before a step


def test_auto_stays_on_the_cpu_and_says_once_how_to_ask_for_openreg(monkeypatch):
    monkeypatch.setattr(_lightning, "_said_auto", type(_lightning._said_auto)())  # not said yet
    with pytest.warns(UserWarning, match="chose the CPU") as said:
        _, model = tiny.fit(accelerator="auto")
    [warning] = [w for w in said if "openreg" in str(w.message)]
    assert str(warning.message) == (
        'openreg-lab: Trainer(accelerator="auto") chose the CPU; openreg is used only when named: '
        'Trainer(accelerator="openreg") trains on it, accelerator="cpu" keeps the CPU without this warning'
    )
    assert Path(warning.filename).name == "lightning_tiny.py"  # the line that made the Trainer
    assert sorted(set(model.seen)) == [("cpu", "cpu", "Tiny")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = pl.Trainer(accelerator="auto", logger=False, enable_checkpointing=False)  # once a process
    assert again.strategy.root_device == torch.device("cpu")
    monkeypatch.setattr(_lightning, "_said_auto", type(_lightning._said_auto)())
    with pytest.warns(UserWarning, match=re.escape('Fabric(accelerator="openreg") trains on it')):
        assert Fabric(accelerator="auto").device == torch.device("cpu")


def test_fabric_runs_on_openreg_with_autocast():
    fabric = Fabric(accelerator="openreg", precision="bf16-mixed", devices=[1])
    assert fabric.device == torch.device("openreg", 1)
    torch.manual_seed(0)
    model, _ = fabric.setup(nn.Linear(4, 2), torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1))
    with openreg_lab.trace() as t:
        out = model(torch.ones(3, 4, device=fabric.device))
    assert out.device == torch.device("openreg", 1) and out.dtype == torch.float32
    casts = t.casts()
    # Fabric gives the module a bfloat16 input itself; autocast casts the weight and the bias.
    assert list(casts.argument) == ["weight", "bias"] and set(casts.device) == {"openreg:1"}
    assert set(casts.to_dtype) == {"bfloat16"}


def test_devices_name_openreg_devices_and_a_bad_choice_says_how_many_there_are():
    quiet = dict(logger=False, enable_checkpointing=False)
    one = pl.Trainer(accelerator="openreg", devices=[1], **quiet).strategy
    assert type(one).__name__ == "SingleDeviceStrategy" and one.root_device == torch.device("openreg", 1)
    two = pl.Trainer(accelerator="openreg", devices="0,1", **quiet).strategy
    assert type(two).__name__ == "DDPStrategy"
    assert two.parallel_devices == [torch.device("openreg", 0), torch.device("openreg", 1)]
    for bad in (3, [0, 0], "2,5", "many"):
        with pytest.raises(MisconfigurationException) as e:
            pl.Trainer(accelerator="openreg", devices=bad, **quiet)
        assert str(e.value) == (
            f"devices={bad!r} is not a set of openreg devices: openreg has 2 (openreg:0 to openreg:1); "
            "give a count from 1 to 2, -1 for all, or distinct indices such as [0, 1] "
            "(OPENREG_DEVICE_COUNT sets how many devices there are)"
        )


class _KeptOnTheCpu(nn.Module):
    """An embedding table a model keeps on the host: ``Module.to`` leaves it where it is."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(10, 4)

    def _apply(self, fn, recurse=True):
        return self


class _Offloading(tiny.Tiny):
    def __init__(self) -> None:
        super().__init__()
        self.offload = _KeptOnTheCpu()


class _MovedByAHook(tiny.Tiny):
    def on_train_start(self) -> None:
        self.net[2].to("cpu")


@pytest.mark.parametrize(
    ("model", "name"),
    [(_Offloading, "offload.table.weight"), (_MovedByAHook, "net.2.weight")],
    ids=["kept-by-the-module", "moved-by-a-hook"],
)
def test_a_model_not_all_on_openreg_names_the_parameter_before_training(model, name):
    mixed = model()
    with pytest.raises(RuntimeError) as e:
        tiny.fit(mixed, accelerator="openreg")
    assert str(e.value) == (
        f"openreg-lab: parameter {name!r} of {model.__name__} is on cpu, but the Trainer trains the model on "
        "openreg:0, one device per process: keep every parameter and buffer on openreg:0, or train on the "
        'CPU with accelerator="cpu"'
    )
    assert "\n" not in str(e.value)
    assert mixed.losses == []  # said before the first step


RESULT = re.compile(
    r"rank (\d) of 2: DDPStrategy, (\w+), seen \[\('([\w:]+)', '([\w:]+)', '(\w+)'\)\], losses \[(.*)\], "
    r"weight sum ([-\d.]+)$"
)


def test_ddp_under_torchrun_trains_over_ogloo_as_one_process_on_the_cpu(on_cpu, tmp_path):
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", "-m", "tests.support.lightning_tiny", "openreg", "2", "ddp",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env={**env(), "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = sorted(m.groups() for m in map(RESULT.search, proc.stdout.splitlines()) if m)
    assert [r[:5] for r in ranks] == [
        ("0", "ogloo", "openreg:0", "openreg:0", "DistributedDataParallel"),
        ("1", "ogloo", "openreg:1", "openreg:1", "DistributedDataParallel"),
    ]
    losses = [[float(v) for v in r[5].split(", ")] for r in ranks]
    assert losses[0] != losses[1]  # each rank its own half of the batch
    losses_cpu, weights_cpu = on_cpu
    # The mean of the halves' losses is the whole batch's; the gradients were averaged over ogloo.
    assert [(a + b) / 2 for a, b in zip(*losses, strict=True)] == pytest.approx(losses_cpu, rel=1e-5)
    weights = [float(r[6]) for r in ranks]
    assert weights[0] == pytest.approx(weights[1], rel=1e-7)
    assert weights[0] == pytest.approx(weights_cpu, rel=1e-5)
    assert running_in(tmp_path) == [], "rank processes outlived torchrun"
