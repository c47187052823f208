"""scaled_dot_product_attention's arguments are checked on openreg as on CPU.

Each row of the table runs one call on the CPU and on openreg: where the CPU raises, openreg raises
the same exception type with a message that names the problem (the CPU's own first line, or for
dropout a clearer one); where the CPU computes, openreg computes the same result. Two misuses the
CPU's flash kernel lets through raise on openreg (Note [Fused attention on openreg] in
csrc/aten/native/Attention.cpp), and two rows mix devices, which only openreg can.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tests.support.parity import outcome

SDPA = F.scaled_dot_product_attention
DROPOUT = "dropout probability has to be between 0 and 1"


def _t(*shape: int, dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return (torch.rand(*shape, generator=g) > 0.3).to(device)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(*shape, generator=g).to(dtype).to(device)
    return torch.randint(0, 5, shape, generator=g).to(dtype).to(device)


def _qkv(
    d: str,
    b: int = 2,
    hq: int = 4,
    hk: int = 4,
    L: int = 5,
    S: int = 7,
    E: int = 8,
    Ev: int = 8,
    dtype: torch.dtype = torch.float32,
    dims: int = 4,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = _t(b, hq, L, E, dtype=dtype, device=d, seed=1)
    k = _t(b, hk, S, E, dtype=dtype, device=d, seed=2)
    v = _t(b, hk, S, Ev, dtype=dtype, device=d, seed=3)
    return (q[0], k[0], v[0]) if dims == 3 else (q, k, v)


def _mask(*shape: int, d: str, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    return _t(*shape, dtype=dtype, device=d, seed=4)


@dataclass(frozen=True)
class Row:
    id: str
    call: Callable[[str], torch.Tensor]
    #: words openreg's message must hold; None: its first line is the CPU's
    words: tuple[str, ...] | None = None
    #: the CPU's flash kernel computes this misuse; openreg raises (the module's docstring)
    cpu_computes: bool = False


ROWS = [
    # dropout_p: the CPU's flash kernel refuses anything but 0, the math path raises above 1.
    Row("dropout -0.1", lambda d: SDPA(*_qkv(d), dropout_p=-0.1), (DROPOUT, "got dropout_p=-0.1")),
    Row("dropout -1e-12", lambda d: SDPA(*_qkv(d), dropout_p=-1e-12), (DROPOUT, "dropout_p=-1e-12")),
    Row("dropout nan", lambda d: SDPA(*_qkv(d), dropout_p=math.nan), (DROPOUT, "dropout_p=nan")),
    Row("dropout -inf", lambda d: SDPA(*_qkv(d), dropout_p=-math.inf), (DROPOUT, "dropout_p=-inf")),
    Row("dropout -0.1 float64", lambda d: SDPA(*_qkv(d, dtype=torch.float64), dropout_p=-0.1), (DROPOUT,)),
    Row("dropout -0.1 float16", lambda d: SDPA(*_qkv(d, dtype=torch.float16), dropout_p=-0.1), (DROPOUT,)),
    Row("dropout -0.1 bfloat16", lambda d: SDPA(*_qkv(d, dtype=torch.bfloat16), dropout_p=-0.1), (DROPOUT,)),
    Row(
        "dropout -0.1 mask", lambda d: SDPA(*_qkv(d), attn_mask=_mask(5, 7, d=d), dropout_p=-0.1), (DROPOUT,)
    ),
    Row("dropout -0.1 causal", lambda d: SDPA(*_qkv(d), is_causal=True, dropout_p=-0.1), (DROPOUT,)),
    Row(
        "dropout -0.1 gqa", lambda d: SDPA(*_qkv(d, hq=8, hk=2), dropout_p=-0.1, enable_gqa=True), (DROPOUT,)
    ),
    # where the CPU takes the math path, a negative dropout_p is no dropout on both
    Row("dropout -0.1 3-D", lambda d: SDPA(*_qkv(d, dims=3), dropout_p=-0.1)),
    Row("dropout -0.1 wider value", lambda d: SDPA(*_qkv(d, Ev=6), dropout_p=-0.1)),
    Row("dropout -0.1 empty query", lambda d: SDPA(*_qkv(d, L=0), dropout_p=-0.1)),
    Row("dropout 1 drops everything", lambda d: SDPA(*_qkv(d), dropout_p=1.0)),
    Row("dropout 1.5", lambda d: SDPA(*_qkv(d), dropout_p=1.5)),
    Row("dropout inf", lambda d: SDPA(*_qkv(d), dropout_p=math.inf)),
    Row("dropout 1.5 3-D", lambda d: SDPA(*_qkv(d, dims=3), dropout_p=1.5)),
    # ranks and shapes
    Row("rank 1", lambda d: SDPA(_t(8, device=d), _t(8, device=d), _t(8, device=d))),
    Row("rank 2", lambda d: SDPA(_t(5, 8, device=d), _t(7, 8, device=d), _t(7, 8, device=d))),
    Row(
        "rank 5",
        lambda d: SDPA(_t(1, 2, 3, 5, 8, device=d), _t(1, 2, 3, 7, 8, device=d), _t(1, 2, 3, 7, 8, device=d)),
    ),
    Row("query 4-D, key and value 3-D", lambda d: SDPA(_qkv(d)[0], *(t[0] for t in _qkv(d)[1:]))),
    Row("batch mismatch", lambda d: SDPA(_qkv(d, b=2)[0], *_qkv(d, b=3)[1:])),
    Row("batch broadcast", lambda d: SDPA(_qkv(d, b=2)[0], *_qkv(d, b=1)[1:])),
    Row(
        "head dim mismatch",
        lambda d: SDPA(_t(2, 4, 5, 8, device=d), _t(2, 4, 7, 6, device=d), _t(2, 4, 7, 8, device=d)),
    ),
    Row(
        "key and value heads differ",
        lambda d: SDPA(_t(2, 4, 5, 8, device=d), _t(2, 4, 7, 8, device=d), _t(2, 2, 7, 8, device=d)),
    ),
    Row(
        "value shorter than key",
        lambda d: SDPA(_t(2, 4, 5, 8, device=d), _t(2, 4, 7, 8, device=d), _t(2, 4, 6, 8, device=d)),
        ("Expected size for first two dimensions of batch2 tensor",),
        cpu_computes=True,
    ),
    # dtypes
    Row(
        "query float, key double",
        lambda d: SDPA(
            _t(2, 4, 5, 8, device=d), _t(2, 4, 7, 8, dtype=torch.float64, device=d), _t(2, 4, 7, 8, device=d)
        ),
    ),
    Row("int64", lambda d: SDPA(*_qkv(d, dtype=torch.int64))),
    Row("int32", lambda d: SDPA(*_qkv(d, dtype=torch.int32))),
    Row("bool", lambda d: SDPA(*_qkv(d, dtype=torch.bool))),
    Row("complex64", lambda d: SDPA(*_qkv(d, dtype=torch.complex64))),
    # masks
    Row("mask of 3 heads for 4", lambda d: SDPA(*_qkv(d), attn_mask=_mask(3, 7, d=d))),
    Row("4-D mask of 3 heads", lambda d: SDPA(*_qkv(d), attn_mask=_mask(2, 3, 5, 7, d=d))),
    Row("5-D mask", lambda d: SDPA(*_qkv(d), attn_mask=_mask(1, 2, 4, 5, 7, d=d))),
    Row("int32 mask", lambda d: SDPA(*_qkv(d), attn_mask=_mask(5, 7, d=d, dtype=torch.int32))),
    Row(
        "float64 mask, float32 query",
        lambda d: SDPA(*_qkv(d), attn_mask=_mask(5, 7, d=d, dtype=torch.float64)),
    ),
    Row(
        "float16 mask, float32 query",
        lambda d: SDPA(*_qkv(d), attn_mask=_mask(5, 7, d=d, dtype=torch.float16)),
    ),
    Row(
        "mask masking every key",
        lambda d: SDPA(*_qkv(d), attn_mask=torch.zeros(5, 7, dtype=torch.bool, device=d)),
    ),
    Row(
        "additive mask needing grad",
        lambda d: SDPA(*_qkv(d), attn_mask=_mask(5, 7, d=d, dtype=torch.float32).requires_grad_()),
    ),
    Row(
        "is_causal with a mask",
        lambda d: SDPA(*_qkv(d), attn_mask=_mask(5, 7, d=d), is_causal=True),
        ("Explicit attn_mask should not be set when is_causal=True",),
        cpu_computes=True,
    ),
    Row("is_causal, more queries than keys", lambda d: SDPA(*_qkv(d, L=9, S=4), is_causal=True)),
    # scale
    Row("scale 0", lambda d: SDPA(*_qkv(d), scale=0.0)),
    Row("scale -2", lambda d: SDPA(*_qkv(d), scale=-2.0)),
    Row("scale nan", lambda d: SDPA(*_qkv(d), scale=math.nan)),
    Row("scale inf", lambda d: SDPA(*_qkv(d), scale=math.inf)),
    # grouped-query attention
    Row("gqa, 6 query heads for 4", lambda d: SDPA(*_qkv(d, hq=6, hk=4), enable_gqa=True)),
    Row("grouped heads without enable_gqa", lambda d: SDPA(*_qkv(d, hq=8, hk=2))),
    Row("gqa, no key heads", lambda d: SDPA(*_qkv(d, hq=8, hk=0), enable_gqa=True)),
    Row("gqa 3-D", lambda d: SDPA(*_qkv(d, hq=8, hk=2, dims=3), enable_gqa=True)),
    # empty sizes
    Row("no queries", lambda d: SDPA(*_qkv(d, L=0))),
    Row("no keys", lambda d: SDPA(*_qkv(d, S=0))),
    Row("head dim 0", lambda d: SDPA(*_qkv(d, E=0))),
    Row("value head dim 0", lambda d: SDPA(*_qkv(d, Ev=0))),
    Row("batch 0", lambda d: SDPA(*_qkv(d, b=0))),
    Row("no heads", lambda d: SDPA(*_qkv(d, hq=0, hk=0))),
    Row(
        "non-contiguous",
        lambda d: SDPA(*(t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in _qkv(d))),
    ),
]


def _outcome(row: Row, device: str) -> tuple[str, object]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex and empty inputs warn alike on both devices
        return outcome(row.call, device)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_each_bad_argument_is_checked_as_on_cpu(row: Row) -> None:
    cpu_kind, cpu = _outcome(row, "cpu")
    kind, ours = _outcome(row, "openreg")
    if row.cpu_computes:
        assert cpu_kind == "ok", f"the CPU now raises {cpu!r}: the row and the Note should say so"
        assert kind == "raise" and type(ours) is RuntimeError, ours
        assert all(w in str(ours) for w in row.words or ()), ours
        return
    assert kind == cpu_kind, f"CPU: {cpu!r}, openreg: {ours!r}"
    if cpu_kind == "raise":
        assert type(ours) is type(cpu), f"{ours!r} vs CPU's {cpu!r}"
        if row.words is None:
            assert str(ours).splitlines()[0] == str(cpu).splitlines()[0]
        else:
            assert all(w in str(ours) for w in row.words), ours
        return
    [c], [o] = cpu, ours
    assert o.shape == c.shape and o.dtype == c.dtype
    torch.testing.assert_close(o, c, rtol=1e-4, atol=1e-5, equal_nan=True)


def test_dropout_one_drops_everything_on_both():
    for device in ("cpu", "openreg"):
        out = SDPA(*_qkv(device), dropout_p=1.0)
        assert out.device.type == device and not out.any()


def test_a_negative_dropout_is_refused_where_the_cpu_refuses_it():
    # The CPU refuses it in its flash kernel, and takes the math path (no dropout) where flash is
    # switched off: openreg asks the CPU's own choice, so both follow sdpa_kernel alike.
    for device in ("cpu", "openreg"):
        with pytest.raises(RuntimeError, match="dropout"):
            SDPA(*_qkv(device), dropout_p=-0.5)
        with sdpa_kernel([SDPBackend.MATH, SDPBackend.OVERRIDEABLE]):
            torch.testing.assert_close(SDPA(*_qkv(device), dropout_p=-0.5).cpu(), SDPA(*_qkv("cpu")))
    # only the overrideable kernel allowed: the CPU's choice has no backend, openreg's kernel says why
    with (
        sdpa_kernel([SDPBackend.OVERRIDEABLE]),
        pytest.warns(UserWarning, match=r"dropout_p must be in \[0, 1\)"),
    ):
        with pytest.raises(RuntimeError, match="No viable backend"):
            SDPA(*_qkv("openreg"), dropout_p=-0.5)


@pytest.mark.parametrize("mixed", ["query on openreg, key and value on the CPU", "mask on the CPU"])
def test_mixed_devices_raise_naming_both(mixed: str) -> None:
    q, k, v = _qkv("openreg")
    with pytest.raises(RuntimeError) as caught:
        if mixed == "mask on the CPU":
            SDPA(q, k, v, attn_mask=_mask(5, 7, d="cpu"))
        else:
            SDPA(q, *_qkv("cpu")[1:])
    assert "openreg:0" in str(caught.value) and "cpu" in str(caught.value), caught.value
