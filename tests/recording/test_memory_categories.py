"""The memory categories (Note [Memory categories]): on the tutorials' models, Hugging Face GPT-2 and
a small CNN, what was live at the peak sums to the allocator's peak and at least 95% of it has a
category other than unknown; parameters, gradients and optimizer state are exactly the bytes of
those tensors, and activations exactly the blocks autograd saved."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import openreg_lab
from openreg_lab.examples import train_lm
from openreg_lab.examples.models import mlp, transformer_block


def _block(t: torch.Tensor) -> int:
    return -(-t.untyped_storage().nbytes() // 512) * 512


def _loop(
    model: nn.Module, batch: Callable[[], tuple], loss_fn: Callable, opt: str = "adamw"
) -> Callable[[], None]:
    model = model.to("openreg")
    if opt == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    def run() -> None:
        for _ in range(2):
            x, y = (v.to("openreg") for v in batch())
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


def _lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def _gpt2() -> Callable[[], None]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, loss_type="ForCausalLM",
    )  # fmt: skip
    model = GPT2LMHeadModel(config).to("openreg")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 64, (4, 16)).to("openreg")

    def run() -> None:
        for _ in range(2):
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    return run


def _tiny_gpt() -> Callable[[], None]:
    def run() -> None:  # the tutorial's own loop: model, AdamW and bf16 autocast made inside
        with contextlib.redirect_stdout(io.StringIO()):
            train_lm.train(steps=2, batch=4, seq=16)

    return run


CASES: dict[str, Callable[[], Callable[[], None]]] = {
    "mlp": lambda: _loop(mlp(), lambda: (torch.randn(32, 64), torch.randint(0, 10, (32,))), F.nll_loss),
    "transformer_block": lambda: _loop(
        transformer_block(),
        lambda: (torch.randint(0, 100, (4, 16)), torch.randint(0, 100, (4, 16))),
        _lm_loss,
    ),
    "tiny_gpt": _tiny_gpt,
    "gpt2": _gpt2,
    "cnn": lambda: _loop(
        _cnn(), lambda: (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))), F.cross_entropy, opt="sgd"
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_peak_is_the_allocators_and_at_least_95_percent_of_it_has_a_category(name):
    if name == "gpt2" and importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers (the test extra) is not installed")
    torch.manual_seed(0)
    run = CASES[name]()
    torch.openreg.reset_peak_memory_stats()
    with openreg_lab.trace(stack=True) as t:
        run()
    m = t.memory()
    assert m.complete, m.problems
    peak = m.peak("openreg:0")
    live = int(peak["block_bytes"].sum())
    assert live == torch.openreg.max_memory_allocated() == int(m.peaks()["peak_bytes"].iloc[0])
    by = peak.groupby("category")["block_bytes"].sum()
    assert by.get("unknown", 0) <= 0.05 * live, by.to_dict()
    for category in ("parameter", "gradient", "optimizer_state"):
        assert by.get(category, 0) > 0, (category, by.to_dict())
    assert "activation" in set(m.allocations()["category"])


def _saved_storages(root: torch.autograd.graph.Node) -> set[int]:
    """The storages autograd saved for backward, walking the graph from ``root``."""
    seen, todo, out = set(), [root], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                value = getattr(node, attr)
                for v in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(v, torch.Tensor) and v.device.type == "openreg":
                        out.add(v.untyped_storage().data_ptr())
        todo.extend(n for n, _ in node.next_functions)
    return out


def test_parameters_gradients_state_and_activations_are_exactly_those_tensors():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10), nn.LogSoftmax(-1)).to("openreg")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with openreg_lab.trace() as t:
        for _ in range(2):
            x = torch.randn(32, 64).to("openreg")
            y = torch.randint(0, 10, (32,)).to("openreg")
            out = model(x)
            loss = F.nll_loss(out, y)
            saved = _saved_storages(loss.grad_fn)
            openreg_lab.mark("backward begins")
            del out  # nothing but autograd holds the activations now
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    m = t.memory()
    at_mark = t.events.loc[t.events["name"] == "backward begins", "start_ns"].iloc[-1]
    live = m.live(int(at_mark), "openreg:0")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    inputs = {x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr()}
    activations = set(live.loc[live["category"] == "activation", "address"])
    # The first Linear's output (GELU saves it), GELU's (the second Linear saves it), LogSoftmax's
    # and the loss's total weight.
    assert activations == saved - params - inputs and len(activations) == 4
    at_end = m.live(10**15, "openreg:0")
    by = at_end.groupby("category")["block_bytes"].sum()
    assert by["parameter"] == sum(_block(p) for p in model.parameters())
    assert by["gradient"] == sum(_block(p.grad) for p in model.parameters())
    state = [v for s in opt.state.values() for v in s.values() if v.device.type == "openreg"]
    assert by["optimizer_state"] == sum(_block(v) for v in state) == 2 * by["parameter"]
    assert by["input"] == _block(x) + _block(y)


def test_a_trace_holds_the_parameters_it_saw_weakly_and_notes_each_steps_gradients():
    """Note [Gradients seen at each step]: a model deleted inside the trace is freed there, and the
    gradients of every step before were noted at that step's end."""
    import gc
    import weakref

    from openreg_lab.recording import observations

    model = nn.Linear(8, 4).to("openreg")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 8).to("openreg")
    with openreg_lab.trace() as t:
        grads = []
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            model(x).sum().backward()
            grads.append({p.grad.untyped_storage().data_ptr() for p in model.parameters()})
            opt.step()
        watch = observations._watches[-1]
        assert len(watch.params) == 2  # weight and bias, once
        weight = weakref.ref(model.weight)
        del model, opt
        gc.collect()
        assert weight() is None  # the trace kept no parameter alive
        assert watch.params.grad_addresses() == []
    seen = t._seen()
    gradient = seen.address[seen.category == observations.GRADIENT]
    assert set(gradient) == grads[0] | grads[1] and len(gradient) == 4  # two a step; none after


def test_a_steps_end_notes_gradients_and_new_optimizer_state_in_cpp_at_that_steps_time():
    """Note [Gradients seen at each step]: the recorder's step call sweeps each open trace in C++
    (no Python listener runs), noting the gradients, and an optimizer's state each time it has
    gained entries: AdamW makes a parameter's state at the first step that parameter has a
    gradient, here the second for ``late``."""
    import numpy as np

    from openreg_lab.recording import observations, steps

    early = nn.Parameter(torch.randn(4).to("openreg"))
    late = nn.Parameter(torch.randn(4).to("openreg"))
    opt = torch.optim.AdamW([early, late], lr=0.1)
    with openreg_lab.trace(host=False) as t:
        assert steps._listeners == []  # nothing of observations runs in Python at a step's end
        ends, grads = [], []
        for used in ([early], [early, late]):
            opt.zero_grad(set_to_none=True)
            sum(p.sum() for p in used).backward()
            grads.append({p.grad.untyped_storage().data_ptr() for p in used})
            opt.step()
            ends.append(int(openreg_lab._C._trace_now_ns()))
        state = {p: {v.untyped_storage().data_ptr() for v in opt.state[p].values() if v.is_openreg}
                 for p in (early, late)}  # fmt: skip
    seen = t._seen()
    by_time = np.searchsorted(np.array(ends), seen.time)  # 0, 1: noted at that step's end; 2: at close

    def noted(category: int, moment: int) -> set[int]:
        return set(seen.address[(seen.category == category) & (by_time == moment)])

    assert [noted(observations.GRADIENT, i) for i in range(3)] == [*grads, grads[1]]  # and at close
    assert [noted(observations.OPTIMIZER_STATE, i) for i in range(3)] == [
        state[early],
        state[late] | state[early],  # the state gained entries: all of it is noted again
        set(),
    ]
    assert len(state[early]) == len(state[late]) == 2  # exp_avg and exp_avg_sq (step is on the CPU)


def test_the_blocks_a_trace_opens_with_are_every_devices_blocks():
    import numpy as np

    keep = [torch.empty(100, device="openreg:0"), torch.empty(3000, device="openreg:1")]
    raw = np.frombuffer(openreg_lab._C._memory_block_rows(), dtype=np.int64).reshape(-1, 5)
    rows = [(d, a, s, r, bool(al)) for d, a, s, r, al in raw.tolist()]
    expected = [
        (d, *b) for d in range(torch.openreg.device_count()) for b in openreg_lab._C._memory_blocks(d)
    ]
    assert rows == expected and {0, 1} <= {d for d, *_ in rows}
    del keep


def test_a_storage_is_noted_by_the_address_python_gives_and_only_a_devices():
    """The one rule for the storages a trace notes (inputs, buffers, optimizer state, gradients):
    an openreg tensor's storage address, as ``untyped_storage().data_ptr()`` gives it, a view's
    its base's; CPU tensors and other objects skipped, in order."""
    from openreg_lab import _C

    a = torch.arange(6.0, device="openreg")
    b = torch.ones(2, 2, device="openreg")
    got = _C._storage_addresses([a, torch.ones(3), a[2:], "a", None, b.t(), 7])
    assert got == [a.untyped_storage().data_ptr()] * 2 + [b.untyped_storage().data_ptr()]
    assert _C._storage_addresses(t for t in (b, a)) == got[2:0:-1]
