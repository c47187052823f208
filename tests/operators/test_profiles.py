"""Profiles: switching which operators run natively, the fallback's copies, the generic native path."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator

import pytest
import torch

import openreg_lab
from openreg_lab import _C
from tests.operators.test_opinfo import EXPECTED_FAILURES, SUBSET
from tests.support.opinfo_parity import all_cases, check


@pytest.fixture(autouse=True)
def _no_profile() -> Iterator[None]:
    yield
    openreg_lab.set_profile(None)


class Counters:
    """Fallback calls, generic native calls and copies made on this thread inside the block."""

    def __enter__(self) -> Counters:
        self._start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._now()
        self.fallbacks, self.generic, self.copies = (e - s for e, s in zip(end, self._start, strict=True))

    @staticmethod
    def _now() -> tuple[int, int, int]:
        return (
            _C.fallbacks_on_this_thread(),
            _C.generic_calls_on_this_thread(),
            _C.copies_on_this_thread(),
        )


def _pair() -> tuple[torch.Tensor, torch.Tensor]:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    return a, b


def test_profile_ops():
    minimal = openreg_lab.profile_ops("minimal")
    assert "aten::empty.memory_format" in minimal and "aten::add.Tensor" not in minimal
    assert openreg_lab.profile_ops("default") == frozenset(openreg_lab.native_ops())
    for name in ("cpu", "cuda", "mps"):
        ops = openreg_lab.profile_ops(name)
        assert minimal <= ops
        # add.Tensor: structured delegate add.out, a ufunc (CPU and CUDA from codegen), MPS by hand.
        assert "aten::add.Tensor" in ops
    assert "aten::linalg_eig" in openreg_lab.profile_ops("cuda")
    assert "aten::linalg_eig" not in openreg_lab.profile_ops("mps")
    assert "aten::linear" not in openreg_lab.profile_ops("cpu")  # composite implicit, no CPU kernel


def test_minimal_profile_add_goes_through_the_fallback_and_moves_bytes():
    a, b = _pair()
    x, y = a.to("openreg"), b.to("openreg")
    with openreg_lab.use_profile("minimal"), Counters() as c:
        z = x + y
    assert openreg_lab.get_profile() is None
    # add.Tensor decomposes (as without openreg's kernel) into empty + add.out; add.out falls back:
    # x and y to the host, the result back into the out= tensor.
    assert (c.fallbacks, c.generic, c.copies) == (1, 0, 3)
    torch.testing.assert_close(z.cpu(), a + b)
    with Counters() as c:
        z = x + y  # the hand-written kernel again
    assert (c.fallbacks, c.generic, c.copies) == (0, 0, 0)
    torch.testing.assert_close(z.cpu(), a + b)


def test_profile_is_undone_on_exception_and_nests():
    x = torch.randn(3).to("openreg")
    with pytest.raises(KeyError), openreg_lab.use_profile("minimal"):
        raise KeyError
    assert openreg_lab.get_profile() is None
    with openreg_lab.use_profile("cpu"):
        with openreg_lab.use_profile("minimal"):
            assert openreg_lab.get_profile() == "minimal"
        assert openreg_lab.get_profile() == "cpu"
        with Counters() as c:
            torch.atan2(x, x)
        assert (c.fallbacks, c.generic, c.copies) == (0, 1, 0)
    assert openreg_lab.get_profile() is None
    with Counters() as c:
        torch.atan2(x, x)
    assert (c.fallbacks, c.generic) == (1, 0)  # atan2.out has no openreg kernel


def test_set_profile_takes_effect_at_once():
    x = torch.randn(3).to("openreg")
    openreg_lab.set_profile("minimal")
    with Counters() as c:
        x + x
    assert c.fallbacks == 1
    openreg_lab.set_profile("default")
    assert openreg_lab.get_profile() is None
    with Counters() as c:
        x + x
    assert c.fallbacks == 0


def test_generic_native_path_computes_on_device_memory_without_copies():
    a, b = _pair()
    x, y = a.to("openreg"), b.to("openreg")
    with openreg_lab.use_profile("cpu"):
        before = torch.openreg.memory_allocated()
        with Counters() as c:
            z = torch.atan2(x, y)  # functional: the result is allocated by the CPU kernel
            values, indices = torch.sort(x, dim=1)  # two results
            w = torch.ones_like(x)
            w.atan2_(y)  # in-place
            out = torch.empty(0, device="openreg")
            torch.atan2(x, y, out=out)  # out= of the wrong size: resized in device memory
        after = torch.openreg.memory_allocated()
    assert c.copies == 0 and c.fallbacks == 0 and c.generic >= 4
    assert after > before  # the results live in device memory
    for t in (z, values, indices, w, out):
        assert t.device.type == "openreg"
    torch.testing.assert_close(z.cpu(), torch.atan2(a, b))
    torch.testing.assert_close(values.cpu(), torch.sort(a, dim=1).values)
    torch.testing.assert_close(indices.cpu(), torch.sort(a, dim=1).indices)
    torch.testing.assert_close(w.cpu(), torch.atan2(torch.ones_like(a), b))
    torch.testing.assert_close(out.cpu(), torch.atan2(a, b))
    assert out.shape == (4, 5)


def test_generic_views_alias_the_device_tensor():
    a = torch.randn(4, 4)
    x = a.to("openreg")
    with openreg_lab.use_profile(["aten::diagonal"]), Counters() as c:
        d = torch.diagonal(x)
    assert (c.copies, c.fallbacks, c.generic) == (0, 0, 1)
    assert d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    d.fill_(7.0)
    torch.testing.assert_close(torch.diagonal(x.cpu()), torch.full((4,), 7.0))


def test_hand_written_dtype_fallback_runs_generically_under_a_covering_profile():
    # openreg's hand-written add has no complex kernel: by default it falls back.
    a = torch.randn(3, dtype=torch.complex64)
    x = a.to("openreg")
    with Counters() as c:
        x + x
    assert c.fallbacks == 1
    with openreg_lab.use_profile("cpu"), Counters() as c:
        z = x + x
    assert (c.fallbacks, c.copies) == (0, 0)
    torch.testing.assert_close(z.cpu(), a + a)


def test_cpu_profile_opinfo_subset_does_not_fall_back():
    cases = [c for c in all_cases() if c.id in SUBSET]
    assert len(cases) == len(SUBSET)
    with openreg_lab.use_profile("cpu"), Counters() as c:
        compared = sum(check(case, max_samples=8) for case in cases)
    assert compared > len(cases)
    assert c.fallbacks == 0


def test_mps_profile_falls_back_for_an_op_mps_lacks():
    a = torch.randn(3, 4)
    x = a.to("openreg")
    idx = torch.tensor([0, 5, 11], device="openreg")
    with openreg_lab.use_profile("mps"), Counters() as c:
        r = torch.take(x, idx)
    assert c.fallbacks == 1 and c.copies > 0
    torch.testing.assert_close(r.cpu(), torch.take(a, idx.cpu()))
    with openreg_lab.use_profile("cuda"), Counters() as c:
        torch.take(x, idx)
    assert (c.fallbacks, c.copies) == (0, 0)


def test_user_profiles_from_a_list_and_a_yaml_file(tmp_path):
    x = torch.randn(3).to("openreg")
    with openreg_lab.use_profile(["atan2", "aten::atan2.out"]), Counters() as c:
        torch.atan2(x, x)
        x + x  # not in the profile: its composite calls add.out, which falls back
    assert openreg_lab.profile_ops(["atan2"]) == openreg_lab.profile_ops("minimal") | {"aten::atan2"}
    assert (c.generic, c.fallbacks) == (1, 1)
    listed = tmp_path / "vendor.yaml"
    listed.write_text("- aten::atan2\n- aten::add.Tensor\n")
    mapped = tmp_path / "families.yaml"
    mapped.write_text("binary:\n  - aten::atan2\n  - aten::add.Tensor\nempty:\n")
    for path in (listed, mapped):
        with openreg_lab.use_profile(path):
            assert openreg_lab.get_profile() == path.name
            with Counters() as c:
                torch.atan2(x, x)
                x + x
            assert (c.generic, c.fallbacks, c.copies) == (1, 0, 0)


def test_bad_profiles(tmp_path):
    with pytest.raises(ValueError, match=r"unknown profile 'tpu': choose one of minimal, default"):
        openreg_lab.set_profile("tpu")
    with pytest.raises(ValueError, match=r"unknown operator\(s\): aten::atan3 \(did you mean aten::atan"):
        openreg_lab.set_profile(["aten::atan3"])
    with pytest.raises(TypeError, match="list of operator names"):
        openreg_lab.set_profile(42)  # type: ignore[arg-type]
    bad = tmp_path / "bad.yaml"
    bad.write_text("just a string\n")
    with pytest.raises(ValueError, match="must hold a list of operator names"):
        openreg_lab.set_profile(bad)
    assert openreg_lab.get_profile() is None  # nothing changed


def test_a_profile_applies_to_every_thread():
    x = torch.randn(3).to("openreg")
    seen = {}

    def run() -> None:
        torch.openreg.set_device(0)
        with Counters() as c:
            x + x
        seen["fallbacks"] = c.fallbacks

    with openreg_lab.use_profile("minimal"):
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    assert seen == {"fallbacks": 1}


def test_the_generic_path_and_the_fallback_share_the_device_rules():
    # Note [Fallback device rules], in one place for both (Note [One boxed call, two ways to run
    # it]): a `cpu_...` argument may stay on the host (a nested tensor's sizes) ...
    padded, shape = torch.randn(2, 3, 4), torch.tensor([[2, 4], [3, 4]])
    extra = {"aten::_nested_from_padded", "aten::_logcumsumexp.out"}
    ops = sorted({*openreg_lab.profile_ops("default"), *extra})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype: torch says so once
        expected = torch.ops.aten._nested_from_padded(padded, shape)
        with openreg_lab.use_profile(ops), Counters() as c:
            got = torch.ops.aten._nested_from_padded(padded.to("openreg"), shape)
    assert c.generic == 1 and c.fallbacks == 0
    assert got.device.type == "openreg" and got.is_nested
    for a, b in zip(got.unbind(), expected.unbind(), strict=True):
        assert torch.equal(a.cpu(), b)
    # ... and a mismatch is worded the same, naming the way the call ran.
    x, y = torch.randn(3, device="openreg"), torch.randn(3)
    same = "Expected all tensors to be on the same device, but found at least two devices, openreg:0 and cpu!"
    with openreg_lab.use_profile(ops), pytest.raises(RuntimeError) as generic:
        torch.ops.aten._logcumsumexp.out(x, 0, out=y)
    assert str(generic.value).startswith(
        f"{same} (in aten::_logcumsumexp.out, which runs through openreg's generic native path)"
    )
    with pytest.raises(RuntimeError) as fallback:
        torch.ops.aten._logcumsumexp.out(x, 0, out=y)
    assert str(fallback.value).startswith(
        f"{same} (in aten::_logcumsumexp.out, which runs through openreg's CPU fallback)"
    )


def test_only_generic_calls_get_device_memory():
    with openreg_lab.use_profile("cpu"):
        before = torch.openreg.memory_allocated()
        host = torch.randn(1024, 1024)  # CPU work under a profile stays in CPU memory
        assert torch.openreg.memory_allocated() == before
        del host


def test_generic_results_on_the_arguments_device():
    if torch.openreg.device_count() < 2:
        pytest.skip("needs two openreg devices")
    a = torch.randn(3)
    x = a.to("openreg:1")
    with openreg_lab.use_profile("cpu"):
        before = [torch.openreg.memory_allocated(d) for d in (0, 1)]
        with Counters() as c:
            z = torch.atan2(x, x)
        after = [torch.openreg.memory_allocated(d) for d in (0, 1)]
    assert z.device == torch.device("openreg:1") and c.copies == 0
    assert after[0] == before[0] and after[1] > before[1]
    torch.testing.assert_close(z.cpu(), torch.atan2(a, a))
    with openreg_lab.use_profile("cpu"), pytest.raises(RuntimeError, match="same device"):
        torch.atan2(x, torch.randn(3).to("openreg:0"))


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["minimal", "cpu", "mps"])
def test_opinfo_sweep_under_profile(profile: str):
    """Every OpInfo (up to 4 samples each) gives the CPU's results under the profile too."""
    failures = {}
    with openreg_lab.use_profile(profile):
        for case in all_cases():
            if case.id in EXPECTED_FAILURES:
                continue
            try:
                check(case, max_samples=4)
            except Exception as e:
                failures[case.id] = f"{type(e).__name__}: {e}"[:300]
    assert failures == {}
