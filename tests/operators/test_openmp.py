"""Native kernels run on the threads torch uses, with torch's one OpenMP runtime (setup.py).

The extension is compiled with -fopenmp and linked against torch/lib/libgomp.so.1, so that
at::parallel_for in csrc/aten/native/ splits large tensors over torch.get_num_threads() threads.
Each check that needs a fresh OpenMP thread pool runs in a child forked for it. The numerics checks
run under the fallback policy "error", so every op they time is an openreg kernel.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

import openreg_lab
from tests.support.processes import run_python

OPENMP_RUNTIME = re.compile(r"/lib(gomp|iomp5|omp)[^/]*\.so[^/]*$")
TORCH_GOMP = os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp.so.1")

LARGE = (1 << 20) + 3  # not a multiple of any vector width or chunk: chunk edges fall mid-vector


def _run_json(code: str) -> dict:
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_one_openmp_runtime_is_mapped_and_it_is_torchs() -> None:
    out = _run_json(
        f"""
import json, re, torch, openreg_lab
torch.set_num_threads(2)
x = torch.randn({LARGE}).openreg()
(x + x).sum().item()
paths = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split()
        if len(parts) >= 6 and re.search({OPENMP_RUNTIME.pattern!r}, parts[5]):
            paths.add(parts[5])
print(json.dumps(sorted(paths)))
"""
    )
    assert len(out) == 1, f"expected one OpenMP runtime in the process, found {out}"
    assert os.path.samefile(out[0], TORCH_GOMP)


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")
def test_extension_links_torchs_openmp_runtime() -> None:
    dynamic = subprocess.run(
        ["readelf", "-d", openreg_lab._C.__file__], capture_output=True, text=True, check=True
    ).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", dynamic)
    assert "libgomp.so.1" in needed
    # A loader searching the run path finds torch's copy, not the compiler's.
    runpath = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.+)\]", dynamic)
    assert runpath is not None
    dirs = runpath.group(1).split(":")
    assert any(os.path.exists(os.path.join(d, "libgomp.so.1")) for d in dirs)
    first = next(d for d in dirs if os.path.exists(os.path.join(d, "libgomp.so.1")))
    assert os.path.samefile(os.path.join(first, "libgomp.so.1"), TORCH_GOMP)


# The OpenMP pool starts num_threads - 1 workers at the first parallel region and keeps them:
# counting the process's threads around an op shows whether it ran in parallel. Each op needs a
# process whose pool has not started: one interpreter imports torch once and forks a child per
# thread count and op before any parallel region ran (a fork copies only the calling thread); the
# child sets its thread count first. One interpreter for every thread count: each costs an
# `import torch` (about 2.5 CPU seconds), and the parent never starts its pool.
THREADS_AROUND_OPS = """
import json, os, torch, openreg_lab
openreg_lab.set_fallback_policy("error")
def count():
    return len(os.listdir("/proc/self/task"))
def child(op, threads):
    torch.set_num_threads(threads)
    big = torch.empty({n}, device="openreg")  # no kernel touches its elements
    small = torch.empty(64, device="openreg")
    before = count()
    torch.add(small, small)
    small.mul_(2.0)
    torch.relu(small).sum()
    after_small = count()
    eval(op)
    torch.openreg.synchronize()
    return [before, after_small, count()]
out = {{}}
for threads in {thread_counts!r}:
    for name, op in {ops!r}.items():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                os.write(w, json.dumps(child(op, threads)).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            text = f.read()
        os.waitpid(pid, 0)
        out[f"{{threads}} {{name}}"] = json.loads(text) if text else "the child wrote nothing"
print(json.dumps(out))
"""

THREAD_COUNTS = [1, 2, 3]
LARGE_OPS = {
    "add": "torch.add(big, big)",
    "mul_": "big.mul_(2.0)",
    "relu": "torch.relu(big)",
    "sum": "big.sum()",
    "softmax": "torch.softmax(big.view(-1, 64), -1)",
    "layer_norm": "torch.nn.functional.layer_norm(big.view(-1, 64), (64,))",
}


@functools.cache
def _thread_counts() -> dict[str, list[int]]:
    """Per thread count of THREAD_COUNTS and op of LARGE_OPS (keys "3 add"), the process's thread
    count before any op, after small ops, and after the op, each in a fresh child of one
    interpreter, set to that thread count."""
    return _run_json(THREADS_AROUND_OPS.format(thread_counts=THREAD_COUNTS, n=1 << 22, ops=LARGE_OPS))


@pytest.mark.parametrize("threads", THREAD_COUNTS)
@pytest.mark.parametrize("op", sorted(LARGE_OPS))
def test_large_native_op_uses_torchs_thread_count(op: str, threads: int) -> None:
    before, after_small, after_large = _thread_counts()[f"{threads} {op}"]
    assert after_small == before, "a 64-element op must stay on the calling thread"
    assert after_large - before == threads - 1


@pytest.fixture
def restore_threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _on_threads(threads: int, fn: Callable[[], object]) -> object:
    torch.set_num_threads(threads)
    with openreg_lab.fallback_policy("error"):
        return fn()


def _cpu(result: object) -> list[torch.Tensor]:
    items = result if isinstance(result, tuple | list) else (result,)
    return [t.cpu() for t in items]


def _assert_identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x.view(-1).view(torch.uint8), y.view(-1).view(torch.uint8))


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(LARGE, generator=g).to(dtype).openreg()
    b = torch.randn(LARGE, generator=g).to(dtype).openreg()
    return a, b


# Elementwise ops and per-row kernels: each output element is computed by one thread from its own
# inputs, so the result is the same bit for bit whatever the thread count.
PER_ELEMENT: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "add": lambda a, b: a + b,
    "mul_": lambda a, b: a.clone().mul_(1.0001),
    "relu": lambda a, b: torch.relu(a),
    "exp": lambda a, b: torch.exp(a),
    "sigmoid": lambda a, b: torch.sigmoid(a),
    "gelu": lambda a, b: F.gelu(a),
    "addcmul": lambda a, b: torch.addcmul(a, a, b, value=0.5),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "softmax": lambda a, b: torch.softmax(a[: 1 << 20].view(-1, 1000 + 24), -1),
    "log_softmax": lambda a, b: torch.log_softmax(a[: 1 << 20].view(-1, 64), -1),
    "softmax_dim0": lambda a, b: torch.softmax(a[: 1 << 20].view(64, -1), 0),
    "layer_norm": lambda a, b: F.layer_norm(a[: 1 << 20].view(-1, 256), (256,)),
}

# Reductions add fixed chunks of the input and combine the partial results in chunk order: the
# result does not depend on the thread count either.
REDUCTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "sum": lambda a, b: a.sum(),
    "mean": lambda a, b: a.mean(),
    "sum_dim1": lambda a, b: a[: 1 << 20].view(1024, -1).sum(1),
    "sum_dim0": lambda a, b: a[: 1 << 20].view(1024, -1).sum(0),
    "var": lambda a, b: a.var(),
    "amax": lambda a, b: a.amax(),
    "argmax": lambda a, b: a.argmax(),
    "norm_backward": lambda a, b: _layer_norm_input_grad(a),
}


def _layer_norm_input_grad(a: torch.Tensor) -> torch.Tensor:
    x = a[: 1 << 20].view(-1, 256).detach().requires_grad_()
    w = torch.ones(256, device=a.device)
    F.layer_norm(x, (256,), w).sum().backward()
    assert x.grad is not None
    return x.grad


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(PER_ELEMENT.keys() | REDUCTIONS.keys()))
def test_results_do_not_depend_on_the_thread_count(name: str, dtype: torch.dtype) -> None:
    fn = PER_ELEMENT.get(name) or REDUCTIONS[name]
    a, b = _inputs(dtype)
    one = _cpu(_on_threads(1, lambda: fn(a, b)))
    for threads in (2, 3):
        _assert_identical(_cpu(_on_threads(threads, lambda: fn(a, b))), one)
    expected = _cpu(fn(a.cpu(), b.cpu()))
    for x, y in zip(one, expected, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-2 if dtype == torch.bfloat16 else 1e-4, atol=1e-3)


@pytest.mark.usefixtures("restore_threads")
@pytest.mark.parametrize("threads", [1, 2])
def test_layer_norm_weight_grads_are_the_same_run_to_run(threads: int) -> None:
    # dgamma and dbeta add one partial sum per chunk of rows; the chunks depend on the thread
    # count, so the result is fixed for a given count.
    a, _ = _inputs(torch.float32)
    x = a[: 1 << 20].view(-1, 256)

    def grads() -> list[torch.Tensor]:
        w = torch.randn(256, generator=torch.Generator().manual_seed(1)).openreg().requires_grad_()
        b = torch.zeros(256, device="openreg", requires_grad=True)
        (F.layer_norm(x, (256,), w, b) * x).sum().backward()
        assert w.grad is not None and b.grad is not None
        return [w.grad.cpu(), b.grad.cpu()]

    first = _on_threads(threads, grads)
    for _ in range(3):
        _assert_identical(_on_threads(threads, grads), first)  # type: ignore[arg-type]
