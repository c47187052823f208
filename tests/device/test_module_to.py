"""Moving modules to and from openreg keeps parameter identity, as for CUDA.

Note [Module parameters keep their identity] in csrc/aten/ShallowCopy.cpp: without openreg's kernel
for ``_has_compatible_shallow_copy_type``, ``Module._apply`` replaced every parameter by a new one,
so tied weights came apart and optimizers built before ``.to()`` trained abandoned tensors.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from torch import nn


class TiedLM(nn.Module):
    """A tiny language model whose output projection is its input embedding (weight tying)."""

    def __init__(self, vocab: int = 17, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.embed(tokens))))


def _tied_pair() -> nn.Module:
    m = nn.Module()
    m.a = nn.Linear(4, 4)
    m.b = nn.Linear(4, 4)
    m.b.weight = m.a.weight
    return m


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 17, (4, 9), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


MOVES = {
    "to_str": lambda m: m.to("openreg"),
    "to_device": lambda m: m.to(torch.device("openreg", 0)),
    "openreg_method": lambda m: m.openreg(),
    "to_index_1": lambda m: m.to("openreg:1"),
    "to_dtype_and_device": lambda m: m.to("openreg", torch.float64),
}


@pytest.mark.parametrize("move", MOVES.values(), ids=MOVES.keys())
def test_issue_example_tied_weight_survives_the_move(move):
    m = _tied_pair()
    weight = m.a.weight
    bias = m.a.bias
    move(m)
    assert m.a.weight is m.b.weight
    assert m.a.weight is weight
    assert m.a.bias is bias
    assert weight.device.type == "openreg"
    assert isinstance(weight, nn.Parameter) and weight.requires_grad and weight.is_leaf


def test_back_to_cpu_and_between_devices_keeps_identity():
    m = _tied_pair()
    weight = m.a.weight
    expected = weight.detach().clone()
    m.to("openreg")
    m.to("openreg:1")
    assert weight.device == torch.device("openreg", 1)
    m.half()
    m.cpu()
    assert m.a.weight is weight is m.b.weight
    assert weight.device.type == "cpu" and weight.dtype == torch.float16
    torch.testing.assert_close(weight.float(), expected.half().float(), rtol=0, atol=0)


def test_gradient_moves_with_its_parameter():
    m = _tied_pair()
    (m.a(torch.ones(2, 4)).sum() + m.b(torch.ones(2, 4)).sum()).backward()
    grad = m.a.weight.grad.clone()
    m.to("openreg")
    assert m.a.weight.grad.device.type == "openreg"
    assert m.b.weight.grad is m.a.weight.grad
    torch.testing.assert_close(m.a.weight.grad.cpu(), grad, rtol=0, atol=0)


def test_to_empty_keeps_ties_as_cpu_does():
    cpu = _tied_pair().to_empty(device="cpu")
    assert cpu.a.weight is cpu.b.weight
    m = _tied_pair()
    weight = m.a.weight
    m.to_empty(device="openreg")
    assert m.a.weight is weight is m.b.weight
    assert weight.device.type == "openreg" and weight.shape == (4, 4)


def test_meta_module_to_empty_behaves_like_cpu():
    # From the meta device c10 itself answers "not compatible" for CPU, so CPU gets new Parameters
    # (and loses the tie); openreg must do exactly what CPU does, not more.
    with torch.device("meta"):
        cpu_from_meta = _tied_pair()
        dev_from_meta = _tied_pair()
    cpu_from_meta.to_empty(device="cpu")
    dev_from_meta.to_empty(device="openreg")
    same_cpu = cpu_from_meta.a.weight is cpu_from_meta.b.weight
    same_dev = dev_from_meta.a.weight is dev_from_meta.b.weight
    assert same_dev == same_cpu
    assert dev_from_meta.a.weight.device.type == "openreg"


def test_compatibility_answers_match_cpu_for_every_pair():
    ask = torch._has_compatible_shallow_copy_type
    cpu = torch.ones(2)
    dev = torch.ones(2, device="openreg")
    dev1 = torch.ones(2, device="openreg:1")
    meta = torch.ones(2, device="meta")
    sparse = torch.ones(2).to_sparse()
    # openreg answers as CPU does, in both directions.
    assert ask(cpu, cpu) and ask(dev, dev) and ask(dev, dev1)
    assert ask(cpu, dev) and ask(dev, cpu)
    assert ask(dev, torch.ones(2, dtype=torch.float64, device="openreg"))
    assert ask(dev, nn.Parameter(torch.ones(2)))
    assert ask(dev, meta) == ask(cpu, meta) is False
    assert ask(meta, dev) == ask(meta, cpu) is False
    assert ask(dev, sparse) == ask(cpu, sparse) is False
    # Other devices are left to c10.
    assert ask(meta, meta) and ask(sparse, sparse)


def test_torch_function_is_not_patched():
    # torch.compile's polyfill substitutes this exact builtin and checks its signature.
    from torch._C import _VariableFunctions

    assert torch._has_compatible_shallow_copy_type is _VariableFunctions._has_compatible_shallow_copy_type
    assert inspect.isbuiltin(torch._has_compatible_shallow_copy_type)


def test_swap_tensors_mode_also_keeps_identity():
    m = _tied_pair()
    weight = m.a.weight
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m.to("openreg")
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    assert m.a.weight is weight is m.b.weight
    assert weight.device.type == "openreg"


def test_optimizer_built_before_to_steps_the_moved_parameters():
    torch.manual_seed(0)
    cpu_model = TiedLM()
    dev_model = copy.deepcopy(cpu_model)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.5, momentum=0.9)
    dev_opt = torch.optim.SGD(dev_model.parameters(), lr=0.5, momentum=0.9)
    dev_model.to("openreg")
    assert {id(p) for p in dev_opt.param_groups[0]["params"]} == {id(p) for p in dev_model.parameters()}
    x, y = _batch()
    for _ in range(5):
        for model, opt, xb, yb in (
            (cpu_model, cpu_opt, x, y),
            (dev_model, dev_opt, x.openreg(), y.openreg()),
        ):
            opt.zero_grad()
            _loss(model, xb, yb).backward()
            opt.step()
    assert dev_model.head.weight is dev_model.embed.weight
    for (name, p_cpu), p_dev in zip(cpu_model.named_parameters(), dev_model.parameters(), strict=True):
        assert p_dev.device.type == "openreg", name
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6)
        state = dev_opt.state[p_dev]["momentum_buffer"]
        assert state.device.type == "openreg"
        torch.testing.assert_close(state.cpu(), cpu_opt.state[p_cpu]["momentum_buffer"], rtol=1e-5, atol=1e-6)


def test_training_with_tied_weights_matches_cpu():
    torch.manual_seed(0)
    cpu_model = TiedLM()
    dev_model = copy.deepcopy(cpu_model).to("openreg")
    assert dev_model.head.weight is dev_model.embed.weight
    assert len(list(dev_model.parameters())) == len(list(cpu_model.parameters())) == 3
    x, y = _batch()
    losses = {}
    for key, model, xb, yb in (("cpu", cpu_model, x, y), ("dev", dev_model, x.openreg(), y.openreg())):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses[key] = []
        for _ in range(15):
            opt.zero_grad()
            loss = _loss(model, xb, yb)
            loss.backward()
            opt.step()
            losses[key].append(loss.item())
    torch.testing.assert_close(losses["dev"], losses["cpu"], rtol=1e-4, atol=1e-5)
    assert losses["cpu"][-1] < losses["cpu"][0]
    torch.testing.assert_close(
        dev_model.embed.weight.detach().cpu(), cpu_model.embed.weight.detach(), rtol=1e-4, atol=1e-5
    )


def test_state_dict_round_trip_keeps_ties_and_values():
    torch.manual_seed(0)
    src = TiedLM().to("openreg")
    sd = src.state_dict()
    assert sd["embed.weight"].device.type == "openreg"
    assert sd["embed.weight"].data_ptr() == sd["head.weight"].data_ptr()

    dst = TiedLM()
    weight = dst.embed.weight
    dst.load_state_dict(sd)
    assert dst.embed.weight is weight is dst.head.weight
    dst.to("openreg")
    assert dst.embed.weight is weight is dst.head.weight
    for k, v in dst.state_dict().items():
        torch.testing.assert_close(v.cpu(), sd[k].cpu(), rtol=0, atol=0)


def test_load_state_dict_assign_matches_cpu():
    # assign=True wraps each loaded tensor in a new Parameter, one per key, on CPU as on openreg:
    # openreg must give the same identities as CPU, and a later move must keep them.
    torch.manual_seed(0)
    ref = TiedLM()
    tied = {}
    for device in ("cpu", "openreg"):
        sd = {k: v.to(device) for k, v in ref.state_dict().items()}
        dst = TiedLM()
        dst.load_state_dict(sd, assign=True)
        weights = (dst.embed.weight, dst.head.weight, dst.body.weight)
        assert all(isinstance(w, nn.Parameter) and w.device.type == device for w in weights)
        tied[device] = dst.embed.weight is dst.head.weight
        dst.to("openreg:1").cpu()
        assert all(
            a is b for a, b in zip((dst.embed.weight, dst.head.weight, dst.body.weight), weights, strict=True)
        )
        for k, v in dst.state_dict().items():
            torch.testing.assert_close(v, ref.state_dict()[k], rtol=0, atol=0)
    assert tied["openreg"] == tied["cpu"]


def test_optimizer_state_dict_round_trip_to_openreg():
    torch.manual_seed(0)
    cpu_model = TiedLM()
    cpu_opt = torch.optim.Adam(cpu_model.parameters(), lr=1e-2)
    x, y = _batch()
    for _ in range(3):
        cpu_opt.zero_grad()
        _loss(cpu_model, x, y).backward()
        cpu_opt.step()
    dev_model = copy.deepcopy(cpu_model)
    dev_opt = torch.optim.Adam(dev_model.parameters(), lr=1e-2)
    # A deep copy: a CPU "step" tensor is loaded as it is, shared with cpu_opt otherwise.
    saved = copy.deepcopy(cpu_opt.state_dict())
    dev_opt.load_state_dict(saved)
    dev_model.to("openreg")
    assert all(p.device.type == "openreg" for p in dev_opt.param_groups[0]["params"])
    # Optimizer.load_state_dict casts state to each parameter's device when it is loaded; loading
    # again after the move puts it on openreg.
    dev_opt.load_state_dict(copy.deepcopy(saved))
    for p in dev_model.parameters():
        assert dev_opt.state[p]["exp_avg"].device.type == "openreg"
    for model, opt, xb, yb in ((cpu_model, cpu_opt, x, y), (dev_model, dev_opt, x.openreg(), y.openreg())):
        for _ in range(3):
            opt.zero_grad()
            _loss(model, xb, yb).backward()
            opt.step()
    for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters(), strict=True):
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5)
