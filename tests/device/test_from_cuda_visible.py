"""``CUDA_VISIBLE_DEVICES`` under ``from_cuda()`` selects and renumbers openreg devices as CUDA would
(Note [CUDA_VISIBLE_DEVICES under from_cuda] in ``openreg_lab/device/_cuda_visible.py``)."""

from __future__ import annotations

import copy
import threading
import warnings

import pytest
import torch
import torch.distributed as dist
from torch import nn

import openreg_lab
from openreg_lab.device import _cuda_visible, _distributed

UUIDS = [f"00000000-0000-0000-0000-00000000000{i + 1}" for i in range(3)]  # openreg's, by index


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, None),  # unset: every device, cuda:N is openreg:N
        ("1", [1]),
        ("2,0", [2, 0]),
        (" 1 , +0", [1, 0]),  # spaces and a sign, as strtoul reads them
        ("1gpu,0", [1, 0]),  # an entry's leading integer
        ("0,2,-1,1", [0, 2]),  # a negative entry ends the list (NVIDIA's example)
        ("1,5,0", [1]),  # so does one that names no device
        ("1,x,0", [1]),  # and one that is not a number
        ("", []),
        ("-1", []),
        ("1,1", []),  # an index listed twice shows nothing
        ("GPU-00000000-0000-0000-0000-000000000003,GPU-00000000-0000-0000-0000-000000000001", [2, 0]),
        ("GPU-00000000-0000-0000-0000-000000000002,1", [1]),  # a list of uuids ends at an index
        ("GPU-00000000,0", []),  # a prefix shared by every device names none
        ("MIG-1234", []),
    ],
)
def test_the_variable_is_read_as_cuda_reads_it(value, shown):
    assert _cuda_visible.parse(value, 3, UUIDS) == shown


def test_one_visible_device_is_cuda_0_everywhere_a_device_enters(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    one = torch.device("openreg", 1)
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(3.0)}, path)
    seen = {}

    def worker() -> None:  # a new thread starts on cuda:0 too
        seen["device"], seen["current"] = torch.ones(1, device="cuda").device, torch.cuda.current_device()

    with openreg_lab.from_cuda():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        made = [
            torch.ones(1, device="cuda"),
            torch.zeros(1, device="cuda:0"),
            torch.empty(1, device=0),
            torch.arange(2).cuda(),
            torch.arange(2).cuda(0),
            torch.arange(2).to("cuda"),
            torch.arange(2).to(0),
            nn.Linear(2, 2).cuda().weight,
            nn.Linear(2, 2).to("cuda:0").weight,
            torch.load(path, map_location="cuda:0")["w"],
            torch.randn(2, generator=torch.Generator(device="cuda").manual_seed(1), device="cuda"),
        ]
        assert torch.cuda.current_device() == 0 and torch.openreg.current_device() == 1
        torch.cuda.set_device(0)
        with torch.cuda.device(0):
            made.append(torch.ones(1, device="cuda"))
        assert torch.cuda.Stream(device="cuda:0").device == one and torch.cuda.current_stream().device == one
        assert torch.cuda.get_device_properties(0) == torch.openreg.get_device_properties(1)
        before = [torch.openreg.memory_allocated(i) for i in (0, 1)]
        block = torch.empty(1024, device="cuda")  # 4 KiB on openreg:1
        assert torch.cuda.memory_allocated(0) == torch.cuda.memory_allocated() == before[1] + 4096
        assert torch.openreg.memory_allocated(0) == before[0]
        del block
        assert torch.cuda.mem_get_info(0) == torch.openreg.mem_get_info(1)
        assert torch.cuda.default_generators == (torch.openreg.default_generators[1],)
        t = threading.Thread(target=worker)
        t.start()
        t.join(10)
        for bad in (lambda: torch.ones(1, device="cuda:1"), lambda: torch.cuda.set_device(1)):
            with pytest.raises(
                torch.AcceleratorError,
                match=r"invalid device ordinal \(cuda:1 is out of range: CUDA_VISIBLE_DEVICES='1' shows 1 "
                r"openreg devices to CUDA: cuda:0 = openreg:1\)",
            ):
                bad()
    assert [t.device for t in made] == [one] * len(made)
    assert seen == {"device": one, "current": 0}
    assert torch.ones(1, device="openreg:0").device.index == 0  # openreg's own indices are untouched


def test_the_order_of_the_list_is_cudas_numbering(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    torch.manual_seed(0)
    cpu = nn.Linear(4, 2)
    x = torch.randn(4, 4)
    with openreg_lab.from_cuda():
        assert torch.cuda.device_count() == 2 and torch.cuda.current_device() == 0
        assert [torch.ones(1, device=f"cuda:{i}").device.index for i in (0, 1)] == [1, 0]
        torch.cuda.set_device(1)
        assert torch.openreg.current_device() == 0 and torch.cuda.current_device() == 1
        torch.cuda.set_device(0)
        dp = nn.DataParallel(copy.deepcopy(cpu).cuda())  # every device CUDA sees, cuda:0 first
        assert dp.device_ids == [1, 0] and dp.src_device_obj == torch.device("openreg", 1)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "PyTorch is not compiled with NCCL support")
            y = dp(x.cuda())
        assert y.device == torch.device("openreg", 1)
        torch.testing.assert_close(y.cpu(), cpu(x))


def test_no_visible_device_is_no_cuda(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with openreg_lab.from_cuda():
        assert not torch.cuda.is_available() and torch.cuda.device_count() == 0
        with pytest.raises(RuntimeError, match=r"^No CUDA GPUs are available: CUDA_VISIBLE_DEVICES='' shows"):
            torch.ones(1, device="cuda")
        with pytest.raises(RuntimeError, match="No CUDA GPUs are available"):
            torch.cuda.current_device()
        net = nn.Linear(2, 2)
        dp = nn.DataParallel(net)  # as on a machine without GPUs: the module runs as it is
        assert dp.device_ids == [] and dp(torch.ones(1, 2)).device.type == "cpu"


def test_the_value_is_read_at_the_first_use_in_the_block_and_again_in_the_next(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with openreg_lab.from_cuda():
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # a script's os.environ line at its top
        assert torch.cuda.device_count() == 1
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # read once, as CUDA does
        assert torch.cuda.device_count() == 1
    with openreg_lab.from_cuda():
        assert torch.cuda.device_count() == 2


def test_ddp_device_ids_are_cuda_ordinals(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    # The group's job (rank, run id) outlives it, by design (Note [A run id for every trace]): keep
    # it to this test, so later traces of the test process record no rank.
    monkeypatch.setattr(_distributed, "JOB", {})
    with openreg_lab.from_cuda():
        dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        try:
            model = nn.Linear(4, 2).cuda()
            ddp = nn.parallel.DistributedDataParallel(model, device_ids=[0], output_device=0)
            assert ddp.device_ids == [1] and ddp.output_device == 1
            ddp(torch.randn(3, 4)).sum().backward()  # the inputs go where the parameters are
            assert model.weight.grad.device == torch.device("openreg", 1)
        finally:
            dist.destroy_process_group()
