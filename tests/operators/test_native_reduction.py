"""Native reductions (csrc/aten/native/Reduction.cpp) give CPU's results, dtypes, shapes and errors.

Every comparison runs the openreg side under the fallback policy "error", so it also proves that the
op ran natively: the CPU fallback raises NotImplementedError under that policy.
"""

from __future__ import annotations

import math

import pytest
import torch

import openreg_lab
from tests.support.native_checks import assert_matches, check, check_error
from tests.support.parity import assert_same_as_cpu

NATIVE = [
    "sum",
    "sum.dim_IntList",
    "sum.IntList_out",
    "mean",
    "mean.dim",
    "mean.out",
    "amax",
    "amax.out",
    "amin",
    "amin.out",
    "max",
    "min",
    "max.dim",
    "max.dim_max",
    "min.dim",
    "min.dim_min",
    "argmax",
    "argmax.out",
    "argmin",
    "argmin.out",
    "var.correction",
    "var.correction_out",
    "std.correction",
    "std.correction_out",
]

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]

# dim arguments of the list-taking reductions: None and [] mean every dim.
DIMS = [None, 0, -1, 1, (0, 2), (2, 0), (-1, -3), (), (0, 1, 2)]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    low = 0 if dtype == torch.uint8 else -50
    return torch.randint(low, 50, shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("op", NATIVE)
def test_registered_natively_for_privateuse1(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "PrivateUse1")


# --- sum and mean ------------------------------------------------------------------


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_dims(dim, keepdim):
    x = make((4, 5, 6))
    check(lambda t: t.sum(dim, keepdim=keepdim) if dim is not None else t.sum(), x)
    check(lambda t: torch.sum(t, dim, keepdim), x)


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS, torch.bool])
@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1)])
def test_sum_dtypes(dtype, dim):
    x = make((37, 45), dtype)
    out = check(lambda t: t.sum(dim) if dim is not None else t.sum(), x)
    # Integers (and bool) sum to int64, floats keep their dtype.
    assert out.dtype == (dtype if dtype.is_floating_point else torch.int64)


@pytest.mark.parametrize(
    ("src", "dtype"),
    [
        (torch.float16, torch.float32),
        (torch.float32, torch.float64),
        (torch.float32, torch.float16),
        (torch.int32, torch.float32),
        (torch.bool, torch.int32),
        (torch.int64, torch.int8),
        (torch.float32, torch.int64),
    ],
)
def test_sum_dtype_argument(src, dtype):
    x = make((6, 7), src) * (3 if src.is_floating_point else 1)
    check(lambda t: t.sum(dtype=dtype), x)
    check(lambda t: t.sum(1, dtype=dtype), x)
    check(lambda t: t.sum(0, keepdim=True, dtype=dtype), x)


def test_integer_sum_wraps_like_cpu():
    x = torch.full((1000,), 2**62, dtype=torch.int64)
    check(lambda t: t.sum(), x)
    check(lambda t: t.sum(dtype=torch.int8), torch.full((300,), 100, dtype=torch.int32))


LAYOUTS = {
    "transposed": lambda t: t.transpose(0, 2),
    "sliced": lambda t: t[:, ::2, 1:],
    "permuted": lambda t: t.permute(1, 2, 0),
    "expanded": lambda t: t[:, :1, :].expand(-1, 5, -1),
    "narrowed": lambda t: t[1:3],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dim", [None, 0, 1, 2, (0, 2), (1, 2)])
def test_non_contiguous_inputs(layout, dim):
    x = make((6, 5, 7))
    view = LAYOUTS[layout]

    def reduce_all(t):
        v = view(t)
        return (
            v.sum(dim) if dim is not None else v.sum(),
            v.mean(dim),
            v.amax(dim if dim is not None else ()),
            v.var(dim),
        )

    check(reduce_all, x)
    if isinstance(dim, int):
        check(lambda t: view(t).max(dim), x)
        check(lambda t: view(t).argmin(dim), x)
    if dim is None:
        check(lambda t: view(t).argmax(), x)


@pytest.mark.parametrize("dim", [0, 1, (0, 1), None])
def test_large_inputs_use_every_path(dim):
    # (3000, 200): column mode over dim 0, rows over dim 1, a chunked long row for all dims.
    x = make((3000, 200))
    # Float sums of 600000 values round differently from CPU's (both ~1e-6 relative).
    tol = {"rtol": 1e-5, "atol": 1e-4}
    check(lambda t: t.sum(dim), x, **tol)
    check(lambda t: t.mean(dim), x, **tol)
    check(lambda t: t.var(dim), x, **tol)
    check(lambda t: t.amin(dim if dim is not None else ()), x)
    if dim != (0, 1):
        check(lambda t: t.argmax(dim), x)
    if isinstance(dim, int):
        check(lambda t: t.max(dim), x)


def test_float32_sum_is_as_accurate_as_cpu():
    # A naive float accumulator is off by ~1e-3 relative here; CPU's cascade sum is not.
    x = torch.rand(2_000_000, dtype=torch.float64).add_(1.0)
    truth = x.sum().item()
    x32 = x.float()
    cols = x32.view(2000, 1000)
    with openreg_lab.fallback_policy("error"):
        dev = x32.to("openreg").sum().item()
        dev_cols = cols.to("openreg").sum(0).double().cpu()
    cpu_err = abs(x32.sum().item() - truth)
    assert abs(dev - truth) <= max(4 * cpu_err, 1e-6 * truth)
    col_truth = x.view(2000, 1000).sum(0)
    col_cpu_err = (cols.sum(0).double() - col_truth).abs().max().item()
    assert (dev_cols - col_truth).abs().max().item() <= max(4 * col_cpu_err, 1e-6 * 2000)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_sums_accumulate_in_float(dtype):
    x = torch.full((4096,), 1.0, dtype=dtype)
    out = check(lambda t: t.sum(), x)
    assert out.item() == 4096.0  # a 16-bit accumulator would stall at 2048 / 256
    check(lambda t: t.mean(), make((300, 70), dtype))
    check(lambda t: t.view(64, 64).sum(0), x)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_mean(dim, dtype):
    x = make((4, 5, 6), dtype)
    check(lambda t: t.mean(dim) if dim is not None else t.mean(), x)
    check(lambda t: t.mean(dim, keepdim=True), x)


def test_mean_dtype_argument_and_errors():
    check(lambda t: t.mean(dtype=torch.float32), make((5, 6), torch.int32))
    check(lambda t: t.mean(1, dtype=torch.float64), make((5, 6), torch.float32))
    check(lambda t: t.mean(0, dtype=torch.float16), make((5, 6), torch.float32))
    check_error(lambda t: t.mean(), make((5,), torch.int64))
    check_error(lambda t: t.mean(0), make((5,), torch.int32))
    check_error(lambda t: t.mean(dtype=torch.int64), make((5,)))


# --- out= ---------------------------------------------------------------------------

OUT_OPS = {
    "sum": (lambda t, out: torch.sum(t, (0, 2), out=out), torch.float32),
    "sum_keepdim": (lambda t, out: torch.sum(t, 1, True, out=out), torch.float32),
    "mean": (lambda t, out: torch.mean(t, -1, out=out), torch.float32),
    "amax": (lambda t, out: torch.amax(t, (1, 2), out=out), torch.float32),
    "amin": (lambda t, out: torch.amin(t, 0, keepdim=True, out=out), torch.float32),
    "argmax": (lambda t, out: torch.argmax(t, 1, out=out), torch.int64),
    "argmin": (lambda t, out: torch.argmin(t, out=out), torch.int64),
    "var": (lambda t, out: torch.var(t, (0, 1), out=out), torch.float32),
    "std": (lambda t, out: torch.std(t, 2, correction=0, keepdim=True, out=out), torch.float32),
}


@pytest.mark.parametrize("name", list(OUT_OPS))
def test_out_variants(name):
    fn, dtype = OUT_OPS[name]
    x = make((4, 5, 6))
    expected = fn(x, torch.empty(0, dtype=dtype))
    with openreg_lab.fallback_policy("error"):
        out = torch.empty(0, dtype=dtype, device="openreg")
        result = fn(x.to("openreg"), out)
        assert result is out
    assert_matches(out, expected)


STRIDED_OUT_OPS = {
    "sum": lambda t, out: torch.sum(t, 1, out=out),
    "mean": lambda t, out: torch.mean(t, 1, out=out),
    "amax": lambda t, out: torch.amax(t, 1, out=out),
    "var": lambda t, out: torch.var(t, 1, out=out),
    "std": lambda t, out: torch.std(t, 1, out=out),
    "argmax": lambda t, out: torch.argmax(t, 1, out=out),
    "max_values": lambda t, out: torch.max(t, 1, out=(out, torch.empty_like(out, dtype=torch.int64)))[0],
    "min_indices": lambda t, out: torch.min(t, 1, out=(torch.empty_like(out, dtype=t.dtype), out))[1],
}


@pytest.mark.parametrize("name", list(STRIDED_OUT_OPS))
def test_non_contiguous_out_is_written_in_place(name):
    fn = STRIDED_OUT_OPS[name]
    dtype = torch.int64 if name in ("argmax", "min_indices") else torch.float32
    x = make((4, 5, 6))
    expected = fn(x, torch.empty(0, dtype=dtype))
    base = torch.zeros(6, 4, dtype=dtype, device="openreg")
    with openreg_lab.fallback_policy("error"):
        result = fn(x.to("openreg"), base.t())
    assert result.data_ptr() == base.data_ptr()
    assert_matches(base.t(), expected)


def test_out_of_wrong_shape_is_resized_with_cpus_warning():
    x = make((4, 5))
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        expected = torch.sum(x, 0, out=torch.empty(2))
    with openreg_lab.fallback_policy("error"):
        out = torch.empty(2, device="openreg")
        with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
            torch.sum(x.to("openreg"), 0, out=out)
    assert_matches(out, expected)


def test_sum_out_dtype_rules():
    x = make((4, 5))
    # Without dtype=, the out tensor's dtype is the result dtype.
    for out_dtype in (torch.float64, torch.int64, torch.float16):
        expected = torch.sum(x, 1, out=torch.empty(0, dtype=out_dtype))
        with openreg_lab.fallback_policy("error"):
            out = torch.sum(x.to("openreg"), 1, out=torch.empty(0, dtype=out_dtype, device="openreg"))
        assert_matches(out, expected)
    check_error(lambda t: torch.sum(t, 0, dtype=torch.float16, out=torch.empty(0, dtype=torch.float64)), x)


def test_out_dtype_errors_match_cpu():
    x = make((4, 5))
    empty = torch.empty

    check_error(lambda t: torch.amax(t, 0, out=empty(0, dtype=torch.float64, device=t.device)), x)
    check_error(lambda t: torch.argmax(t, 0, out=empty(0, dtype=torch.int32, device=t.device)), x)
    check_error(lambda t: torch.mean(t, 0, dtype=torch.float16, out=empty(0, device=t.device)), x)
    check_error(
        lambda t: torch.max(
            t,
            0,
            out=(
                empty(0, dtype=torch.float64, device=t.device),
                empty(0, dtype=torch.int64, device=t.device),
            ),
        ),
        x,
    )
    check_error(
        lambda t: torch.min(
            t, 0, out=(empty(0, device=t.device), empty(0, dtype=torch.int32, device=t.device))
        ),
        x,
    )


def test_out_on_another_device_is_refused():
    x = make((4, 5)).to("openreg")
    with pytest.raises(RuntimeError, match="Expected out tensor to have device openreg:0, but got cpu"):
        torch.sum(x, 0, out=torch.empty(0))


def test_out_mixed_precision():
    x = make((4, 5))
    expected = torch.mean(x, 0, out=torch.empty(0, dtype=torch.float64))
    with openreg_lab.fallback_policy("error"):
        out = torch.mean(x.to("openreg"), 0, out=torch.empty(0, dtype=torch.float64, device="openreg"))
    assert_matches(out, expected)


# --- amax, amin, max, min -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS, torch.bool])
@pytest.mark.parametrize("dim", [(), 0, -1, (0, 2)])
def test_amax_amin(dtype, dim):
    x = make((7, 6, 33), dtype)
    check(lambda t: (t.amax(dim), t.amin(dim, keepdim=True)), x)


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS, torch.bool])
def test_full_max_min(dtype):
    x = make((5, 300), dtype)
    check(lambda t: (t.max(), t.min()), x)
    check(lambda t: (t.max(), t.min()), make((), dtype))


# Short rows take a plain loop, longer ones vectorised lanes (NaN found through v - v), columns
# their own loop, and more than 131072 elements a chunked single row.
NAN_SHAPES = [(6, 40), (6, 333), (333, 70), (3, 100_000)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("shape", NAN_SHAPES)
def test_nan_propagates(dtype, shape):
    x = make(shape, dtype)
    x[2, 17] = math.nan
    x[1, -1] = math.nan
    x[0, 3] = math.inf
    tol = {"equal_nan": True}
    check(lambda t: (t.amax(), t.amin(1), t.amax(0), t.max(), t.min()), x, **tol)
    check(lambda t: (t.max(1), t.min(0), t.argmax(1), t.argmin(), t.argmax(0)), x, **tol)
    check(lambda t: (t.sum(1), t.mean(0), t.var(1)), x, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", NAN_SHAPES)
def test_infinities_are_not_nans(dtype, shape):
    x = make(shape, dtype)
    x[0, 5] = math.inf
    x[2, 7] = -math.inf
    x[1, 0] = math.inf
    check(lambda t: (t.amax(1), t.amin(1), t.amax(0), t.amin(0), t.max(), t.min()), x)
    check(lambda t: (t.max(1), t.min(1), t.max(0), t.argmin(0), t.argmax()), x)


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_dim(dtype, dim, keepdim):
    x = make((9, 70), dtype)
    check(lambda t: (t.max(dim, keepdim), t.min(dim, keepdim=keepdim)), x)


def test_indices_of_ties_are_the_first():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0], [2.0, 2.0, 2.0, 2.0, 2.0], [0.0, -1.0, 0.0, -1.0, 5.0]])
    x = x.repeat(1, 30)  # ties within and across rows
    for t in (x, x.t().contiguous().t(), x.int(), x.half(), x.to(torch.bool)):
        check(lambda v: (v.max(1), v.min(1), v.max(0), v.min(0)), t)
        if t.dtype != torch.bool:
            check(lambda v: (v.argmax(1), v.argmin(1), v.argmax(0), v.argmin(0), v.argmax(), v.argmin()), t)
    ties = torch.zeros(200_000)
    ties[100_000] = 1.0  # chunks of the long-row path: 65536 elements
    ties[190_000] = 1.0
    out = check(lambda v: (v.argmax(), v.argmin(), v.max(0)), ties)
    assert out[0].item() == 100_000 and out[1].item() == 0


def test_max_dim_out():
    x = make((5, 8))
    with openreg_lab.fallback_policy("error"):
        values = torch.empty(0, device="openreg")
        indices = torch.empty(0, dtype=torch.int64, device="openreg")
        result = torch.max(x.to("openreg"), 1, out=(values, indices))
    assert result[0] is values and result[1] is indices
    assert_matches((values, indices), tuple(torch.max(x, 1)))
    values.resize_(0)
    indices.resize_(0)
    with openreg_lab.fallback_policy("error"):
        result = torch.min(x.to("openreg"), 0, keepdim=True, out=(values, indices))
    assert result[0] is values and result[1] is indices
    assert_matches((values, indices), tuple(torch.min(x, 0, keepdim=True)))


# --- argmax, argmin -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS])
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(dtype, dim, keepdim):
    x = make((6, 45), dtype)
    check(lambda t: (t.argmax(dim, keepdim), t.argmin(dim, keepdim=keepdim)), x)


def test_argmax_over_all_dims_counts_in_logical_order():
    x = make((5, 7, 3))
    check(lambda t: (t.transpose(0, 2).argmax(), t.permute(1, 0, 2).argmin()), x)
    check(lambda t: t.transpose(0, 2).argmax(keepdim=True), x)


def test_scalar_inputs():
    x = torch.tensor(2.5)
    check(lambda t: (t.sum(0), t.sum(-1), t.mean(), t.amax(0), t.max(0), t.argmax(0), t.argmin()), x)
    check(lambda t: (t.max(-1, keepdim=True), t.sum((), keepdim=True)), x)
    check_error(lambda t: t.sum(1), x)


def test_results_stay_on_the_inputs_device():
    if torch.openreg.device_count() < 2:
        pytest.skip("needs two openreg devices")
    x = make((40, 70))
    with openreg_lab.fallback_policy("error"):
        d = x.to("openreg:1")
        results = (d.sum(0), d.mean(), d.amax(1), d.max(0)[1], d.argmin(), d.var(1), d.half().sum())
    for r in results:
        assert r.device == torch.device("openreg:1")
    assert_matches(results[0], x.sum(0))


# --- var and std --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), ()])
@pytest.mark.parametrize("correction", [None, 0, 2, 0.5])
def test_var_std(dtype, dim, correction):
    x = make((6, 5, 40), dtype)
    check(lambda t: (t.var(dim, correction=correction), t.std(dim, correction=correction, keepdim=True)), x)


def test_var_std_legacy_overloads_reach_the_native_kernel():
    x = make((6, 50))
    check(lambda t: (t.var(), t.var(0, unbiased=False), t.std(1, True, True), t.std(unbiased=False)), x)
    check(lambda t: torch.var(t, 1, unbiased=True, keepdim=True), x)


def test_var_is_accurate_with_a_large_mean():
    # Sum of squares minus squared sum would lose every digit here; two passes do not.
    x = (torch.randn(100_000, dtype=torch.float64) + 1e4).float()
    truth = x.double().var().item()
    with openreg_lab.fallback_policy("error"):
        dev = x.to("openreg").var().item()
        dev_cols = x.view(1000, 100).to("openreg").var(0).double().cpu()
    assert dev == pytest.approx(truth, rel=1e-4)
    torch.testing.assert_close(dev_cols, x.view(1000, 100).double().var(0), rtol=1e-4, atol=0)


def test_var_degrees_of_freedom_warning():
    x = make((1, 4))
    with pytest.warns(UserWarning, match=r"var\(\): degrees of freedom is <= 0"):
        expected = x.var(0)
    with openreg_lab.fallback_policy("error"):
        with pytest.warns(UserWarning, match=r"var\(\): degrees of freedom is <= 0"):
            out = x.to("openreg").var(0)
        with pytest.warns(UserWarning, match=r"std\(\): degrees of freedom is <= 0"):
            x.to("openreg").std(1, correction=5)
    assert_matches(out, expected, equal_nan=True)


def test_var_of_integers_is_refused():
    check_error(lambda t: t.var(), make((5,), torch.int64))
    check_error(lambda t: t.std(0), make((5,), torch.int32))


def test_var_out_with_another_dtype_matches_cpu():
    x = make((4, 5))
    expected = torch.var(x, 0, out=torch.empty(0, dtype=torch.float64))
    out = torch.var(x.to("openreg"), 0, out=torch.empty(0, dtype=torch.float64, device="openreg"))
    assert_matches(out, expected)


# --- empty tensors ------------------------------------------------------------------


def test_empty_reductions_with_an_identity():
    e = torch.empty(0, 3)
    check(lambda t: (t.sum(0), t.sum(1), t.sum(), t.sum(0, dtype=torch.int64)), e)
    check(lambda t: (t.mean(1), t.amax(1), t.max(1), t.argmin(1)), e)
    check(lambda t: (t.mean(0), t.mean()), e, equal_nan=True)
    check(lambda t: t.sum((0, 1), keepdim=True), torch.empty(0, 4, dtype=torch.int32))
    with pytest.warns(UserWarning, match="degrees of freedom"):
        check(lambda t: (t.var(0), t.std(), t.var(1)), e, equal_nan=True)


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.amax(),
        lambda t: t.amax(0),
        lambda t: t.amin(-2),
        lambda t: t.max(),
        lambda t: t.min(),
        lambda t: t.max(0),
        lambda t: t.min(-2),
        lambda t: t.argmax(),
        lambda t: t.argmin(0),
        lambda t: t.argmax(-2, keepdim=True),
    ],
)
def test_empty_reductions_without_an_identity_raise_cpus_error(fn):
    check_error(fn, torch.empty(0, 3))


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.sum(3),
        lambda t: t.sum((0, 0)),
        lambda t: t.sum((1, -2)),
        lambda t: t.mean(-4),
        lambda t: t.amax((2, 2)),
        lambda t: t.max(5),
        lambda t: t.argmax(3),
        lambda t: t.var((0, 3)),
        lambda t: t.argmax().bool().argmax(),
        lambda t: t.bool().argmin(0),
    ],
)
def test_bad_arguments_raise_cpus_error(fn):
    check_error(fn, make((2, 3, 4)))


# --- the fallback for other dtypes --------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.sum(0),
        lambda t: t.sum(),
        lambda t: t.mean(1),
        lambda t: t.var(0),
        lambda t: t.std(),
        lambda t: torch.sum(t, 0, out=torch.empty(0, dtype=t.dtype, device=t.device)),
    ],
)
def test_complex_inputs_go_through_the_fallback(fn):
    x = torch.randn(4, 5, dtype=torch.complex64)
    expected = fn(x)
    with (
        openreg_lab.fallback_policy("error"),
        pytest.raises(NotImplementedError, match="has no openreg kernel"),
    ):
        fn(x.to("openreg"))
    assert_matches(fn(x.to("openreg")), expected)


def test_complex_errors_come_from_cpu():
    x = torch.randn(4, 5, dtype=torch.complex64)
    for fn in (lambda t: t.amax(0), lambda t: t.max(), lambda t: t.max(0)):
        with pytest.raises(Exception) as cpu_err:
            fn(x)
        with pytest.raises(cpu_err.type) as dev_err:
            fn(x.to("openreg"))  # through the fallback: CPU's own error
        assert str(dev_err.value).splitlines()[0] == str(cpu_err.value).splitlines()[0]
    check_error(lambda t: t.argmax(), x)  # checked natively, like bool


# --- autograd ---------------------------------------------------------------------


def test_sum_backward_is_native():
    x = make((4, 6))
    with openreg_lab.fallback_policy("error"):
        d = x.to("openreg").requires_grad_()
        d.sum(1).sum().backward()
    assert_matches(d.grad, torch.ones(4, 6))


# --- argmax / argmin / max / min with a dim on more than 64 dims ----------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda t, d: torch.argmax(t, dim=0),
        lambda t, d: torch.argmin(t, dim=-1, keepdim=True),
        lambda t, d: torch.argmax(t, 0, out=torch.empty(0, dtype=torch.long, device=d)),
        lambda t, d: torch.max(t, dim=3),
        lambda t, d: torch.min(
            t, 0, out=(torch.empty(0, device=d), torch.empty(0, dtype=torch.long, device=d))
        ),
    ],
    ids=["argmax", "argmin_keepdim", "argmax_out", "max_dim", "min_dim_out"],
)
def test_arg_reductions_with_a_dim_refuse_more_than_64_dims(fn):
    err = assert_same_as_cpu(lambda d: fn(torch.zeros([1] * 65, device=d), d))
    assert "only tensors with up to 64 dims are supported" in str(err)


def _big(device):
    # 65 dims: one more than a reduction's dim mask has bits.
    return torch.arange(6.0).reshape([1] * 63 + [2, 3]).to(device)


WHOLE_TENSOR_REDUCTIONS = {
    "sum": lambda t, d: t.sum(),
    "sum_int": lambda t, d: t.long().sum(),
    "sum_keepdim": lambda t, d: t.sum(dim=None, keepdim=True),
    "sum_dim": lambda t, d: t.sum(dim=1),
    "sum_out": lambda t, d: torch.sum(t, dim=[], out=torch.empty(0, device=d)),
    "mean": lambda t, d: t.mean(),
    "mean_dim": lambda t, d: t.mean(dim=-1),
    "mean_out": lambda t, d: torch.mean(t, dim=[], out=torch.empty(0, device=d)),
    "amax": lambda t, d: t.amax(),
    "amin_dim": lambda t, d: t.amin(dim=0),
    "amax_out": lambda t, d: torch.amax(t, dim=[], out=torch.empty(0, device=d)),
    "max": lambda t, d: t.max(),
    "min": lambda t, d: t.min(),
    "argmax": lambda t, d: t.argmax(),
    "argmin_keepdim": lambda t, d: t.argmin(keepdim=True),
    "var": lambda t, d: t.var(),
    "std_keepdim": lambda t, d: t.std(dim=None, keepdim=True),
    "std_dim": lambda t, d: t.std(dim=64),
    "var_out": lambda t, d: torch.var(t, dim=None, out=torch.empty(0, device=d)),
}


@pytest.mark.parametrize("name", WHOLE_TENSOR_REDUCTIONS)
def test_reductions_of_more_than_64_dims_match_cpu(name):
    fn = WHOLE_TENSOR_REDUCTIONS[name]

    def run(device):
        r = fn(_big(device), device)
        return tuple(r.shape), r.reshape(-1)  # assert_close itself cannot compare 65-dim tensors

    assert_same_as_cpu(run)


def test_arg_reductions_with_a_dim_still_work_on_64_dims():
    assert_same_as_cpu(lambda d: torch.arange(6.0, device=d).reshape([1] * 62 + [2, 3]).argmax(dim=-1))
