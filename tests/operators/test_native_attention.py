"""Fused attention on openreg (csrc/aten/native/Attention.cpp, AttentionChoice.cpp): the backend
choice, the overrideable forward and backward against CPU, dropout drawn from openreg's generator
as the CPU draws it (bit for bit), the trace, a real transformers model trained with dropout as on
the CPU, and compiled code.

Every comparison runs under the "error" fallback policy, so a test fails if anything falls back.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import openreg_lab
from tests.support.native_nn import DEV, dev, native, randn
from tests.support.opinfo_parity import Case, all_cases, check

aten = torch.ops.aten
FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"
FUSED_BWD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"
OPS = ["aten::_fused_sdp_choice", FUSED, FUSED_BWD]
HALF = [torch.float16, torch.bfloat16]
# 16-bit inputs: both sides accumulate in float; results agree to a couple of 16-bit ulps.
TOL = {
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
    torch.float64: {},
    torch.float16: {"rtol": 5e-3, "atol": 2e-3},
    torch.bfloat16: {"rtol": 3e-2, "atol": 2e-2},
}


def test_registered_and_listed():
    for op in OPS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), op
    assert sorted(openreg_lab.native_ops_by_family()["attention"]) == sorted(OPS)


# --- the choice ------------------------------------------------------------------------------------


def _qkv(b=2, hq=4, hk=4, n=5, s=7, e=8, ev=8, dtype=torch.float32, seed=0):
    return (
        randn(b, hq, n, e, dtype=dtype, seed=seed),
        randn(b, hk, s, e, dtype=dtype, seed=seed + 1),
        randn(b, hk, s, ev, dtype=dtype, seed=seed + 2),
    )


def _choice(q, k, v, **kw) -> int:
    return torch._fused_sdp_choice(dev(q), dev(k), dev(v), **kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *HALF])
def test_choice_is_the_fused_kernel_for_what_it_runs(dtype):
    q, k, v = _qkv(dtype=dtype)
    mask = torch.rand(5, 7) > 0.3
    assert _choice(q, k, v) == SDPBackend.OVERRIDEABLE.value
    assert _choice(q, k, v, is_causal=True, dropout_p=0.3, scale=0.5) == SDPBackend.OVERRIDEABLE.value
    assert _choice(q, k, v, attn_mask=dev(mask)) == SDPBackend.OVERRIDEABLE.value
    assert (
        _choice(q, k, v, attn_mask=dev(torch.zeros(2, 1, 5, 7, dtype=dtype))) == SDPBackend.OVERRIDEABLE.value
    )
    q8, k2, v2 = _qkv(hq=8, hk=2, dtype=dtype)
    assert _choice(q8, k2, v2, enable_gqa=True) == SDPBackend.OVERRIDEABLE.value
    # the composite itself asks the same question: the fused op runs, nothing else does
    with native(), openreg_lab.trace() as t:
        F.scaled_dot_product_attention(dev(q), dev(k), dev(v), attn_mask=dev(mask))
    assert t.summary().set_index("name").loc[FUSED, "calls"] == 1


def test_choice_is_math_for_what_the_fused_kernel_does_not_run():
    q, k, v = _qkv()
    math = SDPBackend.MATH.value
    q8, k2, v2 = _qkv(hq=8, hk=2)
    assert _choice(q8, k2, v2) == math  # grouped heads without enable_gqa: math raises
    assert _choice(q, k, v, attn_mask=dev(torch.zeros(5, 7)), is_causal=True) == math
    assert _choice(q, k, v, attn_mask=dev(torch.zeros(5, 7, dtype=torch.int32))) == math
    assert _choice(q, k, v, attn_mask=dev(torch.zeros(3, 5, 7))) == math  # 3 heads do not broadcast to 4
    assert _choice(q, k, v.double()) == math
    assert _choice(q, k, v, dropout_p=1.0) == math
    assert _choice(q[0, 0], k[0, 0], v[0, 0]) == math  # 2-D
    assert _choice(q[0], k[0], v[0]) == math  # 3-D: as on CPU, whose flash kernel takes 4-D only
    assert _choice(q[:, :, :0], k, v) == math
    assert _choice(q[0], k, v) == math  # 3-D query against 4-D key: broadcasting
    assert torch._fused_sdp_choice(q, k, v) == torch._fused_sdp_choice(q, k, v)  # CPU untouched


def test_sdpa_kernel_decides_and_a_disabled_backend_says_why():
    q, k, v = (dev(t) for t in _qkv())
    with sdpa_kernel([SDPBackend.MATH]):
        assert torch._fused_sdp_choice(q, k, v) == SDPBackend.MATH.value
        with openreg_lab.trace() as t:  # the math path (its safe softmax falls back: isneginf)
            F.scaled_dot_product_attention(q, k, v)
        names = set(t.summary().name)
        assert FUSED not in names and "aten::_scaled_dot_product_attention_math" in names
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        assert torch._fused_sdp_choice(q, k, v) == SDPBackend.OVERRIDEABLE.value
        with pytest.warns(UserWarning, match="query's heads must equal the key's"):
            with pytest.raises(RuntimeError, match="No viable backend"):
                F.scaled_dot_product_attention(q, k[:, :2], v[:, :2])


@pytest.mark.parametrize("profile", ["cpu", "minimal"])
def test_a_backend_profile_without_the_fused_kernel_takes_the_math_path(profile):
    q, k, v = _qkv()
    with openreg_lab.use_profile(profile), openreg_lab.trace() as t:
        out = F.scaled_dot_product_attention(dev(q), dev(k), dev(v), is_causal=True)
    names = set(t.summary().name)
    assert FUSED not in names and "aten::_scaled_dot_product_attention_math" in names
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    with openreg_lab.trace() as t:  # and the kernel is back once the profile ends
        F.scaled_dot_product_attention(dev(q), dev(k), dev(v))
    assert FUSED in set(t.summary().name)


def test_calling_the_op_with_what_it_cannot_run_names_the_problem():
    q, k, v = (dev(t) for t in _qkv())
    with pytest.raises(RuntimeError, match=r"is_causal with an explicit attn_mask; call torch\.nn"):
        aten._scaled_dot_product_fused_attention_overrideable(q, k, v, dev(torch.zeros(5, 7)), is_causal=True)


# --- parity with CPU ---------------------------------------------------------------------------------


def _sdpa(q, k, v, w, **kw) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Output and gradients (of the output weighted by ``w``) of every input that requires one."""
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    leaves = [t for t in (q, k, v, kw.get("attn_mask")) if t is not None and t.requires_grad]
    grads = torch.autograd.grad((out * w).sum(), leaves)
    return out, list(grads)


def _kinds_under(ev, names: set[str]) -> set[str]:
    """The kinds of the events recorded inside the calls of the ops ``names``, but the allocator's
    segments (when a block is taken from the host, which depends on what the cache holds)."""
    inside = set(ev.id[(ev.kind == "op") & ev.name.isin(names)])
    kinds = set()
    for row in ev.itertuples():
        parent = row.parent
        while parent >= 0 and parent not in inside:
            parent = int(ev.parent.iloc[parent])
        if parent >= 0:
            kinds.add(row.kind)
    return kinds - {"segment"}


def _compare_with_cpu(q, k, v, dtype, **kw) -> torch.Tensor:
    """SDPA on openreg (fused, natively, no copies) and on CPU agree forward and backward."""
    cpu = [t.to(dtype).requires_grad_() for t in (q, k, v)]
    mask = kw.pop("attn_mask", None)
    cpu_kw = dict(kw, attn_mask=mask)
    dev_args = [dev(t.detach()).requires_grad_() for t in cpu]
    dev_mask = None if mask is None else dev(mask.detach()).requires_grad_(mask.requires_grad)
    w = torch.linspace(-1, 1, v.shape[-1])
    expected, e_grads = _sdpa(*cpu, w.to(dtype), **cpu_kw)
    w_dev = dev(w.to(dtype))
    with native(), openreg_lab.trace() as t:
        actual, a_grads = _sdpa(*dev_args, w_dev, **dict(kw, attn_mask=dev_mask))
    summary = t.summary().set_index("name")
    assert summary.loc[FUSED, "calls"] == 1 and summary.loc[FUSED_BWD, "calls"] == 1
    assert summary.loc[[FUSED, FUSED_BWD], "kernel"].tolist() == ["native", "native"]
    # no copy, no fallback: ops and the memory they allocate (a block, and the host segment it may take)
    assert _kinds_under(t.events, {FUSED, FUSED_BWD}) - {"segment"} == {"op", "alloc"}
    assert actual.device == DEV and actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, **TOL[dtype])
    assert len(a_grads) == len(e_grads)
    for a, e in zip(a_grads, e_grads, strict=True):
        assert a.device == DEV and a.shape == e.shape and a.dtype == e.dtype
        torch.testing.assert_close(a.cpu(), e, **TOL[dtype])
    return actual


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *HALF])
@pytest.mark.parametrize("causal", [False, True])
def test_plain_and_causal_attention_match_cpu(dtype, causal):
    _compare_with_cpu(*_qkv(), dtype, is_causal=causal)
    _compare_with_cpu(*_qkv(n=9, s=4), dtype, is_causal=causal)  # more queries than keys


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
@pytest.mark.parametrize(
    "mask_shape", [(5, 7), (1, 7), (2, 1, 5, 7), (4, 5, 7), (2, 4, 5, 7), (1, 1, 1, 7)], ids=str
)
def test_boolean_and_additive_masks_match_cpu(dtype, mask_shape):
    g = torch.Generator().manual_seed(3)
    keep = torch.rand(mask_shape, generator=g) > 0.4
    keep[..., 0] = True  # no row masks every key (CPU's kernels disagree on such rows)
    _compare_with_cpu(*_qkv(), dtype, attn_mask=keep)
    additive = torch.randn(mask_shape, generator=g).to(dtype)
    _compare_with_cpu(*_qkv(), dtype, attn_mask=additive)
    # a mask that requires grad gets its gradient, summed over the dimensions it broadcast along
    _compare_with_cpu(*_qkv(), dtype, attn_mask=additive.clone().requires_grad_())


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_scale_grouped_heads_and_a_wider_value_match_cpu(dtype):
    _compare_with_cpu(*_qkv(), dtype, scale=0.3)
    _compare_with_cpu(*_qkv(hq=6, hk=2), dtype, enable_gqa=True, is_causal=True)
    _compare_with_cpu(*_qkv(hq=6, hk=3), dtype, enable_gqa=True, attn_mask=torch.randn(5, 7).to(dtype))
    _compare_with_cpu(*_qkv(ev=12), dtype)  # value head dim unlike the query's: the explicit path
    # the op itself also runs 3-D (H, L, E) inputs, which the choice leaves to the math path
    q, k, v = _qkv()
    with native():
        out = aten._scaled_dot_product_fused_attention_overrideable(
            *(dev(t[0].to(dtype)) for t in (q, k, v))
        )[0]
    expected = F.scaled_dot_product_attention(*(t[0].to(dtype) for t in (q, k, v)))
    torch.testing.assert_close(out.cpu(), expected, **TOL[dtype])


def test_non_contiguous_inputs_and_the_output_layout_follow_the_query():
    # (B, L, H, E) memory seen as (B, H, L, E), as transformers' attention layers make it
    q, k, v = (randn(2, n, 4, 8, seed=i).transpose(1, 2) for i, n in enumerate((5, 7, 7)))
    out = _compare_with_cpu(q, k, v, torch.float32, is_causal=True)
    assert out.stride() == F.scaled_dot_product_attention(q, k, v, is_causal=True).stride()


def _sdpa_case() -> Case:
    return next(c for c in all_cases() if c.id == "nn.functional.scaled_dot_product_attention")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *HALF])
def test_opinfo_samples_match_cpu_through_the_fused_kernel(dtype):
    case = _sdpa_case()
    with openreg_lab.trace() as t:
        compared = check(case, max_samples=100, dtype=dtype)
    assert compared == 25  # every sample PyTorch has for the op
    summary = t.summary().set_index("name")
    # the 4-D samples (8, and the masked one) run the fused kernel forward and backward; the 3-D
    # ones and the broadcast ones (3-D query, 4-D key) take the math path, as on CPU
    assert summary.loc[FUSED, "calls"] == 9 and summary.loc[FUSED_BWD, "calls"] == 9


def test_opinfo_samples_match_cpu_on_non_contiguous_inputs():
    assert check(_sdpa_case(), max_samples=100, noncontiguous=True) == 25


# --- dropout -----------------------------------------------------------------------------------------


def _fused(q, k, v, p, **kw):
    return aten._scaled_dot_product_fused_attention_overrideable(
        q, k, v, dropout_p=p, return_debug_mask=True, **kw
    )


@pytest.mark.parametrize(("kv_heads", "causal"), [(4, False), (2, True)], ids=["masked", "gqa-causal"])
def test_dropout_is_the_math_formula_with_the_kernels_own_mask(kv_heads, causal):
    q, k, v = (dev(t).requires_grad_() for t in _qkv(hk=kv_heads, n=16, s=16))
    bias = None if causal else torch.randn(16, 16)
    p = 0.3
    torch.manual_seed(7)
    with native():
        res = _fused(q, k, v, p, attn_bias=None if bias is None else dev(bias), is_causal=causal, scale=0.4)
    out, keep = res[0], res[8]
    assert keep.dtype == torch.bool and keep.shape == (2, 4, 16, 16) and keep.device == DEV
    kept = keep.cpu().float().mean().item()
    assert abs(kept - (1 - p)) < 0.05  # 2048 draws: 4.5 standard deviations
    # the same computation by hand on CPU, with that mask (key heads repeated for each group)
    qc, kc, vc = (t.detach().cpu().requires_grad_() for t in (q, k, v))
    groups = 4 // kv_heads
    kr, vr = kc.repeat_interleave(groups, 1), vc.repeat_interleave(groups, 1)
    if causal:
        bias = torch.zeros(16, 16).masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))
    probs = torch.softmax(qc @ kr.transpose(-2, -1) * 0.4 + bias, -1)
    expected = (probs * keep.cpu() / (1 - p)) @ vr
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-6)
    # the backward draws the same mask again from the seed the forward returned
    w = torch.randn(expected.shape)
    a_grads = torch.autograd.grad((out * dev(w)).sum(), (q, k, v))
    e_grads = torch.autograd.grad((expected * w).sum(), (qc, kc, vc))
    for a, e in zip(a_grads, e_grads, strict=True):
        assert a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-6)


# (batch, query heads, key heads, L, S, E, mask, causal): Note [Attention dropout as the CPU draws it]
DROPOUT_SHAPES = {
    "plain": (2, 4, 4, 5, 7, 8, None, False),
    "bool-mask": (2, 4, 4, 6, 6, 8, "bool", False),
    "float-mask": (1, 2, 2, 3, 9, 16, "float", False),
    "causal": (2, 2, 2, 7, 7, 8, None, True),
    "gqa-causal": (2, 6, 2, 6, 6, 8, None, True),
    "gqa-mask": (1, 4, 2, 5, 8, 4, "bool", False),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", list(DROPOUT_SHAPES))
def test_dropout_equals_the_cpus_bit_for_bit(shape, dtype):
    # After the same seed, openreg's fused kernel draws the CPU math path's mask from openreg's
    # generator and computes as that path does: outputs and gradients equal bit for bit.
    b, hq, hk, n, s, e, mask_kind, causal = DROPOUT_SHAPES[shape]
    q, k, v = _qkv(b, hq, hk, n, s, e, e, dtype=dtype)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(b, 1, n, s, generator=torch.Generator().manual_seed(3)) > 0.3
    elif mask_kind == "float":
        mask = randn(n, s, dtype=dtype, seed=4)
    go = randn(b, hq, n, e, dtype=dtype, seed=5)
    results = {}
    for device in ("cpu", "openreg"):
        leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
        torch.manual_seed(11)  # seeds the CPU's generator and openreg's alike
        with openreg_lab.trace() as t:
            out = F.scaled_dot_product_attention(
                *leaves, attn_mask=None if mask is None else mask.to(device), dropout_p=0.3,
                is_causal=causal, enable_gqa=hq != hk,
            )  # fmt: skip
            grads = torch.autograd.grad(out, leaves, go.to(device))
        results[device] = ([out, *grads], t)
    for c, d in zip(results["cpu"][0], results["openreg"][0], strict=True):
        # (the CPU's key gradient comes out transposed from its math path; openreg's like the key)
        assert d.device.type == "openreg" and d.dtype == c.dtype and d.shape == c.shape
        assert torch.equal(d.cpu(), c)
    assert results["openreg"][0][0].stride() == results["cpu"][0][0].stride()
    names = results["openreg"][1].summary()["name"].tolist()
    assert FUSED in names and FUSED_BWD in names
    assert results["openreg"][1].fallbacks().empty


def test_dropout_draws_from_openregs_generator_only_and_the_same_seed_repeats():
    q, k, v = (dev(t).requires_grad_() for t in _qkv())

    def run(seed: int):
        torch.openreg.manual_seed(seed)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5, is_causal=True)
        return [out, *torch.autograd.grad(out.sum(), (q, k, v))]

    cpu_state = torch.get_rng_state()
    with native():
        first, again, other = run(1), run(1), run(2)
    assert torch.equal(torch.get_rng_state(), cpu_state)  # the CPU's generator was not drawn from
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(first[0].cpu(), other[0].cpu())
    # each call draws its mask from openreg's generator, so the stream moves on between calls
    torch.openreg.manual_seed(1)
    with torch.no_grad():
        one = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        two = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert not torch.equal(one.cpu(), two.cpu())
    # the mask is bernoulli(1 - p) drawn from openreg's generator, as the CPU's dropout draws it
    torch.openreg.manual_seed(5)
    res = _fused(q.detach(), k.detach(), v.detach(), 0.5)
    torch.openreg.manual_seed(5)
    drawn = torch.empty(2, 4, 5, 7, device=DEV).bernoulli_(0.5)
    assert torch.equal(res[8].cpu(), drawn.cpu().bool())
    # philox seed and offset are CPU scalars, as CUDA's: the seed is the generator's
    assert res[6].device.type == "cpu" and res[6].item() == 5 and res[7].item() == 0


def test_the_backward_with_dropout_needs_the_forwards_philox_seed():
    q, k, v = (dev(t) for t in _qkv())
    res = _fused(q, k, v, 0.5)
    args = (res[0], q, k, v, None, [True] * 4, res[0], res[1], None, None, 5, 7, 0.5, False)
    with pytest.raises(RuntimeError, match="needs the philox_seed tensor its forward returned"):
        aten._scaled_dot_product_fused_attention_overrideable_backward(*args, torch.tensor(5), res[7])
    grads = aten._scaled_dot_product_fused_attention_overrideable_backward(*args, res[6], res[7])
    assert grads[0].shape == q.shape and grads[3] is None


def test_without_dropout_there_is_no_debug_mask_and_no_draw():
    q, k, v = (dev(t) for t in _qkv())
    state = torch.openreg.get_rng_state()
    res = _fused(q, k, v, 0.0)
    assert res[8] is None and res[6].item() == 0
    assert torch.equal(torch.openreg.get_rng_state(), state)
    assert res[1].dtype == torch.float32 and res[1].shape == (2, 4, 5) and (res[4], res[5]) == (5, 7)


# --- a real model ------------------------------------------------------------------------------------


def _gpt2(dropout: float):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=64,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=dropout,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.GPT2LMHeadModel(config)
    assert model.config._attn_implementation == "sdpa"
    return model


def test_gpt2_runs_fused_attention_forward_and_backward_natively(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cpu_model = _gpt2(dropout=0.0)
    model = _gpt2(dropout=0.0).to(DEV)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, -3:] = 0  # right padding: a real attention mask reaches the kernel
    expected = cpu_model(input_ids=ids, attention_mask=mask, labels=ids)
    expected.loss.backward()
    with openreg_lab.trace() as t:
        out = model(input_ids=dev(ids), attention_mask=dev(mask), labels=dev(ids))
        out.loss.backward()
    summary = t.summary().set_index("name")
    assert summary.loc[FUSED, "calls"] == 2 and summary.loc[FUSED_BWD, "calls"] == 2  # one per layer
    assert summary.loc[[FUSED, FUSED_BWD], "kernel"].tolist() == ["native", "native"]
    assert "aten::_scaled_dot_product_attention_math" not in summary.index
    torch.testing.assert_close(out.loss.cpu(), expected.loss, rtol=1e-5, atol=1e-5)
    for (name, p), (_, pc) in zip(model.named_parameters(), cpu_model.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_gpt2_training_with_attention_dropout_stays_fused(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = _gpt2(dropout=0.1).to(DEV).train()
    ids = dev(torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1)))

    def step() -> list[torch.Tensor]:
        torch.openreg.manual_seed(3)
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        return [p.grad.cpu() for p in model.parameters()]

    with native(), openreg_lab.trace() as t:
        first = step()
    summary = t.summary().set_index("name")
    assert summary.loc[FUSED, "calls"] == 2 and summary.loc[FUSED_BWD, "calls"] == 2
    assert all(torch.equal(a, b) for a, b in zip(first, step(), strict=True))


def test_gpt2_with_its_default_dropout_trains_as_on_cpu(monkeypatch):
    # GPT-2's defaults: dropout 0.1 on the embeddings, the residuals and the attention. Five AdamW
    # steps after the same seed: the same masks everywhere, so the same losses and weights.
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4, attn_implementation="sdpa"
    )
    assert config.attn_pdrop == config.resid_pdrop == config.embd_pdrop == 0.1
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    losses = {}
    for device in ("cpu", "openreg"):
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = transformers.GPT2LMHeadModel(config).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        torch.manual_seed(7)  # the dropout masks of all five steps follow from here
        losses[device] = []
        for _ in range(5):
            loss = model(input_ids=ids.to(device), labels=ids.to(device)).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[device].append(loss.item())
    torch.testing.assert_close(
        torch.tensor(losses["openreg"]), torch.tensor(losses["cpu"]), rtol=1e-5, atol=1e-5
    )
    assert losses["cpu"][-1] < losses["cpu"][0]
    # (the weights are not compared: AdamW turns the rounding noise of gradients that are 0 in exact
    # arithmetic, the attention's key bias, into full-size steps; see tests/operators/test_training.py)


# --- compiled code -----------------------------------------------------------------------------------


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(-2)


def test_compiled_code_calls_the_fused_kernel_forward_and_backward_as_extern_kernels():
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Attention().to(DEV)
    eager = _Attention().to(DEV)
    eager.load_state_dict(model.state_dict())
    x = dev(torch.randn(2, 6, 16))
    compiled = torch.compile(model)

    def step(m: torch.nn.Module) -> torch.Tensor:
        out = m(x)
        (out * out).sum().backward()
        return out

    try:
        out, codes = run_and_get_code(step, compiled)
        torch.testing.assert_close(out.cpu(), step(eager).cpu(), rtol=1e-5, atol=1e-5)
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-5)
        forward, backward = codes
        assert "aten._scaled_dot_product_fused_attention_overrideable.default(" in forward
        assert "aten._scaled_dot_product_fused_attention_overrideable_backward.default(" in backward
        with openreg_lab.trace() as t:
            step(compiled)
        ev = t.events
        regions = ev[(ev.kind == "compiled") & ev.fused.isna()]
        assert regions.name.tolist() == ["graph 0/0 forward", "graph 0/0 backward"]
        for name, region in zip((FUSED, FUSED_BWD), regions.id, strict=True):
            op = ev[(ev.kind == "op") & (ev.name == name)]
            assert op.kernel.tolist() == ["native"] and op.parent.tolist() == [region]
        assert _kinds_under(ev, {FUSED, FUSED_BWD}) == {"op", "alloc"}
    finally:
        torch._dynamo.reset()
