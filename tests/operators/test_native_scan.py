"""Native cumsum and cumprod (csrc/aten/native/Scan.cpp) in their functional, in-place and out=
forms, as on the CPU.

The cases of PyTorch's test_reductions.py for the scans (integer upcasting, dtype= in the backward)
and a scan's dims, empty and 0-d inputs, dtypes, layouts and out= tensors, each run on the CPU and on
openreg under the fallback policy "error" (tests.support.parity.assert_native_as_cpu); that a trace
sees every form run natively, with no copy; and the scan a Hugging Face model runs every step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

import openreg_lab
from tests.support.native_checks import DTYPES, integer_upcast, make
from tests.support.parity import assert_native_as_cpu

Fn = Callable[[str], Any]
SCAN = [
    "aten::cumsum",
    "aten::cumsum_",
    "aten::cumsum.out",
    "aten::cumprod",
    "aten::cumprod_",
    "aten::cumprod.out",
]


def test_registered_and_listed():
    for op in SCAN:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), op
    assert sorted(openreg_lab.native_ops_by_family()["scan"]) == sorted(SCAN)


def _cases() -> dict[str, Fn]:
    """cumsum and cumprod: test_cumsum/cumprod_integer_upcast and test_reduce_dtype of
    test_reductions.py, and the dims, empty and 0-d tensors, layouts and out= forms of a scan."""
    cases: dict[str, Fn] = {}
    for name in ("cumsum", "cumprod"):
        op = getattr(torch, name)
        for shape, dim in [
            ([3, 4, 5], 0),
            ([3, 4, 5], 1),
            ([3, 4, 5], -1),
            ([], 0),
            ([], -1),
            ([], 1),
            ([0, 3], 0),
            ([0, 3], 1),
            ([2, 0], 1),
            ([2, 3], 2),
            ([2, 3], -3),
            ([3, 3000], 1),
            ([3000, 3], 0),
        ]:
            cases[f"{name}-{shape}-dim{dim}"] = lambda d, op=op, s=shape, dm=dim: op(
                make(s, d, low=-1, high=1), dm
            )
        for dtype in DTYPES:
            cases[f"{name}-{str(dtype)[6:]}"] = lambda d, op=op, dt=dtype: op(
                make([4, 5], d, dt, low=-3, high=3), 1
            )
            for to in (torch.float64, torch.int64, torch.float16):
                cases[f"{name}-{str(dtype)[6:]}-dtype-{str(to)[6:]}"] = lambda d, op=op, dt=dtype, to=to: op(
                    make([4, 5], d, dt, low=-3, high=3), 0, dtype=to
                )
        views = {
            "transposed": lambda t: t.t(),
            "sliced": lambda t: t[::2, 1:],
            "expanded": lambda t: t[:1].expand(4, 6),
        }
        for view, cut in views.items():
            for dim in (0, 1):
                cases[f"{name}-{view}-dim{dim}"] = lambda d, op=op, c=cut, dm=dim: op(c(make([6, 6], d)), dm)
        cases[f"{name}-nan-inf"] = lambda d, op=op: op(
            torch.tensor([1.0, torch.inf, -torch.inf, torch.nan, 2.0], device=d), 0
        )
        cases[f"{name}-upcast"] = integer_upcast(functools.partial(op, dim=0), has_out=True)

        def out(d: str, op: Callable[..., Any] = op) -> Any:
            x = make([4, 5], d)
            right, empty, wide = (
                torch.empty(4, 5, device=d),
                torch.empty(0, device=d),
                torch.empty(7, 5, device=d),
            )
            strided = torch.empty(5, 4, device=d).t()
            ints = torch.empty(4, 5, dtype=torch.int64, device=d)
            return [
                op(x, 1, out=right),
                op(x, 1, out=empty),
                op(x, 0, out=wide),
                op(x, 1, out=strided),
                op(x, 1, out=ints),
                op(make([4, 5], d, torch.int32), 1, out=right),
            ]

        cases[f"{name}-out"] = out
        cases[f"{name}-out-dtype-mismatch"] = lambda d, op=op: op(
            make([4, 5], d), 1, dtype=torch.float64, out=torch.empty(4, 5, device=d)
        )
        cases[f"{name}-out-dim-out-of-range"] = lambda d, op=op: op(
            make([4, 5], d), 2, out=torch.empty(4, 5, device=d)
        )

        def in_place(d: str, name: str = name) -> Any:
            x, i, v = make([4, 5], d), make([4, 5], d, torch.int32), make([4, 6], d)
            getattr(x, f"{name}_")(1)
            getattr(i, f"{name}_")(0)
            getattr(v[:, ::2], f"{name}_")(1)
            return x, i, v

        cases[f"{name}_"] = in_place
        cases[f"{name}_-dtype-mismatch"] = lambda d, name=name: getattr(make([4, 5], d), f"{name}_")(
            1, dtype=torch.float64
        )

        def backward(d: str, op: Callable[..., Any] = op) -> Any:  # test_reduce_dtype
            x = make([3, 3], d, low=0.5, high=2).requires_grad_()
            gi = make([3, 3], d, seed=1)
            (g1,) = torch.autograd.grad([op(x, 0)], [x], gi)
            (g2,) = torch.autograd.grad([op(x, 0, dtype=torch.double)], [x], gi.double())
            return g1, g2

        cases[f"{name}-backward"] = backward
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", list(CASES))
def test_scan_as_on_cpu(case: str) -> None:
    # a scan's backward flips its gradient: flip has no openreg kernel
    assert_native_as_cpu(CASES[case], native=not case.endswith("-backward"))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_every_form_runs_natively_without_a_copy(name: str) -> None:
    x = torch.randn(4, 5, device="openreg")
    out = torch.empty(4, 5, device="openreg")
    with openreg_lab.fallback_policy("error"), openreg_lab.trace() as t:
        getattr(torch, name)(x, 1)
        getattr(torch, name)(x, 0, out=out)
        getattr(x, f"{name}_")(1)
    ops = t.events[(t.events.kind == "op") & (t.events.name != "aten::empty.memory_format")]
    assert ops[["name", "kernel"]].values.tolist() == [
        [f"aten::{name}", "native"],
        [f"aten::{name}.out", "native"],
        [f"aten::{name}_", "native"],
    ]
    assert t.fallbacks().empty and t.copies().empty


def test_position_ids_from_an_attention_mask_as_hugging_face_builds_them():
    # GPT-2 and others: position ids count the kept tokens; padding gets 1
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]])
    expected = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 1)
    m = mask.to("openreg")
    with openreg_lab.fallback_policy("error"):
        got = (m.cumsum(-1) - 1).masked_fill_(m == 0, 1)
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), expected)
