"""Autograd through openreg: training runs give CPU's losses and gradients."""

import copy

import pytest
import torch

from openreg_lab.examples.models import mlp, transformer_block

STEPS = 20


def _mlp_batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)


def _transformer_batch():
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 100, (4, 12), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _mlp_loss(model, x, y):
    return torch.nn.functional.nll_loss(model(x), y)


def _transformer_loss(model, x, y):
    logits = model(x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _train(model, loss_fn, x, y, steps, foreach):
    # lr 1e-3 keeps the loss of order one for all 20 steps: a relative tolerance on a loss that
    # has collapsed towards 0 (as it does at lr 1e-2, where both models memorise the batch)
    # measures rounding noise, not parity.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize(
    ("build", "batch", "loss_fn"),
    [(mlp, _mlp_batch, _mlp_loss), (transformer_block, _transformer_batch, _transformer_loss)],
    ids=["mlp", "transformer"],
)
def test_training_matches_cpu(build, batch, loss_fn, foreach):
    torch.manual_seed(0)
    cpu_model = build()
    dev_model = copy.deepcopy(cpu_model).openreg()
    x, y = batch()
    cpu_losses = _train(cpu_model, loss_fn, x, y, STEPS, foreach)
    dev_losses = _train(dev_model, loss_fn, x.openreg(), y.openreg(), STEPS, foreach)
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=1e-5, atol=0)
    assert cpu_losses[-1] < cpu_losses[0]  # it did learn something
    assert min(cpu_losses) > 0.1  # and the relative comparison above is meaningful
    # Parameters are compared under SGD below: Adam divides by sqrt(v), which turns the ~1e-10
    # rounding noise of gradients that are zero in exact arithmetic (the attention key bias)
    # into full-size steps, on CPU as well as on openreg.


@pytest.mark.parametrize(
    ("build", "batch", "loss_fn"),
    [(mlp, _mlp_batch, _mlp_loss), (transformer_block, _transformer_batch, _transformer_loss)],
    ids=["mlp", "transformer"],
)
def test_sgd_parameters_match_cpu(build, batch, loss_fn):
    torch.manual_seed(0)
    cpu_model = build()
    dev_model = copy.deepcopy(cpu_model).openreg()
    x, y = batch()
    for model, xs, ys in ((cpu_model, x, y), (dev_model, x.openreg(), y.openreg())):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(STEPS):
            opt.zero_grad()
            loss_fn(model, xs, ys).backward()
            opt.step()
    for (name, p_cpu), p_dev in zip(cpu_model.named_parameters(), dev_model.parameters(), strict=True):
        torch.testing.assert_close(p_dev.cpu(), p_cpu, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("build", [mlp, transformer_block], ids=["mlp", "transformer"])
def test_leaf_gradients_match_cpu(build):
    torch.manual_seed(0)
    cpu_model = build()
    dev_model = copy.deepcopy(cpu_model).openreg()
    if build is mlp:
        x, y = _mlp_batch()
        x_cpu = x.clone().requires_grad_()
        x_dev = x.openreg().requires_grad_()
        _mlp_loss(cpu_model, x_cpu, y).backward()
        _mlp_loss(dev_model, x_dev, y.openreg()).backward()
        assert x_dev.grad is not None and x_dev.grad.device.type == "openreg"
        torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad, rtol=1e-5, atol=1e-6)
    else:
        x, y = _transformer_batch()
        _transformer_loss(cpu_model, x, y).backward()
        _transformer_loss(dev_model, x.openreg(), y.openreg()).backward()
    for (name, p_cpu), p_dev in zip(cpu_model.named_parameters(), dev_model.parameters(), strict=True):
        assert p_dev.grad.device.type == "openreg"
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_backward_through_a_fallback_op():
    x = torch.randn(6, requires_grad=True)
    xd = x.detach().openreg().requires_grad_()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_logcumsumexp", "PrivateUse1")
    torch.logcumsumexp(x, 0).pow(2).sum().backward()
    torch.logcumsumexp(xd, 0).pow(2).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
