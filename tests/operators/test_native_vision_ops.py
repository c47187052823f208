"""Native kernels for what vision and diffusion models run every step, against the CPU: batch norm
(native/BatchNorm.cpp), group norm (native/GroupNorm.cpp; its layouts, dtypes and errors in
tests/operators/test_native_group_norm.py), 2-d pooling (native/Pooling.cpp),
upsampling (native/Upsample.cpp), the mean squared error (native/MseLoss.cpp), var_mean and std_mean
(native/Reduction.cpp).

PyTorch's OpInfo samples (tests/support/opinfo_parity.py) in float32, contiguous and not, float64 and
bfloat16, each call native with no fallback and no copy; then, each run on the CPU and natively on
openreg (tests.support.parity.assert_native_as_cpu: the same values, dtypes, shapes, strides,
warnings and errors): channels-last inputs, training and eval with the running statistics updated,
16-bit inputs with float parameters, the out= forms with right, empty and wrong-sized outputs, and
arguments the CPU refuses.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import openreg_lab
from tests.support.opinfo_parity import all_cases, case_id, check
from tests.support.parity import assert_native_as_cpu

BATCH_NORM = {
    "aten::native_batch_norm",
    "aten::native_batch_norm.out",
    "aten::native_batch_norm_backward",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit.no_stats",
    "aten::_batch_norm_with_update",
    "aten::_batch_norm_no_update",
    "aten::batch_norm_backward",
}
GROUP_NORM = {"aten::native_group_norm", "aten::native_group_norm_backward"}
POOLING = {
    f"aten::{op}{form}"
    for op, out in [
        ("avg_pool2d", ".out"),
        ("avg_pool2d_backward", ".grad_input"),
        ("max_pool2d_with_indices", ".out"),
        ("max_pool2d_with_indices_backward", ".grad_input"),
    ]
    for form in ("", out)
} | {"aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward"}
UPSAMPLE = {
    f"aten::upsample_{mode}2d{part}{form}"
    for mode in ("nearest", "bilinear")
    for part, out in (("", ".out"), ("_backward", ".grad_input"))
    for form in ("", out)
}
MSE = {"aten::mse_loss", "aten::mse_loss_backward"}
VAR_MEAN = {"aten::var_mean.correction", "aten::std_mean.correction"}
OURS = BATCH_NORM | GROUP_NORM | POOLING | UPSAMPLE | MSE | VAR_MEAN

BN = {"aten::native_batch_norm", "aten::native_batch_norm_backward"}
OPINFOS = {
    "nn.functional.batch_norm": BN,
    "native_batch_norm": {"aten::native_batch_norm"},
    "nn.functional.instance_norm": BN,
    "nn.functional.group_norm": GROUP_NORM,
    "native_group_norm": {"aten::native_group_norm"},
    "nn.functional.avg_pool2d": {"aten::avg_pool2d", "aten::avg_pool2d_backward"},
    "nn.functional.avg_pool1d": {"aten::avg_pool2d", "aten::avg_pool2d_backward"},
    "nn.functional.max_pool2d": {"aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward"},
    "max_pool2d_with_indices_backward": {"aten::max_pool2d_with_indices_backward"},
    "nn.functional.adaptive_avg_pool2d": {
        "aten::_adaptive_avg_pool2d",
        "aten::_adaptive_avg_pool2d_backward",
    },
    "nn.functional.adaptive_avg_pool1d": {
        "aten::_adaptive_avg_pool2d",
        "aten::_adaptive_avg_pool2d_backward",
    },
    "nn.functional.interpolate.nearest": {"aten::upsample_nearest2d", "aten::upsample_nearest2d_backward"},
    "nn.functional.interpolate.bilinear": {"aten::upsample_bilinear2d", "aten::upsample_bilinear2d_backward"},
    "nn.functional.mse_loss": MSE,
    "var_mean": {"aten::var_mean.correction"},
    "var_mean.unbiased": {"aten::var_mean.correction"},
    "std_mean": {"aten::std_mean.correction"},
    "std_mean.unbiased": {"aten::std_mean.correction"},
}
# OpInfos some of whose samples reach other ops (1-d and 3-d interpolation, a 1 x 1 adaptive pool
# (a mean), eval-mode batch norm without a backward, instance norm's reshapes).
SOME = {
    "nn.functional.interpolate.nearest",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_avg_pool1d",
    "nn.functional.batch_norm",
    "nn.functional.instance_norm",
}
# Samples compared per OpInfo: all of nearest interpolation's, whose 2-d ones come after its 1-d ones.
# (F.upsample_nearest and F.upsample_bilinear, deprecated, are interpolate.)
SAMPLES = {"nn.functional.interpolate.nearest": 24}
DTYPES = [torch.float32, torch.float64, torch.bfloat16]
CASES = {
    (c.id, dtype, noncontiguous): c
    for dtype in DTYPES
    for c in all_cases(dtype)
    if c.id in OPINFOS
    for noncontiguous in ((False, True) if dtype == torch.float32 else (False,))
}


def assert_native(t: openreg_lab.Trace, expect: set[str], some: bool = False) -> None:
    """Every call of our ops in ``t`` ran natively, none fell back or copied; all of ``expect`` ran
    (``some``: at least one of them)."""
    ev = t.events
    ops = ev[(ev["kind"] == "op") & ev["name"].isin(OURS)]
    seen = set(ops["name"])
    assert (seen & expect) if some else (expect <= seen), sorted(seen)
    assert set(ops["kernel"]) <= {"native"}, ops[["name", "kernel"]].drop_duplicates()
    assert not set(t.fallbacks()["name"]) & OURS, t.fallbacks()[["name", "calls"]]
    copies = t.copies()
    assert not set(copies["op"]) & OURS, copies[["op", "bytes"]]


def test_every_op_is_registered_and_listed():
    by_family = openreg_lab.native_ops_by_family()
    assert set(by_family["batch_norm"]) == BATCH_NORM
    assert set(by_family["group_norm"]) == GROUP_NORM
    assert set(by_family["pooling"]) == POOLING
    assert set(by_family["upsample"]) == UPSAMPLE
    assert set(by_family["mse_loss"]) == MSE and VAR_MEAN <= set(by_family["reduction"])
    for op in OURS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), op
    assert not set(openreg_lab.via_cpu_ops()) & OURS


def test_every_opinfo_is_found():
    assert {name for name, _, _ in CASES} == set(OPINFOS)


@pytest.mark.parametrize("key", list(CASES), ids=case_id)
def test_opinfo_parity_natively(key):
    name, dtype, noncontiguous = key
    with openreg_lab.trace() as t:
        compared = check(
            CASES[key], max_samples=SAMPLES.get(name, 8), dtype=dtype, noncontiguous=noncontiguous
        )
    assert compared > 0
    assert_native(t, OPINFOS[name], some=name in SOME)


# --- batch norm: layouts, training and eval, running statistics ---------------------------------------

Fn = Callable[[str], Any]


def _x(
    *shape: int, seed: int = 0, dtype: torch.dtype = torch.float32, layout: str = "contiguous", device="cpu"
):
    # made on the device, so that a view stays a view (a copy to the device would make it dense)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    elif layout == "channels_last_3d":
        x = x.to(memory_format=torch.channels_last_3d)
    elif layout == "strided":
        # column-major in the last two dims, and sliced: no dense layout
        x = x.transpose(-1, -2).contiguous().transpose(-1, -2)[..., : x.shape[-1] - 1]
    return x


def _batch_norm(shape, layout, training, affine, stats, momentum=0.1, dtype=torch.float32, params=None) -> Fn:
    def run(d: str) -> Any:
        x = _x(*shape, layout=layout, dtype=dtype, device=d).requires_grad_()
        c = shape[1]
        pdtype = params or dtype
        w = _x(c, seed=1, dtype=pdtype, device=d).requires_grad_() if affine else None
        b = _x(c, seed=2, dtype=pdtype, device=d).requires_grad_() if affine else None
        rm = _x(c, seed=3, dtype=pdtype, device=d) if stats else None
        rv = _x(c, seed=4, dtype=pdtype, device=d).abs() if stats else None
        y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=1e-3)
        (y.float() * _x(*shape, seed=5, device=d)).sum().backward()
        return [y, x.grad, w.grad if affine else None, b.grad if affine else None, rm, rv]

    return run


BN_CASES = {
    "-".join(
        [
            layout,
            "train" if training else "eval",
            "affine" if affine else "plain",
            "stats" if stats else "nostats",
        ]
    ): _batch_norm(shape, layout, training, affine, stats)
    for layout, shape in [
        ("contiguous", (4, 3, 5, 6)),
        ("channels_last", (4, 3, 5, 6)),
        ("strided", (4, 3, 5, 7)),
        ("channels_last_3d", (2, 3, 2, 4, 3)),
        ("contiguous", (6, 5)),
    ]
    for training in (True, False)
    for affine in (True, False)
    for stats in (True, False)
    if stats or training
}
BN_CASES["bfloat16-float-params"] = _batch_norm(
    (4, 3, 5, 6), "channels_last", True, True, True, dtype=torch.bfloat16, params=torch.float32
)
BN_CASES["float64"] = _batch_norm((4, 3, 5, 6), "contiguous", True, True, True, dtype=torch.float64)


@pytest.mark.parametrize("case", list(BN_CASES))
def test_batch_norm_as_on_cpu(case):
    # The same CPU kernels on the same bytes: the results and the running statistics equal bit for bit.
    assert_native_as_cpu(BN_CASES[case], rtol=0, atol=0)


def test_batch_norm_module_updates_its_statistics_as_on_cpu():
    def run(d: str) -> Any:
        torch.manual_seed(0)
        bn = torch.nn.BatchNorm2d(3, momentum=None).to(d)
        for step in range(3):
            bn(_x(4, 3, 5, 6, seed=step, device=d, layout="channels_last")).sum().backward()
        bn.eval()
        return [bn(_x(4, 3, 5, 6, seed=9, device=d)), bn.running_mean, bn.running_var, bn.num_batches_tracked]

    assert_native_as_cpu(run, rtol=0, atol=0)


def test_batch_norm_variants_and_out_form_as_on_cpu():
    def run(d: str) -> Any:
        x = _x(4, 3, 5, 6, device=d)
        w, b = _x(3, seed=1, device=d), _x(3, seed=2, device=d)
        rm, rv = _x(3, seed=3, device=d), _x(3, seed=4, device=d).abs()
        aten = torch.ops.aten
        legit = aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5)
        no_stats = aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)
        with_update = aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)
        no_update = aten._batch_norm_no_update(x, w, b, rm, rv, 0.1, 1e-5)
        out, mean, invstd = (torch.empty(0, device=d) for _ in range(3))
        outs = aten.native_batch_norm.out(
            x, w, b, rm, rv, True, 0.1, 1e-5, out=out, save_mean=mean, save_invstd=invstd
        )
        grads = aten.batch_norm_backward(
            x, x, w, rm, rv, legit[1], legit[2], True, 1e-5, [True, True, True], with_update[3]
        )
        assert outs[0] is out and outs[1] is mean and outs[2] is invstd
        return [*legit, *no_stats, *with_update, *no_update, out, mean, invstd, *grads, rm, rv]

    assert_native_as_cpu(run, rtol=0, atol=0)


def test_batch_norm_backward_of_mixed_layouts_as_on_cpu():
    # a gradient in another layout than the input: the CPU's general kernel
    def run(d: str) -> Any:
        x = _x(4, 3, 5, 6, device=d)
        g = _x(4, 3, 5, 6, seed=1, device=d, layout="channels_last")
        w = _x(3, seed=2, device=d)
        _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5)
        return torch.ops.aten.native_batch_norm_backward(
            g, x, w, None, None, mean, invstd, True, 1e-5, [True] * 3
        )

    assert_native_as_cpu(run, rtol=1e-6, atol=1e-6)


# --- pooling ------------------------------------------------------------------------------------------


def _pool(fn: Callable[..., Any], shape=(2, 3, 9, 8), layout="contiguous", dtype=torch.float32, **kw) -> Fn:
    def run(d: str) -> Any:
        x = _x(*shape, layout=layout, dtype=dtype, device=d).requires_grad_()
        out = fn(x, **kw)
        first = out[0] if isinstance(out, tuple) else out
        (first.float() * _x(*first.shape, seed=5, device=d)).sum().backward()
        return [out, x.grad]

    return run


POOL_CASES = {
    "max-3-2-1": _pool(F.max_pool2d, kernel_size=3, stride=2, padding=1),
    "max-channels-last": _pool(F.max_pool2d, layout="channels_last", kernel_size=3, stride=2, padding=1),
    "max-indices-ceil-dilation": _pool(
        F.max_pool2d, kernel_size=(2, 3), stride=(2, 1), dilation=(1, 2), ceil_mode=True, return_indices=True
    ),
    "max-3d-input": _pool(F.max_pool2d, shape=(3, 9, 8), kernel_size=2),
    "max-strided": _pool(F.max_pool2d, shape=(2, 3, 9, 9), layout="strided", kernel_size=2),
    "max-bfloat16": _pool(F.max_pool2d, dtype=torch.bfloat16, kernel_size=2),
    "avg-2": _pool(F.avg_pool2d, kernel_size=2),
    "avg-channels-last": _pool(F.avg_pool2d, layout="channels_last", kernel_size=3, stride=2, padding=1),
    "avg-exclude-pad-ceil": _pool(
        F.avg_pool2d, kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False
    ),
    "avg-divisor": _pool(F.avg_pool2d, kernel_size=2, divisor_override=3),
    "avg-3d-input": _pool(F.avg_pool2d, shape=(3, 9, 8), kernel_size=2),
    "avg-float64": _pool(F.avg_pool2d, dtype=torch.float64, kernel_size=2),
    "adaptive-3x4": _pool(F.adaptive_avg_pool2d, output_size=(3, 4)),
    "adaptive-channels-last": _pool(F.adaptive_avg_pool2d, layout="channels_last", output_size=5),
    "adaptive-larger": _pool(F.adaptive_avg_pool2d, output_size=(11, 10)),
    "adaptive-3d-input": _pool(F.adaptive_avg_pool2d, shape=(3, 9, 8), output_size=(2, None)),
    "adaptive-bfloat16": _pool(F.adaptive_avg_pool2d, dtype=torch.bfloat16, output_size=3),
    "max-kernel-too-large": _pool(F.max_pool2d, kernel_size=10),
    "max-pad-too-large": _pool(F.max_pool2d, kernel_size=2, padding=2),
    "avg-2d-input": _pool(F.avg_pool2d, shape=(9, 8), kernel_size=2),
    "adaptive-2d-input": _pool(F.adaptive_avg_pool2d, shape=(9, 8), output_size=2),
    "adaptive-empty-channels": _pool(F.adaptive_avg_pool2d, shape=(2, 0, 4, 4), output_size=2),
}


@pytest.mark.parametrize("case", list(POOL_CASES))
def test_pooling_as_on_cpu(case):
    assert_native_as_cpu(POOL_CASES[case], rtol=0, atol=0)


# --- upsampling -----------------------------------------------------------------------------------


def _upsample(shape=(2, 3, 5, 4), layout="contiguous", dtype=torch.float32, **kw) -> Fn:
    return _pool(F.interpolate, shape=shape, layout=layout, dtype=dtype, **kw)


UPSAMPLE_CASES = {
    "nearest-2x": _upsample(scale_factor=2.0, mode="nearest"),
    "nearest-size": _upsample(size=(7, 9), mode="nearest"),
    "nearest-down": _upsample(size=(3, 2), mode="nearest"),
    "nearest-channels-last": _upsample(layout="channels_last", scale_factor=2.0, mode="nearest"),
    "nearest-fractional-scale": _upsample(scale_factor=1.7, mode="nearest"),
    "nearest-bfloat16": _upsample(dtype=torch.bfloat16, scale_factor=2.0, mode="nearest"),
    "bilinear": _upsample(scale_factor=2.0, mode="bilinear"),
    "bilinear-align-corners": _upsample(size=(8, 7), mode="bilinear", align_corners=True),
    "bilinear-channels-last": _upsample(layout="channels_last", scale_factor=1.5, mode="bilinear"),
    "bilinear-recompute-scale": _upsample(scale_factor=1.3, mode="bilinear", recompute_scale_factor=True),
    "bilinear-float64": _upsample(dtype=torch.float64, size=(6, 6), mode="bilinear"),
    "bilinear-strided": _upsample(layout="strided", shape=(2, 3, 5, 5), scale_factor=2.0, mode="bilinear"),
    "nearest-zero-size": lambda d: torch.ops.aten.upsample_nearest2d(_x(1, 2, 3, 3, device=d), [0, 4]),
    "bilinear-3d-input": lambda d: torch.ops.aten.upsample_bilinear2d(_x(2, 3, 3, device=d), [4, 4], False),
}


@pytest.mark.parametrize("case", list(UPSAMPLE_CASES))
def test_upsampling_as_on_cpu(case):
    assert_native_as_cpu(UPSAMPLE_CASES[case], rtol=0, atol=0)


# --- out= forms ------------------------------------------------------------------------------------

OUT_FORMS = {
    "avg_pool2d": lambda x, o: torch.ops.aten.avg_pool2d.out(x, [2, 2], out=o),
    "max_pool2d_with_indices": lambda x, o: torch.ops.aten.max_pool2d_with_indices.out(
        x, [2, 2], out=o, indices=torch.empty(0, dtype=torch.long, device=x.device)
    ),
    "upsample_nearest2d": lambda x, o: torch.ops.aten.upsample_nearest2d.out(x, [8, 6], out=o),
    "upsample_bilinear2d": lambda x, o: torch.ops.aten.upsample_bilinear2d.out(x, [8, 6], True, out=o),
    "avg_pool2d_backward": lambda x, o: torch.ops.aten.avg_pool2d_backward.grad_input(
        x[..., :2, :2], x[..., :4, :4], [2, 2], [2, 2], [0, 0], False, True, None, grad_input=o
    ),
    "upsample_nearest2d_backward": lambda x, o: torch.ops.aten.upsample_nearest2d_backward.grad_input(
        x, [4, 4], [2, 3, 2, 2], grad_input=o
    ),
    "upsample_bilinear2d_backward": lambda x, o: torch.ops.aten.upsample_bilinear2d_backward.grad_input(
        x, [4, 4], [2, 3, 3, 3], False, grad_input=o
    ),
}
OUTS = {
    "right": lambda d, shape: torch.zeros(shape, device=d),
    "empty": lambda d, shape: torch.empty(0, device=d),
    "wrong-size": lambda d, shape: torch.zeros(3, device=d),
    "channels-last": lambda d, shape: torch.zeros(shape, device=d).to(memory_format=torch.channels_last),
    "wrong-dtype": lambda d, shape: torch.zeros(shape, dtype=torch.float64, device=d),
}


@pytest.mark.parametrize("out", list(OUTS))
@pytest.mark.parametrize("op", list(OUT_FORMS))
def test_out_forms_as_on_cpu(op, out):
    def run(d: str) -> Any:
        x = _x(2, 3, 4, 4, device=d)
        shape = OUT_FORMS[op](x.cpu(), torch.empty(0))
        shape = (shape[0] if isinstance(shape, tuple) else shape).shape
        o = OUTS[out](d, shape)
        result = OUT_FORMS[op](x, o)
        first = result[0] if isinstance(result, tuple) else result
        assert first is o
        return result

    assert_native_as_cpu(run, rtol=0, atol=0)


# --- the mean squared error ---------------------------------------------------------------------------


def _mse(shape=(3, 4), target_shape=None, reduction="mean", dtype=torch.float32, layout="contiguous") -> Fn:
    def run(d: str) -> Any:
        x = _x(*shape, dtype=dtype, layout=layout, device=d).requires_grad_()
        y = _x(*(target_shape or shape), seed=1, dtype=dtype, device=d)
        loss = F.mse_loss(x, y, reduction=reduction)
        (loss.float() * _x(*loss.shape, seed=2, device=d)).sum().backward()
        return [loss, x.grad]

    return run


MSE_CASES = {
    **{r: _mse(reduction=r) for r in ("mean", "sum", "none")},
    "channels-last-none": _mse(shape=(2, 3, 4, 5), layout="channels_last", reduction="none"),
    "bfloat16": _mse(dtype=torch.bfloat16),
    "float64": _mse(dtype=torch.float64),
    "broadcast-target": _mse(shape=(3, 4), target_shape=(4,)),
    "broadcast-input": _mse(shape=(4,), target_shape=(3, 4), reduction="sum"),
    "empty": _mse(shape=(0, 4)),
    "not-broadcastable": _mse(shape=(3, 4), target_shape=(3,)),
    "integers": lambda d: F.mse_loss(torch.ones(3, dtype=torch.int64, device=d), torch.ones(3, device=d)),
}


@pytest.mark.parametrize("case", list(MSE_CASES))
def test_mse_loss_as_on_cpu(case):
    assert_native_as_cpu(MSE_CASES[case], rtol=0, atol=0)


# --- var_mean and std_mean --------------------------------------------------------------------------


def _var_mean(fn, shape=(4, 5, 6), dtype=torch.float32, layout="contiguous", **kw) -> Fn:
    return lambda d: fn(_x(*shape, dtype=dtype, layout=layout, device=d), **kw)


VAR_MEAN_CASES = {
    f"{fn.__name__}-{name}": _var_mean(fn, **kw)
    for fn in (torch.var_mean, torch.std_mean)
    for name, kw in {
        "all": {},
        "dim": {"dim": 1},
        "dims-keepdim": {"dim": (0, 2), "keepdim": True},
        "correction-0": {"dim": -1, "correction": 0},
        "unbiased-false": {"dim": 0, "unbiased": False},
        "channels-last": {"shape": (2, 3, 4, 5), "layout": "channels_last", "dim": (2, 3)},
        "strided": {"layout": "strided", "dim": 1},
        "bfloat16": {"dtype": torch.bfloat16, "dim": 1},
        "float64": {"dtype": torch.float64},
        "one-element-dof": {"shape": (3, 1), "dim": 1},
        "empty": {"shape": (0, 3), "dim": 0},
        "integers": {"dtype": torch.int32},
    }.items()
}


@pytest.mark.parametrize("case", list(VAR_MEAN_CASES))
def test_var_mean_and_std_mean_as_on_cpu(case):
    # openreg sums in double in two passes, the CPU with Welford's method: a float32 ulp apart at most
    assert_native_as_cpu(VAR_MEAN_CASES[case], rtol=1.3e-6, atol=1e-6)


# --- devices ---------------------------------------------------------------------------------------


def test_mixed_devices_are_refused():
    x = torch.zeros(2, 3, 4, 4, device="openreg")
    same = "Expected all tensors to be on the same device"
    with pytest.raises(RuntimeError, match=same):
        torch.ops.aten.native_batch_norm(x, torch.ones(3), None, None, None, True, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match=same):
        torch.ops.aten.native_group_norm(x, torch.ones(3), None, 2, 3, 16, 3, 1e-5)
    with pytest.raises(RuntimeError, match=same):
        torch.ops.aten.avg_pool2d.out(x, [2, 2], out=torch.empty(0))
    with pytest.raises(RuntimeError, match=same):
        F.mse_loss(x, torch.zeros(2, 3, 4, 4))
    with pytest.raises(RuntimeError, match=same):
        torch.ops.aten.upsample_nearest2d_backward.grad_input(
            x, [4, 4], [2, 3, 2, 2], grad_input=torch.empty(0)
        )


def test_a_channels_last_pipeline_stays_channels_last_natively():
    x = _x(4, 8, 16, 16, device="openreg", layout="channels_last")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with openreg_lab.fallback_policy("error"), openreg_lab.trace() as t:
            y = F.max_pool2d(torch.relu(torch.nn.functional.batch_norm(x, None, None, training=True)), 2)
            z = F.interpolate(y, scale_factor=2.0)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert z.is_contiguous(memory_format=torch.channels_last)
    assert_native(t, {"aten::native_batch_norm", "aten::max_pool2d_with_indices", "aten::upsample_nearest2d"})
