"""OpInfo parity: PyTorch's own sample inputs give the same results on openreg as on CPU.

The default run checks a representative subset (native kernels and common fallbacks) in float32,
a smaller one in each of the other dtypes (float64, float16, bfloat16, complex64, int32, bool) and
the float32 subset again on non-contiguous inputs; the full sweep over every float32 OpInfo runs
with ``pytest -m slow tests/operators/test_opinfo.py``.
"""

import pytest
import torch

from tests.support.opinfo_parity import EXTRA_DTYPES, Case, _to_cpu, all_cases, check

# A fast, representative subset: ops with hand-written kernels, composites built on them, and ops
# that run through the CPU fallback (views, in-place, out=, several outputs, tensor lists).
SUBSET = {
    "add",
    "sub",
    "mul",
    "div.no_rounding_mode",
    "div.floor_rounding",
    "pow",
    "maximum",
    "eq",
    "lt",
    "neg",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "abs",
    "sin",
    "cos",
    "reciprocal",
    "sign",
    "clamp",
    "nn.functional.relu",
    "nn.functional.gelu",
    "nn.functional.silu",
    "sigmoid",
    "tanh",
    "sum",
    "mean",
    "amax",
    "amin",
    "max.reduction_with_dim",
    "argmax",
    "var",
    "std",
    "mm",
    "addmm",
    "bmm",
    "matmul",
    "nn.functional.linear",
    "softmax",
    "log_softmax",
    "nn.functional.layer_norm",
    "nn.functional.embedding",
    "nn.functional.nll_loss",
    "cat",
    "index_select",
    "where",
    "masked_fill",
    "lerp",
    "addcmul",
    "addcdiv",
    "arange",
    "fill",
    "zero_",
    "cumsum",
    "cumprod",
    "sort",
    "topk",
    "atan2",
    "fmod",
    "unique",
    "nonzero",
    "stack",
    "split",
    "transpose",
    "t",
    "diagonal",
    "narrow",
    "unfold",
    "as_strided",
    "view",
    "reshape",
    "flip",
    "roll",
    "gather",
    "scatter_add",
    "index_put",
    "nn.functional.conv2d",
    "nn.functional.batch_norm",
    "linalg.inv",
}

# The ops checked in every dtype of EXTRA_DTYPES that they support on CPU: native elementwise and
# reduction kernels (whose dtype dispatch is openreg's own), matrix products, and fallbacks.
DTYPE_SUBSET = {
    "add",
    "mul",
    "div.no_rounding_mode",
    "neg",
    "abs",
    "exp",
    "sign",
    "clamp",
    "maximum",
    "eq",
    "where",
    "masked_fill",
    "nn.functional.relu",
    "sigmoid",
    "sum",
    "mean",
    "amax",
    "argmax",
    "cumsum",
    "cumprod",
    "mm",
    "matmul",
    "softmax",
    "cat",
    "index_select",
    "gather",
    "sort",
    "flip",
}

# Known gaps, each with its reason. strict: a fix makes the test fail until the entry goes.
EXPECTED_FAILURES: dict[str, str] = {}

CASES = all_cases()
FAST = [c for c in CASES if c.id in SUBSET]
DTYPE_CASES = [(c, dtype) for dtype in EXTRA_DTYPES for c in all_cases(dtype) if c.id in DTYPE_SUBSET]


def test_subset_names_exist():
    ids = {c.id for c in CASES}
    assert SUBSET - ids == set()
    assert DTYPE_SUBSET - ids == set()


def test_every_extra_dtype_is_checked():
    assert {dtype for _, dtype in DTYPE_CASES} == set(EXTRA_DTYPES)


def test_cpu_copy_of_a_sample_keeps_conjugate_and_negative_views():
    # The parity helper rebuilds views on a CPU copy of their base; a lazy conj() or neg view
    # carries its bit in the view alone, so a rebuilt view without it compares wrong values.
    base = torch.randn(8, dtype=torch.complex64, device="openreg")
    host = base.cpu()
    views = {
        "conj": (base.conj(), host.conj()),
        "sliced conj": (base[1:5].conj(), host[1:5].conj()),
        "neg": (torch._neg_view(base[::2]), torch._neg_view(host[::2])),
        "conj of neg": (torch._neg_view(base).conj(), torch._neg_view(host).conj()),
    }
    for name, (view, expected) in views.items():
        copy = _to_cpu(view)
        assert copy.device.type == "cpu", name
        assert torch.equal(copy.resolve_conj().resolve_neg(), expected.resolve_conj().resolve_neg()), name


@pytest.mark.parametrize("case", FAST, ids=lambda c: c.id)
def test_opinfo_subset(case: Case):
    assert check(case, max_samples=8) > 0


def _id(v: object) -> str:
    return v.id if isinstance(v, Case) else str(v).removeprefix("torch.")


@pytest.mark.parametrize(("case", "dtype"), DTYPE_CASES, ids=_id)
def test_opinfo_dtypes(case: Case, dtype: torch.dtype):
    assert check(case, max_samples=4, dtype=dtype) > 0


@pytest.mark.parametrize("case", FAST, ids=lambda c: c.id)
def test_opinfo_subset_noncontiguous(case: Case):
    assert check(case, max_samples=4, noncontiguous=True) > 0


def _with_known_gaps(cases: list[Case]) -> list:
    return [
        pytest.param(c, marks=pytest.mark.xfail(reason=EXPECTED_FAILURES[c.id], strict=True))
        if c.id in EXPECTED_FAILURES
        else c
        for c in cases
    ]


@pytest.mark.slow
@pytest.mark.parametrize("case", _with_known_gaps(CASES), ids=lambda c: c.id)
def test_opinfo_full(case: Case):
    check(case)
