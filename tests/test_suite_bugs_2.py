"""More bugs PyTorch's device-generic suites found on openreg (issue 13, item 2, and the smaller items of 3).

Each case runs on CPU and on openreg: the same error, or the same values (and the same warnings).
"""

from __future__ import annotations

import pytest
import torch
from _parity import assert_same_as_cpu

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


def test_arg_reductions_with_a_dim_still_work_on_64_dims():
    assert_same_as_cpu(lambda d: torch.arange(6.0, device=d).reshape([1] * 62 + [2, 3]).argmax(dim=-1))
