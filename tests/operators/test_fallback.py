"""The boxed CPU fallback already runs any op; its full semantics are tested with the operators."""

import re
import warnings

import pytest
import torch

import openreg_lab


def test_unregistered_op_runs_and_stays_on_device():
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_logcumsumexp", "PrivateUse1")
    x = torch.randn(10)
    y = torch.logcumsumexp(x.to("openreg"), 0)
    assert y.device == torch.device("openreg", 0)
    assert torch.allclose(y.cpu(), torch.logcumsumexp(x, 0))


def test_result_stays_on_the_inputs_device():
    x = torch.randn(4, 4)
    y = torch.linalg.inv(x.to("openreg:1"))
    assert y.device == torch.device("openreg", 1)
    assert torch.allclose(y.cpu(), torch.linalg.inv(x), atol=1e-5)


def test_in_place_and_out_variants_write_the_device_tensor():
    x = torch.randn(8)
    d = x.to("openreg")
    ptr = d.data_ptr()
    d.exp_()
    assert d.data_ptr() == ptr and torch.allclose(d.cpu(), x.exp())
    out = torch.empty(8, device="openreg")
    r = torch.exp(x.to("openreg"), out=out)
    assert r is out and torch.allclose(out.cpu(), x.exp())
    out2 = torch.empty(0, device="openreg")  # resized by the CPU kernel
    torch.exp(x.to("openreg"), out=out2)
    assert out2.shape == (8,) and torch.allclose(out2.cpu(), x.exp())


def test_in_place_on_a_view_writes_the_base():
    x = torch.randn(4, 4)
    d = x.to("openreg")
    d[:, 1].exp_()
    expected = x.clone()
    expected[:, 1] = expected[:, 1].exp()
    assert torch.allclose(d.cpu(), expected)


_lib = torch.library.Library("openreg_test", "DEF")
_lib.define("first_row(Tensor(a) x) -> Tensor(a)")
_lib.impl("first_row", lambda x: x[0], "CPU")


def test_fallback_view_op_aliases_device_memory():
    # Every aten view op with a backend kernel is native on openreg; a user's view op with only
    # a CPU kernel reaches the fallback, whose result must alias the device tensor, not copy it.
    x = torch.randn(3, 4)
    d = x.to("openreg")
    row = torch.ops.openreg_test.first_row(d)
    assert row.device == d.device and row.shape == (4,)
    assert row.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    row.fill_(0)
    assert d.cpu()[0].tolist() == [0.0] * 4
    assert torch.equal(d.cpu()[1:], x[1:])


def test_multiple_outputs():
    x = torch.randn(5, 6)
    values, indices = torch.sort(x.to("openreg"), dim=1)
    ev, ei = torch.sort(x, dim=1)
    assert values.device.type == "openreg" and indices.device.type == "openreg"
    assert torch.equal(values.cpu(), ev) and torch.equal(indices.cpu(), ei)


def test_mixed_openreg_devices_are_rejected():
    a = torch.randn(3, device="openreg:0")
    b = torch.randn(3, device="openreg:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.atan2(a, b)


def test_cpu_tensor_mixed_with_device_is_rejected_but_scalars_are_fine():
    a = torch.randn(3, device="openreg")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.atan2(a, torch.randn(3))
    r = torch.atan2(a, torch.tensor(2.0))
    assert r.device.type == "openreg"


@pytest.mark.parametrize("policy", ["allow", "warn", "error"])
def test_policy_round_trip(policy):
    openreg_lab.set_fallback_policy(policy)
    assert openreg_lab.get_fallback_policy() == policy


def test_policy_error_raises_before_running():
    d = torch.randn(4, device="openreg")
    before = d.cpu().clone()
    with openreg_lab.fallback_policy("error"):
        with pytest.raises(NotImplementedError, match=r"aten::atan\.out has no openreg kernel.*'error'"):
            d.atan_()
    assert torch.equal(d.cpu(), before)
    assert openreg_lab.get_fallback_policy() == "allow"


def test_bad_policy_is_rejected():
    with pytest.raises(ValueError, match="choose 'allow', 'warn' or 'error'"):
        openreg_lab.set_fallback_policy("sometimes")  # type: ignore[arg-type]


# --- full semantics --------------------------------------------------------------------------


def _copies() -> int:
    return openreg_lab._C.copies_on_this_thread()


def test_fallback_copies_each_input_once_and_each_output_once():
    x = torch.randn(1000, device="openreg")
    before = _copies()
    torch.logcumsumexp(x, 0)
    assert _copies() - before == 2  # x to the host, the result back


def test_same_tensor_twice_is_copied_once():
    x = torch.randn(10, device="openreg")
    before = _copies()
    torch.atan2(x, x)
    assert _copies() - before == 2


def test_error_policy_moves_no_data():
    x = torch.randn(10, device="openreg")
    before = _copies()
    with openreg_lab.fallback_policy("error"), pytest.raises(NotImplementedError):
        torch.logcumsumexp(x, 0)
    assert _copies() == before


def test_warn_policy_warns_once_per_operator():
    x = torch.randn(5, device="openreg")
    with openreg_lab.fallback_policy("warn"):
        with pytest.warns(UserWarning, match=r"aten::_logcumsumexp has no openreg kernel") as rec:
            torch.logcumsumexp(x, 0)
            torch.logcumsumexp(x, 0)
            torch.logcumsumexp(x.clone(), 0)
        assert len([w for w in rec if "logcumsumexp" in str(w.message)]) == 1
    with openreg_lab.fallback_policy("warn"), pytest.warns(UserWarning, match="logcumsumexp"):
        torch.logcumsumexp(x, 0)  # a new "warn" period warns again


def test_policy_from_environment():
    from tests.support.processes import run_python

    result = run_python(
        "import torch, openreg_lab\n"
        "print(openreg_lab.get_fallback_policy())\n"
        "try:\n    torch.logcumsumexp(torch.ones(3, device='openreg'), 0)\n"
        "except NotImplementedError as e:\n    print('refused', 'aten::_logcumsumexp' in str(e))\n",
        OPENREG_FALLBACK="error",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["error", "refused", "True"]
    bad = run_python("import openreg_lab", OPENREG_FALLBACK="never")
    assert bad.returncode != 0 and "OPENREG_FALLBACK='never' is not a fallback policy" in bad.stderr


def test_non_contiguous_inputs():
    x = torch.randn(6, 4)
    d = x.to("openreg")
    torch.testing.assert_close(torch.logcumsumexp(d.t(), 1).cpu(), torch.logcumsumexp(x.t(), 1))
    torch.testing.assert_close(torch.logcumsumexp(d[::2, 1:], 0).cpu(), torch.logcumsumexp(x[::2, 1:], 0))


def test_scalar_arguments():
    x = torch.randn(7) * 5
    d = x.to("openreg")
    torch.testing.assert_close(torch.fmod(d, 2.5).cpu(), torch.fmod(x, 2.5))
    torch.testing.assert_close(torch.remainder(d, -1.5).cpu(), torch.remainder(x, -1.5))
    torch.testing.assert_close(torch.hypot(d, torch.tensor(3.0)).cpu(), torch.hypot(x, torch.tensor(3.0)))


def test_optional_and_mutable_optional_arguments():
    # Batch norm in training mode updates running_mean / running_var in place: the fallback
    # must write those openreg buffers back.
    torch.manual_seed(0)
    bn_cpu = torch.nn.BatchNorm1d(3)
    bn_dev = torch.nn.BatchNorm1d(3).openreg()
    x = torch.randn(8, 3)
    y_cpu = bn_cpu(x)
    y_dev = bn_dev(x.openreg())
    torch.testing.assert_close(y_dev.cpu(), y_cpu)
    torch.testing.assert_close(bn_dev.running_mean.cpu(), bn_cpu.running_mean)
    torch.testing.assert_close(bn_dev.running_var.cpu(), bn_cpu.running_var)
    bn_nw = torch.nn.BatchNorm1d(3, affine=False).openreg()  # weight and bias are None
    torch.testing.assert_close(bn_nw(x.openreg()).cpu(), torch.nn.BatchNorm1d(3, affine=False)(x))


def test_mutated_tensor_list():
    grads = [torch.tensor([2.0, 4.0]), torch.tensor([float("inf"), 1.0])]
    dev = [g.openreg() for g in grads]
    found_inf = torch.zeros(1, device="openreg")
    torch._amp_foreach_non_finite_check_and_unscale_(dev, found_inf, torch.full((1,), 0.5, device="openreg"))
    assert dev[0].cpu().tolist() == [1.0, 2.0]
    assert found_inf.item() == 1.0


def test_tensor_list_output_and_data_dependent_shapes():
    x = torch.tensor([3, 1, 3, 2, 1])
    values, counts = torch.unique(x.openreg(), return_counts=True)
    assert values.device.type == "openreg" and counts.device.type == "openreg"
    assert values.cpu().tolist() == [1, 2, 3] and counts.cpu().tolist() == [2, 1, 2]
    nz = torch.nonzero(torch.tensor([0, 1, 0, 1]).openreg())
    assert nz.device.type == "openreg" and nz.cpu().tolist() == [[1], [3]]
    chunks = torch.tensor_split(torch.arange(7.0).openreg(), torch.tensor([2, 5]))
    assert [c.cpu().tolist() for c in chunks] == [[0.0, 1.0], [2.0, 3.0, 4.0], [5.0, 6.0]]


def test_indexing_with_cpu_indices_is_allowed():
    x = torch.arange(10.0)
    d = x.openreg()
    idx = torch.tensor([1, 4, 7])
    assert d[idx].cpu().tolist() == [1.0, 4.0, 7.0]
    d[idx] = torch.zeros(3, device="openreg")
    assert d.cpu()[idx].tolist() == [0.0, 0.0, 0.0]
    mask = d > 5
    assert d[mask].cpu().tolist() == [6.0, 8.0, 9.0]


def test_out_variant_with_multiple_outputs():
    x = torch.randn(4, 5)
    vals = torch.empty(0, device="openreg")
    idx = torch.empty(0, dtype=torch.long, device="openreg")
    r = torch.topk(x.openreg(), 2, dim=1, out=(vals, idx))
    assert r[0] is vals and r[1] is idx
    ev, ei = torch.topk(x, 2, dim=1)
    torch.testing.assert_close(vals.cpu(), ev)
    assert torch.equal(idx.cpu(), ei)


def test_factory_with_device_argument():
    r = torch.linspace(0, 1, 5, device="openreg:1")
    assert r.device == torch.device("openreg", 1)
    torch.testing.assert_close(r.cpu(), torch.linspace(0, 1, 5))
    p = torch.randperm(8, device="openreg")
    assert sorted(p.cpu().tolist()) == list(range(8))


# Note [Printing is exempt from the fallback policy]
@pytest.mark.parametrize("policy", ["warn", "error"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(5.0, device="openreg"),
        lambda: torch.tensor([1.5, float("nan"), float("inf"), -2.0], device="openreg"),
        lambda: torch.arange(12, device="openreg").view(3, 4)[:, ::2],
        lambda: torch.randn(2000, device="openreg"),  # summarised: the printer slices and concatenates
        lambda: torch.nn.Parameter(torch.ones(2, device="openreg")),
        lambda: torch.tensor([True, False], device="openreg"),
    ],
    ids=["arange", "nonfinite", "strided", "summarised", "parameter", "bool"],
)
def test_printing_a_tensor_works_under_every_policy_and_warns_nothing(policy, make):
    t = make()
    with openreg_lab.fallback_policy(policy), warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warning would raise
        text = repr(t)
        assert str(t) == text
    assert "device='openreg:0'" in text

    def words(s: str) -> str:
        return re.sub(r"[\s,]+", " ", s.replace("device='openreg:0'", "")).replace(" )", ")")

    host = t.detach().cpu()
    if isinstance(t, torch.nn.Parameter):
        host = torch.nn.Parameter(host)
    assert words(text) == words(repr(host))  # the same digits as the CPU's printout


def test_the_printing_exemption_ends_with_the_printer():
    x = torch.randn(4, device="openreg")
    with openreg_lab.fallback_policy("error"):
        repr(x)
        with pytest.raises(NotImplementedError, match=r"aten::atan\.out has no openreg kernel"):
            x.atan_()


def test_printing_is_still_traced():
    x = torch.tensor([1.5, float("nan")], device="openreg")
    with openreg_lab.fallback_policy("error"), openreg_lab.trace() as t:
        repr(x)
    assert len(t.fallbacks()) > 0  # what printing costs on the device stays visible


def test_the_convolution_error_names_convolution_not_the_hook():
    # Convolution is native (Convolution.cpp); under a profile without it, it goes through the CPU
    # and obeys the policy like any fallback.
    x, w = torch.randn(1, 1, 4, 4, device="openreg"), torch.randn(1, 1, 2, 2, device="openreg")
    with openreg_lab.use_profile("minimal"), openreg_lab.fallback_policy("error"):
        with pytest.raises(
            NotImplementedError,
            match=r"^Convolution \(conv1d/2d/3d and conv_transpose1d/2d/3d, which openreg's "
            r"aten::convolution_overrideable hands to the CPU's kernel\) has no openreg kernel",
        ):
            torch.nn.functional.conv2d(x, w)
