"""The accelerator API's corners, as CUDA and PyTorch's OpenReg reference behave.

Streams and events without an index, the device capability, the error of an invalid device index,
lazy initialisation (and DeviceMesh's LOCAL_RANK device under torchrun), the Dynamo backend
``"openreg"``. Autocast's refusal is in test_autocast.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import openreg_lab
from tests.support.distributed_pool import free_port
from tests.support.processes import run_python

REPO = str(Path(__file__).resolve().parents[2])


# -- streams and events without an index --------------------------------------------------------
def test_stream_and_event_without_an_index_use_the_current_device():
    torch.openreg.set_device(1)
    stream = torch.Stream(device="openreg")
    assert stream.device == torch.device("openreg", 1)
    assert torch.Stream(device="openreg", priority=-1).device_index == 1
    event = torch.Event(device="openreg", enable_timing=True)
    event.record()  # on the current stream of the current device
    assert event.device == torch.device("openreg", 1)
    assert event.query()
    later = torch.Event(device="openreg", enable_timing=True)
    later.record(stream)
    assert event.elapsed_time(later) >= 0
    torch.openreg.set_device(0)
    assert torch.Stream(device="openreg").device_index == 0
    assert torch.accelerator.current_stream(torch.device("openreg")).device_index == 0


# -- device capability ---------------------------------------------------------------------------
QUANTIZED = (torch.qint8, torch.quint8, torch.qint32)
# openreg's own kernels compute with these; the other reported dtypes only through the CPU fallback.
NATIVE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool, torch.uint8, torch.int8,
          torch.int16, torch.int32, torch.int64}  # fmt: skip


def _source(dtype: torch.dtype) -> torch.Tensor:
    if dtype in QUANTIZED:
        return torch.quantize_per_tensor(torch.linspace(-1, 1, 6), 0.05, 3, dtype)
    src = torch.empty(6, dtype=dtype)
    data = torch.arange(src.view(torch.uint8).numel(), dtype=torch.uint8)
    src.view(torch.uint8).copy_(data % 2 if dtype == torch.bool else data)  # bytes every dtype holds
    return src


def _computed(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in QUANTIZED:
        return t.dequantize()
    return t.to(torch.complex128 if t.dtype.is_complex else torch.float64)


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.int_repr() if t.dtype in QUANTIZED else t.view(torch.uint8)


def _supported(dtype: torch.dtype) -> bool:
    """An openreg tensor of ``dtype`` can be created, copied to and from the host bit for bit, and
    computed with (a cast to float64 or complex128, or dequantize) as on the CPU."""
    try:
        torch.empty(4, dtype=dtype, device="openreg")
        src = _source(dtype)
        dev = src.to("openreg:1")
        back = dev.cpu()
        if back.dtype != dtype or not torch.equal(_raw(back), _raw(src)):
            return False
        return torch.equal(_computed(dev).cpu(), _computed(src))
    except (RuntimeError, NotImplementedError):
        return False


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_device_capability_lists_the_dtypes_openreg_creates_copies_and_computes_with():
    cap = torch.accelerator.get_device_capability()
    assert cap == torch.openreg.get_device_capability() == torch.openreg.get_device_capability("openreg:1")
    held = cap["supported_dtypes"]
    every = {d for d in vars(torch).values() if isinstance(d, torch.dtype)}
    assert held == {d for d in every if _supported(d)}  # each dtype tried: nothing more, nothing less
    assert {torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.complex32, torch.qint8} <= held
    # left out: the bit containers and float4 (no cast even on the CPU), the sub-byte and packed types
    assert torch.bits8 not in held and torch.float4_e2m1fn_x2 not in held and torch.uint4 not in held
    assert NATIVE < held


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_device_capability_dtypes_compute_natively_or_through_the_fallback_as_documented():
    for dtype in sorted(torch.accelerator.get_device_capability()["supported_dtypes"], key=str):
        x = _source(dtype).to("openreg")
        expected = torch.eq(_source(dtype), _source(dtype))
        if dtype in NATIVE:
            with openreg_lab.fallback_policy("error"):
                assert torch.equal(torch.eq(x, x).cpu(), expected), dtype
            continue
        with openreg_lab.fallback_policy("error"), pytest.raises(NotImplementedError, match="fallback"):
            torch.eq(x, x)
        assert torch.equal(torch.eq(x, x).cpu(), expected), dtype  # the fallback computes it


# -- an invalid device index ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda: torch.openreg.set_device(2),
        lambda: torch.ones(2, device="openreg:3"),
        lambda: torch.zeros(2).to("openreg:5"),
        lambda: torch.accelerator.set_device_index(4),
        lambda: torch.Stream(device="openreg:6"),
        lambda: torch.openreg.get_device_capability(7),
        lambda: torch.openreg.memory_allocated(9),
    ],
    ids=["set_device", "factory", "to", "accelerator", "stream", "capability", "memory"],
)
def test_an_invalid_device_index_is_cudas_runtime_error(call):
    with pytest.raises(RuntimeError) as caught:  # what `except RuntimeError` handlers catch
        call()
    assert type(caught.value) is torch.AcceleratorError  # as CUDA's "CUDA error: invalid device ordinal"
    assert caught.value.error_code == 101  # cudaErrorInvalidDevice's number
    assert str(caught.value).startswith("openreg error: invalid device ordinal (openreg device index ")
    assert "out of range: valid indices are 0 to 1; 2 devices, set OPENREG_DEVICE_COUNT" in str(caught.value)
    # and as PyTorch's reference PrivateUse1 backend (its test_invalid_device_index) words it
    assert "The device index is out of range: it must be in [0, 2), but got " in str(caught.value)
    assert torch.openreg.current_device() == 0


# -- lazy initialisation -------------------------------------------------------------------------
LAZY = textwrap.dedent(
    """
    import os, torch, openreg_lab
    o = torch.openreg
    queries = [o.device_count, o.is_available, o.memory_allocated, o.memory_stats, o.get_memory_limit,
               o.empty_cache, o.synchronize, lambda: o.manual_seed(1), lambda: torch.manual_seed(1),
               o.get_rng_state, lambda: o.device(-1).__enter__(), lambda: torch.Event(device="openreg"),
               lambda: torch.ones(2).sum()]
    for q in queries:
        q()
    print("queries", o.is_initialized())
    uses = {
        "factory": lambda: torch.ones(2, device="openreg"),
        "to": lambda: torch.ones(2).to("openreg"),
        "module": lambda: torch.nn.Linear(2, 2).to("openreg"),
        "set_device": lambda: o.set_device(1),
        "accelerator": lambda: torch.accelerator.set_device_index(0),
        "stream": lambda: torch.Stream(device="openreg"),
        "current_device": o.current_device,
        "init": o.init,
    }
    for name, use in uses.items():  # each in a child forked before any use
        pid = os.fork()
        if pid == 0:
            before = o.is_initialized()
            use()
            os._exit(10 * before + o.is_initialized())
        print(name, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """
)


def test_openreg_initialises_at_its_first_use_as_cuda():
    result = run_python(LAZY)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "queries False"
    # 1: not initialised before the use, initialised after it
    assert lines[1:] == [f"{name} 1" for name in (
        "factory", "to", "module", "set_device", "accelerator", "stream", "current_device", "init"
    )]  # fmt: skip


DEVICE_MESH = textwrap.dedent(
    """
    import os, torch, openreg_lab
    from torch.distributed.device_mesh import init_device_mesh
    before = torch.openreg.is_initialized()
    mesh = init_device_mesh("openreg", (2,))
    x = torch.ones(1, device="openreg")
    line = f"{os.environ['LOCAL_RANK']} {before} {torch.openreg.current_device()} {x.device} {mesh.size()}\\n"
    os.write(1, line.encode())  # one write: the two ranks share torchrun's stdout
    torch.distributed.destroy_process_group()
    """
)


def test_device_mesh_selects_the_local_rank_device_under_torchrun(tmp_path: Path):
    script = tmp_path / "mesh.py"
    script.write_text(DEVICE_MESH)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", str(script),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # each rank: not initialised before the mesh; then its current device is its LOCAL_RANK
    assert sorted(proc.stdout.splitlines()) == ["0 False 0 openreg:0 2", "1 False 1 openreg:1 2"]


# -- the Dynamo backend "openreg" ----------------------------------------------------------------
def test_compile_with_the_openreg_backend_is_inductor_with_openregs_settings():
    import torch._dynamo
    from torch._inductor import config, metrics

    torch.openreg.get_device_interface()  # registers with Dynamo (no entry point in this process)
    assert "openreg" in torch._dynamo.list_backends()
    x = torch.randn(5, 3)
    expected = (x.sin() * 2 + x).sum(0)
    torch._dynamo.reset()
    with config.patch(cpp_wrapper=True, fx_graph_cache=False):  # a global setting openreg refuses...
        with pytest.raises(Exception, match=r"does not support options=\{'cpp_wrapper': True\}"):
            torch.compile(lambda t: (t.sin() * 2 + t).sum(0))(x.to("openreg"))
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        metrics.reset()
        # ...which backend="openreg" overrides with openreg's own
        compiled = torch.compile(lambda t: (t.sin() * 2 + t).sum(0), backend="openreg")
        got = compiled(x.to("openreg"))
    assert got.device == torch.device("openreg", 0)
    torch.testing.assert_close(got.cpu(), expected)
    assert metrics.generated_kernel_count >= 1  # Inductor generated the kernels
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    # an option given to torch.compile comes last, so a refused one is refused, never dropped
    torch._dynamo.reset()
    with pytest.raises(Exception, match="does not support CUDA graphs"):
        torch.compile(lambda t: t.cos() + 1, backend="openreg", mode="reduce-overhead")(x.to("openreg"))
    torch._dynamo.reset()
