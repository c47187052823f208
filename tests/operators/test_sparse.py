"""Sparse COO and compressed (CSR) tensors on openreg.

Building and describing a sparse tensor runs natively (csrc/aten/Sparse.cpp, SparseCsr.cpp): its
indices and values are openreg tensors. Computing on one runs on the CPU through the fallback of the
sparse keys (csrc/aten/fallback/LayoutFallback.cpp), with the same results as on CPU.
"""

from __future__ import annotations

import pytest
import torch

import openreg_lab

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (CSR )?(tensor support|invariant checks)")

INDICES = [[0, 1, 1, 2, 0], [2, 0, 2, 1, 2]]  # (0, 2) appears twice: uncoalesced
VALUES = [1.0, 2.0, 3.0, 4.0, 5.0]


def _sparse(device: str) -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.tensor(INDICES), torch.tensor(VALUES), (3, 3), device=device)


def _dense(device: str) -> torch.Tensor:
    return torch.arange(12.0, device=device).reshape(3, 4) / 7


def _copies() -> int:
    return openreg_lab._C.copies_on_this_thread()


def _same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.device.type == "openreg"
    assert actual.layout == expected.layout
    if actual.layout == torch.sparse_coo:
        assert actual._indices().device == actual.device
        assert actual._values().device == actual.device
        assert torch.equal(actual._indices().cpu(), expected._indices())
        torch.testing.assert_close(actual._values().cpu(), expected._values())
        assert actual.is_coalesced() == expected.is_coalesced()
    else:
        torch.testing.assert_close(actual.cpu(), expected)


def test_sparse_tensor_is_built_on_the_device_from_device_indices_and_values():
    s = _sparse("openreg")
    assert (s.device, s.layout, s.shape, s._nnz()) == (
        torch.device("openreg", 0),
        torch.sparse_coo,
        (3, 3),
        5,
    )
    assert (s.sparse_dim(), s.dense_dim(), s.is_coalesced()) == (2, 0, False)
    assert s._indices().device == s._values().device == s.device
    assert torch.equal(s._indices().cpu(), torch.tensor(INDICES))


@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_round_trips_between_cpu_and_openreg(device):
    cpu = _sparse("cpu")
    dev = cpu.to(device)
    assert dev.device == torch.device(device) and dev.layout == torch.sparse_coo
    back = dev.cpu()
    assert torch.equal(back._indices(), cpu._indices()) and torch.equal(back._values(), cpu._values())


def test_empty_with_sparse_layout():
    e = torch.empty((4, 5), layout=torch.sparse_coo, device="openreg")
    assert (e.device.type, e.layout, e.shape, e._nnz()) == ("openreg", torch.sparse_coo, (4, 5), 0)


def test_to_sparse_and_to_dense_match_cpu():
    d = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    s = d.to("openreg").to_sparse()
    _same(s, d.to_sparse())
    _same(s.to_dense(), d)
    _same(d.to("openreg").to_sparse(1), d.to_sparse(1))


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(lambda s, d: s.coalesce(), id="coalesce"),
        pytest.param(lambda s, d: s + s, id="add"),
        pytest.param(lambda s, d: s * s, id="mul"),
        pytest.param(lambda s, d: s * 2.5, id="mul_scalar"),
        pytest.param(lambda s, d: -s, id="neg"),
        pytest.param(lambda s, d: torch.sparse.mm(s, d), id="sparse.mm"),
        pytest.param(lambda s, d: s @ d, id="matmul"),
        pytest.param(lambda s, d: s.sum(), id="sum"),  # dense on CPU, not the composite's sparse
        pytest.param(lambda s, d: torch.sparse.sum(s), id="sparse.sum"),
        pytest.param(lambda s, d: torch.sparse.sum(s, dim=1), id="sparse.sum_dim"),
        pytest.param(lambda s, d: s.t(), id="t"),
        pytest.param(lambda s, d: s.to_dense() + d[:, :3], id="to_dense_add"),
        pytest.param(lambda s, d: torch.sparse.softmax(s.coalesce(), 1), id="sparse.softmax"),
    ],
)
def test_sparse_ops_match_cpu(op):
    _same(op(_sparse("openreg"), _dense("openreg")), op(_sparse("cpu"), _dense("cpu")))


def test_in_place_sparse_ops_write_the_device_tensor():
    s = _sparse("openreg").coalesce()
    expected = _sparse("cpu").coalesce()
    s.add_(s)
    expected.add_(expected)
    _same(s, expected)
    s.mul_(0.5)
    _same(s, expected.mul_(0.5))
    s.zero_()
    assert s._nnz() == 0 and s.device.type == "openreg"


def test_sparse_op_shows_in_a_trace_as_a_fallback_with_its_copies():
    s = _sparse("openreg")
    with openreg_lab.trace() as t:
        s.coalesce()
    fallbacks = t.fallbacks()
    assert list(fallbacks["name"]) == ["aten::_coalesce"]
    # to the host: indices (2 x 5 int64) and values (5 float32); back: the 4 distinct entries
    assert int(fallbacks["bytes_to_cpu"].iloc[0]) == 2 * 5 * 8 + 5 * 4
    assert int(fallbacks["bytes_back"].iloc[0]) == 2 * 4 * 8 + 4 * 4
    copies = t.copies()
    assert list(copies["direction"]) == ["D2H", "D2H", "H2D", "H2D"]
    assert set(copies["op"]) == {"aten::_coalesce"}


def test_fallback_policy_applies_to_sparse_ops_before_any_copy():
    s = _sparse("openreg")
    before = _copies()
    with openreg_lab.fallback_policy("error"), pytest.raises(NotImplementedError, match=r"aten::_coalesce"):
        s.coalesce()
    assert _copies() == before


def test_sparse_and_dense_on_two_devices_are_rejected():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.sparse.mm(_sparse("openreg:0"), _dense("openreg:1"))


# --- compressed layouts -----------------------------------------------------------------------


def test_csr_structure_is_native_and_on_the_device():
    d = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    csr = d.to("openreg").to_sparse_csr()
    expected = d.to_sparse_csr()
    assert (csr.layout, csr._nnz()) == (torch.sparse_csr, 3)
    for name in ("crow_indices", "col_indices", "values"):
        got = getattr(csr, name)()
        assert got.device == csr.device, name
        assert torch.equal(got.cpu(), getattr(expected, name)()), name


@pytest.mark.parametrize(
    "op",
    [
        pytest.param(lambda c, d: c.to_dense(), id="to_dense"),
        pytest.param(lambda c, d: c @ d, id="matmul"),
        pytest.param(lambda c, d: torch.mm(c, d), id="mm"),
        pytest.param(lambda c, d: torch.addmm(d, c, d), id="addmm"),
        pytest.param(lambda c, d: (c + c).to_dense(), id="add"),
        pytest.param(lambda c, d: (c * 3.0).to_dense(), id="mul_scalar"),
    ],
)
def test_csr_ops_match_cpu(op):
    dense = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0], [0.0, 0.0, 4.0]])

    def run(device):
        return op(dense.to(device).to_sparse_csr(), _dense(device)[:, :3])

    expected = run("cpu")
    actual = run("openreg")
    assert actual.device.type == "openreg"
    torch.testing.assert_close(actual.cpu(), expected)


@pytest.mark.parametrize("profile", ["cpu", "mps"])
def test_to_sparse_under_a_profile_that_runs_it_generically(profile):
    # The generic native path (Note [Generic native path]) returns the CPU kernel's sparse result
    # through the copy path: a sparse tensor has no storage to present as device memory.
    d = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    with openreg_lab.use_profile(profile):
        s = d.to("openreg").to_sparse()
    _same(s, d.to_sparse())
