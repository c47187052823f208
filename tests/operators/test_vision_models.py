"""One training step of each vision and diffusion model people train, on openreg with no fallback and
as on the CPU: a ResNet-18-shaped CNN (20 convolutions, batch norm, max and average pooling), a
ConvNeXt (depthwise convolutions, channels-last LayerNorm, GELU, layer scale), a ViT (patch
embedding, attention, MLP) and diffusers' UNet2DModel (group norm, SiLU, attention, nearest
upsampling, the mean squared error), from openreg_lab.examples.models.

Each step (forward, backward, AdamW) runs under a trace: no fallback event, no copy, and the ops that
fell back every step (batch norm, pooling, group norm, upsampling, the loss) run natively; the
losses, gradients and the next step's loss equal the CPU's with the tolerances of
tests/operators/test_training.py.
"""

from __future__ import annotations

import copy

import pytest
import torch

import openreg_lab
from openreg_lab.examples.models import VISION_MODELS, TrainingCase, vision_case

# What each model runs every step, natively: the ops a ResNet and a UNet step sent to the CPU fallback
# before (batch norm, pooling; group norm, upsampling, the loss), and the heart of the others.
NATIVE = {
    "resnet": {
        "aten::native_batch_norm",
        "aten::native_batch_norm_backward",
        "aten::avg_pool2d",
        "aten::avg_pool2d_backward",
        "aten::max_pool2d_with_indices",
        "aten::max_pool2d_with_indices_backward",
    },
    "convnext": {
        "aten::native_layer_norm",
        "aten::native_layer_norm_backward",
        "aten::convolution_overrideable",
        "aten::convolution_backward_overrideable",
    },
    "vit": {
        "aten::_scaled_dot_product_fused_attention_overrideable",
        "aten::_scaled_dot_product_fused_attention_overrideable_backward",
    },
    "unet": {
        "aten::native_group_norm",
        "aten::native_group_norm_backward",
        "aten::upsample_nearest2d",
        "aten::upsample_nearest2d_backward",
        "aten::mse_loss",
        "aten::mse_loss_backward",
        "aten::_scaled_dot_product_fused_attention_overrideable",
    },
}


def _step(case: TrainingCase, model: torch.nn.Module, batch: list[torch.Tensor], opt) -> torch.Tensor:
    *inputs, target = batch
    loss = case.loss(model(*inputs), target)
    loss.backward()
    opt.step()
    return loss


def _train(case: TrainingCase, model: torch.nn.Module, device: str, steps: int = 2):
    """``steps`` AdamW steps of ``model`` on ``device``: the losses, the first step's gradients and
    its trace (openreg)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = [x.to(device) for x in (*case.inputs, case.target)]  # on the device before the trace
    losses, grads, trace = [], {}, None
    for step in range(steps):
        opt.zero_grad()
        if step == 0 and device == "openreg":
            with openreg_lab.trace() as trace:
                loss = _step(case, model, batch, opt)
        else:
            loss = _step(case, model, batch, opt)
        losses.append(loss.item())
        if step == 0:
            grads = {name: p.grad.cpu() for name, p in model.named_parameters()}
    return losses, grads, trace


@pytest.fixture(scope="module", params=VISION_MODELS)
def trained(request):
    if request.param == "unet":
        pytest.importorskip("diffusers")
    case = vision_case(request.param)
    dev_model = copy.deepcopy(case.model).to("openreg")
    cpu = _train(case, case.model, "cpu")
    dev = _train(case, dev_model, "openreg")
    return case, cpu, dev


def test_a_training_step_has_no_fallback_and_moves_no_byte_between_host_and_device(trained):
    case, _, (_, _, t) = trained
    assert t.fallbacks().empty, t.fallbacks()[["name", "calls"]]
    copies = t.copies()
    # the copies a model asks for itself (.contiguous(), reshapes of permuted tensors) stay on the device
    assert set(copies["direction"]) <= {"D2D"}, copies[["direction", "bytes", "source"]]
    ops = t.events[t.events.kind == "op"]
    ran = ops.groupby("name")["kernel"].agg(set)
    missing = NATIVE[case.name] - set(ran.index)
    assert not missing, missing
    assert all(ran[name] == {"native"} for name in NATIVE[case.name])
    assert (t.events.kind == "step").sum() == 1  # AdamW's step, traced


def test_losses_and_gradients_equal_the_cpus(trained):
    _, (cpu_losses, cpu_grads, _), (dev_losses, dev_grads, _) = trained
    # the second loss follows an AdamW step on each side
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=1e-5, atol=0)
    assert cpu_losses[1] != cpu_losses[0]
    assert dev_grads.keys() == cpu_grads.keys()
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(dev_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_the_models_are_what_the_issue_describes():
    resnet = vision_case("resnet").model
    convs = [m for m in resnet.modules() if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in resnet.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(convs) == 20 and len(norms) == 20
    assert any(isinstance(m, torch.nn.MaxPool2d) for m in resnet.modules())
    convnext = vision_case("convnext").model
    assert (
        sum(m.groups == m.in_channels > 1 for m in convnext.modules() if isinstance(m, torch.nn.Conv2d)) == 4
    )
    with pytest.raises(ValueError, match="unknown vision model 'vgg': expected one of resnet"):
        vision_case("vgg")


def test_a_channels_last_resnet_step_has_no_fallback_and_keeps_its_layout():
    case = vision_case("resnet")
    model = case.model.to(memory_format=torch.channels_last)
    dev_model = copy.deepcopy(model).to("openreg")
    images = case.inputs[0].to(memory_format=torch.channels_last)
    results = {}
    for device, m in (("cpu", model), ("openreg", dev_model)):
        x, target = images.detach().to(device).requires_grad_(), case.target.to(device)
        with openreg_lab.trace() as t:
            loss = case.loss(m(x), target)
            loss.backward()
        results[device] = (loss.item(), x.grad, {n: p.grad.cpu() for n, p in m.named_parameters()}, t)
    cpu, dev = results["cpu"], results["openreg"]
    t = dev[3]
    assert t.fallbacks().empty and set(t.copies()["direction"]) <= {"D2D"}
    assert dev[1].is_contiguous(memory_format=torch.channels_last)
    assert dev[1].stride() == cpu[1].stride()
    assert dev[0] == pytest.approx(cpu[0], rel=1e-5)
    # Every layer's output equals the CPU's bit for bit up to the global average pool, a mean over the
    # channels-last pixels, which openreg's reduction sums in another order (its result an ulp apart);
    # the backward through 20 batch norms grows that to 2e-6 in the first layers' gradients.
    torch.testing.assert_close(dev[1].cpu(), cpu[1], rtol=1e-5, atol=5e-6)
    for name, grad in cpu[2].items():
        torch.testing.assert_close(dev[2][name], grad, rtol=1e-5, atol=5e-6, msg=name)
    # the running statistics were updated on the device as on the CPU
    for (name, b_cpu), b_dev in zip(model.named_buffers(), dev_model.buffers(), strict=True):
        torch.testing.assert_close(b_dev.cpu(), b_cpu, rtol=1e-6, atol=1e-7, msg=name)
