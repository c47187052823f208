"""What compilation predicts of openreg's layouts: the fake convolution, and the check of each result.

Note [Fake convolution on openreg]
torch.compile traces with fake tensors, and the code Inductor generates asserts that each kernel's
real result has the sizes and strides the fake one had. For convolution the fake kernel
(``torch/_subclasses/fake_impls.py``) asks ATen which convolution backend the device has
(``_select_conv_backend``) and which memory format that backend returns
(``_conv_determine_backend_memory_format``). Every PrivateUse1 device is the backend
"Overrideable", whose format is contiguous unless the device is XPU, so a channels-last
convolution was predicted contiguous. openreg's convolution is the host's (Note [openreg's device
DNN library] in ``csrc/aten/Convolution.cpp``): it returns what the CPU returns for tensors of the
same sizes, strides and dtype, channels-last for a channels-last input where the CPU's oneDNN
kernel does. Inductor turns a graph with enough convolutions to channels-last (its layout
optimisation), and the first openreg convolution then failed the assertion.

So openreg's fake convolution asks the same two questions of CPU tensors with the fake tensors'
sizes, strides and dtype (allocated, never written: their pages are never touched) and gives its
results that format. It wraps PyTorch's own fake kernel, registered in FakeTensor's table of
operator implementations (``fake_impls.op_implementations_dict``), which is where PyTorch registers
it; for every other device the wrapper returns PyTorch's answer unchanged. Symbolic sizes without a
hint keep PyTorch's answer, as PyTorch's kernel itself does.

Note [A layout compilation did not predict]
Should a kernel still return other strides than compilation predicted, Inductor's assertion would
blame "a custom op". openreg's wrapper (``_inductor.OpenRegWrapperCodegen``) writes each of its
size and stride checks as a call of :func:`check`, which says that the result is openreg's and
names the operator.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

DEVICE = "openreg"
aten = torch.ops.aten
#: The operators PyTorch's fake convolution serves (forward and backward).
CONVOLUTIONS = (
    aten.convolution.default,
    aten._convolution.default,
    aten._convolution.deprecated,
    aten.convolution_backward.default,
)
_FORWARD = CONVOLUTIONS[:3]


def register() -> None:
    """Give openreg's fake convolution the layouts openreg's kernels return (Note [Fake convolution
    on openreg]). Idempotent."""
    from torch._subclasses import fake_impls

    table = fake_impls.op_implementations_dict
    for op in CONVOLUTIONS:
        impl = table.get(op)
        if impl is not None and not getattr(impl, "openreg", False):
            table[op] = _wrap(impl)


def _wrap(pytorch_impl: Any) -> Any:
    @functools.wraps(pytorch_impl)
    def fake_convolution(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        out = pytorch_impl(fake_mode, func, *args, **kwargs)
        inputs = _inputs(func, args, kwargs)
        if inputs is None:
            return out
        fmt = _host_format(func, *inputs)
        if fmt is None:
            return out
        with fake_mode:
            if func in _FORWARD:
                return out.contiguous(memory_format=fmt)
            grad_input, grad_weight, grad_bias = out
            return (
                None if grad_input is None else grad_input.contiguous(memory_format=fmt),
                None if grad_weight is None else grad_weight.contiguous(memory_format=fmt),
                grad_bias,
            )

    fake_convolution.openreg = True  # type: ignore[attr-defined]
    return fake_convolution


def _inputs(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """The arguments that decide the layout, when the call is on openreg and its sizes are known."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.symbolic_shapes import has_guarding_hint
    from torch.fx.operator_schemas import normalize_function

    normalized = normalize_function(func, args=args, kwargs=kwargs, normalize_to_only_use_kwargs=True)
    if normalized is None:
        return None
    kw = normalized.kwargs
    x, w = kw["input"], kw["weight"]
    if not (isinstance(x, FakeTensor) and x.fake_device.type == DEVICE) or w.dim() not in (4, 5):
        return None  # other devices keep PyTorch's answer; 1-d convolutions are never channels-last
    if not all(has_guarding_hint(s) for t in (x, w) for s in (*t.shape, *t.stride())):
        return None
    return x, w, kw


def _host_format(func: Any, x: Any, w: Any, kw: dict[str, Any]) -> torch.memory_format | None:
    """The memory format the host's convolution gives tensors of ``x``'s and ``w``'s sizes,
    strides and dtype (Note [Fake convolution on openreg])."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw

    def shadow(t: Any) -> torch.Tensor:
        sizes = [guarding_hint_or_throw(s) for s in t.shape]
        strides = [guarding_hint_or_throw(s) for s in t.stride()]
        return torch.empty_strided(sizes, strides, dtype=t.dtype, device="cpu")

    bias = kw.get("bias")
    with unset_fake_temporarily():
        x_cpu, w_cpu = shadow(x), shadow(w)
        select = {
            k: kw[k] for k in ("stride", "padding", "dilation", "transposed", "output_padding", "groups")
        }
        select["bias"] = None if bias is None else shadow(bias)
        if bias is None:
            select["bias_sizes"] = kw.get("bias_sizes")
        backend = torch._C._select_conv_backend(x_cpu, w_cpu, **select)
        return torch._C._conv_determine_backend_memory_format(x_cpu, w_cpu, backend)


def check(tensor: torch.Tensor, size: Any, stride: Any, op: str) -> None:
    """Inductor's size and stride assertion for openreg's graphs, naming openreg and the operator
    (Note [A layout compilation did not predict])."""
    try:
        torch._C._dynamo.guards.assert_size_stride(tensor, size, stride)
    except AssertionError as e:
        raise AssertionError(
            f"openreg: {op} returned a tensor of sizes {tuple(tensor.shape)} and strides "
            f"{tuple(tensor.stride())}, where torch.compile predicted sizes {tuple(size)} and strides "
            f"{tuple(stride)} ({e}). openreg's fake kernel for {op} disagrees with its real kernel: "
            "please report it to openreg-lab with the model that compiled"
        ) from None
