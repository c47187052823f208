"""Fused attention against the math path on openreg, side by side in one run.

    .venv/bin/python benchmarks/bench_attention.py
    PYTHONPATH=. .venv/bin/python benchmarks/bench_attention.py  # another checkout than the installed one

Each row times torch.nn.functional.scaled_dot_product_attention on the same openreg tensors twice:
restricted to the math path (PyTorch's decomposition into matmul, softmax and dropout, what every
backend without a fused kernel runs) and to the overrideable backend (openreg's fused kernel, Note
[Fused attention on openreg] in csrc/aten/native/Attention.cpp), forward alone (no_grad) and forward
plus backward. The ratio is math time over fused time: above 1, the fused kernel is faster.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import compare, fmt_time, print_table

import openreg_lab  # noqa: F401

# (batch, heads, sequence length, head dim, causal, dropout): GPT-2 small's heads at two lengths,
# a longer sequence, and a training-style call with dropout (the fused kernel's math-path replica).
SHAPES = [
    (2, 12, 128, 64, True, 0.0),
    (1, 12, 512, 64, True, 0.0),
    (1, 4, 1024, 64, False, 0.0),
    (2, 12, 128, 64, True, 0.1),
]


def _call(backend: SDPBackend, q, k, v, causal: bool, dropout: float, backward: bool) -> Callable[[], object]:
    def run() -> object:
        with sdpa_kernel([backend]):
            if not backward:
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=dropout)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=dropout)
            out.sum().backward()
            return out

    return run


def rows() -> list[list[str]]:
    out = []
    for b, h, n, e, causal, dropout in SHAPES:
        q, k, v = (torch.randn(b, h, n, e, device="openreg", requires_grad=True) for _ in range(3))
        for backward in (False, True):
            math_t, fused_t = compare(
                [
                    _call(SDPBackend.MATH, q, k, v, causal, dropout, backward),
                    _call(SDPBackend.OVERRIDEABLE, q, k, v, causal, dropout, backward),
                ],
                rounds=7,
            )
            out.append(
                [
                    f"{b}x{h}x{n}x{e}" + (" causal" if causal else "") + (f" p={dropout}" if dropout else ""),
                    "fwd+bwd" if backward else "fwd",
                    fmt_time(math_t),
                    fmt_time(fused_t),
                    f"{math_t / fused_t:.2f}x",
                ]
            )
    return out


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32 on openreg\n")
    print_table(["B x H x L x E", "pass", "math", "fused", "math / fused"], rows())


if __name__ == "__main__":
    main()
