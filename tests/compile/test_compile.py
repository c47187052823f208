"""torch.compile on openreg: every backend, Inductor included, matches CPU eager and CPU Inductor.

Inductor generates its C++ kernels for CPUs for openreg graphs and runs them on device memory
(``openreg_lab/device/_inductor.py``). Each compile builds C++ (seconds on 2 cores), so the
models are tiny and each is compiled once per module (fixtures), against Inductor's on-disk cache.
Counting compilations uses Dynamo's ``CompileCounterWithBackend("inductor")``: Inductor itself,
counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import openreg_lab
from openreg_lab.device import InductorUnsupportedError
from openreg_lab.examples.train_lm import TinyGPT
from tests.support.processes import run_python

F32 = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(scope="module", autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 2))


def _convnet() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3)
    )


def _lm() -> nn.Module:
    torch.manual_seed(0)
    return TinyGPT(vocab=16, dim=16, heads=2, layers=1, context=8)


def _counter() -> CompileCounterWithBackend:
    return CompileCounterWithBackend("inductor")


def _chain(error: BaseException) -> list[BaseException]:
    chain = []
    seen: BaseException | None = error
    while seen is not None:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


@dataclass
class Run:
    """One model trained a step eagerly on CPU, compiled on CPU, and compiled on openreg."""

    out: dict[str, torch.Tensor]
    grads: dict[str, list[torch.Tensor]]
    frames: int  # graphs Inductor compiled for openreg, forward and backward of each frame
    frames_after_second_call: int
    moved: tuple[int, int]  # fallback events and copies in the second compiled step on openreg


def _run(
    make: Callable[[], nn.Module],
    x: torch.Tensor,
    loss: Callable[[Any], torch.Tensor],
    cpu_inductor: bool = True,
) -> Run:
    out, grads = {}, {}
    counter = _counter()
    places = (
        ("cpu eager", "cpu inductor", "openreg inductor")
        if cpu_inductor
        else ("cpu eager", "openreg inductor")
    )
    for where in places:
        model = make().to("openreg" if where.startswith("openreg") else "cpu")
        inputs = x.to(next(model.parameters()).device)
        run = (
            model
            if where == "cpu eager"
            else torch.compile(model, backend=counter if where.startswith("openreg") else "inductor")
        )
        result = run(inputs)
        loss(result).backward()
        out[where] = result.detach().cpu()
        grads[where] = [p.grad.cpu() for p in model.parameters()]
        if where.startswith("openreg"):
            assert result.device == torch.device("openreg", 0)
            frames = counter.frame_count
            with openreg_lab.trace() as t:
                again = run(inputs)  # same shapes: no recompile
                loss(again).backward()
            torch.testing.assert_close(again.detach().cpu(), out[where], rtol=0, atol=0)
            moved = (len(t.fallbacks()), len(t.copies()))
    return Run(out, grads, frames, counter.frame_count, moved)


@pytest.fixture(scope="module")
def mlp_run() -> Run:
    return _run(_mlp, torch.randn(5, 6), lambda y: y.square().sum())


def _conv_run(cpu_inductor: bool) -> Run:
    return _run(_convnet, torch.randn(2, 1, 8, 8), lambda y: y.square().sum(), cpu_inductor)


def _lm_run(cpu_inductor: bool) -> Run:
    tokens = torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(1))
    return _run(_lm, tokens, lambda logits: logits.float().logsumexp(-1).sum(), cpu_inductor)


@pytest.fixture(scope="module")
def conv_run() -> Run:
    return _conv_run(cpu_inductor=False)  # CPU Inductor too: the slow test below


@pytest.fixture(scope="module")
def lm_run() -> Run:
    return _lm_run(cpu_inductor=False)


def _check(run: Run) -> None:
    for reference in ("cpu eager", "cpu inductor"):
        if reference not in run.out:
            continue
        torch.testing.assert_close(run.out["openreg inductor"], run.out[reference], **F32)
        for got, want in zip(run.grads["openreg inductor"], run.grads[reference], strict=True):
            torch.testing.assert_close(got, want, **F32)
    assert run.frames == 1  # one frame, compiled once; the second call reuses it
    assert run.frames_after_second_call == 1


@pytest.mark.parametrize("fixture", ["mlp_run", "conv_run", "lm_run"])
def test_inductor_on_openreg_matches_cpu_eager(fixture, request):
    run: Run = request.getfixturevalue(fixture)
    assert "cpu eager" in run.out
    _check(run)


def test_the_compiled_conv_net_step_moves_nothing(conv_run):
    # Inductor's extern convolution calls reach openreg's native convolution (Note [openreg's
    # device DNN library]): no fallback and no copy in a compiled forward and backward.
    assert conv_run.moved == (0, 0)


def test_inductor_on_openreg_matches_cpu_inductor(mlp_run):
    assert "cpu inductor" in mlp_run.out
    _check(mlp_run)


@pytest.mark.slow  # two more CPU compilations (forward and backward each): about a minute cold
@pytest.mark.parametrize("make", [_conv_run, _lm_run], ids=["conv", "lm"])
def test_the_conv_net_and_the_lm_on_openreg_match_cpu_inductor(make):
    run = make(cpu_inductor=True)
    assert "cpu inductor" in run.out
    _check(run)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_other_backends_match_eager_cpu_forward_and_backward(backend):
    cpu = _mlp()
    dev = _mlp().to("openreg")
    x = torch.randn(5, 6)
    compiled = torch.compile(dev, backend=backend)
    out = compiled(x.to("openreg"))
    out.square().sum().backward()
    expected = cpu(x)
    expected.square().sum().backward()
    assert out.device.type == "openreg"
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-6)
    for p_dev, p_cpu in zip(dev.parameters(), cpu.parameters(), strict=True):
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, rtol=1e-5, atol=1e-6)


def _train(device: str, optimizer: str, steps: int, compile_step: bool) -> tuple[list[float], nn.Module, int]:
    model = _mlp().to(device)
    make = {
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2),
        "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    }
    opt = make[optimizer](model.parameters())
    counter = _counter()
    run = torch.compile(model, backend=counter) if device == "openreg" else model
    step = torch.compile(opt.step, backend=counter) if compile_step and device == "openreg" else opt.step
    data = torch.randn(steps, 5, 6, generator=torch.Generator().manual_seed(2))
    losses = []
    for i in range(steps):
        loss = run(data[i].to(device)).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        step()
        losses.append(loss.item())
    return losses, model, counter.frame_count


@pytest.mark.parametrize(("optimizer", "compile_step"), [("adamw", True), ("sgd", False)])
def test_a_training_loop_compiled_on_openreg_matches_eager_cpu(optimizer, compile_step):
    losses, model, frames = _train("openreg", optimizer, 3, compile_step)
    expected_losses, expected, _ = _train("cpu", optimizer, 3, False)
    torch.testing.assert_close(losses, expected_losses, **F32)
    for got, want in zip(model.parameters(), expected.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), **F32)
    assert frames == (2 if compile_step else 1)  # the model, and the optimizer step: each once


def test_dynamic_true_compiles_once_for_every_batch_size():
    counter = _counter()
    f = torch.compile(lambda x: (x.sin() * 2 + x).sum(0), backend=counter, dynamic=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x.to("openreg")).cpu(), (x.sin() * 2 + x).sum(0), **F32)
    assert counter.frame_count == 1


def test_automatic_dynamic_shapes_recompile_once_then_reuse():
    counter = _counter()
    f = torch.compile(lambda x: torch.relu(x) * 3, backend=counter)
    for n in (3, 5, 9):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x.to("openreg")).cpu(), torch.relu(x) * 3, rtol=0, atol=0)
    assert counter.frame_count == 2  # static for 3, then dynamic for 5 and 9


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_inside_a_compiled_region_matches_eager_openreg_autocast(dtype):
    model = _mlp().to("openreg")
    x = torch.randn(5, 6).to("openreg")

    def forward(inp: torch.Tensor) -> torch.Tensor:
        with torch.autocast("openreg", dtype=dtype):
            return model(inp)

    expected = forward(x)
    got = torch.compile(forward, backend=_counter())(x)
    assert got.dtype == expected.dtype == dtype  # the last Linear runs in the low precision
    torch.testing.assert_close(got.float().cpu(), expected.float().cpu(), rtol=2e-2, atol=2e-2)


def test_a_graph_on_openreg_1_allocates_and_computes_on_openreg_1():
    x = torch.randn(64, 8)
    before = (torch.openreg.memory_allocated(0), torch.openreg.memory_allocated(1))
    dev1 = x.to("openreg:1")
    f = torch.compile(lambda t: (t * 2).exp() + 1, backend=_counter())
    out = f(dev1)
    assert out.device == torch.device("openreg", 1)
    torch.testing.assert_close(out.cpu(), (x * 2).exp() + 1, **F32)
    assert torch.openreg.memory_allocated(0) == before[0]  # nothing landed on the current device
    assert torch.openreg.memory_allocated(1) == before[1] + 2 * x.numel() * 4


def test_fullgraph_compiles_one_graph_and_refuses_a_graph_break():
    counter = _counter()
    f = torch.compile(lambda x: x.cos() + x.sin(), backend=counter, fullgraph=True)
    x = torch.randn(4)
    torch.testing.assert_close(f(x.to("openreg")).cpu(), x.cos() + x.sin(), **F32)
    assert (counter.frame_count, counter.op_count) == (1, 3)

    def breaks(x: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return x + 1

    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(breaks, backend=_counter(), fullgraph=True)(x.to("openreg"))


class _Broken(nn.Module):
    """Two Linear layers with a graph break between them."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h)


# Dynamo itself reads .grad of the resumed frame's input (a non-leaf tensor), on CPU too.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
def test_a_graph_break_splits_the_model_in_two_graphs_with_the_same_results():
    counter = _counter()
    model = _Broken().to("openreg")
    x = torch.randn(3, 4)
    out = torch.compile(model, backend=counter)(x.to("openreg"))
    out.sum().backward()
    cpu = _Broken()
    expected = cpu(x)
    expected.sum().backward()
    torch.testing.assert_close(out.cpu(), expected, **F32)
    for got, want in zip(model.parameters(), cpu.parameters(), strict=True):
        torch.testing.assert_close(got.grad.cpu(), want.grad, **F32)
    assert counter.frame_count == 2


def test_inductor_still_compiles_cpu_code_beside_openreg_code():
    torch.compile(lambda y: y + 1)(torch.ones(2, device="openreg"))
    assert torch.compile(lambda y: y * 3)(torch.ones(2)).tolist() == [3.0, 3.0]


def _row_norm(x: torch.Tensor) -> torch.Tensor:
    # A reduction fused with the pointwise ops around it: the shape of graph whose fusion ran
    # Inductor's GPU-only loop rewrites (Note [Inductor's GPU-only loop transforms]).
    return (x.sin() * 2).sum(1) + x.mean()


def _row_scale(x: torch.Tensor) -> torch.Tensor:
    return x.cos() / (x * x).sum(1, keepdim=True)


def test_compiling_in_a_thread_pool_and_in_a_second_thread_uses_openreg_settings():
    # Inductor keeps a config assignment per thread: a compile outside the thread that registered
    # openreg failed inside fusion with a TypeError before openreg set process-wide defaults.
    import threading
    from concurrent.futures import ThreadPoolExecutor

    torch.openreg.get_device_interface()  # registers openreg with Inductor in this thread
    x = torch.randn(8, 16)
    with ThreadPoolExecutor(1) as pool:
        pooled = pool.submit(lambda: torch.compile(_row_norm)(x.to("openreg"))).result(timeout=600)
    results: dict[str, torch.Tensor | BaseException] = {}

    def second() -> None:
        try:
            results["thread"] = torch.compile(_row_scale)(x.to("openreg"))
        except BaseException as error:  # reported in the test's thread
            results["thread"] = error

    thread = threading.Thread(target=second)
    thread.start()
    thread.join(timeout=600)
    assert not thread.is_alive()
    torch.testing.assert_close(pooled.cpu(), _row_norm(x), **F32)
    got = results["thread"]
    assert isinstance(got, torch.Tensor), got
    torch.testing.assert_close(got.cpu(), _row_scale(x), **F32)


def test_importing_openreg_lab_does_not_import_inductor():
    result = run_python("import sys, openreg_lab, torch\nprint('torch._inductor' in sys.modules)")
    assert (result.returncode, result.stdout.strip()) == (0, "False"), result.stderr


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"mode": "reduce-overhead"}, 'mode="reduce-overhead"'),
        ({"options": {"triton.cudagraphs": True}}, '"triton.cudagraphs": True'),
        ({"options": {"cpp_wrapper": True}}, "options={'cpp_wrapper': True}"),
        ({"options": {"cpu_backend": "triton"}}, "options={'cpu_backend': 'triton'}"),
    ],
)
def test_options_openreg_cannot_honour_raise_naming_the_option(kwargs, named):
    f = torch.compile(lambda y: y * 2 + 1, **kwargs)
    with pytest.raises(Exception) as caught:
        f(torch.arange(4.0, device="openreg"))
    chain = _chain(caught.value)
    ours = [e for e in chain if isinstance(e, InductorUnsupportedError)]
    assert ours, [type(e) for e in chain]
    assert named in str(ours[0])
    assert "torch.compile on openreg does not support" in str(caught.value)


def test_dynamo_sees_openreg_through_its_device_interface():
    from torch._dynamo.device_interface import get_interface_for_device

    iface = torch.openreg.get_device_interface()  # registers, if nothing compiled yet
    assert iface is get_interface_for_device("openreg") is get_interface_for_device("openreg:1")
    assert iface.is_available() and iface.device_count() == torch.openreg.device_count() == 2
    with iface.device(1):
        assert iface.current_device() == torch.openreg.current_device() == 1
    assert iface.current_device() == 0
    assert iface.exchange_device(1) == 0 and torch.openreg.current_device() == 1
    assert iface.maybe_exchange_device(0) == 1 and torch.openreg.current_device() == 0
    stream = iface.current_stream()
    assert isinstance(stream, torch.Stream) and stream.device == torch.device("openreg", 0)
    event = iface.Event(enable_timing=True)
    event.record()
    iface.synchronize()
    assert event.device == torch.device("openreg", 0) and event.query()
    x = torch.empty(256, device="openreg")
    assert iface.memory_allocated(0) == torch.openreg.memory_allocated(0) >= x.nbytes
    assert (iface.get_compute_capability(), iface.get_raw_stream(0)) == ("", 0)
    assert iface.is_bf16_supported() and iface.is_dtype_supported(torch.bfloat16)
    assert not iface.is_triton_capable()
    assert iface.Worker.get_device_properties().multi_processor_count >= 1


def test_the_mode_the_cuda_graphs_error_suggests_works():
    model = _mlp().to("openreg")
    x = torch.randn(5, 6)
    out = torch.compile(model, mode="max-autotune-no-cudagraphs")(x.to("openreg"))
    torch.testing.assert_close(out.cpu(), _mlp()(x), **F32)


def test_compiled_code_reads_the_current_openreg_stream_through_torch_accelerator():
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Stream]:
        return x * 2 + 1, torch.accelerator.current_stream()

    out, stream = torch.compile(f, backend=_counter(), fullgraph=True)(torch.ones(3, device="openreg"))
    assert out.tolist() == [3.0, 3.0, 3.0]
    assert (stream.device, stream.stream_id) == (torch.device("openreg", 0), 0)


def test_the_template_compiles_alone_and_the_lab_attaches_through_its_seam():
    # Note [The lab's seam in Python]: with nothing attached, Inductor gets the template's own classes
    # and its generated code names no recorder; with the lab, its subclasses of them.
    code = """
import sys, torch, openreg_lab
from openreg_lab.device import _inductor, _seam
from torch._inductor.utils import run_and_get_code
_seam.use_lab(lambda: None)  # the template as a vendor copies it: no lab
x = torch.randn(8)
out, (src,) = run_and_get_code(torch.compile(lambda t: (t * 2).exp() + 1), x.to("openreg"))
torch.testing.assert_close(out.cpu(), (x * 2).exp() + 1)
print(torch.openreg.PythonWrapperCodegen is _inductor.OpenRegWrapperCodegen,
      torch.openreg.Scheduling is _inductor.OpenRegScheduling,
      "_openreg" in src, "openreg_lab.recording" in sys.modules)
"""
    result = run_python(code)
    assert (result.returncode, result.stdout.split()) == (0, ["True", "True", "False", "False"]), (
        result.stderr
    )
    from openreg_lab.device import _inductor

    wrapper, scheduling = torch.openreg.PythonWrapperCodegen, torch.openreg.Scheduling
    assert (
        issubclass(wrapper, _inductor.OpenRegWrapperCodegen)
        and wrapper.__module__ == "openreg_lab.recording.compiled"
    )
    assert (
        issubclass(scheduling, _inductor.OpenRegScheduling) and scheduling is not _inductor.OpenRegScheduling
    )
