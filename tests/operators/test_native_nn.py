"""Native openreg kernels of the neural-network families together: a second device with the
composite out= variants, and the example models' training steps (every family's ops native, the
same results as on CPU). Each family has its own file (test_native_softmax, _layer_norm,
_embedding, _loss, _indexing), as csrc/aten/native/ has.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import openreg_lab
from openreg_lab.examples.models import mlp, transformer_block
from tests.support.native_nn import ALL_NATIVE, DEV, aten, check, dev, native, randn

# --- second device, composite out= variants ------------------------------------------------------


def test_second_device_and_composite_out_variants():
    # Results stay on the inputs' device; the out= overloads without an openreg kernel are
    # CompositeExplicitAutograd wrappers around the native functional kernels, so they do not fall back.
    d1 = torch.device("openreg", 1)
    x, w, b = randn(4, 8), randn(8, seed=1), randn(8, seed=2)
    xd, wd, bd = x.to(d1), w.to(d1), b.to(d1)
    i = torch.tensor([0, 1, 2, 1, 0])
    g = randn(5, 3, seed=3)
    with native():
        outs = [torch.empty(0, device=d1) for _ in range(3)]
        aten.native_layer_norm.out(xd, [8], wd, bd, 1e-5, out0=outs[0], out1=outs[1], out2=outs[2])
        grads = [torch.empty(0, device=d1) for _ in range(3)]
        aten.native_layer_norm_backward.out(
            xd,
            xd,
            [8],
            outs[1],
            outs[2],
            wd,
            bd,
            [True, True, True],
            out0=grads[0],
            out1=grads[1],
            out2=grads[2],
        )
        emb = aten.embedding_dense_backward.out(
            g.to(d1), i.to(d1), 4, -1, False, out=torch.empty(0, device=d1)
        )
        sm = torch.softmax(xd, 1)
        cat = torch.cat([xd, xd])
        sel = torch.index_select(xd, 0, i[:2].to(d1))
        loss = F.nll_loss(torch.log_softmax(xd, 1), torch.tensor([1, 2, 3, 0], device=d1))
    expected = torch.native_layer_norm(x, [8], w, b, 1e-5)
    for a, e in zip(outs, expected, strict=True):
        assert a.device == d1
        torch.testing.assert_close(a.cpu(), e)
    for a, e in zip(
        grads, aten.native_layer_norm_backward(x, x, [8], *expected[1:], w, b, [True] * 3), strict=True
    ):
        assert a.device == d1
        torch.testing.assert_close(a.cpu(), e)
    for a, e in [
        (emb, aten.embedding_dense_backward(g, i, 4, -1, False)),
        (sm, torch.softmax(x, 1)),
        (cat, torch.cat([x, x])),
        (sel, torch.index_select(x, 0, i[:2])),
        (loss, F.nll_loss(torch.log_softmax(x, 1), torch.tensor([1, 2, 3, 0]))),
    ]:
        assert a.device == d1
        torch.testing.assert_close(a.cpu(), e)
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([xd, dev(x)])


# --- the example models ------------------------------------------------------------------------------

FAMILY_OPS = {op.split("::")[1].split(".")[0] for op in ALL_NATIVE}


def _fallback_ops(fn: Callable[[], None]) -> set[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with openreg_lab.fallback_policy("warn"):
            fn()
    found = set()
    for w in caught:
        m = re.match(r"(aten::[\w.]+) has no openreg kernel", str(w.message))
        if m:
            found.add(m.group(1))
    return found


def _train_step(model, inputs, targets, loss_fn):
    model.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["mlp", "transformer_block"])
def test_training_step_matches_cpu_and_family_ops_are_native(name):
    torch.manual_seed(0)
    if name == "mlp":
        model = mlp()
        inputs, targets = torch.randn(32, 64), torch.randint(0, 10, (32,))

        def loss_fn(out, t):
            return F.nll_loss(out, t)
    else:
        model = transformer_block()
        tokens = torch.randint(0, 100, (4, 17))
        inputs, targets = tokens[:, :-1], tokens[:, 1:]

        def loss_fn(out, t):
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))

    model_dev = type(model)() if name == "transformer_block" else mlp()
    model_dev.load_state_dict(model.state_dict())
    model_dev.to(DEV)
    loss, grads = _train_step(model, inputs, targets, loss_fn)
    result = {}

    def step():
        result["out"] = _train_step(model_dev, dev(inputs), dev(targets), loss_fn)

    fell_back = _fallback_ops(step)
    loss_d, grads_d = result["out"]
    check(loss_d, loss, rtol=1e-4, atol=1e-5)
    for n, g in grads.items():
        check(grads_d[n], g, rtol=1e-4, atol=1e-5)
    ours = {op for op in fell_back if op.split("::")[1].split(".")[0] in FAMILY_OPS}
    assert ours == set()
