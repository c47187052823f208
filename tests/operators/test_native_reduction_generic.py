"""PyTorch's device-generic reduction checks, run over the CPU and openreg's native kernels.

The cases of test/test_reductions.py that apply to the reductions openreg implements (sum, mean,
amax/amin, max/min, argmax/argmin, var/std, all/any, vector norms; the scans are in
test_native_scan.py):
the ReductionOpInfo unit tests (default, None, single, empty, multiple, unsorted, duplicate and
out-of-bounds dims, 65 dims, empty tensors and slices, non-contiguous inputs, result dtypes, NaN,
identities) and the legacy tests on empty tensors, out= tensors, dtypes and integer upcasting,
written again here as cases of one parametrised test (PyTorch's test files are not installed). Each
case runs on the CPU and on openreg under the fallback policy "error"
(tests.support.parity.assert_native_as_cpu): the same values, dtypes, shapes and strides, or the same
exception type and first line, and the same warnings.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.support.native_checks import DTYPES, FLOATS, integer_upcast, make
from tests.support.parity import assert_native_as_cpu

Fn = Callable[[str], Any]


# The reductions, as PyTorch's ReductionOpInfos describe them: how to call with a dim, whether a list
# of dims is taken, the identity over an empty slice.
MULTI: dict[str, Callable[..., Any]] = {
    "sum": torch.sum,
    "mean": torch.mean,
    "amax": torch.amax,
    "amin": torch.amin,
    "var": torch.var,
    "std": torch.std,
    "all": torch.all,
    "any": torch.any,
    "vector_norm": torch.linalg.vector_norm,
}
SINGLE: dict[str, Callable[..., Any]] = {
    "max": torch.max,
    "min": torch.min,
    "argmax": torch.argmax,
    "argmin": torch.argmin,
}
IDENTITY = {"sum": 0, "all": True, "any": False, "vector_norm": 0}


def _cases() -> dict[str, Fn]:
    cases: dict[str, Fn] = {}

    def add(name: str, fn: Fn) -> None:
        assert name not in cases, name
        cases[name] = fn

    ops = {**MULTI, **SINGLE}
    for name, op in ops.items():
        multi = name in MULTI
        needs_dim = name in ("max", "min")  # their dim overloads; the full ones are below
        for keep in (False, True):
            k = "-keepdim" if keep else ""
            if not needs_dim:
                for nd in range(3):  # test_dim_default(_keepdim), test_dim_none(_keepdim)
                    shape = [2, 3, 4][:nd]
                    add(
                        f"{name}-default-{nd}d{k}",
                        lambda d, op=op, s=shape, kp=keep: op(make(s, d), keepdim=kp),
                    )
                    add(
                        f"{name}-none-{nd}d{k}",
                        lambda d, op=op, s=shape, kp=keep: op(make(s, d), dim=None, keepdim=kp),
                    )
            for nd, dim in ((0, 0), (1, 0), (2, -1), (3, 1)):  # test_dim_single(_keepdim)
                shape = [3, 4, 2][:nd]
                add(
                    f"{name}-dim{dim}-{nd}d{k}",
                    lambda d, op=op, s=shape, dm=dim, kp=keep: op(make(s, d), dim=dm, keepdim=kp),
                )
            if multi:
                dims = [(0, []), (2, []), (1, [0]), (3, [0, 2]), (4, [3, 0, 2])]  # empty, multi, unsorted
                for nd, dim in dims:
                    shape = [2, 3, 4, 2][:nd]
                    add(
                        f"{name}-dims{dim}-{nd}d{k}",
                        lambda d, op=op, s=shape, dm=dim, kp=keep: op(make(s, d), dim=dm, keepdim=kp),
                    )
        if multi:  # test_dim_multi_duplicate, test_repeated_dim
            add(f"{name}-duplicate-dims", lambda d, op=op: op(make([2, 3, 4], d), dim=[0, 1, 1, 2]))
            add(f"{name}-repeated-dims", lambda d, op=op: op(make([3, 3, 3, 3], d), dim=(0, -4)))
        add(f"{name}-dim-out-of-bounds", lambda d, op=op: op(make([2, 3], d), dim=2))  # test_dim_offbounds
        add(f"{name}-65-dims", lambda d, op=op: op(make([1] * 65, d), dim=0))  # test_dim_ndim_limit
        add(f"{name}-65-dims-last", lambda d, op=op: op(make([1] * 65, d), dim=-1))  # less_than_64
        # test_empty_tensor_empty_slice / _nonempty_slice
        for dim in [0, [0, 2]] if multi else [0]:
            add(f"{name}-empty-slice-{dim}", lambda d, op=op, dm=dim: op(make([0, 2, 3], d), dim=dm))
        for dim in [1, [1, 2]] if multi else [1]:
            add(f"{name}-empty-tensor-{dim}", lambda d, op=op, dm=dim: op(make([0, 2, 3], d), dim=dm))
        # test_noncontiguous_*
        views = {
            "innermost": (lambda t: t[:, ::2], [10, 10], 1),
            "outermost": (lambda t: t[::2, :], [10, 10], 0),
            "all": (lambda t: t[::2, ::3, 1:-1:2], [5, 5, 5], None),
            "transposed": (lambda t: t.T, [5, 5], None),
            "expanded": (lambda t: t.unsqueeze(1).expand(-1, 5, -1), [2, 3], None),
        }
        for view, (cut, shape, dim) in views.items():
            kw = {} if dim is None else {"dim": dim}
            if needs_dim and dim is None:
                kw = {"dim": 0}
            add(
                f"{name}-noncontiguous-{view}",
                lambda d, op=op, c=cut, s=shape, kw=kw: op(c(make(s, d, low=-1, high=1)), **kw),
            )
        for dtype in DTYPES:  # test_result_dtype
            kw = {"dim": 0} if needs_dim else {}
            add(
                f"{name}-dtype-{str(dtype)[6:]}", lambda d, op=op, dt=dtype, kw=kw: op(make([5], d, dt), **kw)
            )
        if name in IDENTITY:  # test_identity

            def identity(d: str, op: Callable[..., Any] = op, v: object = IDENTITY[name]) -> Any:
                t = make([10], d)
                t[1::2] = v
                return op(t[::2]), op(t)

            add(f"{name}-identity", identity)
        if name not in ("all", "any"):  # test_nan_policy_propagate

            def nan(d: str, op: Callable[..., Any] = op, with_dim: bool = needs_dim) -> Any:
                t = make([5], d)
                t[2] = torch.nan
                return op(t, dim=0) if with_dim else op(t)

            add(f"{name}-nan", nan)
    return cases


def _legacy_cases() -> dict[str, Fn]:
    """The legacy tests of test_reductions.py, for the same operators."""
    cases: dict[str, Fn] = {}
    # test_tensor_compare_ops_empty, test_tensor_compare_ops_argmax_argmix_kthvalue_dim_empty
    compare = {
        "amax": torch.amax,
        "amin": torch.amin,
        "max": lambda *a, **k: torch.max(*a, **k).values,
        "min": lambda *a, **k: torch.min(*a, **k).values,
        "argmax": torch.argmax,
        "argmin": torch.argmin,
    }
    for name, fn in compare.items():
        for dim, keep in itertools.product((2, -1, 1), (False, True)):
            cases[f"{name}-of-2x0x4-dim{dim}-keepdim{keep}"] = lambda d, f=fn, dm=dim, kp=keep: f(
                make([2, 0, 4], d), dim=dm, keepdim=kp
            )
    cases["argmax-of-2x0x4"] = lambda d: torch.argmax(make([2, 0, 4], d))
    cases["max-of-2x0x4"] = lambda d: torch.max(make([2, 0, 4], d))
    # test_tensor_reduce_ops_empty
    reduce = {
        "sum": torch.sum,
        "mean": torch.mean,
        "var": torch.var,
        "std": torch.std,
        "norm": torch.norm,
        "vector_norm": torch.linalg.vector_norm,
        "logsumexp": torch.logsumexp,
    }
    for name, fn in reduce.items():
        for dim, keep in itertools.product((2, -1, 1, -2), (False, True)):
            cases[f"{name}-of-2x0x4-dim{dim}-keepdim{keep}"] = lambda d, f=fn, dm=dim, kp=keep: f(
                make([2, 0, 4], d), dim=dm, keepdim=kp
            )
        if name != "logsumexp":
            cases[f"{name}-of-2x0x4"] = lambda d, f=fn: f(make([2, 0, 4], d))
    # test_reduction_empty_any_all, test_all_any_empty
    for dtype in DTYPES:

        def empty_any_all(d: str, dt: torch.dtype = dtype) -> Any:
            x = make([2, 0, 4], d, dt)
            return [
                f(x, *a, **k)
                for f in (torch.any, torch.all)
                for a, k in (
                    ((2,), {}),
                    ((2,), {"keepdim": True}),
                    ((1,), {}),
                    ((1,), {"keepdim": True}),
                    ((), {}),
                )
            ]

        cases[f"any-all-of-2x0x4-{str(dtype)[6:]}"] = empty_any_all
    cases["any-all-of-empty-byte-and-bool"] = lambda d: [
        f(torch.tensor([], dtype=dt, device=d))
        for f in (torch.all, torch.any)
        for dt in (torch.uint8, torch.bool)
    ]
    # test_all_any_vs_numpy's out variant, test_all_issue117215
    for dtype in (torch.bool, torch.uint8, torch.float32):
        for name, fn in (("all", torch.all), ("any", torch.any)):

            def out_variant(d: str, f: Callable[..., Any] = fn, dt: torch.dtype = dtype) -> Any:
                x = make([3, 4], d, dt)
                out = torch.empty_like(x)
                return f(x, 1, out=out), out

            cases[f"{name}-out-{str(dtype)[6:]}"] = out_variant
    cases["all-uint8-issue117215"] = lambda d: torch.all(
        make([7, 11, 3, 5], d, torch.uint8, low=0, high=255), dim=0
    )
    # test_dim_reduction_fns: a non-contiguous out=
    for name in ("sum", "mean", "std", "var", "amax", "amin", "norm"):

        def strided_out(d: str, name: str = name) -> Any:
            x, y = make([5, 3], d, seed=1), make([5, 3], d, seed=2)
            getattr(torch, name)(y, 1, keepdim=False, out=x[:, 1])
            return x

        cases[f"{name}-out-noncontiguous"] = strided_out
    for name in ("max", "min"):

        def strided_out_pair(d: str, name: str = name) -> Any:
            y, values = make([5, 3], d, seed=1), make([5, 3], d, seed=2)
            indices = torch.zeros(5, 3, device=d).long() - 1
            getattr(torch, name)(y, 1, keepdim=False, out=(values[:, 1], indices[:, 1]))
            return values, indices

        cases[f"{name}-out-noncontiguous"] = strided_out_pair
    # test_minmax_illegal_dtype
    illegal = {
        "values int": (torch.int32, torch.long),
        "indices double": (torch.float32, torch.double),
        "both": (torch.int32, torch.double),
    }
    for (what, (vt, it)), name in itertools.product(illegal.items(), ("max", "min")):
        cases[f"{name}-out-{what}"] = lambda d, n=name, vt=vt, it=it: getattr(torch, n)(
            make([5, 5], d),
            dim=0,
            out=(torch.empty(5, dtype=vt, device=d), torch.empty(5, dtype=it, device=d)),
        )
    for name in ("amax", "amin"):
        cases[f"{name}-out-int"] = lambda d, n=name: getattr(torch, n)(
            make([5, 5], d), dim=0, out=torch.empty(5, dtype=torch.int32, device=d)
        )

    # test_sum_dim_reduction_uint8_overflow, test_sum_out, test_mean_out_is_alias_of_return
    def uint8_overflow(d: str) -> Any:
        x = torch.tensor([[-1, 2, 1], [5, 3, 6]], dtype=torch.uint8, device=d)
        y = x.clone()
        torch.sum(x, 0, out=y)
        return x.sum(dtype=torch.uint8), x.sum(0, dtype=torch.uint8), x.sum(1, dtype=torch.uint8), y

    cases["sum-uint8-overflow"] = uint8_overflow

    def sum_out_resized(d: str) -> Any:
        out = torch.tensor((), dtype=torch.float64, device=d)
        return torch.sum(make([10, 10, 10], d, torch.float64), (2, 1), out=out), out

    cases["sum-out-empty-resized"] = sum_out_resized
    for dtype in FLOATS:

        def mean_out_alias(d: str, dt: torch.dtype = dtype) -> Any:
            a = torch.tensor([[[1.0] * 4], [[2.0] * 4], [[3.0] * 4]], dtype=dt, device=d)
            out = torch.empty((1, 1, 4), dtype=dt, device=d)
            ret = torch.mean(a, dim=0, keepdim=True, out=out)
            return out, torch._C._is_alias_of(out, ret)

        cases[f"mean-out-alias-{str(dtype)[6:]}"] = mean_out_alias
    # test_dim_arg_reduction_scalar, test_argminmax_axis_with_dim_one, test_max/min_with_inf
    for dtype in DTYPES[1:]:
        cases[f"argmax-argmin-of-0d-{str(dtype)[6:]}"] = lambda d, dt=dtype: [
            f(torch.tensor(4, dtype=dt, device=d), **kw)
            for f in (torch.argmax, torch.argmin)
            for kw in ({}, {"dim": None}, {"dim": 0}, {"dim": 0, "keepdim": True})
        ]
    cases["argmax-argmin-axis-of-size-1"] = lambda d: [
        f(torch.zeros(1, 4099, device=d), dim=dm, keepdim=kp)
        for f in (torch.argmax, torch.argmin)
        for dm in (0, -2)
        for kp in (False, True)
    ]
    for dtype in FLOATS:
        cases[f"max-min-with-inf-{str(dtype)[6:]}"] = lambda d, dt=dtype: [
            f(
                torch.tensor(
                    [[-torch.inf, -torch.inf, torch.inf, 3], [torch.inf, torch.inf, -torch.inf, -1]],
                    dtype=dt,
                    device=d,
                ),
                **kw,
            )
            for f in (torch.max, torch.min, torch.amax, torch.amin)
            for kw in ({}, {"dim": 1})
        ]
    # test_amin_amax_some_dims, test_var/std_correction_vs_numpy, test_var_stability
    for dim, keep in itertools.product([(0, 1), (1, 3), (0, 2, 4), (4, 1)], (False, True)):
        cases[f"amax-amin-dims{dim}-keepdim{keep}"] = lambda d, dm=dim, kp=keep: [
            f(make([4, 6, 7, 5, 3], d), dim=dm, keepdim=kp) for f in (torch.amax, torch.amin)
        ]
    for (dim, correction, keep), name in itertools.product(
        [*itertools.product((None, 0, 1), (None, 0, 10, 30), (False, True)), (None, -100, True)],
        ("var", "std"),
    ):
        cases[f"{name}-dim{dim}-correction{correction}-keepdim{keep}"] = (
            lambda d, n=name, dm=dim, c=correction, kp=keep: getattr(torch, n)(
                make([20, 20], d), dim=dm, correction=c, keepdim=kp
            )
        )
    cases["var-stability"] = lambda d: [
        torch.tensor([2281.5, 2281.25], device=d).var(),
        torch.tensor([[2281.5], [2281.25]], device=d).var(0),
    ]
    return cases


def _upcast_cases() -> dict[str, Fn]:
    return {
        "sum-upcast": integer_upcast(functools.partial(torch.sum, dim=0), has_out=True),
        "sum-all-upcast": integer_upcast(torch.sum, has_out=False),
    }


CASES = {**_cases(), **_legacy_cases(), **_upcast_cases()}
# More than 64 dims go to the CPU fallback by design (whose kernel raises the CPU's error).
FALLS_BACK = {c for c in CASES if c.endswith(("-65-dims", "-65-dims-last"))}


@pytest.mark.parametrize("case", list(CASES))
def test_reduction_as_on_cpu(case: str) -> None:
    assert_native_as_cpu(CASES[case], native=case not in FALLS_BACK)
