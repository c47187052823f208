"""The vectorised paths of the native kernels (Note [SIMD clones], Note [In-place rows], Note
[Deterministic vector sums] in csrc/aten/native/): same values as CPU, bit-identical results on 1
and 2 threads, for odd lengths (vector tails), strided, broadcast and in-place operands.

Float sums are checked bit for bit against their summation order written out in NumPy below, which
fixes the result whichever clone (AVX-512, AVX2 or baseline) the loader picked on this machine.
Every openreg call runs under the fallback policy "error".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import openreg_lab

# Vector tails of every length: below one vector, around a 256-element block, a chunk
# (65536) boundary, and long rows cut into chunks.
LENGTHS = [1, 3, 7, 16, 31, 33, 255, 256, 257, 1000, 4099, 65536 * 2 + 5, (1 << 20) + 3]
FLOATS = [torch.float32, torch.float64]


@pytest.fixture
def restore_threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _data(n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g, dtype=torch.float64).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.detach().cpu().reshape(-1))
    return flat.view(torch.uint8)


def _on_threads(threads: int, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    torch.set_num_threads(threads)
    with openreg_lab.fallback_policy("error"):
        return fn().cpu()


def _same_on_1_and_2_threads(fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    one = _on_threads(1, fn)
    two = _on_threads(2, fn)
    assert torch.equal(_bits(one), _bits(two))
    return one


# --- sums: the order of Note [Deterministic vector sums], written out ----------------------------

LANES = {np.float32: 32, np.float64: 16}
ROW_CHUNK = 65536  # Reduction.cpp's kRowChunk


def _block_sums(x: np.ndarray) -> list:
    """The sum of each block of 8 * lanes elements, lanes summed as independent running sums."""
    dt = x.dtype.type
    lanes = LANES[dt]
    block = 8 * lanes
    full = len(x) // block
    sums = []
    if full:
        blocks = x[: full * block].reshape(full, 8, lanes)
        lane = np.zeros((full, lanes), dtype=dt)
        for g in range(8):
            lane = lane + blocks[:, g, :]
        w = lanes // 2
        while w:
            lane = lane[:, :w] + lane[:, w : 2 * w]
            w //= 2
        sums += list(lane[:, 0])
    tail = x[full * block :]
    if len(tail) == 0:
        return sums
    if len(tail) < lanes:
        s = dt(0)
        for v in tail:
            s = dt(s + v)
        return [*sums, s]
    lane = np.zeros(lanes, dtype=dt)
    i = 0
    while i + lanes <= len(tail):
        lane = lane + tail[i : i + lanes]
        i += lanes
    for v in tail[i:]:
        lane[0] = dt(lane[0] + v)
    w = lanes // 2
    while w:
        lane = lane[:w] + lane[w : 2 * w]
        w //= 2
    return [*sums, lane[0]]


def _tree(s: list) -> np.floating:
    if len(s) == 1:
        return s[0]
    half = len(s) // 2
    return _tree(s[:half]) + _tree(s[half:])


def _pairwise(x: np.ndarray) -> np.floating:
    return _tree(_block_sums(x))


def _full_sum(x: np.ndarray) -> np.floating:
    """A full reduction: one pairwise sum, or fixed chunks of a long row added in order."""
    if len(x) < 2 * ROW_CHUNK:
        return _pairwise(x)
    acc = _pairwise(x[:ROW_CHUNK])
    for c in range(ROW_CHUNK, len(x), ROW_CHUNK):
        acc = acc + _pairwise(x[c : c + ROW_CHUNK])
    return acc


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", LENGTHS)
def test_sum_is_the_documented_order_bit_for_bit(n: int, dtype: torch.dtype) -> None:
    x = _data(n, dtype)
    xd = x.openreg()
    got = _same_on_1_and_2_threads(lambda: xd.sum())
    expected = _full_sum(x.numpy())
    assert got.numpy().tobytes() == np.asarray(expected, dtype=expected.dtype).tobytes()
    assert_close(got, x.sum(), rtol=1e-4 if dtype == torch.float32 else 1e-12, atol=1e-3)


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(5, 3), (7, 257), (64, 1000), (3, 70000)])
def test_row_sums_and_means_are_the_documented_order(shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = _data(shape[0] * shape[1], dtype).view(shape)
    xd = x.openreg()
    sums = _same_on_1_and_2_threads(lambda: xd.sum(1))
    means = _same_on_1_and_2_threads(lambda: xd.mean(1))
    rows = x.numpy()
    expected = np.array([_pairwise(r) for r in rows], dtype=rows.dtype)
    assert sums.numpy().tobytes() == expected.tobytes()
    assert means.numpy().tobytes() == (expected / rows.dtype.type(shape[1])).tobytes()
    assert_close(sums, x.sum(1), rtol=1e-5, atol=1e-4)
    assert_close(means, x.mean(1), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("restore_threads")
def test_sum_of_a_strided_input_matches_cpu() -> None:
    # Columns of a transposed view: the reduction copies them into rows first.
    x = _data(1000 * 33, torch.float32).view(1000, 33)
    xd = x.openreg()
    got = _same_on_1_and_2_threads(lambda: xd.t().sum(1))
    assert_close(got, x.t().sum(1), rtol=1e-5, atol=1e-4)
    got = _same_on_1_and_2_threads(lambda: xd[:, ::2].sum())
    assert_close(got, x[:, ::2].sum(), rtol=1e-5, atol=1e-3)


def test_sum_keeps_special_values() -> None:
    x = _data(1000, torch.float32)
    for value in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[517] = value
        assert_close(y.openreg().sum().cpu(), y.sum(), equal_nan=True)
    zeros = -torch.zeros(300)
    assert _bits(zeros.openreg().sum()).tolist() == _bits(zeros.sum()).tolist()


# --- elementwise ---------------------------------------------------------------------------------

BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=0.75),
    "sub": lambda a, b: a - b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "add_scalar": lambda a, b: a + 1.5,
    "mul_scalar": lambda a, b: a * 1.0001,
    "div_scalar": lambda a, b: a / 3.0,
    "rsub_scalar": lambda a, b: 2.0 - a,
    "add_": lambda a, b: a.clone().add_(b, alpha=2),
    "sub_": lambda a, b: a.clone().sub_(b),
    "mul_": lambda a, b: a.clone().mul_(b),
    "mul_scalar_": lambda a, b: a.clone().mul_(1.0001),
    "div_": lambda a, b: a.clone().div_(b),
    "div_scalar_": lambda a, b: a.clone().div_(7.0),
    "add_out": lambda a, b: torch.add(a, b, out=torch.empty_like(a)),
    "mul_out": lambda a, b: torch.mul(a, b, out=torch.empty_like(a)),
    "relu": lambda a, b: torch.relu(a),
    "relu_": lambda a, b: torch.relu_(a.clone()),
    "threshold_backward": lambda a, b: torch.ops.aten.threshold_backward(b, a, 0.0),
}


def _columns(t: torch.Tensor) -> torch.Tensor:
    """The first r * (n // r) elements as the transpose of an (r, n // r) matrix, r = 7 or 1."""
    rows = 7 if len(t) >= 7 else 1
    return t[: (len(t) // rows) * rows].view(rows, -1).t()


# Views of a (n,) pair: contiguous, strided, transposed (2-d), broadcast, and self-aliased.
LAYOUTS: dict[str, Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
    "contiguous": lambda a, b: (a, b),
    "strided": lambda a, b: (a[::3], b[::3]),
    "transposed": lambda a, b: (_columns(a), _columns(b)),
    "broadcast": lambda a, b: (a, b[:1]),
    "same": lambda a, b: (a, a),
}


def _inputs(n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    a = _data(n, dtype, seed=1)
    b = _data(n, dtype, seed=2)
    b = torch.where(b.abs() < 0.1, torch.full_like(b, 0.5), b)  # no near-zero divisors
    a[: min(n, 5)] = torch.tensor([0.0, -0.0, 1.0, -1.0, float("nan")], dtype=dtype)[: min(n, 5)]
    return a, b


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 7, 33, 1000, (1 << 18) + 5])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_vectorised_elementwise_matches_cpu(op: str, n: int, dtype: torch.dtype, layout: str) -> None:
    fn = BINARY[op]
    a, b = LAYOUTS[layout](*_inputs(n, dtype))
    ad, bd = LAYOUTS[layout](*(t.openreg() for t in _inputs(n, dtype)))
    got = _same_on_1_and_2_threads(lambda: fn(ad, bd))
    expected = fn(a, b)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    # Each of these is one rounded operation (an fma at most): CPU's parity tolerances.
    assert_close(got, expected, equal_nan=True)


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("dtype", FLOATS)
def test_in_place_on_a_view_writes_only_the_view(dtype: torch.dtype) -> None:
    base = _data(1000, dtype)
    based = base.openreg()
    with openreg_lab.fallback_policy("error"):
        based[1::2].mul_(3.0)
        based[::2].add_(based[1::2])
    base[1::2].mul_(3.0)
    base[::2].add_(base[1::2])
    assert_close(based.cpu(), base)


# --- softmax and layer norm ----------------------------------------------------------------------


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(3, 1), (5, 7), (1000, 33), (4099, 64), (7, 1031)])
def test_softmax_and_layer_norm_rows(shape: tuple[int, int], dtype: torch.dtype) -> None:
    x = _data(shape[0] * shape[1], dtype).view(shape) * 4
    xd = x.openreg()
    w = _data(shape[1], dtype, seed=3)
    wd = w.openreg()
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}
    for fn in (
        lambda t, w: torch.softmax(t, -1),
        lambda t, w: torch.log_softmax(t, -1),
        lambda t, w: torch.softmax(t.t(), 0),
        lambda t, w: F.layer_norm(t, (shape[1],)),
        lambda t, w: F.layer_norm(t, (shape[1],), w, w),
    ):
        got = _same_on_1_and_2_threads(lambda fn=fn: fn(xd, wd))
        assert_close(got, fn(x, w), **tol)
