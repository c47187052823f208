"""Simulated devices, the current device, the device guard and cross-device copies."""

import threading

import pytest
import torch

from tests.support.processes import run_python


def test_default_count_and_availability():
    assert torch.openreg.device_count() == 2
    assert torch.openreg.is_available()
    assert torch.openreg.is_initialized()


def test_set_and_current_device():
    assert torch.openreg.current_device() == 0
    torch.openreg.set_device(1)
    assert torch.openreg.current_device() == 1
    assert torch.empty(1, device="openreg").device == torch.device("openreg", 1)
    torch.openreg.set_device("openreg:0")
    assert torch.openreg.current_device() == 0
    torch.openreg.set_device(torch.device("openreg", 1))
    assert torch.accelerator.current_device_index() == 1


def test_device_context_manager_restores():
    with torch.openreg.device(1):
        assert torch.openreg.current_device() == 1
        with torch.openreg.device(0):
            assert torch.openreg.current_device() == 0
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0
    with torch.openreg.device(-1):
        assert torch.openreg.current_device() == 0


def test_device_of_tensor():
    x = torch.ones(1, device="openreg:1")
    with torch.openreg.device_of(x):
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0


def test_current_device_is_per_thread():
    torch.openreg.set_device(1)
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.openreg.current_device()))
    t.start()
    t.join()
    assert seen == [0]


@pytest.mark.parametrize("bad", [2, 7, -3, "openreg:5", torch.device("openreg", 9)])
def test_out_of_range_device_names_valid_range(bad):
    with pytest.raises(
        torch.AcceleratorError, match=r"invalid device ordinal .*out of range: valid indices are 0 to 1"
    ):
        torch.openreg.set_device(bad)


def test_out_of_range_tensor_creation():
    with pytest.raises(RuntimeError, match=r"invalid device ordinal .*valid indices are 0 to 1"):
        torch.empty(3, device="openreg:2")


def test_wrong_device_type_is_rejected():
    with pytest.raises(ValueError, match="expected an openreg device, got cpu"):
        torch.openreg.set_device("cpu")


def test_devices_have_separate_memory():
    before = [torch.openreg.memory_allocated(i) for i in (0, 1)]
    a = torch.arange(4.0).to("openreg:0")
    b = a.to("openreg:1")
    assert b.device == torch.device("openreg", 1)
    assert a.data_ptr() != b.data_ptr()
    b.fill_(7.0)
    assert a.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert b.cpu().tolist() == [7.0] * 4
    # 16 bytes each, rounded up to one 512-byte block per device.
    assert torch.openreg.memory_allocated(0) - before[0] == 512
    assert torch.openreg.memory_allocated(1) - before[1] == 512


def test_copy_between_devices_preserves_values_and_layout():
    src = torch.randn(6, 5)
    a = src.to("openreg:0").t()  # non-contiguous
    b = torch.empty(5, 6, device="openreg:1")
    b.copy_(a)
    assert torch.equal(b.cpu(), src.t())
    c = a.to("openreg:1", dtype=torch.float64)
    assert c.dtype == torch.float64 and torch.equal(c.cpu(), src.t().double())


def test_synchronize_checks_index():
    torch.openreg.synchronize()
    torch.openreg.synchronize(1)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.openreg.synchronize(4)


def test_device_count_from_environment():
    result = run_python(
        "import torch, openreg_lab; print(torch.openreg.device_count()); "
        "print(torch.ones(1, device='openreg:3').device)",
        OPENREG_DEVICE_COUNT="4",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["4", "openreg:3"]


@pytest.mark.parametrize("value", ["0", "17", "two", "1.5"])
def test_bad_device_count_fails_import_clearly(value):
    result = run_python("import openreg_lab", OPENREG_DEVICE_COUNT=value)
    assert result.returncode != 0
    assert f"OPENREG_DEVICE_COUNT='{value}' is not a device count" in result.stderr
    assert "from 1 to 16" in result.stderr
