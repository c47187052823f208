"""What compilation predicts of openreg's layouts is what openreg's kernels return: the fake
convolution (Note [Fake convolution on openreg]) and every native kernel with an OpInfo, on
contiguous and channels-last inputs; a mismatch that does happen names openreg and the operator
(Note [A layout compilation did not predict])."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import openreg_lab
from openreg_lab.device import _compile, _layouts

aten = torch.ops.aten


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    _compile.register()  # what the first torch.compile on openreg does


def _fake(fn: Any, *tensors: torch.Tensor) -> Any:
    with FakeTensorMode() as mode:
        return fn(*(mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in tensors))


def _strides(out: Any) -> list[tuple[int, ...] | None]:
    return [t.stride() if isinstance(t, torch.Tensor) else None for t in tree_flatten(out)[0]]


#: (dims, groups, transposed): the kinds of convolution at::convolution takes.
KINDS = [(d, g, t) for d in (1, 2, 3) for g in (1, 2) for t in (False, True)]
#: Which of input and weight are channels-last (2-d and 3-d only).
FORMATS = list(itertools.product((False, True), repeat=2))


def _conv_args(dims: int, groups: int, transposed: bool, x_last: bool, w_last: bool) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(dims * 10 + groups)
    x = torch.randn(2, 4, *([5] * dims), generator=g)
    w = torch.randn(*((4, 6 // groups) if transposed else (6, 4 // groups)), *([3] * dims), generator=g)
    fmt = {2: torch.channels_last, 3: torch.channels_last_3d}.get(dims)
    if fmt is not None:
        x = x.contiguous(memory_format=fmt) if x_last else x
        w = w.contiguous(memory_format=fmt) if w_last else w
    ones = [1] * dims
    return x, w, torch.randn(6, generator=g), ones, ones, ones, transposed, [0] * dims, groups


@pytest.mark.parametrize("x_last,w_last", FORMATS, ids=lambda v: "last" if v else "contig")
@pytest.mark.parametrize("dims,groups,transposed", KINDS, ids=str)
def test_the_fake_convolution_predicts_openregs_layouts(dims, groups, transposed, x_last, w_last):
    if dims == 1 and (x_last or w_last):
        pytest.skip("a 1-d tensor has no channels-last format")
    x, w, b, stride, padding, dilation, transposed, out_pad, groups = _conv_args(
        dims, groups, transposed, x_last, w_last
    )
    rest = (stride, padding, dilation, transposed, out_pad, groups)
    args = [t.to("openreg") for t in (x, w, b)]
    real = aten.convolution(*args, *rest)
    assert _fake(lambda *a: aten.convolution(*a, *rest), *args).stride() == real.stride()
    assert real.stride() == aten.convolution(x, w, b, *rest).stride()  # the host's layout
    grad = torch.randn_like(real)
    bw = (grad, args[0], args[1], [6], *rest, [True, True, True])
    real_grads = aten.convolution_backward(*bw)
    assert _strides(_fake(lambda *a: aten.convolution_backward(*a), *bw)) == _strides(real_grads)


def test_other_devices_keep_pytorchs_fake_convolution():
    x, w = torch.randn(2, 4, 5, 5).contiguous(memory_format=torch.channels_last), torch.randn(6, 4, 3, 3)
    rest = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert (
        _fake(lambda *a: aten.convolution(*a, None, *rest), x, w).stride()
        == aten.convolution(x, w, None, *rest).stride()
    )
    impl = torch._subclasses.fake_impls.op_implementations_dict[aten.convolution.default]
    assert impl.openreg and impl.__wrapped__ is not None  # ours, around PyTorch's
    _layouts.register()  # idempotent: not wrapped twice
    assert torch._subclasses.fake_impls.op_implementations_dict[aten.convolution.default] is impl


def test_a_layout_mismatch_names_openreg_and_the_op():
    t = torch.empty(2, 3, 4, 4, device="openreg").contiguous(memory_format=torch.channels_last)
    _layouts.check(t, (2, 3, 4, 4), (48, 1, 12, 3), "aten.convolution.default")  # what it is: no error
    with pytest.raises(AssertionError) as e:
        _layouts.check(t, (2, 3, 4, 4), (48, 16, 4, 1), "aten.convolution.default")
    message = str(e.value)
    assert message.startswith("openreg: aten.convolution.default returned a tensor of sizes (2, 3, 4, 4)")
    assert (
        "strides (48, 1, 12, 3), where torch.compile predicted sizes (2, 3, 4, 4) and strides (48, 16, 4, 1)"
        in (message)
    )


def _native_opinfos() -> list[Any]:
    """The OpInfos (float32 on CPU) of operators openreg runs with a kernel of its own: the OpInfo's
    name, its ATen name or its last part (``nn.functional.silu``), with or without a leading
    underscore (``softmax`` runs ``aten::_softmax``), or their ``_forward`` form (``nll_loss``)."""
    native = {name.split(".")[0].removeprefix("aten::") for name in openreg_lab.native_ops()}
    out = []
    for op in op_db:
        names = {op.name, getattr(op, "aten_name", op.name), op.name.split(".")[-1]}
        names |= {f"_{n}" for n in names} | {f"{n}_forward" for n in names}
        if names & native and torch.float32 in op.supported_dtypes("cpu"):
            out.append(op)
    return out


def _channels_last(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dim() == 4 and not x.is_sparse:
        return x.contiguous(memory_format=torch.channels_last)
    return x


NATIVE = _native_opinfos()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize(
    "op", NATIVE, ids=lambda o: o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")
)
def test_fake_strides_are_the_real_kernels_for_every_native_op(op, layout):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's notices on building sparse samples
        samples = list(itertools.islice(op.sample_inputs("openreg", torch.float32, requires_grad=False), 8))
    compared = 0
    for sample in samples:
        if compared == 2:
            break
        args = (sample.input, *sample.args)
        kwargs = dict(sample.kwargs)
        if layout == "channels_last":
            args, kwargs = tree_map(_channels_last, (args, kwargs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                real = op(*args, **kwargs)
            except Exception:  # a sample the op refuses: the operator tier checks its errors
                continue
            with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                to_fake = lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t  # noqa: E731
                fake = op(*tree_map(to_fake, args), **tree_map(to_fake, kwargs))
        real_flat, fake_flat = tree_flatten(real)[0], tree_flatten(fake)[0]
        for r, f in zip(real_flat, fake_flat, strict=True):
            if isinstance(r, torch.Tensor) and r.layout == torch.strided and r.numel() > 1:
                assert tuple(f.shape) == tuple(r.shape), (sample, r.shape, f.shape)
                assert f.stride() == r.stride(), (
                    f"{op.name}: fake {f.stride()} real {r.stride()} for {sample}"
                )
        compared += 1
    assert compared > 0, f"{op.name}: no sample ran on openreg"
