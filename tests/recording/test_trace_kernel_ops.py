"""``trace(ops="kernels")``: op events from openreg's own kernels and CPU fallback, with no
RecordFunction callback (Note [Op events from openreg's kernels] in csrc/trace/KernelEvents.h).

The events must be exactly those of the default trace whose kernel openreg ran (native, generic or
fallback), in the same order, with the same names, shapes, dtypes and devices."""

from __future__ import annotations

import copy
import html
import json
import threading
import zipfile

import numpy as np
import pytest
import torch

import openreg_lab
from openreg_lab import _C
from openreg_lab.recording.verdict import KERNEL_OPS_NOTE
from openreg_lab.views.dashboard import dashboard

RAN = ("native", "generic", "fallback")  # kernels openreg ran: what ops="kernels" records


def _ops(t: openreg_lab.Trace):
    ev = t.events
    return ev[ev["kind"] == "op"]


def _signature(ops) -> list[tuple]:
    return [
        (r.thread, r.name, r.kernel, json.dumps(r.shapes), json.dumps(r.dtypes), r.device)
        for r in ops.itertuples()
    ]


def _both(run) -> tuple[openreg_lab.Trace, openreg_lab.Trace]:
    """``run(mode)`` traced once with every op and once with ops="kernels"."""
    traces = []
    for mode in ("all", "kernels"):
        with openreg_lab.trace(record_shapes=True, ops=mode) as t:
            run(mode)
        traces.append(t)
    return traces[0], traces[1]


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(3):
        layers += [torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)]
    return torch.nn.Sequential(*layers, torch.nn.Linear(16, 4))


def test_a_training_step_records_exactly_the_kernel_ops_of_the_default_trace():
    base = _mlp().openreg()
    x = torch.randn(8, 16).openreg()
    y = torch.randint(0, 4, (8,)).openreg()
    models = {mode: copy.deepcopy(base) for mode in ("all", "kernels")}
    opts = {m: torch.optim.AdamW(models[m].parameters(), lr=1e-3, foreach=True) for m in models}

    def step(mode: str) -> None:
        opts[mode].zero_grad()
        torch.nn.functional.cross_entropy(models[mode](x), y).backward()
        opts[mode].step()

    full, kernels = _both(step)
    expected = _ops(full)[_ops(full)["kernel"].isin(RAN)]
    assert len(expected) > 100  # forward, backward and the optimizer's foreach ops
    assert _signature(_ops(kernels)) == _signature(expected)
    # What the default mode has and this one does not: composites and autograd nodes.
    assert (full.events["kind"] == "backward").sum() > 10
    assert (kernels.events["kind"] == "backward").sum() == 0
    assert set(_ops(full)["kernel"]) - set(RAN) == {"composite"}
    assert set(_ops(kernels)["kernel"]) <= set(RAN)
    # Copies, allocations and frees are recorded the same in both.
    for kind in ("alloc", "free", "copy"):
        assert (kernels.events["kind"] == kind).sum() == (full.events["kind"] == kind).sum(), kind
    for a, b in zip(models["all"].parameters(), models["kernels"].parameters(), strict=True):
        assert torch.equal(a.cpu(), b.cpu())


def test_fallbacks_generic_ops_and_autocast_match_the_default_trace():
    x = torch.randn(4, 6).openreg()
    z = torch.ones(3, dtype=torch.complex64).openreg()
    w = torch.randn(6, 5).openreg()

    def work(mode: str) -> None:
        torch.special.erfcx(x)  # no openreg kernel: the boxed fallback
        z + z  # a native kernel that hands complex inputs to the fallback
        with torch.autocast("openreg", dtype=torch.bfloat16):
            (x @ w).float().sum()

    full, kernels = _both(work)
    expected = _ops(full)[_ops(full)["kernel"].isin(RAN)]
    assert _signature(_ops(kernels)) == _signature(expected)
    ops = _ops(kernels)
    # One op event per call, even when a native kernel hands its call to the fallback.
    assert ops["name"].tolist().count("aten::add.Tensor") == 1
    add = ops[ops["name"] == "aten::add.Tensor"].iloc[0]
    assert add["kernel"] == "fallback"
    fallbacks = kernels.events[kernels.events["kind"] == "fallback"]
    assert sorted(fallbacks["name"]) == ["aten::add.Tensor", "aten::special_erfcx.out"]
    assert set(fallbacks["parent"]) <= set(ops["id"])  # each inside its op's event
    casts = kernels.events[kernels.events["kind"] == "cast"]
    assert len(casts) == (full.events["kind"] == "cast").sum() == 2


def test_events_carry_the_kernels_own_dispatch_path_and_no_sequence_number():
    x = torch.ones(2, 3, device="openreg", requires_grad=True)
    with openreg_lab.trace(ops="kernels") as t:
        (x * 2).sum().backward()
        torch.empty(5, device="openreg")
    ops = _ops(t)
    assert ops["name"].tolist()[:2] == ["aten::mul.Tensor", "aten::empty.memory_format"]
    paths = dict(zip(ops["name"], ops["dispatch"], strict=False))
    assert paths["aten::mul.Tensor"] == "PrivateUse1"
    assert paths["aten::empty.memory_format"] == "BackendSelect > PrivateUse1"
    assert (ops["seq"] == -1).all()
    assert (t.events["kind"] == "backward").sum() == 0
    assert "aten::sum" in set(ops["name"])  # composite-free: sum's own kernel


def test_kernel_events_are_resolved_when_each_trace_closes():
    # Note [Kernel events are resolved at close]: a native kernel's event holds its kernel's name
    # address and key set until its session closes; each session's events leave resolved, the
    # inner trace's and the outer one's alike, with nothing of the raw form left in bytes or seq.
    x = torch.ones(2, 3, device="openreg")
    with openreg_lab.trace(ops="kernels", record_shapes=True, host=False) as outer:
        x.sum()
        with openreg_lab.trace(ops="kernels", record_shapes=True, host=False) as inner:
            x + x
            torch.special.erfcx(x)  # the boxed fallback: resolved when recorded
            x * 3
    for t in (outer, inner):
        ops = _ops(t)
        assert (ops["bytes"] == 0).all() and (ops["seq"] == -1).all()
        assert not ops["cache_hit"].any()
        assert ops["name"].str.startswith("aten::").all()
        assert set(ops["kernel"]) == {"native", "fallback"}
    mine = ["name", "kernel", "dispatch", "shapes"]
    tail = _ops(outer)[mine].iloc[-len(_ops(inner)) :].reset_index(drop=True)
    assert tail.astype(str).equals(_ops(inner)[mine].reset_index(drop=True).astype(str))
    assert _ops(inner)["name"].tolist()[0] == "aten::add.Tensor"
    assert _ops(outer)["name"].tolist()[0] == "aten::sum"


def test_a_hooks_ops_are_recorded_where_they_run():
    # No backward events here, so a node's post hook is not inside one (Note [A backward node ends
    # with its hooks]): its op is at the top of the engine thread's events, as the node's own ops.
    w = torch.ones(3, device="openreg", requires_grad=True)
    accumulate = w.view_as(w).grad_fn.next_functions[0][0]  # kept alive for its hook

    def hook(grad_inputs, grad_outputs):
        torch.neg(grad_outputs[0])

    accumulate.register_hook(hook)
    with openreg_lab.trace(ops="kernels") as t:
        (w * 2).sum().backward()
    ops = _ops(t)
    assert ops.loc[ops["name"] == "aten::neg", "parent"].tolist() == [-1]
    assert (t.events["kind"] == "backward").sum() == 0


def test_no_record_function_callback_is_installed_unless_a_trace_wants_every_op():
    x = torch.ones(3, device="openreg")
    assert not _C._trace_op_observer_installed()
    with openreg_lab.trace(ops="kernels") as outer:
        assert not _C._trace_op_observer_installed()
        for _ in range(3):
            x.add_(1)
        with openreg_lab.trace() as inner:
            assert _C._trace_op_observer_installed()
            x.add_(1)
            torch.nn.functional.linear(x, torch.ones(2, 3, device="openreg"))
        assert not _C._trace_op_observer_installed()
        for _ in range(3):
            x.add_(1)
    assert not _C._trace_op_observer_installed()
    # Each call recorded once: by the kernels outside the inner trace, by RecordFunction inside.
    assert _ops(outer)["name"].tolist().count("aten::add_.Tensor") == 7
    inner_names = _ops(inner)["name"].tolist()
    assert inner_names.count("aten::add_.Tensor") == 1
    assert inner_names.count("aten::linear") == 1  # a composite: RecordFunction recorded it
    assert _ops(outer)["name"].tolist().count("aten::linear") == 1


def test_other_threads_are_recorded_and_internal_calls_are_not():
    x = torch.ones(4, device="openreg")
    with openreg_lab.trace(ops="kernels", record_shapes=True) as t:
        worker = threading.Thread(target=lambda: [x.mul(2) for _ in range(5)])
        worker.start()
        worker.join()
        torch.special.erfcx(x)
    ops = _ops(t)
    assert ops["thread"].nunique() == 2
    assert ops["name"].tolist().count("aten::mul.Tensor") == 5
    # The fallback's own CPU calls and copies are not ops (Note [The backend's own dispatcher calls]).
    erfcx = ops[ops["name"] == "aten::special_erfcx.out"]
    assert len(erfcx) == 1
    children = t.events[t.events["parent"] == int(erfcx["id"].iloc[0])]
    assert (children["kind"] == "op").sum() == 0


def test_stack_gives_top_level_kernel_events_the_users_line():
    x = torch.ones(4, device="openreg")
    with openreg_lab.trace(ops="kernels", stack=True) as t:
        x.neg()  # the line below is this one + 0
    line = test_stack_gives_top_level_kernel_events_the_users_line.__code__.co_firstlineno + 3
    top = _ops(t)[_ops(t)["parent"] == -1]
    assert top["source"].iloc[0].endswith(f"test_trace_kernel_ops.py:{line}")


@pytest.mark.parametrize("bad", ["kernel", "ALL", "", None, 1])
def test_an_unknown_ops_mode_is_refused_naming_both(bad):
    with pytest.raises(ValueError, match=r"'all'.*'kernels'"):
        openreg_lab.trace(ops=bad)


def test_the_mode_survives_a_file_and_old_files_read_as_every_op(tmp_path):
    x = torch.ones(4, device="openreg")
    with openreg_lab.trace(ops="kernels") as t:
        x.neg()
    path = tmp_path / "k.trace"
    t.save(path)
    back = openreg_lab.load_trace(path)
    assert back.ops == "kernels" and len(back) == len(t)

    def rewrite(change) -> None:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        header = json.loads(bytes(arrays["header"]).decode("utf-8", "surrogatepass"))  # Note [Header text]
        change(header)
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    rewrite(lambda h: h.pop("ops"))  # written before trace(ops=...) existed
    assert openreg_lab.load_trace(path).ops == "all"
    rewrite(lambda h: h.update(ops="some"))
    with pytest.raises(ValueError, match=r"damaged.*ops is 'some'"):
        openreg_lab.load_trace(path)
    assert zipfile.is_zipfile(path)


def test_the_views_say_that_only_kernel_ops_were_recorded(tmp_path):
    x = torch.ones(4, device="openreg")
    with openreg_lab.trace(ops="kernels") as t:
        x.neg()
    board = dashboard(t)
    note = html.escape(KERNEL_OPS_NOTE)
    assert note in board.header.value
    assert note in board._repr_mimebundle_()["text/html"]
    t.to_html(tmp_path / "r.html")
    text = (tmp_path / "r.html").read_text()
    assert "openreg&#x27;s kernels only" in text and "are not recorded, and each op" in text
    with openreg_lab.trace() as every:
        x.neg()
    assert "are not recorded, and each op" not in dashboard(every).header.value


def test_a_kernel_registered_with_torch_library_is_not_openregs_but_its_ops_are_recorded():
    x = torch.tensor([1.0, float("-inf")], device="openreg")
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("signbit.out", lambda self, *, out: torch.lt(self, 0, out=out), "PrivateUse1")
    try:
        full, kernels = _both(lambda mode: torch.signbit(x))
    finally:
        lib._destroy()
    assert _ops(full).set_index("name").loc["aten::signbit.out", "kernel"] == "native"
    names = _ops(kernels)["name"].tolist()
    assert "aten::signbit.out" not in names and "aten::lt.Scalar_out" in names
    with openreg_lab.trace(ops="kernels") as after:  # the fallback is back once the library is gone
        torch.signbit(x)
    assert after.fallbacks()["name"].tolist() == ["aten::signbit.out"]
