"""Native openreg kernels: cat and index_select (csrc/aten/native/Indexing.cpp), compared with the CPU.

Every native call runs under the "error" fallback policy, so a test fails if the op (or anything it
calls) falls back to the CPU.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.native_nn import (
    DEV,
    check,
    check_registration,
    dev,
    native,
    randn,
    same_error,
)


def test_registered_and_listed():
    check_registration("indexing")


# --- cat --------------------------------------------------------------------------------------------

ALL_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def make(shape, dtype, seed=0):
    x = randn(*shape, seed=seed) * 50
    if dtype.is_complex:
        return torch.complex(x, x.flip(-1) if x.dim() else x).to(dtype)
    if dtype == torch.bool:
        return x > 0
    if dtype == torch.uint8:
        return x.abs().to(dtype)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_cat(dtype, dim):
    shapes = {0: [(1, 3, 4), (2, 3, 4)], 1: [(2, 1, 4), (2, 5, 4)], 2: [(2, 3, 1), (2, 3, 2)]}
    parts = [make(s, dtype, seed=i) for i, s in enumerate(shapes[dim % 3])]
    parts.append(make(shapes[dim % 3][0], dtype, seed=9))
    expected = torch.cat(parts, dim)
    with native():
        out = torch.cat([dev(p) for p in parts], dim)
        o = torch.empty(0, dtype=dtype, device=DEV)
        assert torch.cat([dev(p) for p in parts], dim, out=o) is o
    check(out, expected)
    check(o, expected)


def test_cat_type_promotion():
    parts = [
        make((2, 3), torch.int64),
        make((1, 3), torch.float16),
        make((2, 3), torch.bool),
        make((1, 3), torch.int8),
    ]
    expected = torch.cat(parts)
    with native():
        out = torch.cat([dev(p) for p in parts])
    assert out.dtype == torch.float16
    check(out, expected)
    ints = [make((2,), torch.bool), make((3,), torch.int8), make((1,), torch.uint8)]
    with native():
        check(torch.cat([dev(p) for p in ints]), torch.cat(ints))
        # out= may be any dtype the inputs can be cast to
        o = torch.empty(0, dtype=torch.complex128, device=DEV)
        torch.cat([dev(p) for p in parts], out=o)
    check(o, torch.cat(parts).to(torch.complex128))
    same_error(
        lambda ps, o: torch.cat(ps, out=o),
        (parts, torch.empty(0, dtype=torch.int64)),
        ([dev(p) for p in parts], torch.empty(0, dtype=torch.int64, device=DEV)),
        match="can't be cast to the desired output type Long",
    )


def test_cat_legacy_empty_and_edge_cases():
    a, b = randn(2, 3), randn(1, 3, seed=1)
    empty = torch.empty(0)
    cases = [
        ([a, empty, b], 0),
        ([a, empty, randn(2, 1)], -1),  # wrapped with the first non-skipped tensor's dims
        ([empty, a], 1),
        ([empty, empty.double()], 0),  # all skipped: shape [0], promoted dtype
        ([empty, empty], 5),  # all skipped: dim is not checked
        ([torch.empty(0, 3), a], 0),
        ([torch.empty(2, 0), a], 1),
        ([a], 0),
    ]
    for parts, dim in cases:
        expected = torch.cat(parts, dim)
        with native():
            out = torch.cat([dev(p) for p in parts], dim)
        check(out, expected)


def test_cat_layouts():
    x = randn(2, 3, 4, 5)
    cl = x.to(memory_format=torch.channels_last)
    cl2 = randn(2, 2, 4, 5, seed=1).to(memory_format=torch.channels_last)
    for parts, dim in [([cl, cl2], 1), ([cl, cl], 0), ([cl, cl], 3), ([cl, x], 1), ([x, cl], 2)]:
        expected = torch.cat(parts, dim)
        with native():
            out = torch.cat([dev(p) for p in parts], dim)
        check(out, expected)  # channels-last in, channels-last out, as on CPU
    cl3d = randn(2, 3, 2, 4, 5).to(memory_format=torch.channels_last_3d)
    with native():
        check(torch.cat([dev(cl3d), dev(cl3d)], 2), torch.cat([cl3d, cl3d], 2))
    # Non-contiguous inputs, and a conjugated one.
    t = randn(4, 6)[:, ::2]
    c = make((3, 3), torch.complex64).conj()
    with native():
        check(torch.cat([dev(t), dev(t.t().t())], 0), torch.cat([t, t], 0))
        check(torch.cat([dev(c), dev(c)], 1), torch.cat([c, c], 1))
    # An out= tensor of the right shape keeps its strides.
    o = torch.empty(3, 4, device=DEV).t()
    parts = [randn(2, 3), randn(2, 3, seed=1)]
    with native():
        torch.cat([dev(p) for p in parts], out=o)
    assert o.stride() == (1, 4)
    check(o, torch.cat(parts), strides=False)


def test_cat_errors():
    a = randn(2, 3)
    for parts, dim, match in [
        ([a, randn(2, 4)], 0, "Sizes of tensors must match except in dimension 0"),
        ([a, randn(2, 3, 1)], 0, "same number of dimensions"),
        ([a, torch.tensor(1.0)], 0, r"zero-dimensional tensor \(at position 1\)"),
        ([a], 2, "Dimension out of range"),
    ]:
        same_error(torch.cat, (parts, dim), ([dev(p) for p in parts], dim), match=match)
    with pytest.raises(ValueError, match="non-empty list"):
        torch.cat([], 0)
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([dev(a), a])
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([dev(a), a.to("openreg:1")])
    o = dev(randn(4, 3))
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.cat([o[:2], o[2:]], out=o)


def test_cat_autograd():
    a = randn(2, 3).requires_grad_()
    b = randn(4, 3, seed=1).requires_grad_()
    ad, bd = dev(a.detach()).requires_grad_(), dev(b.detach()).requires_grad_()
    g = randn(6, 3, seed=2)
    torch.cat([a, b]).backward(g)
    torch.cat([ad, bd]).backward(dev(g))
    check(ad.grad, a.grad)
    check(bd.grad, b.grad)


# --- index_select --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_index_select(dtype, dim, index_dtype):
    x = make((4, 5, 3), dtype)
    idx = torch.tensor([2, 0, 2, 1], dtype=index_dtype)
    expected = torch.index_select(x, dim, idx)
    with native():
        out = torch.index_select(dev(x), dim, dev(idx))
        o = torch.empty(0, dtype=dtype, device=DEV)
        assert torch.index_select(dev(x), dim, dev(idx), out=o) is o
    check(out, expected)
    check(o, expected)


def test_index_select_edge_cases():
    x = randn(4, 5)
    cases = [
        (x, 0, torch.tensor(3)),  # 0-dim index
        (x, 1, torch.tensor([], dtype=torch.long)),  # empty index
        (torch.tensor(2.5), 0, torch.tensor([0])),  # 0-dim self
        (torch.tensor(2.5), -1, torch.tensor(0)),
        (randn(7), 0, torch.tensor([6, 0, 6])),
        (torch.empty(2, 0), 0, torch.tensor([1, 0])),  # empty self
        (x[:, ::2], 1, torch.tensor([2, 0])),  # non-contiguous self
        (x.t(), 0, torch.tensor([4, 1])),
        (randn(2, 3, 4, 5).to(memory_format=torch.channels_last), 1, torch.tensor([2, 0])),
        (make((3, 4), torch.complex64).conj(), 1, torch.tensor([3, 1])),
    ]
    for self_, dim, idx in cases:
        expected = torch.index_select(self_, dim, idx)
        with native():
            out = torch.index_select(dev(self_), dim, dev(idx))
        check(out, expected)
    # A 0-dim index may stay on the CPU (as in the fallback); a 1-D one may not.
    with native():
        check(torch.index_select(dev(x), 0, torch.tensor(2)), torch.index_select(x, 0, torch.tensor(2)))
    with pytest.raises(RuntimeError, match="same device"):
        torch.index_select(dev(x), 0, torch.tensor([2]))
    with pytest.raises(RuntimeError, match="same device"):
        torch.index_select(dev(x), 0, torch.tensor([2], device="openreg:1"))


def test_index_select_out_layouts():
    x = randn(4, 5)
    idx = torch.tensor([3, 1, 0])
    expected = torch.index_select(x, 0, idx)
    o = torch.empty(5, 3, device=DEV).t()  # right shape, transposed
    with native():
        assert torch.index_select(dev(x), 0, dev(idx), out=o) is o
    assert o.stride() == (1, 3)
    check(o, expected, strides=False)
    with pytest.warns(UserWarning, match="resized"), native():
        torch.index_select(dev(x), 0, dev(idx), out=torch.empty(2, device=DEV))


def test_index_select_errors():
    x = randn(4, 5)
    cases = [
        (x, 0, torch.tensor([4]), "index out of range in self"),
        (x, 0, torch.tensor([-1]), "index out of range in self"),
        (randn(3), 0, torch.tensor([3]), "index out of range in self"),
        (torch.tensor(1.0), 0, torch.tensor([1]), "index out of range in self"),
        (torch.tensor(1.0), 0, torch.tensor([0, 0]), "can have only 1 value"),
        (x, 0, torch.tensor([[0]]), "supposed to be a vector"),
        (x, 0, torch.tensor([0.0]), "int32 or int64"),
        (x, 2, torch.tensor([0]), "Dimension out of range"),
        (torch.empty(0, 3), 0, torch.tensor([0]), "should be positive"),
    ]
    for self_, dim, idx, match in cases:
        same_error(torch.index_select, (self_, dim, idx), (dev(self_), dim, dev(idx)), match=match)
    # CPU's fast path for this one raises a RuntimeError of its own; openreg raises PyTorch's usual
    # IndexError.
    with native(), pytest.raises(IndexError, match="index out of range in self"):
        torch.index_select(dev(x), 1, dev(torch.tensor([0, 5])))
    same_error(
        lambda s, i, o: torch.index_select(s, 0, i, out=o),
        (x, torch.tensor([0]), torch.empty(1, 5, dtype=torch.float64)),
        (dev(x), dev(torch.tensor([0])), torch.empty(1, 5, dtype=torch.float64, device=DEV)),
        match="same scalar type",
    )
    i = torch.tensor([0, 1, 2, 3, 4])
    same_error(
        lambda s, i: torch.index_select(s, 1, i, out=s),
        (x, i),
        (dev(x), dev(i)),
        match="single memory location",
    )


def test_index_select_autograd():
    x = randn(5, 3).requires_grad_()
    xd = dev(x.detach()).requires_grad_()
    idx = torch.tensor([4, 0, 4])
    g = randn(3, 3, seed=1)
    torch.index_select(x, 0, idx).backward(g)
    torch.index_select(xd, 0, dev(idx)).backward(dev(g))
    check(xd.grad, x.grad)
