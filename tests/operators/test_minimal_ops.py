"""The operators every backend must provide, registered natively for openreg."""

import pytest
import torch

NATIVE = [
    "empty.memory_format",
    "empty_strided",
    "as_strided",
    "view",
    "_reshape_alias",
    "resize_",
    "set_.source_Storage",
    "set_.source_Storage_storage_offset",
    "set_.source_Tensor",
    "set_",
    "_local_scalar_dense",
    "fill_.Scalar",
    "fill_.Tensor",
    "zero_",
    "_copy_from",
    "_copy_from_and_resize",
]


@pytest.mark.parametrize("op", NATIVE)
def test_registered_natively_for_privateuse1(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "PrivateUse1")


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.uint8,
        torch.bool,
        torch.complex64,
    ],
)
def test_copy_round_trip_every_dtype(dtype):
    x = (torch.randn(7, 3) * 10).to(dtype)
    y = x.to("openreg")
    assert y.dtype == dtype and y.device.type == "openreg"
    assert torch.equal(y.cpu(), x)


def test_factories_and_strides():
    e = torch.empty(2, 3, 4, device="openreg", dtype=torch.float64)
    assert e.shape == (2, 3, 4) and e.stride() == (12, 4, 1) and e.dtype == torch.float64
    s = torch.empty_strided((3, 4), (1, 3), device="openreg")
    assert s.stride() == (1, 3)
    cl = torch.empty(2, 3, 4, 5, device="openreg", memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    z = torch.zeros(3, device="openreg")
    o = torch.ones(3, device="openreg", dtype=torch.int32)
    f = torch.full((2,), 2.5, device="openreg")
    assert z.cpu().tolist() == [0.0] * 3 and o.cpu().tolist() == [1] * 3 and f.cpu().tolist() == [2.5, 2.5]


def test_pinned_factory_on_device_is_rejected():
    with pytest.raises(RuntimeError, match="only CPU tensors can be pinned"):
        torch.empty(3, device="openreg", pin_memory=True)


def test_copy_directions_and_non_contiguous():
    src = torch.randn(5, 6)
    d = src.to("openreg")
    nc = d[:, ::2]  # non-contiguous view on device
    assert torch.equal(nc.cpu(), src[:, ::2])
    host = torch.empty(5, 3)
    host.copy_(nc)  # D2H into an existing tensor
    assert torch.equal(host, src[:, ::2])
    d2 = torch.zeros(6, 5, device="openreg")
    d2.copy_(d.t())  # D2D with a transpose
    assert torch.equal(d2.cpu(), src.t())
    d3 = torch.zeros(5, 6, device="openreg", dtype=torch.float64)
    d3.copy_(src)  # H2D with a dtype change
    assert torch.equal(d3.cpu(), src.double())
    d4 = torch.zeros(3, 6, device="openreg")
    d4.copy_(torch.arange(6.0))  # broadcast
    assert torch.equal(d4.cpu(), torch.arange(6.0).expand(3, 6))


def test_views_share_memory():
    x = torch.arange(12.0).to("openreg")
    v = x.view(3, 4)
    t = v.t()
    a = x.as_strided((2, 2), (4, 1), 1)
    u = x.unfold(0, 4, 4)
    r = x.reshape(2, 6)
    t[1, 0] = 100.0  # writes x[1]
    assert x.cpu()[1].item() == 100.0
    assert a.cpu().tolist() == [[100.0, 2.0], [5.0, 6.0]]
    assert u.shape == (3, 4) and u.cpu()[0, 1].item() == 100.0
    assert r.data_ptr() == x.data_ptr()
    assert v._base is x


def test_complex_views():
    c = torch.randn(4, dtype=torch.complex64)
    d = c.to("openreg")
    real = torch.view_as_real(d)
    assert real.shape == (4, 2) and torch.equal(real.cpu(), torch.view_as_real(c))
    assert torch.equal(torch.view_as_complex(real).cpu(), c)


def test_resize_grows_storage_and_keeps_prefix():
    x = torch.arange(4.0).to("openreg")
    x.resize_(10)
    assert x.shape == (10,)
    assert x.untyped_storage().nbytes() >= 40
    assert x.cpu()[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
    x.resize_(2, 2)
    assert x.cpu().tolist() == [[0.0, 1.0], [2.0, 3.0]]
    y = torch.empty(2, 3, 4, 5, device="openreg")
    y.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert y.is_contiguous(memory_format=torch.channels_last)


def test_set_variants():
    x = torch.arange(6.0).to("openreg")
    y = torch.empty(0, device="openreg")
    y.set_(x.untyped_storage(), 2, (2, 2), (2, 1))
    assert y.cpu().tolist() == [[2.0, 3.0], [4.0, 5.0]]
    z = torch.empty(0, device="openreg").set_(x)
    assert z.data_ptr() == x.data_ptr() and z.shape == x.shape
    w = torch.empty(0, device="openreg").set_(x.untyped_storage())
    assert w.shape == (6,)
    x.set_()
    assert x.numel() == 0 and x.device.type == "openreg"


def test_set_rejects_other_device_storage():
    x = torch.arange(3.0).to("openreg:1")
    with pytest.raises(RuntimeError, match="expected a storage on openreg:0"):
        torch.empty(0, device="openreg:0").set_(x.untyped_storage(), 0, (3,), (1,))


def test_item_fill_zero():
    x = torch.tensor([3.5], device="openreg")
    assert x.item() == 3.5
    x.fill_(2)
    assert x.item() == 2.0
    x.fill_(torch.tensor(4.0, device="openreg"))
    assert x.item() == 4.0
    x.zero_()
    assert x.item() == 0.0
    v = torch.ones(4, 4, device="openreg")[:, 1]
    v.fill_(9)
    assert v.cpu().tolist() == [9.0] * 4
    with pytest.raises(RuntimeError, match="0-dimension value tensor"):
        x.fill_(torch.ones(2, device="openreg"))


def test_empty_tensors():
    e = torch.empty(0, 3, device="openreg")
    assert e.cpu().shape == (0, 3)
    assert torch.zeros(0, device="openreg").sum().item() == 0.0


def test_copies_resolve_conjugate_and_negative_views():
    # Note [Copies resolve conjugate and negative bits]: this used to recurse until the stack overflowed.
    x = torch.randn(5, dtype=torch.complex64)
    d = x.openreg()
    c = d.conj()
    assert c.is_conj()
    assert torch.equal(c.resolve_conj().cpu(), x.conj().resolve_conj())
    assert torch.equal(c.cpu(), x.conj())
    assert c[2].item() == x.conj()[2].item()
    n = c.neg()
    assert torch.equal(n.cpu(), x.conj().neg())
    back = torch.empty(5, dtype=torch.complex64, device="openreg:1")
    back.copy_(c)
    assert torch.equal(back.cpu(), x.conj().resolve_conj())
