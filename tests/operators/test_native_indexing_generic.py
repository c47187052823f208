"""PyTorch's device-generic indexing checks, run over the CPU and openreg's native kernels.

The cases of test/test_indexing.py that read through advanced indexing (``index.Tensor``:
``x[idx]``, ``x[mask]``, empty and zero-size indices, broadcast, non-adjacent and out-of-range
indices, masks of the wrong shape or dtype), and those of test_scatter_gather.py and test_torch.py
for the other native indexing kernels (``gather``, ``index_select``, ``cat``), with their out=
forms: written again here as cases of one parametrised test (PyTorch's test files are not
installed). Each case runs on the CPU and on openreg under the fallback policy "error"
(tests.support.parity.assert_native_as_cpu): the same values, dtypes, shapes and strides, or the
same exception type and first line, and the same warnings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.support.parity import assert_native_as_cpu

Fn = Callable[[str], Any]


def consec(shape: list[int], device: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """1, 2, 3, ... in ``shape``, as test_indexing.py's consec."""
    n = 1
    for s in shape:
        n *= s
    return torch.arange(1, n + 1, dtype=torch.float64).view(shape).to(dtype).to(device)


def long(values: object, device: str, dtype: torch.dtype = torch.long) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def _index_cases() -> dict[str, Fn]:
    c: dict[str, Fn] = {}
    # test_empty_ndim_index, test_empty_ndim_index_bool, test_empty_index
    c["empty-2d-index-of-1d"] = lambda d: consec([5], d)[torch.empty(0, 2, dtype=torch.int64, device=d)]
    c["empty-2d-index-in-dim1"] = lambda d: consec([2, 3, 4, 5], d)[
        :, torch.empty(0, 6, dtype=torch.int64, device=d)
    ]
    c["zero-size-dim-rows"] = lambda d: torch.empty(10, 0, device=d)[[1, 2]]
    c["zero-size-dim-empty-lists"] = lambda d: torch.empty(10, 0, device=d)[[], []]
    c["zero-size-dim-indexed"] = lambda d: torch.empty(10, 0, device=d)[:, [0, 1]]
    c["zero-size-dim-indexed-1d"] = lambda d: torch.empty(0, device=d)[[0, 1]]
    c["zero-size-dim-indexed-middle"] = lambda d: torch.empty(5, 0, 3, device=d)[:, [0]]
    c["zero-size-dim-indexed-by-empty"] = lambda d: torch.empty(5, 0, 3, device=d)[:, long([], d)]
    c["zero-size-dim-indexed-tensor"] = lambda d: torch.empty(2, 0, device=d)[:, long([[0, 1]], d)]
    c["zero-size-dim-other-dim-indexed"] = lambda d: torch.empty(3, 0, device=d)[[0, 2]]
    c["empty-uint8-mask-2d"] = lambda d: consec([5], d)[torch.empty(0, 2, dtype=torch.uint8, device=d)]
    c["empty-long-index"] = lambda d: consec([4, 3], d)[long([], d)]
    c["all-false-mask"] = lambda d: consec([4, 3], d)[torch.zeros(4, 3, dtype=torch.bool, device=d)]
    c["empty-long-of-3d"] = lambda d: consec([3, 3, 3], d)[torch.LongTensor().to(d)]
    # test_index's LongTensor indexing, test_int_indices(2d, _broadcast), test_advancedindex
    c["long-index"] = lambda d: consec([5, 5, 5], d)[long([2, 4], d)]
    c["list-index"] = lambda d: consec([10], d)[[0, 2, 4]]
    c["int-indices"] = lambda d: consec([5, 7, 3], d)[[0, 4, 2]]
    c["int-indices-in-dim1"] = lambda d: consec([5, 7, 3], d)[:, [2, 4]]
    c["int-indices-in-dim1-and-2"] = lambda d: consec([5, 7, 3], d)[:, [2, 4], [0, 2]]
    c["int-indices-2d"] = lambda d: consec([4, 3], d)[long([[0, 0], [3, 3]], d), long([[0, 2], [0, 2]], d)]
    c["int-indices-broadcast"] = lambda d: consec([4, 3], d)[long([0, 3], d)[:, None], long([0, 2], d)]
    c["pairs"] = lambda d: consec([3, 2], d)[long([0, 1, 1, 0, 2], d), long([1], d)]
    c["repeated"] = lambda d: consec([3, 2], d)[long([0, 0, 1, 1], d), long([0, 1, 0, 0], d)]
    c["transposed-self"] = lambda d: consec([3, 4], d).t()[long([0, 1, 2], d), long([1], d)]
    c["strided-self"] = lambda d: consec([10], d)[::2][long([[2, 1], [0, 3]], d)]
    c["offset-self"] = lambda d: consec([10], d)[4::4][long([[0, 1], [1, 0]], d)]
    c["non-adjacent-indices"] = lambda d: consec([3, 4, 5], d)[long([0, 2], d), :, long([1, 3], d)]
    c["non-adjacent-with-slice"] = lambda d: consec([3, 4, 5, 2], d)[long([1], d), 1:3, long([0, 4], d)]
    c["none-and-index"] = lambda d: consec([3, 4], d)[None, long([1, 2], d)]
    c["ellipsis-and-index"] = lambda d: consec([3, 4, 5], d)[..., long([1, 4], d)]
    c["negative-indices"] = lambda d: consec([5, 4], d)[long([-1, -5, 0], d)]
    c["int32-indices"] = lambda d: consec([5, 4], d)[long([1, 3], d, torch.int32)]
    c["cpu-indices"] = lambda d: consec([5, 4], d)[torch.tensor([1, 3])]
    c["index-out-of-range"] = lambda d: consec([5, 4], d)[long([1, 5], d)]
    c["negative-out-of-range"] = lambda d: consec([5, 4], d)[long([-6], d)]
    c["index-out-of-range-dim1"] = lambda d: consec([5, 4], d)[:, long([4], d)]
    c["float-index"] = lambda d: consec([5, 4], d)[torch.tensor([1.0], device=d)]
    c["too-many-indices"] = lambda d: consec([5], d)[long([0], d), long([0], d)]
    c["indices-not-broadcastable"] = lambda d: consec([5, 4], d)[long([0, 1], d), long([0, 1, 2], d)]
    c["index-of-0d"] = lambda d: torch.tensor(5.0, device=d)[long([0, 0], d)]
    # masks: test_byte_mask, test_bool_indices, test_multiple_bool_indices, test_byte_mask2d, ...
    c["bool-mask"] = lambda d: consec([10, 3], d)[long([1, 0, 1, 1, 0, 1, 0, 1, 0, 1], d).bool()]
    c["byte-mask"] = lambda d: consec([10, 3], d)[long([1, 0, 1, 1, 0, 1, 0, 1, 0, 1], d, torch.uint8)]
    c["bool-mask-2d"] = lambda d: consec([5, 3, 2], d)[(consec([5, 3], "cpu").remainder(3) == 0).to(d)]
    c["byte-mask-2d"] = lambda d: consec([5, 3, 2], d)[(consec([5, 3], "cpu").remainder(3) == 0).byte().to(d)]
    c["two-bool-masks"] = lambda d: consec([3, 4], d)[long([1, 0, 1], d).bool(), long([1, 0, 1, 0], d).bool()]
    c["mask-in-dim1"] = lambda d: consec([3, 4], d)[:, long([0, 1, 1, 0], d).bool()]
    c["mask-and-index"] = lambda d: consec([3, 4], d)[long([1, 0, 1], d).bool(), long([2, 3], d)]
    c["mask-of-wrong-shape"] = lambda d: consec([5, 4], d)[torch.ones(3, dtype=torch.bool, device=d)]
    c["mask-of-wrong-shape-dim1"] = lambda d: consec([5, 4], d)[:, torch.ones(3, dtype=torch.bool, device=d)]
    c["0d-true"] = lambda d: consec([3, 2], d)[torch.tensor(True, device=d)]
    c["0d-false"] = lambda d: consec([3, 2], d)[torch.tensor(False, device=d)]
    c["mask-of-0d"] = lambda d: torch.tensor(5.0, device=d)[torch.tensor([True], device=d)]
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float64,
    ):
        c[f"dtype-{str(dtype)[6:]}"] = lambda d, dt=dtype: consec([4, 3], d, dt)[
            long([3, 0], d), long([[1], [2]], d)
        ]

    def index_out(d: str) -> Any:  # index.Tensor_out
        x, out, wide = consec([5, 4], d), torch.empty(0, device=d), torch.empty(3, 4, device=d)
        index = torch.ops.aten.index.Tensor_out
        return index(x, [long([1, 3], d)], out=out), out, index(x, [long([4], d)], out=wide)

    c["out"] = index_out
    c["out-of-another-dtype"] = lambda d: torch.ops.aten.index.Tensor_out(
        consec([5, 4], d), [long([1], d)], out=torch.empty(1, 4, dtype=torch.float64, device=d)
    )
    return c


def _gather_cases() -> dict[str, Fn]:
    """test_scatter_gather.py's gather cases."""
    c: dict[str, Fn] = {}

    def index(
        shape: list[int], high: int, d: str, dtype: torch.dtype = torch.long, seed: int = 0
    ) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, high, shape, generator=g).to(dtype).to(d)

    for dim in (0, 1, 2, -1):
        c[f"gather-dim{dim}"] = lambda d, dm=dim: torch.gather(
            consec([4, 5, 6], d), dm, index([3, 4, 5], [4, 5, 6][dm], d)
        )
    c["gather-noncontiguous"] = lambda d: torch.gather(consec([6, 5], d).t(), 1, index([5, 6], 6, d).t().t())
    c["gather-index-noncontiguous"] = lambda d: torch.gather(consec([5, 6], d), 1, index([7, 5], 6, d).t())
    c["gather-0d"] = lambda d: torch.gather(torch.tensor(3.0, device=d), 0, long(0, d))
    c["gather-empty-index"] = lambda d: torch.gather(
        consec([4, 5], d), 1, torch.empty(4, 0, dtype=torch.long, device=d)
    )
    c["gather-of-empty"] = lambda d: torch.gather(
        torch.empty(0, 5, device=d), 1, torch.empty(0, 3, dtype=torch.long, device=d)
    )
    c["gather-out-of-range"] = lambda d: torch.gather(consec([4, 5], d), 1, long([[0, 5]], d))
    c["gather-negative-index"] = lambda d: torch.gather(consec([4, 5], d), 1, long([[0, -1]], d))
    c["gather-int32-index"] = lambda d: torch.gather(consec([4, 5], d), 1, index([4, 2], 5, d, torch.int32))
    c["gather-dims-mismatch"] = lambda d: torch.gather(consec([4, 5], d), 1, index([4], 5, d))
    c["gather-index-too-big"] = lambda d: torch.gather(consec([4, 5], d), 1, index([6, 2], 5, d))
    c["gather-dim-out-of-range"] = lambda d: torch.gather(consec([4, 5], d), 2, index([4, 2], 5, d))
    c["gather-sparse-grad"] = lambda d: torch.gather(
        consec([4, 5], d), 1, index([4, 2], 5, d), sparse_grad=True
    )
    for dtype in (torch.bool, torch.uint8, torch.int32, torch.float16, torch.bfloat16, torch.float64):
        c[f"gather-{str(dtype)[6:]}"] = lambda d, dt=dtype: torch.gather(
            consec([4, 5], d, dt), 0, index([3, 5], 4, d)
        )

    def gather_out(d: str) -> Any:
        x, i = consec([4, 5], d), index([4, 2], 5, d)
        out, strided = torch.empty(0, device=d), torch.empty(2, 4, device=d).t()
        return torch.gather(x, 1, i, out=out), out, torch.gather(x, 1, i, out=strided)

    c["gather-out"] = gather_out
    c["gather-out-of-another-dtype"] = lambda d: torch.gather(
        consec([4, 5], d), 1, index([4, 2], 5, d), out=torch.empty(4, 2, dtype=torch.float64, device=d)
    )
    return c


def _index_select_and_cat_cases() -> dict[str, Fn]:
    """test_torch.py's index_select cases, test_tensor_creation_ops.py's and test_shape_ops.py's cat."""
    c: dict[str, Fn] = {}
    for dim in (0, 1, -1):
        c[f"index_select-dim{dim}"] = lambda d, dm=dim: torch.index_select(
            consec([4, 5], d), dm, long([3, 0, 3], d)
        )
    c["index_select-0d"] = lambda d: torch.index_select(torch.tensor(2.0, device=d), 0, long([0], d))
    c["index_select-0d-index"] = lambda d: torch.index_select(consec([4, 5], d), 1, long(2, d))
    c["index_select-empty-index"] = lambda d: torch.index_select(consec([4, 5], d), 0, long([], d))
    c["index_select-of-empty"] = lambda d: torch.index_select(torch.empty(0, 5, device=d), 1, long([1], d))
    c["index_select-from-empty-dim"] = lambda d: torch.index_select(
        torch.empty(0, 5, device=d), 0, long([0], d)
    )
    c["index_select-out-of-range"] = lambda d: torch.index_select(consec([4, 5], d), 0, long([4], d))
    c["index_select-negative"] = lambda d: torch.index_select(consec([4, 5], d), 0, long([-1], d))
    c["index_select-int32"] = lambda d: torch.index_select(consec([4, 5], d), 0, long([1, 2], d, torch.int32))
    c["index_select-2d-index"] = lambda d: torch.index_select(consec([4, 5], d), 0, long([[1]], d))
    c["index_select-float-index"] = lambda d: torch.index_select(
        consec([4, 5], d), 0, torch.ones(1, device=d)
    )
    c["index_select-noncontiguous"] = lambda d: torch.index_select(
        consec([5, 6], d).t()[::2], 1, long([4, 0], d)[::-1].clone()
    )
    for dtype in (torch.bool, torch.int8, torch.int64, torch.float16, torch.bfloat16, torch.float64):
        c[f"index_select-{str(dtype)[6:]}"] = lambda d, dt=dtype: torch.index_select(
            consec([4, 5], d, dt), 1, long([4, 1], d)
        )

    def index_select_out(d: str) -> Any:
        x, out, wide = consec([4, 5], d), torch.empty(0, device=d), torch.empty(9, device=d)
        return (
            torch.index_select(x, 0, long([1], d), out=out),
            out,
            torch.index_select(x, 1, long([0, 2], d), out=wide),
        )

    c["index_select-out"] = index_select_out
    # cat: zero-size and legacy empty inputs, promotion, dims, errors, out=
    c["cat-zero-size"] = lambda d: torch.cat(
        [consec([2, 3], d), torch.empty(0, 3, device=d), consec([1, 3], d)]
    )
    c["cat-legacy-empty"] = lambda d: torch.cat([torch.empty(0, device=d), consec([2, 3], d)], 1)
    c["cat-all-empty"] = lambda d: torch.cat([torch.empty(0, device=d), torch.empty(0, device=d)])
    c["cat-promotes"] = lambda d: torch.cat(
        [consec([2, 3], d, torch.int32), consec([2, 3], d, torch.float16)]
    )
    c["cat-dim-negative"] = lambda d: torch.cat([consec([2, 3], d), consec([2, 1], d)], -1)
    c["cat-dim-out-of-range"] = lambda d: torch.cat([consec([2, 3], d), consec([2, 3], d)], 2)
    c["cat-shape-mismatch"] = lambda d: torch.cat([consec([2, 3], d), consec([2, 4], d)], 0)
    c["cat-rank-mismatch"] = lambda d: torch.cat([consec([2, 3], d), consec([3], d)], 0)
    c["cat-0d"] = lambda d: torch.cat([torch.tensor(1.0, device=d), torch.tensor(2.0, device=d)])
    c["cat-no-tensors"] = lambda d: torch.cat([])
    c["cat-noncontiguous"] = lambda d: torch.cat([consec([3, 4], d).t(), consec([4, 6], d)[:, ::2]], 1)
    c["cat-channels-last"] = lambda d: torch.cat(
        [consec([1, 2, 3, 3], d).to(memory_format=torch.channels_last)] * 2, 1
    )

    def cat_out(d: str) -> Any:
        out, wrong = torch.empty(0, device=d), torch.empty(2, 2, device=d)
        return (
            torch.cat([consec([2, 3], d)] * 2, out=out),
            out,
            torch.cat([consec([2, 3], d)] * 2, 1, out=wrong),
        )

    c["cat-out"] = cat_out
    c["cat-out-of-another-dtype"] = lambda d: torch.cat(
        [consec([2, 3], d)], out=torch.empty(2, 3, dtype=torch.int64, device=d)
    )
    return c


CASES = {**_index_cases(), **_gather_cases(), **_index_select_and_cat_cases()}


@pytest.mark.parametrize("case", list(CASES))
def test_indexing_as_on_cpu(case: str) -> None:
    assert_native_as_cpu(CASES[case])
