"""``openreg_lab.from_cuda()``: code written for CUDA runs on openreg inside the block."""

from __future__ import annotations

import sys
import threading

import pytest
import torch
from torch import nn

import openreg_lab

REAL_CUDA = torch.cuda


def test_devices_tensors_and_modules_go_to_openreg():
    with openreg_lab.from_cuda():
        a = torch.ones(2, device="cuda")
        b = torch.zeros(2, device=torch.device("cuda", 1))
        c = torch.arange(3).to("cuda:1")
        d = torch.arange(3).cuda()
        e = torch.arange(3).cuda(1)
        m = nn.Linear(2, 2).cuda()
        n = nn.Linear(2, 2).to("cuda")
        assert a.is_cuda and not torch.ones(1).is_cuda
    assert (a.device, b.device, c.device, d.device, e.device) == (
        torch.device("openreg", 0),
        torch.device("openreg", 1),
        torch.device("openreg", 1),
        torch.device("openreg", 0),
        torch.device("openreg", 1),
    )
    assert m.weight.device.type == n.bias.device.type == "openreg"
    assert not a.is_cuda  # outside the block, is_cuda is torch's again


def test_torch_cuda_is_torch_openreg_under_cuda_names():
    with openreg_lab.from_cuda():
        import torch.cuda as cuda  # what a script's `import torch.cuda` gets

        assert cuda is torch.cuda is sys.modules["torch.cuda"]
        assert torch.cuda.is_available() and torch.cuda.device_count() == torch.openreg.device_count()
        torch.cuda.set_device("cuda:1")
        assert torch.cuda.current_device() == 1
        torch.cuda.set_device(0)
        torch.cuda.manual_seed(3)
        torch.cuda.reset_peak_memory_stats()
        x = torch.ones(1024, device="cuda")
        assert torch.cuda.max_memory_allocated() >= 4096 and torch.cuda.memory_allocated() >= 4096
        assert "allocated_bytes.all.current" in torch.cuda.memory_stats()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            assert torch.cuda.current_stream() == s
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        torch.cuda.synchronize()
        assert ev.query() and isinstance(s, torch.openreg.Stream)
        assert torch.cuda.is_bf16_supported() and torch.cuda.get_device_name(0).startswith("openreg")
        del x
    assert torch.cuda is REAL_CUDA and sys.modules["torch.cuda"] is REAL_CUDA


def test_autocast_and_grad_scaler_for_cuda_use_openreg():
    model = nn.Linear(8, 4).to("openreg")
    with openreg_lab.from_cuda():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled("cuda")
            y = model(torch.randn(2, 8, device="cuda"))
        with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16):
            z = model(torch.randn(2, 8, device="cuda"))
        scaler = torch.amp.GradScaler()  # the default device is "cuda"
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler.scale(y.float().sum()).backward()
        scaler.step(opt)
        scaler.update()
    assert y.dtype == z.dtype == torch.bfloat16 and y.device.type == "openreg"
    assert scaler._device == "openreg" and scaler.get_scale() == 65536.0
    assert not torch.is_autocast_enabled("openreg")


def test_unmapped_calls_raise_naming_the_call():
    with openreg_lab.from_cuda():
        with pytest.raises(openreg_lab.CudaNotMappedError, match=r"torch\.cuda\.get_device_capability\(\)"):
            torch.cuda.get_device_capability(0)
        with pytest.raises(openreg_lab.CudaNotMappedError, match=r"torch\.cuda\.graphs\.CUDAGraph"):
            torch.cuda.graphs.CUDAGraph  # noqa: B018
        with pytest.raises(AttributeError):
            torch.cuda.no_such_function  # noqa: B018
    assert torch.cuda is REAL_CUDA


def test_blocks_nest_and_the_device_mapping_is_per_thread():
    seen = {}

    def other_thread() -> None:
        try:
            torch.ones(1, device="cuda")
        except RuntimeError as e:  # torch's own error: this thread did not enter the block
            seen["error"] = str(e)

    with openreg_lab.from_cuda():
        with openreg_lab.from_cuda():
            assert torch.ones(1, device="cuda").device.type == "openreg"
        assert torch.cuda is not REAL_CUDA  # the outer block still maps
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert torch.cuda is REAL_CUDA
    assert "error" in seen


def test_torch_load_with_a_cuda_map_location_lands_on_openreg(tmp_path):
    import openreg_lab

    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(4.0)}, path)
    with openreg_lab.from_cuda():
        for where in ("cuda", "cuda:1", torch.device("cuda", 0), {"cpu": "cuda"}):
            w = torch.load(path, map_location=where)["w"]
            assert w.device.type == "openreg", where
            assert torch.equal(w.cpu(), torch.arange(4.0))
        assert torch.load(path, map_location="cuda:1")["w"].device == torch.device("openreg", 1)
        assert torch.load(path)["w"].device.type == "cpu"  # saved on the CPU: stays there
        assert torch.load(path, map_location=lambda s, loc: s)["w"].device.type == "cpu"
    assert torch.load(path, map_location="cpu")["w"].device.type == "cpu"


def test_cuda_generators_are_openreg_generators():
    import openreg_lab

    with openreg_lab.from_cuda():
        g = torch.Generator(device="cuda:1").manual_seed(3)
        assert g.device == torch.device("openreg", 1)
        assert isinstance(g, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
        a = torch.randn(4, generator=g, device="cuda:1")
        b = torch.randn(4, generator=torch.Generator(device="cuda:1").manual_seed(3), device="cuda:1")
        assert a.device == torch.device("openreg", 1) and torch.equal(a.cpu(), b.cpu())
        assert torch.Generator().device.type == "cpu"
    assert torch.Generator is torch._C.Generator
