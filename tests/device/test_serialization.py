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


# --- BackendMeta: the format tag (Note [Backend metadata] in csrc/runtime/BackendMeta.h) ----------


def test_format_tag_survives_save_and_load():
    x = torch.randn(2, 8, 3, 3, device="openreg:1")
    torch.openreg._set_backend_format(x, "nc4hw4")
    loaded = _round_trip({"x": x, "plain": torch.ones(2, device="openreg")})
    assert torch.openreg._backend_format(loaded["x"]) == "nc4hw4"
    assert loaded["x"].device == torch.device("openreg", 1)
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    assert torch.openreg._backend_format(loaded["plain"]) == "plain"


def test_format_tag_is_the_only_metadata_saved():
    x = torch.randn(4, device="openreg")
    assert torch._C._get_tensor_metadata(x) == {}  # untagged checkpoints are unchanged
    torch.openreg._set_backend_format(x, "tiled16")
    assert torch._C._get_tensor_metadata(x) == {"openreg.format.tiled16": True}
    torch.openreg._set_backend_format(x, "plain")
    assert torch._C._get_tensor_metadata(x) == {}


def test_format_tag_stays_with_the_tensor_and_its_shallow_copies_only():
    x = torch.randn(4, 4, device="openreg")
    torch.openreg._set_backend_format(x, "tiled16")
    assert torch.openreg._backend_format(x.detach()) == "tiled16"
    assert torch.openreg._backend_format(x[0]) == "plain"  # a view is a new TensorImpl
    assert torch.openreg._backend_format(x + 1) == "plain"
    detached = x.detach()
    torch.openreg._set_backend_format(detached, "nc4hw4")  # its own record, not x's
    assert torch.openreg._backend_format(x) == "tiled16"


def test_format_tag_is_dropped_when_loading_to_cpu():
    x = torch.randn(3, device="openreg")
    torch.openreg._set_backend_format(x, "nc4hw4")
    y = _round_trip(x, map_location="cpu")
    assert y.device == torch.device("cpu")
    assert torch.equal(y, x.cpu())


def test_unknown_format_in_a_checkpoint_is_a_clear_error():
    x = torch.randn(3, device="openreg")
    with pytest.raises(RuntimeError, match=r"format 'bogus', which this openreg_lab does not know"):
        torch._C._set_tensor_metadata(x, {"openreg.format.bogus": True})  # what torch.load calls


def test_bad_format_arguments_are_clear_errors():
    x = torch.randn(3, device="openreg")
    assert torch.openreg._backend_formats() == ["plain", "nc4hw4", "tiled16"]
    with pytest.raises(
        ValueError, match="unknown openreg format 'nchw': known formats are plain, nc4hw4, tiled16"
    ):
        torch.openreg._set_backend_format(x, "nchw")
    with pytest.raises(RuntimeError, match="expected an openreg tensor, got cpu"):
        torch.openreg._set_backend_format(torch.ones(2), "nc4hw4")
