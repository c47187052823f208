"""explain(): the dispatch path of one call, read from the dispatcher's tables, and its decomposition."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import openreg_lab


@pytest.fixture(autouse=True)
def _no_profile() -> Iterator[None]:
    yield
    openreg_lab.set_profile(None)


def _x() -> torch.Tensor:
    return torch.randn(3, 4).to("openreg")


def _path(e: openreg_lab.Explanation) -> list[tuple[str, str]]:
    return [(s.key, s.registered) for s in e.steps]


def test_native_op():
    x = _x()
    e = openreg_lab.explain(torch.ops.aten.add.Tensor, x, x)
    assert e.op == "aten::add.Tensor"
    assert {"PrivateUse1", "AutogradPrivateUse1", "ADInplaceOrView"} <= set(e.argument_keys)
    assert "AutocastPrivateUse1" in e.tls_excluded and "AutocastPrivateUse1" not in e.keys
    assert _path(e) == [
        ("AutogradPrivateUse1", "kernel"),
        ("ADInplaceOrView", "fallthrough"),
        ("BackendSelect", "fallthrough"),
        ("PrivateUse1", "kernel"),
    ]
    assert e.steps[-1].action == "runs openreg's hand-written kernel"
    assert "Binary.cpp" in e.steps[-1].source
    assert (e.resolution, e.kernel) == ("native", "hand_written")
    # The kernel's own calls: it only allocates its result.
    assert [c.op for c in e.calls] == ["aten::empty.memory_format"]


def test_composite_implicit_decomposition_is_observed():
    x, w, b = _x(), torch.randn(5, 4).to("openreg"), torch.randn(5).to("openreg")
    e = openreg_lab.explain(torch.ops.aten.linear.default, x, w, b)
    assert _path(e) == [("AutogradPrivateUse1", "composite_implicit")]
    assert (e.resolution, e.kernel) == ("composite_implicit", "composite")
    top = [(c.op, c.kernel) for c in e.calls if c.depth == 0]
    assert top == [("aten::t", "composite"), ("aten::addmm", "hand_written")]
    assert ("aten::as_strided", "hand_written") in [(c.op, c.kernel) for c in e.calls]  # inside t
    assert "decomposes into" in repr(e) and "aten::addmm" in repr(e)


def test_composite_explicit_and_fallback():
    x = _x()
    e = openreg_lab.explain(torch.ops.aten.atan2.default, x, x)
    assert _path(e)[-1] == ("PrivateUse1", "composite_explicit")
    assert [(c.op, c.kernel, c.ran) for c in e.calls if c.depth == 0] == [
        ("aten::empty.memory_format", "hand_written", "native"),
        ("aten::atan2.out", "cpu_fallback", "fallback"),
    ]
    # The fallback's transfers are in the run's trace: x (passed twice, copied once) out, the result back.
    copies = e.trace.copies()
    assert copies["direction"].tolist() == ["D2H", "H2D"]
    assert set(copies["op"]) == {"aten::atan2.out"}


def test_thread_local_state_enters_the_key_set():
    x, w = _x(), torch.randn(4, 5).to("openreg")
    with torch.autocast("openreg", dtype=torch.bfloat16):
        e = openreg_lab.explain(torch.ops.aten.mm.default, x, w)
    assert e.steps[0].key == "AutocastPrivateUse1" and e.steps[0].registered == "kernel"
    assert "AutocastPrivateUse1" not in e.tls_excluded
    assert [c.op for c in e.calls if c.depth == 0].count("aten::to.dtype") == 2  # the casts
    assert e.trace.casts()["argument"].tolist() == ["self", "mat2"]
    with (
        torch.no_grad(),
        torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradPrivateUse1)),
    ):
        e = openreg_lab.explain(torch.ops.aten.mm.default, x, w)
    assert "AutogradPrivateUse1" in e.tls_excluded
    assert _path(e)[0] == ("ADInplaceOrView", "fallthrough")


def test_factory_goes_through_backend_select():
    e = openreg_lab.explain("aten::empty.memory_format", [2, 3], device="openreg")
    assert e.argument_keys == ()
    assert _path(e) == [
        ("ADInplaceOrView", "fallthrough"),
        ("BackendSelect", "kernel"),
        ("PrivateUse1", "kernel"),
    ]


def test_packet_chooses_the_overload():
    x = _x()
    assert openreg_lab.explain(torch.ops.aten.add, x, x).op == "aten::add.Tensor"
    assert openreg_lab.explain(torch.ops.aten.add, x, 2).op == "aten::add.Scalar"
    assert openreg_lab.explain("add.Tensor", x, x).op == "aten::add.Tensor"


def test_under_a_profile():
    x = _x()
    with openreg_lab.use_profile("minimal"):
        e = openreg_lab.explain(torch.ops.aten.add.Tensor, x, x)
    assert e.profile == "minimal"
    assert (e.resolution, e.kernel) == ("composite_explicit", "composite")
    assert "composite kernel" in e.steps[-1].action
    assert ("aten::add.out", "cpu_fallback") in [(c.op, c.kernel) for c in e.calls]
    with openreg_lab.use_profile("cpu"):
        e = openreg_lab.explain(torch.ops.aten.atan2.default, x, x)
    assert (e.resolution, e.kernel) == ("native", "generic")
    assert "generic native path" in e.steps[-1].action


def test_repr_reads_well():
    x = _x()
    text = repr(openreg_lab.explain(torch.ops.aten.add.Tensor, x, x))
    assert text.splitlines()[0] == "explain aten::add.Tensor"
    assert "dispatch key set: AutogradPrivateUse1, ADInplaceOrView, BackendSelect, PrivateUse1" in text
    assert "openreg: native (hand_written)" in text


def test_errors():
    x = _x()
    with pytest.raises(ValueError, match=r"no operator named 'aten::atan3'; did you mean"):
        openreg_lab.explain("aten::atan3", x)
    with pytest.raises(TypeError, match=r"do not match aten::add.Tensor\(Tensor self"):
        openreg_lab.explain(torch.ops.aten.add.Tensor, x, "two")
    with pytest.raises(TypeError, match="match no overload of aten::add"):
        openreg_lab.explain(torch.ops.aten.add, x, "two")
    with pytest.raises(TypeError, match="explain takes an operator"):
        openreg_lab.explain(3, x)
    with pytest.raises(ValueError, match="called no operator on openreg"):
        openreg_lab.explain(lambda: torch.ones(2) + 1)


@pytest.mark.parametrize("op", ["prim::device", torch.ops.prim.device.default, torch.ops.prim.device])
def test_torchscript_operators_are_refused_with_explains_own_error(op):
    # torch.ops resolves TorchScript's prim:: operators, which never reach the dispatcher.
    with pytest.raises(
        ValueError,
        match=r"explain: prim::device is a TorchScript operator, not a dispatcher operator: .*"
        r"Explain a dispatcher operator such as 'aten::add.Tensor'; did you mean .*aten::",
    ):
        openreg_lab.explain(op, _x())


def test_callables_are_run_and_explained_by_what_they_called():
    x = _x()
    w = torch.randn(3, x.shape[-1], device="openreg", requires_grad=True)
    e = openreg_lab.explain(torch.nn.functional.linear, x, w)
    assert e.called == "torch._C._nn.linear" and e.operators == ("aten::linear",)
    assert e.op == "aten::linear" and e.schema.startswith("aten::linear(Tensor input")
    # linear decomposes (CompositeImplicitAutograd) at the autograd key; the recorder saw that path.
    assert [s.key for s in e.steps] == ["AutogradPrivateUse1"]
    assert e.steps[0].registered == "composite_implicit"
    assert [c.op for c in e.calls if c.depth == 0] == ["aten::t", "aten::matmul"]
    assert "aten::mm" in [c.op for c in e.calls]
    # Tensor methods and torch functions are callables too; a lambda may call several operators.
    assert openreg_lab.explain(torch.Tensor.add, x, x).op == "aten::add.Tensor"
    assert openreg_lab.explain(torch.add, x, x).steps[-1].key == "PrivateUse1"
    both = openreg_lab.explain(lambda: (x.cumsum(0), x * 2))
    assert both.operators == ("aten::cumsum", "aten::mul.Tensor")
    assert "it called aten::cumsum, aten::mul.Tensor" in repr(both)


def test_a_failing_call_is_explained_with_its_error():
    x = _x()
    with openreg_lab.fallback_policy("error"):
        e = openreg_lab.explain(torch.ops.aten.atan2.default, x, x)
    assert e.error is not None and e.error.startswith("NotImplementedError")
    assert "aten::atan2.out" in e.error
    assert ("aten::atan2.out", "cpu_fallback") in [(c.op, c.kernel) for c in e.calls]
    assert repr(e).splitlines()[-1].startswith("  raised: NotImplementedError")
