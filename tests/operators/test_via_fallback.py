"""The operators openreg routes to the CPU fallback (csrc/aten/fallback/ViaFallback.cpp, `via_fallback` in
native_ops.yaml): ATen's own kernels for them reject or mishandle a PrivateUse1 device, so openreg
sends them to the fallback, where they behave exactly as on CPU.

Each case runs on CPU and on openreg: the same error, or the same values (and the same warnings).
Found by PyTorch's device-generic suites.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.support.parity import assert_same_as_cpu

# --- torch.mode with out= ------------------------------------------------------------------------


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_mode_out_runs_like_cpu(dim, keepdim):
    def run(device):
        x = torch.tensor([[1.0, 2, 2, 3], [4, 4, 5, 6], [7, 7, 7, 1]], device=device)
        values = torch.empty(0, device=device)
        indices = torch.empty(0, dtype=torch.long, device=device)
        result = torch.mode(x, dim, keepdim, out=(values, indices))
        assert result.values is values and result.indices is indices
        return values, indices

    assert_same_as_cpu(run, rtol=0, atol=0)


def test_mode_out_checks_dtypes_like_cpu():
    def run(device):
        x = torch.tensor([[1.0, 2, 2]], device=device)
        return torch.mode(x, 1, out=(torch.empty(0, device=device), torch.empty(0, device=device)))

    assert_same_as_cpu(run)


# --- warnings: the same ones as CPU, as often ------------------------------------------------------


def _warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message).split(" (Triggered")[0] for w in caught]


@pytest.mark.parametrize("loss", [F.mse_loss, F.smooth_l1_loss, F.l1_loss, F.huber_loss])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_warn_as_cpu_does(loss, reduction):
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    expected = _warnings(lambda: loss(a, b, reduction=reduction))
    assert _warnings(lambda: loss(a.openreg(), b.openreg(), reduction=reduction)) == expected
    torch.testing.assert_close(
        loss(a.openreg(), b.openreg(), reduction=reduction).cpu(), loss(a, b, reduction=reduction)
    )


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        (
            "mode",
            lambda x: torch.mode(
                x, 0, out=(torch.empty_like(x), torch.empty(0, dtype=torch.long, device=x.device))
            ),
        ),
        ("smooth_l1_loss", lambda x: F.smooth_l1_loss(x, x)),
    ],
)
def test_ops_routed_to_the_fallback_obey_its_policy(name, fn):
    import openreg_lab

    x = torch.arange(4.0, device="openreg")
    with openreg_lab.fallback_policy("error"), pytest.raises(NotImplementedError, match=name):
        fn(x)


# --- the operators routed to the fallback, under profiles --------------------------------------------

ROUTED = {"aten::smooth_l1_loss": lambda a, b, i: F.smooth_l1_loss(a, b)}


def _counts(fn):
    from openreg_lab import _C

    def now():
        return (_C.fallbacks_on_this_thread(), _C.generic_calls_on_this_thread(), _C.copies_on_this_thread())

    start = now()
    fn()
    return tuple(e - s for e, s in zip(now(), start, strict=True))


@pytest.mark.parametrize("op", ROUTED)
def test_routed_ops_run_generically_under_a_profile_that_has_them(op):
    import openreg_lab

    assert op in openreg_lab.dispatch.native.fallback_routes()
    a, b = torch.randn(3, 4, device="openreg"), torch.randn(3, 4, device="openreg")
    i = torch.tensor([2, 0], device="openreg")
    fn = ROUTED[op]
    with openreg_lab.use_profile("cpu"):
        assert _counts(lambda: fn(a, b, i)) == (0, 1, 0)  # no fallback, one generic call, no copy
    with openreg_lab.use_profile("minimal"):
        fallbacks, generic, copies = _counts(lambda: fn(a, b, i))
        assert fallbacks >= 1 and generic == 0 and copies > 0
    torch.testing.assert_close(fn(a, b, i).cpu(), fn(a.cpu(), b.cpu(), i.cpu()))
