"""Native and fallback ops on openreg against the same op on CPU, side by side in one run.

    .venv/bin/python benchmarks/bench_ops.py
    PYTHONPATH=. .venv/bin/python benchmarks/bench_ops.py  # another checkout than the installed one

For a fallback op the table also splits its time: the copies to the host and back, measured on
their own, as a share of the whole call.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import compare, fmt_time, print_table

import openreg_lab

SIZES = {"small": 64, "large": 1 << 20}
# Native kernels split large tensors over torch's threads (at::parallel_for): each is timed on one
# thread, which compares the loops themselves, and on two.
THREADS = (1, 2)


def native_rows() -> list[list[str]]:
    rows = []
    for threads in THREADS:
        torch.set_num_threads(threads)
        for label, n in SIZES.items():
            rows += _native_rows_at(threads, label, n)
    return rows


def _native_rows_at(threads: int, label: str, n: int) -> list[list[str]]:
    side = int(n**0.5)
    a, b = torch.randn(n), torch.randn(n)
    m1, m2 = torch.randn(side, side), torch.randn(side, side)
    cases = {
        "add": (lambda x, y: x + y, (a, b)),
        "mul_": (lambda x, y: x.mul_(1.0001), (a.clone(), b)),
        "relu": (lambda x, y: torch.relu(x), (a, b)),
        "sum": (lambda x, y: x.sum(), (a, b)),
        "softmax": (lambda x, y: torch.softmax(x.view(-1, 64), -1), (a, b)),
        "layer_norm": (lambda x, y: F.layer_norm(x.view(-1, 64), (64,)), (a, b)),
        "mm": (lambda x, y: x @ y, (m1, m2)),
    }
    rows = []
    for name, (fn, (x, y)) in cases.items():
        xd, yd = x.openreg(), y.openreg()
        native = torch._C._dispatch_has_kernel_for_dispatch_key(_aten_name(name), "PrivateUse1")
        t_cpu, t_dev = compare([lambda fn=fn, x=x, y=y: fn(x, y), lambda fn=fn, x=xd, y=yd: fn(x, y)])
        kind = "native" if native else "fallback"
        rows.append(
            [name, label, str(threads), kind, fmt_time(t_cpu), fmt_time(t_dev), f"{t_dev / t_cpu:.2f}"]
        )
    return rows


def _aten_name(name: str) -> str:
    return {
        "add": "aten::add.Tensor",
        "mul_": "aten::mul_.Scalar",
        "relu": "aten::relu",
        "sum": "aten::sum",
        "softmax": "aten::_softmax",
        "layer_norm": "aten::native_layer_norm",
        "mm": "aten::mm",
    }[name]


def fallback_rows() -> list[list[str]]:
    rows = []
    for label, n in SIZES.items():
        x = torch.randn(n)
        xd = x.openreg()
        out = torch.logcumsumexp(x, 0)  # an op openreg has no kernel for
        t_cpu, t_dev, t_down, t_up = compare(
            [
                lambda x=x: torch.logcumsumexp(x, 0),
                lambda xd=xd: torch.logcumsumexp(xd, 0),
                lambda xd=xd: xd.cpu(),  # the input's trip to the host
                lambda out=out: out.to("openreg"),  # the result's trip back
            ]
        )
        share = (t_down + t_up) / t_dev
        rows.append(
            ["logcumsumexp", label, fmt_time(t_cpu), fmt_time(t_dev), f"{t_dev / t_cpu:.2f}", f"{share:.0%}"]
        )
    return rows


def main() -> None:
    threads = torch.get_num_threads()
    # Which build is measured: the installed (editable) package, unless PYTHONPATH names a checkout.
    where = Path(openreg_lab.__file__).parent
    print(f"torch {torch.__version__}, {threads} threads, openreg_lab {openreg_lab.__version__} ({where})")
    print(
        "\nOps with an openreg kernel (or the fallback where noted) vs CPU, on 1 and 2 threads; "
        "small = 64 elements, large = 1Mi elements (mm: 8x8 and 1024x1024; softmax and "
        "layer_norm over rows of 64)"
    )
    header = ["op", "size", "threads", "openreg kernel", "cpu", "openreg", "openreg/cpu"]
    print_table(header, native_rows())
    torch.set_num_threads(threads)
    print("\nA fallback op vs CPU, and the share of its time spent copying to the host and back")
    print_table(["op", "size", "cpu", "openreg", "openreg/cpu", "copies"], fallback_rows())


if __name__ == "__main__":
    main()
