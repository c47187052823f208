"""Native kernels for what training clients run every step, against CPU.

The fused Adam and AdamW steps (native/FusedAdam.cpp), the norms of gradient clipping
(native/Norm.cpp), the attention-mask operators and isnan (native/Mask.cpp), convolution forward
and backward (Convolution.cpp), dropout (native/Dropout.cpp), `&` (native/Bitwise.cpp), gather and
advanced indexing (native/AdvancedIndexing.cpp): parity with CPU on PyTorch's OpInfo samples
(tests/support/opinfo_parity.py) and on optimizer steps, and, from the trace, no fallback event and no copy
for any of them.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from torch.testing._internal.common_methods_invocations import foreach_reduce_op_db

import openreg_lab
from tests.support.opinfo_parity import Case, all_cases, case_id, check

MASK_OPS = {
    f"aten::{name}{overload}"
    for name in ("all", "any")
    for overload in ("", ".all_out", ".dim", ".out", ".dims", ".dims_out")
} | {f"aten::{n}{o}" for n in ("isneginf", "isposinf") for o in ("", ".out")}
MASK_OPS |= {f"aten::{n}{o}" for n in ("tril", "triu") for o in ("", "_", ".out")} | {"aten::isnan"}
NORM_OPS = {"aten::linalg_vector_norm", "aten::linalg_vector_norm.out", "aten::_foreach_norm.Scalar"}
ADAM_OPS = {f"aten::_fused_{n}_{o}" for n in ("adam", "adamw") for o in ("", ".tensor_lr")}
CONV_OPS = {"aten::convolution_overrideable", "aten::convolution_backward_overrideable"}
DROPOUT_OPS = {"aten::native_dropout", "aten::native_dropout_backward"}
BITWISE_OPS = {"aten::bitwise_and.Tensor", "aten::bitwise_and_.Tensor", "aten::bitwise_and.Tensor_out"}
INDEX_OPS = {"aten::gather", "aten::gather.out", "aten::index.Tensor", "aten::index.Tensor_out"}
OURS = MASK_OPS | NORM_OPS | ADAM_OPS | CONV_OPS | DROPOUT_OPS | BITWISE_OPS | INDEX_OPS

OPINFOS = {
    "all": {"aten::all", "aten::all.dim", "aten::all.dims"},
    "any": {"aten::any", "aten::any.dim", "aten::any.dims"},
    "isneginf": {"aten::isneginf"},
    "isposinf": {"aten::isposinf"},
    "tril": {"aten::tril"},
    "triu": {"aten::triu"},
    "linalg.vector_norm": {"aten::linalg_vector_norm"},
    "_foreach_norm": {"aten::_foreach_norm.Scalar"},
    "nn.functional.conv1d": CONV_OPS,
    "nn.functional.conv2d": CONV_OPS,
    "nn.functional.conv_transpose1d": CONV_OPS,
    "nn.functional.conv_transpose2d": CONV_OPS,
    "isnan": {"aten::isnan"},
    "bitwise_and": {"aten::bitwise_and.Tensor"},
    "gather": {"aten::gather"},
    "__getitem__": {"aten::index.Tensor"},
    # Seeded alike on both sides (check() seeds before each call): the same masks, the same values.
    "nn.functional.dropout": DROPOUT_OPS,
    "native_dropout_backward": {"aten::native_dropout_backward"},
}
# OpInfos some of whose samples do not reach our ops (basic slicing, dropout in eval mode, p=0).
SOME = {"all", "any", "__getitem__", "nn.functional.dropout"}
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.bool]
# Integer dtypes too for `&`; a non-floating gradient of dropout is the fallback's (the CPU's own
# type promotion), not ours.
EXTRA_DTYPES = {"bitwise_and": [torch.int32, torch.uint8]}
FOREACH_NORM = next(Case(op) for op in foreach_reduce_op_db if op.name == "_foreach_norm")
# (OpInfo id, dtype, non-contiguous): every dtype contiguous, float32 non-contiguous too.
CASES = {
    (c.id, dtype, noncontiguous): c
    for dtype in [*DTYPES, *EXTRA_DTYPES["bitwise_and"]]
    for c in [*all_cases(dtype), FOREACH_NORM]
    if c.id in OPINFOS and dtype in c.op.supported_dtypes("cpu")
    if dtype in DTYPES or dtype in EXTRA_DTYPES.get(c.id, ())
    if c.id != "native_dropout_backward" or dtype.is_floating_point
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
    assert not set(t.fallbacks()["name"]) & OURS
    copies = t.copies()
    assert not set(copies["op"]) & OURS, copies[["op", "bytes"]]


def test_every_op_is_registered_and_listed():
    listed = set(openreg_lab.native_ops())
    assert listed >= OURS
    for op in OURS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), op
    assert not set(openreg_lab.via_cpu_ops()) & OURS


def test_every_opinfo_is_found():
    assert {name for name, _, _ in CASES} == set(OPINFOS)


@pytest.mark.parametrize("key", list(CASES), ids=case_id)
def test_opinfo_parity_natively(key):
    name, dtype, noncontiguous = key
    with openreg_lab.trace() as t:
        compared = check(CASES[key], max_samples=6, dtype=dtype, noncontiguous=noncontiguous)
    assert compared > 0
    assert_native(t, OPINFOS[name], some=name in SOME)


# --- out= forms, in-place, errors --------------------------------------------------------------


def _pair(fn):
    """fn on CPU and on openreg (the latter traced): both results."""
    cpu = fn("cpu")
    with openreg_lab.trace() as t:
        dev = fn("openreg")
    return cpu, dev, t


def _mask_input(device: str) -> torch.Tensor:
    x = torch.tensor([[0.0, -float("inf"), 1.0], [float("inf"), 2.0, float("nan")]]).to(device)
    return x


@pytest.mark.parametrize(
    ("call", "dtype"),
    [
        (lambda x, o: torch.all(x, out=o), torch.bool),
        (lambda x, o: torch.any(x, 1, out=o), torch.bool),
        (lambda x, o: torch.all(x, (0, 1), keepdim=True, out=o), torch.bool),
        (lambda x, o: torch.isneginf(x, out=o), torch.bool),
        (lambda x, o: torch.isposinf(x, out=o), torch.bool),
        (lambda x, o: torch.tril(x, -1, out=o), torch.float32),
        (lambda x, o: torch.triu(x, 1, out=o), torch.float32),
        (
            lambda x, o: torch.linalg.vector_norm(x.clamp(-3.0, 3.0), 2, 1, out=o),
            torch.float32,
        ),
        (lambda x, o: torch.bitwise_and(x > 0, x < 2, out=o), torch.bool),
        (
            lambda x, o: torch.gather(x, 1, torch.ones(2, 2, dtype=torch.long, device=x.device), out=o),
            torch.float32,
        ),
        (lambda x, o: torch.ops.aten.index.Tensor_out(x, [None, x[0] >= 0], out=o), torch.float32),
    ],
    ids=[
        "all",
        "any.dim",
        "all.dims",
        "isneginf",
        "isposinf",
        "tril",
        "triu",
        "vector_norm",
        "and",
        "gather",
        "index",
    ],
)
def test_out_forms_resize_their_out_on_the_device(call, dtype):
    inputs = {d: _mask_input(d) for d in ("cpu", "openreg")}  # moved before the trace

    def run(device):
        out = torch.empty(0, dtype=dtype, device=device)
        result = call(inputs[device], out)
        assert result is out
        return out

    cpu, dev, t = _pair(run)
    assert dev.device.type == "openreg"
    assert_close(dev.cpu(), cpu, equal_nan=True)
    assert t.fallbacks().empty and t.copies().empty


def test_tril_triu_in_place_write_device_memory():
    x = torch.randn(4, 5)
    for diagonal in (-1, 0, 2):
        for name in ("tril_", "triu_"):
            d = x.openreg()
            ptr = d.data_ptr()
            with openreg_lab.trace() as t:
                getattr(d, name)(diagonal)
            assert d.data_ptr() == ptr
            assert_close(d.cpu(), getattr(x.clone(), name)(diagonal))
            assert_native(t, {f"aten::{name}"})


def test_hf_attention_mask_runs_natively():
    # What a Hugging Face model builds its causal mask with: tril/triu, isneginf, all/any.
    def mask(device):
        m = torch.full((6, 6), float("-inf"), device=device).triu(1)
        keep = torch.ones(2, 6, dtype=torch.bool, device=device).tril()
        return (
            torch.isneginf(m).all(-1),
            torch.isneginf(m).any(),
            keep.all(),
            torch.tril(torch.ones(6, 6, device=device), diagonal=0),
        )

    cpu, dev, t = _pair(mask)
    for c, d in zip(cpu, dev, strict=True):
        assert d.device.type == "openreg"
        assert_close(d.cpu(), c)
    assert t.fallbacks().empty and t.copies().empty


def test_errors_are_the_cpus():
    from tests.support.parity import assert_same_as_cpu

    assert_same_as_cpu(lambda d: torch.zeros(2, device=d) & torch.zeros(2, device=d))
    assert_same_as_cpu(
        lambda d: torch.ones(2, dtype=torch.bool, device=d).bitwise_and_(torch.ones(2, device=d))
    )
    assert_same_as_cpu(
        lambda d: torch.ones(3, dtype=torch.bool, device=d) & torch.ones(2, dtype=torch.bool, device=d)
    )
    assert_same_as_cpu(lambda d: torch.zeros(2, 3, device=d).gather(1, torch.tensor([[3]], device=d)))
    assert_same_as_cpu(
        lambda d: torch.zeros(2, 3, device=d).gather(1, torch.tensor([[0]], dtype=torch.int32, device=d))
    )
    assert_same_as_cpu(lambda d: torch.zeros(2, 3, device=d)[torch.tensor([2], device=d)])
    assert_same_as_cpu(lambda d: torch.zeros(2, 3, device=d)[torch.tensor([True, False, True], device=d)])
    assert_same_as_cpu(
        lambda d: torch.zeros(2, device=d)[torch.tensor([0], device=d), torch.tensor([0], device=d)]
    )

    assert_same_as_cpu(lambda d: torch.zeros(2, 3, device=d).all(dim=3))
    assert_same_as_cpu(lambda d: torch.zeros(2, 3, dtype=torch.complex64, device=d).isneginf())
    assert_same_as_cpu(lambda d: torch.zeros(3, device=d).tril())
    assert_same_as_cpu(lambda d: torch.linalg.vector_norm(torch.arange(3, device=d)))
    assert_same_as_cpu(lambda d: torch._foreach_norm([]))


def test_mixed_devices_are_refused():
    x = torch.zeros(2, 3, device="openreg")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.all(x, out=torch.empty(0, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.gather(x, 1, torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ops.aten.index.Tensor_out(x, [torch.tensor([0])], out=torch.empty(0))


# --- dropout -----------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_dropout_draws_the_cpus_mask_from_the_same_seed(dtype, p):
    # Note [Dropout with openreg's generator]: after the same seed, the mask the CPU draws; the
    # output is input * mask * scale, rounded as on the CPU (scale in the input's dtype).
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(0)).to(dtype)  # 33: not a vector width
    xd = x.openreg()
    torch.manual_seed(7)
    out_cpu, mask_cpu = torch.native_dropout(x, p, True)
    torch.manual_seed(7)
    with openreg_lab.trace() as t:
        out, mask = torch.native_dropout(xd, p, True)
    assert out.device.type == mask.device.type == "openreg" and mask.dtype == torch.bool
    assert torch.equal(mask.cpu(), mask_cpu)
    assert torch.equal(out.cpu(), out_cpu)
    opmath = torch.float64 if dtype == torch.float64 else torch.float32
    scale = torch.tensor(0.0 if p == 1 else 1 / (1 - p), dtype=torch.float64).to(dtype).to(opmath)
    kept = mask.cpu()
    assert torch.equal(out.cpu()[~kept], torch.zeros(int((~kept).sum()), dtype=dtype))
    assert torch.equal(out.cpu()[kept], (x[kept].to(opmath) * scale).to(dtype))
    if p == 1:
        assert not kept.any()
    else:
        assert 0.5 * (1 - p) < kept.float().mean() < min(1.0, 1.5 * (1 - p))  # 2112 draws
    assert_native(t, {"aten::native_dropout"})
    assert t.fallbacks().empty and t.copies().empty


def test_dropout_uses_openregs_generator_only():
    x = torch.ones(1000, device="openreg")
    cpu_state = torch.get_rng_state()
    torch.openreg.manual_seed(5)
    first = torch.native_dropout(x, 0.5, True)[1].cpu()
    second = torch.native_dropout(x, 0.5, True)[1].cpu()
    torch.openreg.manual_seed(5)
    again = torch.native_dropout(x, 0.5, True)[1].cpu()
    assert torch.equal(first, again)  # the same seed repeats
    assert not torch.equal(first, second)  # the generator moved on
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU's generator was not drawn from
    g = torch.Generator("openreg").manual_seed(5)
    drawn = torch.empty(1000, dtype=torch.bool, device="openreg").bernoulli_(0.5, generator=g)
    assert torch.equal(drawn.cpu(), first)  # the mask is bernoulli_(1 - p) from openreg's generator


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_forward_and_backward_match_cpu_through_nn_dropout(dtype):
    x = torch.randn(8, 40, generator=torch.Generator().manual_seed(1)).to(dtype)
    results = {}
    for device in ("cpu", "openreg"):
        leaf = x.detach().to(device).requires_grad_()
        torch.manual_seed(3)
        with openreg_lab.trace() as t:
            out = F.dropout(leaf, 0.2, training=True)
            (out.float() * torch.arange(40.0, device=device)).sum().backward()
        results[device] = (out.detach().cpu(), leaf.grad.cpu(), t)
    assert torch.equal(results["openreg"][0], results["cpu"][0])
    assert torch.equal(results["openreg"][1], results["cpu"][1])
    assert_native(results["openreg"][2], DROPOUT_OPS)


def test_dropout_in_eval_mode_and_on_empty_input_is_the_cpus():
    x = torch.randn(3, 4)
    out, mask = torch.native_dropout(x.openreg(), 0.5, False)
    assert torch.equal(out.cpu(), x) and torch.equal(mask.cpu(), torch.ones(3, 4, dtype=torch.bool))
    empty = torch.empty(0, 3, device="openreg")
    out, mask = torch.native_dropout(empty, 0.5, True)
    assert out is empty and mask.shape == (0, 3) and mask.device == empty.device


# --- `&`, gather, advanced indexing --------------------------------------------------------------


def test_bitwise_and_in_place_broadcasts_and_keeps_its_dtype():
    a = torch.tensor([[True, False, True], [True, True, False]])
    b = torch.tensor([True, False, False])
    d = a.openreg()
    with openreg_lab.trace() as t:
        d &= b.openreg()
        both = torch.tensor([12, -3, 255], dtype=torch.int16, device="openreg") & 10
    assert torch.equal(d.cpu(), a & b)
    assert both.dtype == torch.int16 and both.cpu().tolist() == [8, 8, 10]
    assert_native(t, {"aten::bitwise_and_.Tensor", "aten::bitwise_and.Tensor"})


def test_uint8_mask_index_warns_once_as_cpu():
    t = torch.arange(4.0)
    m = torch.tensor([1, 0, 1, 0], dtype=torch.uint8)
    expected = _warnings(lambda: t[m])
    assert len(expected) == 1 and "uint8" in expected[0]
    result = []
    td, md = t.openreg(), m.openreg()
    with openreg_lab.trace() as tr:
        assert _warnings(lambda: result.append(td[md])) == expected
    assert result[0].device.type == "openreg"
    assert result[0].cpu().tolist() == [0.0, 2.0]
    assert_native(tr, {"aten::index.Tensor"})


def _warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message).split(" (Triggered")[0] for w in caught]


def test_index_with_cpu_and_openreg_indices_matches_cpu_natively():
    from tests.support.parity import assert_same_as_cpu

    x = torch.arange(24.0).reshape(4, 6)
    i = torch.tensor([3, 0, 3])
    j = torch.tensor([1, 5, 2])
    with openreg_lab.trace() as t:
        assert_same_as_cpu(lambda d: x.to(d)[i.to(d), j.to(d)], rtol=0, atol=0)
        assert_same_as_cpu(lambda d: x.to(d)[i, j], rtol=0, atol=0)  # CPU indices, as on CUDA
        assert_same_as_cpu(lambda d: x.to(d)[:, torch.tensor([True, False] * 3, device=d)], rtol=0, atol=0)
        # the CPU's layout: the indexed dims in front when they are not adjacent
        assert_same_as_cpu(lambda d: x.to(d).t()[None][:, i.to(d)].stride(), rtol=0, atol=0)
        assert_same_as_cpu(lambda d: x.to(d).reshape(2, 2, 6)[i.to(d)[:2], :, j.to(d)[:2]], rtol=0, atol=0)
    assert_native(t, {"aten::index.Tensor"})
    with pytest.raises(IndexError, match="indices should be either on cpu or on the same device"):
        x.openreg()[torch.tensor([0], device="openreg:1")]


# --- fused Adam / AdamW, clipping --------------------------------------------------------------


def _params(device: str) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    shapes = [(7, 5), (5,), (3, 4, 2)]
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in shapes]


def _grads(step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g) for s in [(7, 5), (5,), (3, 4, 2)]]


@pytest.mark.parametrize("optim", [torch.optim.Adam, torch.optim.AdamW], ids=["Adam", "AdamW"])
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"amsgrad": True},
        {"maximize": True, "weight_decay": 0.1},
        {"lr": torch.tensor(0.01)},
        {"amsgrad": True, "lr": torch.tensor(0.02), "betas": (0.8, 0.9)},
    ],
    ids=["default", "amsgrad", "maximize", "tensor_lr", "amsgrad-tensor_lr"],
)
def test_fused_adam_steps_match_cpu_natively(optim, kwargs):
    results = {}
    for device in ("cpu", "openreg"):
        params = _params(device)
        kw = dict(kwargs)
        if isinstance(kw.get("lr"), torch.Tensor):
            kw["lr"] = kw["lr"].clone().to(device)
        opt = optim(params, fused=True, **kw)
        grads = [[g.to(device) for g in _grads(step)] for step in range(3)]  # before the trace
        with openreg_lab.trace() as t:
            for step in range(3):
                for p, g in zip(params, grads[step], strict=True):
                    p.grad = g
                opt.step()
        results[device] = ([p.detach().cpu() for p in params], opt, t)
    for got, want in zip(results["openreg"][0], results["cpu"][0], strict=True):
        assert_close(got, want)
    t = results["openreg"][2]
    name = f"aten::_fused_{optim.__name__.lower()}_" + (".tensor_lr" if "lr" in kwargs else "")
    assert_native(t, {name})
    assert t.fallbacks().empty and t.copies().empty
    state = results["openreg"][1].state
    assert all(s["exp_avg"].device.type == "openreg" for s in state.values())


@pytest.mark.parametrize("found_inf", [0.0, 1.0])
@pytest.mark.parametrize("fn", [torch._fused_adamw_, torch._fused_adam_], ids=["adamw", "adam"])
def test_grad_scale_and_found_inf_as_on_cpu(fn, found_inf):
    def run(device):
        g = torch.Generator().manual_seed(3)
        ps, gs, ms, vs, vmax = ([torch.randn(4, 3, generator=g).to(device)] for _ in range(5))
        vs = [v.abs() for v in vs]
        steps = [torch.tensor(2.0, device=device)]
        fn(ps, gs, ms, vs, vmax, steps, lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8,
           amsgrad=True, maximize=False, grad_scale=torch.tensor(4.0, device=device),
           found_inf=torch.tensor(found_inf, device=device))  # fmt: skip
        return ps + ms + vs + vmax

    cpu, dev, t = _pair(run)
    for c, d in zip(cpu, dev, strict=True):
        assert_close(d.cpu(), c)
    assert_native(t, {f"aten::{fn.__name__}"})


def test_fused_adam_refuses_a_state_on_another_device():
    p = [torch.zeros(3, device="openreg")]
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch._fused_adamw_(p, p, p, p, [], [torch.tensor(1.0)], lr=0.1, beta1=0.9, beta2=0.99,
                            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)  # fmt: skip


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_matches_cpu_without_fallback(foreach, norm_type):
    results = {}
    for device in ("cpu", "openreg"):
        params = _params(device)
        for p, g in zip(params, _grads(0), strict=True):
            p.grad = g.to(device)
        with openreg_lab.trace() as t:
            total = torch.nn.utils.clip_grad_norm_(params, 0.5, norm_type=norm_type, foreach=foreach)
        results[device] = (total, [p.grad.cpu() for p in params], t)
    assert_close(results["openreg"][0].cpu(), results["cpu"][0])
    for got, want in zip(results["openreg"][1], results["cpu"][1], strict=True):
        assert_close(got, want)
    t = results["openreg"][2]
    assert t.fallbacks().empty, t.fallbacks()[["name", "calls"]]
    assert t.copies().empty
    assert_native(t, {"aten::_foreach_norm.Scalar"} if foreach else {"aten::linalg_vector_norm"})


# --- convolution -------------------------------------------------------------------------------


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
def test_convolution_keeps_the_cpus_memory_format(transposed, channels_last):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 9, 7, generator=g)
    w = torch.randn(4, 2, 3, 3, generator=g)
    b = torch.randn(4, generator=g)  # out channels: 4 either way (2 per group when transposed)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
        w = w.to(memory_format=torch.channels_last)
    conv = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d
    kwargs = {"stride": 2, "padding": 1, "groups": 2, "dilation": (1, 2)}

    leaves = {d: [t.detach().to(d).requires_grad_() for t in (x, w, b)] for d in ("cpu", "openreg")}

    def run(device):
        xs, ws, bs = leaves[device]
        out = conv(xs, ws, bs, **kwargs)
        out.square().sum().backward()
        return out, xs.grad, ws.grad, bs.grad

    cpu, dev, t = _pair(run)
    for c, d in zip(cpu, dev, strict=True):
        assert d.device.type == "openreg"
        assert d.stride() == c.stride()
        assert_close(d.cpu(), c, atol=1e-4, rtol=1e-5)
    assert_native(t, CONV_OPS)
    assert t.fallbacks().empty and t.copies().empty


def test_convolution_under_a_profile_without_it_goes_through_the_cpu():
    x, w = torch.randn(1, 1, 5, 5), torch.randn(2, 1, 3, 3)
    xd, wd = x.openreg(), w.openreg()
    with openreg_lab.use_profile("minimal"), openreg_lab.trace() as t:
        out = torch.nn.functional.conv2d(xd, wd)
    assert_close(out.cpu(), torch.nn.functional.conv2d(x, w))
    assert list(t.fallbacks()["name"]) == ["aten::convolution_overrideable"]
    # x and w to the host, the 2x3x3 result back
    assert sorted(t.copies()["bytes"].tolist()) == [18 * 4, 18 * 4, 25 * 4]
    with openreg_lab.use_profile("default"), openreg_lab.trace() as t:
        torch.nn.functional.conv2d(xd, wd)
    assert t.fallbacks().empty and t.copies().empty


# --- Hugging Face: a training step and a Trainer step with no fallback ---------------------------


def _hf_model(name: str) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "gpt2":  # default dropout (0.1): native_dropout runs
        config = transformers.GPT2Config(
            vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
        )
        return transformers.GPT2LMHeadModel(config)
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32,
    )  # fmt: skip
    return transformers.BertForMaskedLM(config)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "foreach"])
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_a_hugging_face_training_step_has_no_fallback(name, fused):
    # As a training script writes it: bf16 autocast, a padded attention mask, clipping, AdamW.
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    losses, traces = {}, {}
    for device in ("cpu", "openreg"):
        model = _hf_model(name).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused, foreach=not fused)
        batch = {"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": ids.to(device)}
        losses[device] = []
        for step in range(2):
            torch.manual_seed(10 + step)  # the same dropout masks on both sides
            with openreg_lab.trace() as t:
                with torch.autocast(device, dtype=torch.bfloat16):
                    loss = model(**batch).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
            losses[device].append(loss.item())
            traces[device] = t
    t = traces["openreg"]
    assert t.fallbacks().empty, t.fallbacks()[["name", "calls"]]
    ran = set(t.events.query("kind == 'op'")["name"])
    # the ops that fell back here before: dropout, the mask's `&`, indexing; BERT's gather
    mine = DROPOUT_OPS | {"aten::bitwise_and.Tensor", "aten::index.Tensor"}
    mine |= {"aten::gather"} if name == "bert" else set()
    assert mine | {"aten::_fused_adamw_" if fused else "aten::_foreach_norm.Scalar"} <= ran
    assert losses["openreg"] == pytest.approx(losses["cpu"], rel=2e-3)  # bf16 autocast on both
    assert losses["openreg"][1] != losses["openreg"][0]  # it trained


class _Tokens(torch.utils.data.Dataset):
    """What a tokenizer gives a Trainer: ids, an attention mask (the last one padded), labels; or,
    as a pretokenized dataset gives it, ids and labels alone (GPT-2 then looks for packed sequences
    with cumsum)."""

    def __init__(self, with_mask: bool = True) -> None:
        self.with_mask = with_mask

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        if not self.with_mask:
            return {"input_ids": ids, "labels": ids}
        mask = torch.ones(16, dtype=torch.long)
        mask[12:] = int(i % 2 == 0)
        return {"input_ids": ids, "attention_mask": mask, "labels": ids}


@pytest.fixture
def accelerate_on_openreg(monkeypatch: pytest.MonkeyPatch):
    """ACCELERATE_TORCH_DEVICE as `openreg-lab run` sets it, and accelerate's process-wide state
    forgotten before and after (it keeps the device it found first)."""
    state = pytest.importorskip("accelerate.state")
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "openreg")
    state.AcceleratorState._reset_state(reset_partial_state=True)
    yield
    state.AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("with_mask", [True, False], ids=["attention-mask", "ids-only"])
def test_a_trainer_step_with_default_arguments_has_no_fallback(accelerate_on_openreg, tmp_path, with_mask):
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, report_to=[],
        save_strategy="no", disable_tqdm=True, logging_strategy="no",
    )  # fmt: skip
    trainer = Trainer(model=_hf_model("gpt2"), args=args, train_dataset=_Tokens(with_mask))
    with openreg_lab.trace() as t:
        trainer.train()
    assert args.device.type == "openreg" and trainer.model.lm_head.weight.device.type == "openreg"
    assert (t.events["kind"] == "step").sum() == 2  # both optimizer steps ran on openreg
    assert t.fallbacks().empty, t.fallbacks()[["name", "calls"]]
    ran = set(t.events.query("kind == 'op'")["name"])
    # the Trainer's defaults: fused AdamW, clipping to 1.0, its loss check; the model's dropout
    assert {"aten::_fused_adamw_", "aten::_foreach_norm.Scalar", "aten::isnan"} | DROPOUT_OPS <= ran
    assert with_mask or "aten::cumsum" in ran  # without a mask, GPT-2's packed-sequence check
