"""Native openreg kernels: embedding's dense backward (csrc/aten/native/Embedding.cpp), compared with the CPU.

Every native call runs under the "error" fallback policy, so a test fails if the op (or anything it
calls) falls back to the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.support.native_nn import (
    FLOATS,
    aten,
    check,
    check_registration,
    dev,
    native,
    randn,
    same_error,
    tol,
)


def test_registered_and_listed():
    check_registration("embedding")


# --- embedding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("padding_idx", [None, 3, -2])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding_forward_backward(index_dtype, dtype, padding_idx, scale):
    w = randn(10, 6, dtype=dtype).requires_grad_()
    wd = dev(w.detach()).requires_grad_()
    idx = torch.tensor([[1, 3, 3, 9], [0, 3, 8, 1], [2, 2, 2, 3]], dtype=index_dtype)
    g = randn(3, 4, 6, dtype=dtype, seed=1)
    with native():
        yd = F.embedding(dev(idx), wd, padding_idx=padding_idx, scale_grad_by_freq=scale)
        yd.backward(dev(g))
    y = F.embedding(idx, w, padding_idx=padding_idx, scale_grad_by_freq=scale)
    y.backward(g)
    check(yd.detach(), y.detach())
    check(wd.grad, w.grad, **tol(dtype))


def test_embedding_dense_backward_direct():
    g = randn(2, 3, 4)
    idx = torch.tensor([[0, 1, 2], [3, 4, 5]])
    expected = aten.embedding_dense_backward(g, idx, 6, 2, True)
    with native():
        check(aten.embedding_dense_backward(dev(g), dev(idx), 6, 2, True), expected)
        # Indices may stay on the CPU, as in the fallback.
        check(aten.embedding_dense_backward(dev(g), idx, 6, 2, True), expected)
        check(aten.embedding_dense_backward(dev(g), dev(idx.int()), 6, 2, True), expected)
        # Empty: zeros.
        empty = aten.embedding_dense_backward(
            dev(torch.empty(0, 4)), dev(torch.empty(0, dtype=torch.long)), 5, -1, False
        )
    check(empty, torch.zeros(5, 4))


def test_embedding_errors():
    w = randn(4, 3)
    same_error(
        F.embedding,
        (torch.tensor([4]), w),
        (dev(torch.tensor([4])), dev(w)),
        match="index out of range in self",
    )
    same_error(
        F.embedding,
        (torch.tensor([-1]), w),
        (dev(torch.tensor([-1])), dev(w)),
        match="index out of range in self",
    )
    g = randn(2, 3)
    byte_idx = torch.tensor([0, 1], dtype=torch.uint8)
    same_error(
        aten.embedding_dense_backward,
        (g, byte_idx, 4, -1, False),
        (dev(g), dev(byte_idx), 4, -1, False),
        match="Long, Int",
    )
    same_error(
        aten.embedding_dense_backward,
        (randn(3, 3), torch.tensor([0, 1]), 4, -1, False),
        (dev(randn(3, 3)), dev(torch.tensor([0, 1])), 4, -1, False),
        match="invalid for input of size",
    )
    # CPU does not check the range here (it would write out of bounds); openreg raises.
    with native(), pytest.raises(IndexError, match="out of range"):
        aten.embedding_dense_backward(dev(g), dev(torch.tensor([0, 4])), 4, -1, False)
