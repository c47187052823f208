"""nn.LSTM, nn.GRU and their cells on openreg.

ATen sends every non-CPU device to the fused cells _thnn_fused_lstm_cell / _thnn_fused_gru_cell,
which only CUDA implements; openreg has kernels for them (csrc/aten/native/Rnn.cpp). An operator
that neither openreg nor the CPU implements gets a clear error naming openreg.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import openreg_lab

MODULES = {
    "lstm": lambda: nn.LSTM(3, 5, num_layers=2, bidirectional=True),
    "gru": lambda: nn.GRU(3, 5, num_layers=2, bidirectional=True),
    "lstm_no_bias": lambda: nn.LSTM(3, 5, bias=False),
    "gru_no_bias": lambda: nn.GRU(3, 5, bias=False),
    "lstm_cell": lambda: nn.LSTMCell(3, 5),
    "gru_cell": lambda: nn.GRUCell(3, 5),
}


def _outputs(result):
    if isinstance(result, torch.Tensor):
        return [result]
    flat = []
    for r in result:
        flat.extend(_outputs(r))
    return flat


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", MODULES)
def test_recurrent_modules_match_cpu_forward_and_backward(name, dtype):
    torch.manual_seed(0)
    cpu = MODULES[name]().to(dtype)
    dev = copy.deepcopy(cpu).to("openreg")
    shape = (4, 3) if name.endswith("cell") else (6, 4, 3)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    xd = x.detach().to("openreg").requires_grad_()
    out_cpu, out_dev = _outputs(cpu(x)), _outputs(dev(xd))
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    for c, d in zip(out_cpu, out_dev, strict=True):
        assert d.device.type == "openreg"
        torch.testing.assert_close(d.cpu(), c.detach(), **tol)
    sum(o.square().sum() for o in out_cpu).backward()
    sum(o.square().sum() for o in out_dev).backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, **tol)
    for (pname, pc), pd in zip(cpu.named_parameters(), dev.parameters(), strict=True):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, **tol, msg=pname)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_fused_cells_pass_gradcheck_and_gradgradcheck(cell):
    torch.manual_seed(0)
    h = 3
    n = 4 if cell == "lstm" else 3
    ig = torch.randn(2, n * h, dtype=torch.float64, device="openreg", requires_grad=True)
    hg = torch.randn(2, n * h, dtype=torch.float64, device="openreg", requires_grad=True)
    state = torch.randn(2, h, dtype=torch.float64, device="openreg", requires_grad=True)
    bi = torch.randn(n * h, dtype=torch.float64, device="openreg", requires_grad=True)
    bh = torch.randn(n * h, dtype=torch.float64, device="openreg", requires_grad=True)
    op = torch.ops.aten._thnn_fused_lstm_cell if cell == "lstm" else torch.ops.aten._thnn_fused_gru_cell

    def f(*args):
        return op(*args)[:2] if cell == "lstm" else op(*args)[0]

    assert torch.autograd.gradcheck(f, (ig, hg, state, bi, bh))
    assert torch.autograd.gradgradcheck(f, (ig, hg, state, bi, bh))


def test_training_an_lstm_matches_cpu():
    torch.manual_seed(0)
    cpu = nn.LSTM(4, 8, batch_first=True)
    dev = copy.deepcopy(cpu).to("openreg")
    x = torch.randn(3, 7, 4)
    losses = {}
    for key, model, xb in (("cpu", cpu, x), ("dev", dev, x.openreg())):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses[key] = []
        for _ in range(5):
            opt.zero_grad()
            loss = model(xb)[0].square().mean()
            loss.backward()
            opt.step()
            losses[key].append(loss.item())
    torch.testing.assert_close(losses["dev"], losses["cpu"], rtol=1e-5, atol=1e-6)


def test_an_operator_neither_openreg_nor_the_cpu_implements_names_openreg():
    # Under the CPU's coverage profile the fused cell is not openreg's: it goes to the fallback,
    # and the CPU has no kernel for it either.
    x = torch.randn(2, 12, device="openreg")
    cx = torch.randn(2, 3, device="openreg")
    with openreg_lab.use_profile("cpu"), pytest.raises(NotImplementedError) as err:
        torch.ops.aten._thnn_fused_lstm_cell(x, x, cx)
    message = str(err.value)
    assert "openreg" in message and "aten::_thnn_fused_lstm_cell" in message
    assert "no CPU kernel" in message
    assert "'CPU' backend" not in message
