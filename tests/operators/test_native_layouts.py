"""Native kernels on every input layout: expanded (stride 0), transposed, sliced, offset views.

Autograd hands kernels expanded gradients (the backward of sum is grad.expand(...)), so a kernel
that assumes dense memory reads out of bounds. Each op here runs on CPU and on openreg with the
same layouts, under the "error" fallback policy so that the native kernel is what runs.
"""

import pytest
import torch

import openreg_lab

# layout: (shape of the dense base, view of the base with the (4, 6) shape the ops expect)
LAYOUTS = {
    "expanded": ((1,), lambda b: b.expand(4, 6)),
    "row-expanded": ((6,), lambda b: b.expand(4, 6)),
    "transposed": ((6, 4), lambda b: b.t()),
    "sliced": ((4, 12), lambda b: b[:, ::2]),
    "offset": ((27,), lambda b: b[3:].view(4, 6)),
}


def _pair(layout):
    """The same view of the same values on CPU and on openreg (the view is taken on the device)."""
    shape, view = LAYOUTS[layout]
    base = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    return view(base), view(base.openreg())


OPS = {
    "cat": lambda x: torch.cat([x, x], 0),
    "cat_dim1": lambda x: torch.cat([x, x], 1),
    "index_select": lambda x: torch.index_select(x, 1, torch.tensor([0, 2, 2], device=x.device)),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, 0),
    "layer_norm": lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
    "sum": lambda x: x.sum(0),
    "mean": lambda x: x.mean(-1),
    "amax": lambda x: x.amax(0),
    "var": lambda x: x.var(-1),
    "argmax": lambda x: x.argmax(-1),
    "mm": lambda x: x @ x.t(),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_native_kernel_on_layout(op, layout):
    x, xd = _pair(layout)
    assert xd.stride() == x.stride() and xd.storage_offset() == x.storage_offset()
    expected = OPS[op](x)
    with openreg_lab.fallback_policy("error"):
        actual = OPS[op](xd)
    torch.testing.assert_close(actual.cpu(), expected)


def test_expanded_gradients_reach_cat():
    # split's backward is cat of the incoming gradients, which sum's backward expands.
    x = torch.randn(5, 5, 5, requires_grad=True)
    xd = x.detach().openreg().requires_grad_()
    sum(t.sum() for t in torch.split(x, 2)).backward()
    sum(t.sum() for t in torch.split(xd, 2)).backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
