"""torch.save / torch.load of openreg tensors and module state."""

import io

import pytest
import torch


def _round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_tensor_round_trip_keeps_device_and_values(device):
    x = torch.randn(4, 5, device=device)
    y = _round_trip(x)
    assert y.device == torch.device(device)
    assert torch.equal(y.cpu(), x.cpu())


def test_views_share_storage_after_load():
    x = torch.randn(4, 5, device="openreg")
    loaded = _round_trip({"x": x, "col": x[:, 2]})
    assert loaded["col"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    assert torch.equal(loaded["col"].cpu(), x[:, 2].cpu())


@pytest.mark.parametrize(
    ("map_location", "expected"),
    [("cpu", "cpu"), ("openreg:1", "openreg:1"), (torch.device("openreg", 0), "openreg:0")],
)
def test_map_location(map_location, expected):
    x = torch.randn(6, device="openreg:1")
    y = _round_trip(x, map_location=map_location)
    assert y.device == torch.device(expected)
    assert torch.equal(y.cpu(), x.cpu())


def test_cpu_checkpoint_mapped_to_openreg():
    x = torch.randn(3, 3)
    y = _round_trip(x, map_location="openreg:1")
    assert y.device == torch.device("openreg", 1)
    assert torch.equal(y.cpu(), x)


def test_state_dict_round_trip():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).openreg()
    sd = _round_trip(model.state_dict())
    assert all(v.device == torch.device("openreg", 0) for v in sd.values())
    for k, v in model.state_dict().items():
        assert torch.equal(sd[k].cpu(), v.cpu())
    cpu_sd = _round_trip(model.state_dict(), map_location="cpu")
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    fresh.load_state_dict(cpu_sd)
    x = torch.randn(2, 4)
    assert torch.allclose(fresh(x), model(x.openreg()).cpu())


def test_load_to_missing_device_is_clear():
    x = torch.randn(2, device="openreg:1")
    with pytest.raises(RuntimeError, match="openreg"):
        _round_trip(x, map_location="openreg:5")
