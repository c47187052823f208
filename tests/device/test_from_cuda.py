"""``openreg_lab.from_cuda()``: code written for CUDA runs on openreg inside the block."""

from __future__ import annotations

import copy
import importlib
import inspect
import sys
import threading

import pytest
import torch
from torch import nn

import openreg_lab

REAL_CUDA = torch.cuda


def test_devices_tensors_and_modules_go_to_openreg():
    with openreg_lab.from_cuda():
        a = torch.ones(2, device="cuda")
        b = torch.zeros(2, device=torch.device("cuda", 1))
        c = torch.arange(3).to("cuda:1")
        d = torch.arange(3).cuda()
        e = torch.arange(3).cuda(1)
        m = nn.Linear(2, 2).cuda()
        n = nn.Linear(2, 2).to("cuda")
        assert a.is_cuda and not torch.ones(1).is_cuda
    assert (a.device, b.device, c.device, d.device, e.device) == (
        torch.device("openreg", 0),
        torch.device("openreg", 1),
        torch.device("openreg", 1),
        torch.device("openreg", 0),
        torch.device("openreg", 1),
    )
    assert m.weight.device.type == n.bias.device.type == "openreg"
    assert not a.is_cuda  # outside the block, is_cuda is torch's again


def test_torch_cuda_is_torch_openreg_under_cuda_names():
    with openreg_lab.from_cuda():
        import torch.cuda as cuda  # what a script's `import torch.cuda` gets

        assert cuda is torch.cuda is sys.modules["torch.cuda"]
        assert torch.cuda.is_available() and torch.cuda.device_count() == torch.openreg.device_count()
        torch.cuda.set_device("cuda:1")
        assert torch.cuda.current_device() == 1
        torch.cuda.set_device(0)
        torch.cuda.manual_seed(3)
        torch.cuda.reset_peak_memory_stats()
        x = torch.ones(1024, device="cuda")
        assert torch.cuda.max_memory_allocated() >= 4096 and torch.cuda.memory_allocated() >= 4096
        assert "allocated_bytes.all.current" in torch.cuda.memory_stats()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            assert torch.cuda.current_stream() == s
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        torch.cuda.synchronize()
        assert ev.query() and isinstance(s, torch.openreg.Stream)
        assert torch.cuda.is_bf16_supported() and torch.cuda.get_device_name(0).startswith("openreg")
        del x
    assert torch.cuda is REAL_CUDA and sys.modules["torch.cuda"] is REAL_CUDA


def test_autocast_and_grad_scaler_for_cuda_use_openreg():
    model = nn.Linear(8, 4).to("openreg")
    with openreg_lab.from_cuda():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled("cuda")
            y = model(torch.randn(2, 8, device="cuda"))
        with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16):
            z = model(torch.randn(2, 8, device="cuda"))
        scaler = torch.amp.GradScaler()  # the default device is "cuda"
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler.scale(y.float().sum()).backward()
        scaler.step(opt)
        scaler.update()
    assert y.dtype == z.dtype == torch.bfloat16 and y.device.type == "openreg"
    assert scaler._device == "openreg" and scaler.get_scale() == 65536.0
    assert not torch.is_autocast_enabled("openreg")


def test_every_cuda_name_resolves_and_only_calls_without_meaning_raise():
    with openreg_lab.from_cuda():
        graph_or_none = torch.cuda.CUDAGraph | None  # what transformers evaluates at import
        assert isinstance(torch.cuda.CUDAGraph, type) and torch.cuda.CUDAGraph is torch.cuda.graphs.CUDAGraph
        assert graph_or_none.__args__ == (torch.cuda.CUDAGraph, type(None))

        class MyGraph(torch.cuda.CUDAGraph):  # subclassing a CUDA class works; instantiating raises
            pass

        for make in (torch.cuda.CUDAGraph, MyGraph):
            with pytest.raises(
                openreg_lab.CudaNotMappedError,
                match=r"^torch\.cuda\.CUDAGraph\(\) has no openreg counterpart.*: run the captured code",
            ):
                make()
        assert not isinstance(torch.ones(1), torch.cuda.CUDAGraph)
        event = torch.cuda.Event()
        assert isinstance(event, torch.cuda.Event) and isinstance(event, torch.cuda.streams.Event)
        from torch.cuda import graphs

        make = graphs.make_graphed_callables  # a submodule's function without an openreg meaning
        assert inspect.isfunction(make) and make.__name__ == "make_graphed_callables"
        assert make is torch.cuda.make_graphed_callables
        with pytest.raises(
            openreg_lab.CudaNotMappedError,
            match=r"^torch\.cuda\.graphs\.make_graphed_callables\(\).*: call the module itself$",
        ):
            make(nn.Linear(2, 2), (torch.ones(1, 2),))
        with pytest.raises(openreg_lab.CudaNotMappedError, match=r"^torch\.cuda\.CUDAGraph\.pool "):
            torch.cuda.CUDAGraph.pool  # noqa: B018
        with pytest.raises(AttributeError):
            torch.cuda.no_such_function  # noqa: B018
        comm = importlib.import_module("torch.cuda.comm")  # a submodule no one imported yet
        assert comm.__name__ == "torch.cuda.comm" and torch.cuda.comm is comm
        # names with an openreg meaning are openreg's
        assert torch.cuda.get_device_capability("cuda:1") == (8, 0)
        assert torch.cuda.current_blas_handle() == 0
        assert torch.cuda.memory.memory_allocated(0) == torch.openreg.memory_allocated(0)
    assert torch.cuda is REAL_CUDA
    assert torch.cuda.comm is sys.modules["torch.cuda.comm"]  # the real package has it after the block


def _nvtx_worker(nvtx, handle: int, depths: list[int]) -> None:
    depths.append(nvtx.range_push("worker"))  # its own stack: depth 0 again
    depths.append(nvtx.range_pop())
    nvtx.range_end(handle)  # a range_start range ends on any thread


def test_nvtx_ranges_and_marks_are_marks_in_the_trace():
    """NVTX under from_cuda keeps its contract (depths, handles, per-thread stacks, the context
    manager's format) and each start, end and mark is a mark in the open trace (Note [NVTX labels])."""
    with openreg_lab.trace() as t, openreg_lab.from_cuda():
        from torch.cuda import nvtx

        assert nvtx.range_push("forward") == 0
        assert nvtx.range_push("attention") == 1
        torch.ones(2, device="cuda").add_(1)
        assert nvtx.range_pop() == 1
        assert nvtx.range_pop() == 0
        assert nvtx.range_pop() == -1  # none open: NVTX's negative answer
        handle = nvtx.range_start("load")
        depths: list[int] = []
        worker = threading.Thread(target=_nvtx_worker, args=(nvtx, handle, depths))
        worker.start()
        worker.join(10)
        assert depths == [0, 0]
        with nvtx.range("step {}", 3):
            nvtx.mark("inside")

        @torch.cuda.nvtx.range("decorated")
        def f() -> int:
            return 7

        assert f() == 7
        with pytest.warns(UserWarning, match=r"range_end\(123456\): no range with this handle is open"):
            nvtx.range_end(123456)
        with pytest.raises(TypeError, match=r"range_push\(msg\) takes a string, got int"):
            nvtx.range_push(5)
        assert nvtx.range_pop() == -1  # the refused push left no range open
    marks = t.events.loc[t.events["kind"] == "mark", "name"].tolist()
    assert marks == [
        "forward", "attention", "attention (end)", "forward (end)", "load", "worker", "worker (end)",
        "load (end)", "step 3", "inside", "step 3 (end)", "decorated", "decorated (end)",
    ]  # fmt: skip
    with openreg_lab.from_cuda():
        torch.cuda.nvtx.mark("no trace open: goes nowhere")


def test_openregs_own_classes_take_cuda_devices_inside_the_block():
    """torch.cuda.device and torch.cuda.Stream are openreg's classes (isinstance holds for the
    streams openreg makes), and inside the block they take "cuda:N" as scripts pass it."""
    with openreg_lab.from_cuda():
        with torch.cuda.device("cuda:1"):
            assert torch.cuda.current_device() == 1
            assert torch.ones(1, device="cuda").device == torch.device("openreg", 1)
        with torch.cuda.device(torch.device("cuda", 1)):
            assert torch.cuda.current_device() == 1
        assert torch.cuda.current_device() == 0
        stream = torch.cuda.Stream(device="cuda:1")
        assert stream.device == torch.device("openreg", 1)
        assert isinstance(torch.cuda.current_stream(), torch.cuda.Stream)
    with pytest.raises(ValueError, match=r"expected an openreg device, got cuda:1"):
        torch.openreg.Stream(device="cuda:1")  # outside the block, "cuda" is CUDA again


def test_stream_priorities_are_what_openreg_honours():
    # CUDA gives (0, -N): lower is higher priority. openreg has the default and one high priority.
    with openreg_lab.from_cuda():
        least, greatest = torch.cuda.Stream.priority_range()
        assert (least, greatest) == (0, -1) == torch.cuda.streams.Stream.priority_range()
        assert torch.cuda.Stream(priority=greatest).priority == -1
        assert torch.cuda.Stream(priority=least).priority == 0
        with pytest.raises(ValueError, match=r"priority must be 0 \(default\) or -1 \(high\), got -2"):
            torch.cuda.Stream(priority=greatest - 1)
    assert torch.openreg.Stream.priority_range() == (0, -1)


def test_the_jiterator_is_named_as_not_mapped():
    code = "template <typename T> T twice(T x) { return x + x; }"
    with openreg_lab.from_cuda():
        from torch.cuda import jiterator  # resolves, as every torch.cuda name does

        for create in (jiterator._create_jit_fn, torch.cuda.jiterator._create_multi_output_jit_fn):
            with pytest.raises(
                openreg_lab.CudaNotMappedError,
                match=rf"^torch\.cuda\.jiterator\.{create.__name__}\(\) has no openreg counterpart.*: write "
                r"the elementwise function as torch operations",
            ):
                create(code)
        with pytest.raises(AttributeError):
            jiterator.no_such_function  # noqa: B018


def test_data_parallel_runs_over_the_devices_cuda_sees():
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    x = torch.randn(6, 4)
    with openreg_lab.from_cuda():
        model = copy.deepcopy(cpu).cuda()
        dp = nn.DataParallel(model)
        # openreg's devices and type, not the "cuda" that torch.cuda.is_available() suggests
        assert dp.device_ids == [0, 1] and dp.src_device_obj == torch.device("openreg", 0)
        with pytest.warns(UserWarning, match="PyTorch is not compiled with NCCL support"):
            dp(x.cuda()).sum().backward()
        y = nn.parallel.data_parallel(model, x.cuda(), device_ids=["cuda:0", 1], output_device="cuda:1")
    cpu(x).sum().backward()
    assert y.device == torch.device("openreg", 1)
    torch.testing.assert_close(y.cpu(), cpu(x))
    for ours, theirs in zip(model.parameters(), cpu.parameters(), strict=True):
        torch.testing.assert_close(ours.grad.cpu(), theirs.grad)


def test_a_memory_fraction_is_openregs_memory_limit():
    with openreg_lab.from_cuda():
        size = torch.cuda.get_device_properties(1).total_memory
        limits = torch.openreg.get_memory_limit(0), torch.openreg.get_memory_limit(1)
        try:
            torch.cuda.set_per_process_memory_fraction(0.25, "cuda:1")
            torch.cuda.set_per_process_memory_fraction(0.5, "cuda:1")  # of the device, not compounded
            assert torch.openreg.get_memory_limit(1) == int(0.5 * size)
            assert torch.openreg.get_memory_limit(0) == limits[0]  # the other device untouched
            with pytest.raises(ValueError, match=r"within \[0, 1\], got 1.5"):
                torch.cuda.set_per_process_memory_fraction(1.5)
            torch.openreg.empty_cache()  # a cached block would serve the request, as on CUDA
            torch.cuda.set_per_process_memory_fraction(0, 1)  # as on CUDA, nothing may be allocated
            with pytest.raises(torch.OutOfMemoryError):
                torch.empty(1024, device="cuda:1")
        finally:
            torch.openreg.set_memory_limit(limits[1], 1)
        assert torch.cuda.is_current_stream_capturing() is False  # no CUDA graph is ever captured
        assert torch.cuda.get_arch_list() == []


def test_memory_summary_is_cudas_table_of_openregs_allocator():
    with openreg_lab.from_cuda():
        torch.openreg.empty_cache()
        before = torch.cuda.memory_allocated(1)
        x = torch.ones(1000, device="cuda:1")  # 4000 bytes requested
        summary = torch.cuda.memory_summary("cuda:1", abbreviated=True)
        assert torch.cuda.memory.memory_summary is torch.cuda.memory_summary
    lines = summary.splitlines()
    assert "memory summary, device ID 1" in lines[1]
    row = next(line for line in lines if line.startswith("| Allocations "))
    current, peak = (int(cell) for cell in row.split("|")[2:4])
    stats = torch.openreg.memory_stats(1)
    assert (current, peak) == (stats["allocation.all.current"], stats["allocation.all.peak"])
    assert current >= 1 and torch.openreg.memory_allocated(1) - before >= 4000
    del x


def test_device_properties_have_cuda_fields():
    props = torch.openreg.get_device_properties("openreg:1")
    assert props.name == "openreg (simulated by openreg-lab)" and (props.major, props.minor) == (8, 0)
    assert props.total_memory == torch.openreg.mem_get_info(1)[1] > 0
    assert props.multi_processor_count == torch.get_num_threads() and props.warp_size == 32
    assert (
        props.uuid
        == torch.openreg.get_device_properties(1).uuid
        != torch.openreg.get_device_properties(0).uuid
    )
    assert "total_memory=" in repr(props) and "multi_processor_count=" in repr(props)
    torch.openreg.set_memory_limit(1 << 20, 1)
    try:
        assert torch.openreg.get_device_properties(1).total_memory == 1 << 20  # the limit, when there is one
    finally:
        torch.openreg.set_memory_limit(None, 1)
    with pytest.raises(ValueError, match="expected an openreg device, got cpu"):
        torch.openreg.get_device_properties("cpu")
    with openreg_lab.from_cuda():
        assert torch.cuda.get_device_properties("cuda:1") == props
        assert torch.cuda.get_device_properties(torch.device("cuda", 1)).total_memory == props.total_memory
        assert torch.cuda.get_device_capability() == (props.major, props.minor)
        assert torch.cuda.mem_get_info("cuda:1") == torch.openreg.mem_get_info(1)


def test_blocks_nest_and_the_mapping_covers_every_thread_until_the_end():
    seen = {}

    def other_thread() -> None:
        seen["device"] = torch.ones(1, device="cuda").device

    with openreg_lab.from_cuda():
        with openreg_lab.from_cuda():
            assert torch.ones(1, device="cuda").device.type == "openreg"
        assert torch.cuda is not REAL_CUDA  # the outer block still maps
        t = threading.Thread(target=other_thread)  # DataParallel-style worker threads map too
        t.start()
        t.join()
    assert torch.cuda is REAL_CUDA
    assert seen["device"] == torch.device("openreg", 0)
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA"):  # undone: torch's own error
        torch.ones(1, device="cuda")


def _patchable_state() -> dict[str, dict[str, object]]:
    from torch.utils import _device

    owners = {
        "torch": torch, "Tensor": torch.Tensor, "_nn": torch._C._nn, "fft": torch.fft, "nested": torch.nested,
        "autocast": torch.amp.autocast_mode.autocast, "GradScaler": torch.amp.GradScaler,
        "amp": torch.amp, "autocast_mode": torch.amp.autocast_mode, "DeviceContext": _device.DeviceContext,
        "DataParallel": nn.DataParallel, "c10d": torch.distributed.distributed_c10d,
        "dist": torch.distributed, "modules": sys.modules,
    }  # fmt: skip
    return {k: dict(vars(v)) if k != "modules" else dict(v) for k, v in owners.items()}


def test_no_per_op_cost_and_everything_undone_on_exit():
    before = _patchable_state()
    with openreg_lab.from_cuda():
        assert torch._C._len_torch_function_stack() == 0  # no mode: plain calls run no Python of ours
        assert torch.add is before["torch"]["add"] and nn.functional.linear is torch._C._nn.linear
        assert "to" in vars(torch.Tensor) and torch.zeros is not before["torch"]["zeros"]
    after = _patchable_state()
    for owner, attrs in before.items():
        changed = {k for k in attrs.keys() | after[owner].keys() if attrs.get(k) is not after[owner].get(k)}
        assert not changed, (owner, changed)


def test_every_entry_point_maps_cuda():
    from torch.utils import _device

    x = torch.ones(2, 3)
    with openreg_lab.from_cuda():
        made = {
            "new_zeros": x.new_zeros(2, device="cuda"),
            "zeros_like": torch.zeros_like(x, device="cuda:1"),
            "full": torch.full((2,), 1.0, device=torch.device("cuda")),
            "tensor": torch.tensor([1, 2], device="cuda"),
            "fftfreq": torch.fft.fftfreq(4, device="cuda"),
            "to_empty": nn.Linear(2, 2, device="meta").to_empty(device="cuda").weight,
            "linear": nn.Linear(2, 2, device="cuda:1").weight,
        }
        with torch.device("cuda:1"):
            made["device context"] = torch.empty(2)
        torch.set_default_device("cuda")
        try:
            made["default device"] = torch.zeros(1)
        finally:
            torch.set_default_device(None)
        assert _device.CURRENT_DEVICE is None
    want = {"zeros_like": 1, "linear": 1, "device context": 1}
    for name, t in made.items():
        assert t.device == torch.device("openreg", want.get(name, 0)), name


def test_torch_load_with_a_cuda_map_location_lands_on_openreg(tmp_path):
    import openreg_lab

    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(4.0)}, path)
    with openreg_lab.from_cuda():
        for where in ("cuda", "cuda:1", torch.device("cuda", 0), {"cpu": "cuda"}):
            w = torch.load(path, map_location=where)["w"]
            assert w.device.type == "openreg", where
            assert torch.equal(w.cpu(), torch.arange(4.0))
        assert torch.load(path, map_location="cuda:1")["w"].device == torch.device("openreg", 1)
        assert torch.load(path)["w"].device.type == "cpu"  # saved on the CPU: stays there
        assert torch.load(path, map_location=lambda s, loc: s)["w"].device.type == "cpu"
    assert torch.load(path, map_location="cpu")["w"].device.type == "cpu"


def test_cuda_generators_are_openreg_generators():
    import openreg_lab

    with openreg_lab.from_cuda():
        g = torch.Generator(device="cuda:1").manual_seed(3)
        assert g.device == torch.device("openreg", 1)
        assert isinstance(g, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
        a = torch.randn(4, generator=g, device="cuda:1")
        b = torch.randn(4, generator=torch.Generator(device="cuda:1").manual_seed(3), device="cuda:1")
        assert a.device == torch.device("openreg", 1) and torch.equal(a.cpu(), b.cpu())
        assert torch.Generator().device.type == "cpu"
    assert torch.Generator is torch._C.Generator


def _python_calls_of_a_step(device: str) -> list[str]:
    """The Python functions a small-op training step calls (after a first step), in order."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 8, device=device), torch.randint(0, 4, (4,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    step()
    calls: list[str] = []

    def profile(frame, event, arg) -> None:
        if event == "call":
            calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return calls


def test_a_training_step_under_from_cuda_runs_the_same_python_as_on_openreg():
    # The per-op cost of the TorchFunctionMode this replaced came from Python run on every call: a
    # step written for CUDA now runs exactly the Python that the step written for openreg runs.
    native = _python_calls_of_a_step("openreg")
    with openreg_lab.from_cuda():
        ported = _python_calls_of_a_step("cuda")
    ours = [c for c in ported if "openreg_lab/device/_cuda_" in c]
    assert [c for c in ported if c not in ours] == native and len(native) > 50
    # what remains is per step, not per op: the factories the step itself calls (backward's
    # torch.ones_like seed, AdamW's torch.tensor step increment), each one wrapper call
    assert [c.rpartition(":")[2] for c in ours] == ["wrapper", "wrapper", "map_device"]
