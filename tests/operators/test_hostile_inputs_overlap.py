"""Hostile inputs: overlapping and non-dense tensors.

Host views of one device storage share one CPU storage (Note [Host views share one storage]) and the
fallback copies the arguments over one storage as one span (Note [The fallback keeps layouts and
aliasing]), so every path sees overlaps and layouts exactly as the CPU does.
"""

from __future__ import annotations

import pytest
import torch

import openreg_lab
from tests.support.parity import assert_same_as_cpu


def test_issue_example_overlapping_copy_raises_like_cpu():
    def run(device):
        buf = torch.arange(5.0, device=device)
        buf[1:] = buf[:-1]
        return buf

    err = assert_same_as_cpu(run)
    assert "written-to tensor refer to a single memory location" in str(err)


@pytest.mark.parametrize(
    "copy",
    [
        lambda buf: buf[1:].copy_(buf[:-1]),
        lambda buf: buf[:-1].copy_(buf[1:]),
        lambda buf: buf.copy_(buf),
        lambda buf: buf[:2].copy_(buf[3:]),
        lambda buf: buf[::2].copy_(buf[1::2].double()),
    ],
    ids=["forward", "backward", "itself", "disjoint", "other_dtype"],
)
def test_copies_within_one_storage_match_cpu(copy):
    def run(device):
        buf = torch.arange(6.0, device=device)
        copy(buf)
        return buf

    assert_same_as_cpu(run, rtol=0, atol=0)


@pytest.mark.parametrize("profile", [None, "cpu", "cuda", "minimal"])
def test_issue_example_atan2_out_overlap_does_not_depend_on_the_profile(profile):
    def run(device):
        x = torch.arange(1.0, 6.0, device=device)
        torch.atan2(x[:-1], x[1:], out=x[1:])
        return x

    if profile is None:
        assert_same_as_cpu(run)
    else:
        with openreg_lab.use_profile(profile):
            err = assert_same_as_cpu(run)
        assert "written-to tensor refer to a single memory location" in str(err)


def test_matrix_product_out_overlapping_its_input_raises_like_cpu():
    def run(device):
        b = torch.arange(17.0, device=device)
        a = b[1:].view(4, 4)
        return torch.addmm(a, a, a, out=b[:-1].view(4, 4))

    assert_same_as_cpu(run)


@pytest.mark.parametrize(
    "fn",
    [
        torch.linalg.det,
        lambda a: torch.linalg.slogdet(a)[1],
        lambda a: torch.logdet(a @ a.mT),
        torch.det,
    ],
    ids=["det", "slogdet", "logdet", "torch_det"],
)
@pytest.mark.parametrize("layout", ["strided", "transposed", "contiguous"])
def test_determinant_backward_on_non_dense_inputs_matches_cpu(fn, layout):
    torch.manual_seed(0)
    base = torch.randn(4, 8, dtype=torch.float64)
    grads = {}
    for device in ("cpu", "openreg"):
        a = base.to(device)
        a = {"strided": a[:, ::2], "transposed": a[:, :4].mT, "contiguous": a[:, :4].contiguous()}[layout]
        a.requires_grad_()
        fn(a).backward()
        grads[device] = a.grad.cpu()
    torch.testing.assert_close(grads["openreg"], grads["cpu"], rtol=1e-10, atol=1e-10)


def test_issue_example_det_gradcheck_on_a_strided_view():
    a = torch.randn(4, 8, dtype=torch.float64).to("openreg")[:, ::2].requires_grad_()
    assert torch.autograd.gradcheck(torch.linalg.det, (a,))


def test_fallback_in_place_on_an_expanded_tensor_writes_like_cpu():
    # The fallback now hands the CPU kernel the same layout: the written span goes back whole.
    def run(device):
        base = torch.tensor([-1.0, 2.0, -3.0], device=device)
        x = base.expand(4, 3)
        torch.threshold_(x, 0.0, 7.0)
        return base

    assert assert_same_as_cpu(run, rtol=0, atol=0)[0].tolist() == [7.0, 2.0, 7.0]


def test_fallback_of_a_slice_of_a_large_buffer_copies_only_its_span():
    buf = torch.zeros(1 << 20, device="openreg")
    part = buf[1000:1010].expand(3, 10)  # not dense: copied as a span
    with openreg_lab.trace() as t:
        torch.threshold_(part, 0.5, 1.0)
    copies = t.copies()
    assert copies["bytes"].max() <= 64
    assert buf[1000:1010].cpu().tolist() == [1.0] * 10
    assert buf.sum().item() == 10.0
