"""The recorder: exact events for known ops."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import openreg_lab

FLOAT = 4


def top_level(t: openreg_lab.Trace):
    ev = t.events
    return ev[(ev["kind"] == "op") & (ev["parent"] == -1)]


def of_kind(t: openreg_lab.Trace, kind: str):
    return t.events[t.events["kind"] == kind]


def test_native_add_is_one_native_op_and_no_copy():
    x, y = torch.randn(1000, device="openreg"), torch.randn(1000, device="openreg")
    with openreg_lab.trace() as t:
        x + y
    ops = top_level(t)
    assert ops["name"].tolist() == ["aten::add.Tensor"]
    add = ops.iloc[0]
    assert add["kernel"] == "native"
    assert add["dispatch"] == "AutogradPrivateUse1 > PrivateUse1"
    assert add["device"] == "openreg:0"
    assert add["dur_ns"] > 0
    assert len(of_kind(t, "copy")) == 0
    assert len(of_kind(t, "fallback")) == 0
    allocs = of_kind(t, "alloc")
    assert allocs["bytes"].tolist() == [1000 * FLOAT]  # the result, nothing else
    # The kernel's own allocation is a child op of add.
    child_ops = t.events[(t.events["kind"] == "op") & (t.events["parent"] == add["id"])]
    assert child_ops["name"].tolist() == ["aten::empty.memory_format"]


def test_fallback_op_moves_its_input_out_and_its_result_back():
    openreg_lab.set_fallback_policy("allow")
    x = torch.randn(1000, device="openreg")
    with openreg_lab.trace() as t:
        y = torch.logcumsumexp(x, 0)
    assert torch.equal(y.cpu(), torch.logcumsumexp(x.cpu(), 0))
    fb = of_kind(t, "fallback")
    assert fb["name"].tolist() == ["aten::_logcumsumexp"]
    op = t.events.set_index("id").loc[int(fb["parent"].iloc[0])]
    assert op["name"] == "aten::_logcumsumexp" and op["kernel"] == "fallback"
    copies = of_kind(t, "copy")
    assert copies["name"].tolist() == ["D2H", "H2D"]
    assert copies["bytes"].tolist() == [1000 * FLOAT, 1000 * FLOAT]
    assert (copies["parent"] == fb["id"].iloc[0]).all()
    assert copies["src"].tolist() == ["openreg:0", "cpu"]
    assert copies["dst"].tolist() == ["cpu", "openreg:0"]
    # The functional op is a composite of its out= form (a structured op).
    assert top_level(t)["name"].tolist() == ["aten::logcumsumexp"]
    assert top_level(t)["kernel"].tolist() == ["composite"]


def test_fallbacks_table_splits_time_and_bytes():
    x = torch.randn(1000, device="openreg")
    with openreg_lab.trace(stack=True) as t:
        torch.logcumsumexp(x, 0)
        line = inspect.currentframe().f_lineno - 1
    fb = t.fallbacks()
    row = fb.set_index("name").loc["aten::_logcumsumexp"]
    assert row["calls"] == 1
    assert row["bytes_to_cpu"] == 4000 and row["bytes_back"] == 4000
    assert row["copy_to_cpu_ns"] + row["cpu_ns"] + row["copy_back_ns"] == row["total_ns"]
    assert row["cpu_ns"] > 0
    assert row["sources"] == [f"{__file__}:{line}"]


def test_composite_op_shows_its_decomposition():
    x = torch.randn(4, 8, device="openreg")
    w = torch.randn(3, 8, device="openreg")
    with openreg_lab.trace() as t:
        torch.nn.functional.linear(x, w)
    ops = top_level(t)
    assert ops["name"].tolist() == ["aten::linear"]
    assert ops.iloc[0]["kernel"] == "composite"
    assert ops.iloc[0]["dispatch"] == "AutogradPrivateUse1"
    children = t.events[t.events["parent"] == ops.iloc[0]["id"]]
    assert children["name"].tolist() == ["aten::t", "aten::matmul"]  # linear without bias


def test_copies_in_every_direction_with_bytes_and_devices():
    cpu = torch.randn(256)
    with openreg_lab.trace() as t:
        a = cpu.to("openreg")  # H2D
        b = a.to("openreg:1")  # D2D
        b.cpu()  # D2H
    c = t.copies()
    assert c["direction"].tolist() == ["H2D", "D2D", "D2H"]
    assert c["bytes"].tolist() == [1024, 1024, 1024]
    assert c["src"].tolist() == ["cpu", "openreg:0", "openreg:1"]
    assert c["dst"].tolist() == ["openreg:0", "openreg:1", "cpu"]
    assert c["op"].tolist() == ["aten::_copy_from"] * 3
    assert not c["in_fallback"].any()


def test_alloc_and_free_keep_a_running_total_per_device():
    torch.openreg.empty_cache()
    base = torch.openreg.memory_allocated(0)
    with openreg_lab.trace() as t:
        a = torch.empty(1000, device="openreg")
        b = torch.empty(100, device="openreg")
        del a
        del b
    mem = t.events[t.events["kind"].isin(["alloc", "free"])]
    assert mem["kind"].tolist() == ["alloc", "alloc", "free", "free"]
    assert mem["bytes"].tolist() == [4000, 400, 4000, 400]
    # Blocks are rounded to 512 bytes: 4000 -> 4096, 400 -> 512.
    assert (mem["total"] - base).tolist() == [4096, 4608, 512, 0]
    assert (mem["device"] == "openreg:0").all()


def test_record_shapes_gives_shapes_and_dtypes_of_tensor_arguments():
    x = torch.randn(2, 3, device="openreg")
    y = torch.randn(3, device="openreg", dtype=torch.float64)
    with openreg_lab.trace(record_shapes=True) as t:
        torch.add(x, y)
    add = top_level(t).iloc[0]
    assert add["shapes"] == [[2, 3], [3]]
    assert add["dtypes"] == ["float32", "float64"]
    with openreg_lab.trace() as t2:
        torch.add(x, y)
    assert top_level(t2).iloc[0]["shapes"] is None


def test_stack_points_at_the_calling_line_for_nested_ops_too():
    x = torch.randn(8, device="openreg")
    with openreg_lab.trace(stack=True) as t:
        torch.nn.functional.gelu(x)
        line = inspect.currentframe().f_lineno - 1
    expected = f"{__file__}:{line}"
    # Ops and what happens inside them; the result's free comes after the call returned.
    inside = t.events[t.events["kind"] != "free"]
    assert len(inside) >= 3
    assert set(inside["source"]) == {expected}


def test_backward_ops_link_to_their_forward_op():
    w = torch.randn(4, 4, device="openreg", requires_grad=True)
    x = torch.randn(2, 4, device="openreg")
    with openreg_lab.trace() as t:
        y = torch.mm(x, w)
        y.sum().backward()
    ev = t.events
    mm = ev[(ev["kind"] == "op") & (ev["name"] == "aten::mm") & (ev["parent"] == -1)].iloc[0]
    nodes = ev[ev["kind"] == "backward"]
    assert set(nodes["name"]) == {"MmBackward0", "SumBackward0", "torch::autograd::AccumulateGrad"}
    mm_node = nodes[nodes["name"] == "MmBackward0"].iloc[0]
    assert mm_node["seq"] == mm["seq"] and mm_node["forward"] == mm["id"]
    grad_ops = ev[(ev["parent"] == mm_node["id"]) & (ev["kind"] == "op")]
    assert "aten::mm" in set(grad_ops["name"])
    assert (grad_ops["forward"] == mm["id"]).all()
    # The backward ran on the autograd engine's thread.
    assert mm_node["thread"] != mm["thread"]


def _encloses(outer, inner) -> bool:
    return outer["start_ns"] <= inner["start_ns"] and (
        inner["start_ns"] + inner["dur_ns"] <= outer["start_ns"] + outer["dur_ns"]
    )


def assert_well_nested(t: openreg_lab.Trace) -> None:
    """Every op, backward node, fallback and copy ended, on its parent's thread, inside its parent."""
    ev = t.events
    timed = ev[ev["kind"].isin(["op", "backward", "fallback", "copy"])]
    assert (timed["dur_ns"] >= 0).all()
    for e in timed[timed["parent"] >= 0].itertuples():
        parent = ev.iloc[e.parent]
        assert parent["thread"] == e.thread, e
        assert _encloses(parent, ev.iloc[e.id]), (parent["name"], e.name)


def backward_names(t: openreg_lab.Trace) -> list[str]:
    return sorted(t.events.loc[t.events["kind"] == "backward", "name"])


LINEAR_NODES = sorted(
    ["SumBackward0", "AddmmBackward0", "TBackward0"] + ["torch::autograd::AccumulateGrad"] * 2
)


def test_a_nodes_post_hooks_run_inside_its_backward_event():
    # DDP all-reduces a bucket from a post hook of an AccumulateGrad node
    # (Note [A backward node ends with its hooks]); a post-accumulate-grad hook runs inside the node.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).openreg()
    x = torch.randn(2, 4, device="openreg")

    def node_hook(grad_inputs, grad_outputs):
        torch.neg(grad_outputs[0])

    def tensor_hook(p):
        torch.exp(p.grad)

    # a leaf's AccumulateGrad lives while someone holds it (DDP keeps them too)
    accumulate = model.weight.view_as(model.weight).grad_fn.next_functions[0][0]
    accumulate.register_hook(node_hook)
    model.bias.register_post_accumulate_grad_hook(tensor_hook)
    with openreg_lab.trace() as t:
        model(x).sum().backward()
    ev = t.events
    assert backward_names(t) == LINEAR_NODES  # hooks add no node
    for name in ("aten::neg", "aten::exp"):
        (op,) = ev[(ev["kind"] == "op") & (ev["name"] == name)].itertuples()
        assert op.parent >= 0, name
        node = ev.iloc[op.parent]
        assert node["kind"] == "backward" and node["name"] == "torch::autograd::AccumulateGrad"
        assert _encloses(node, ev.iloc[op.id]) and node["dur_ns"] > op.dur_ns
    # The engine's own hand-off after AddmmBackward0 (the bias gradient summed back to its shape)
    # belongs to that node too: no op of the backward pass is outside a node.
    addmm = ev[ev["name"] == "AddmmBackward0"].iloc[0]
    engine_thread = ev["thread"] == addmm["thread"]
    assert (ev.loc[engine_thread & (ev["kind"] == "op"), "parent"] >= 0).all()
    assert_well_nested(t)


def test_a_hook_of_a_node_on_the_calling_thread_runs_inside_it():
    c = torch.randn(3, requires_grad=True)  # a CPU leaf: its AccumulateGrad runs on the calling thread
    w = torch.randn(3, device="openreg", requires_grad=True)

    def node_hook(grad_inputs, grad_outputs):
        torch.neg(w.detach())

    accumulate = c.view_as(c).grad_fn.next_functions[0][0]  # kept alive, as DDP does
    accumulate.register_hook(node_hook)
    with openreg_lab.trace() as t:
        (c.to("openreg") * w).sum().backward()
    ev = t.events
    (op,) = ev[(ev["kind"] == "op") & (ev["name"] == "aten::neg")].itertuples()
    assert op.parent >= 0
    node = ev.iloc[op.parent]
    assert node["name"] == "torch::autograd::AccumulateGrad" and _encloses(node, ev.iloc[op.id])
    calling = ev[ev["name"] == "aten::mul.Tensor"].iloc[0]["thread"]  # the forward ran here
    assert op.thread == calling
    assert ev[ev["name"] == "MulBackward0"].iloc[0]["thread"] != calling  # openreg's device thread
    assert_well_nested(t)


def test_backward_events_are_one_per_node_that_ran():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).openreg()
    x = torch.randn(2, 4, device="openreg")
    with openreg_lab.trace() as t:
        model(x).sum().backward()
    assert backward_names(t) == LINEAR_NODES
    assert_well_nested(t)
    # torch.autograd.grad(inputs=) captures w1's gradient without running its AccumulateGrad
    w1 = torch.randn(3, device="openreg", requires_grad=True)
    w2 = torch.randn(3, device="openreg", requires_grad=True)
    with openreg_lab.trace() as t:
        torch.autograd.grad((w1 * w2).sum(), [w1])
    assert backward_names(t) == ["MulBackward0", "SumBackward0"]
    assert_well_nested(t)


def test_reentrant_backward_nests_inside_the_node_that_ran_it():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 3).openreg()
    x = torch.randn(2, 3, device="openreg", requires_grad=True)
    with openreg_lab.trace() as t:
        checkpoint(lambda a: torch.relu(model(a)), x, use_reentrant=True).sum().backward()
    ev = t.events
    outer = ev[ev["name"] == "CheckpointFunctionBackward"].iloc[0]
    inner = ev[(ev["kind"] == "backward") & (ev["parent"] == outer["id"])]
    assert sorted(inner["name"]) == sorted(
        ["ReluBackward0", "AddmmBackward0", "TBackward0"] + ["torch::autograd::AccumulateGrad"] * 3
    )
    assert_well_nested(t)
    # A post hook that runs a backward of its own: that backward's nodes are the hook's node's children.
    y = torch.randn(3, device="openreg", requires_grad=True)

    def grad_of_y(grad_inputs, grad_outputs):
        with torch.enable_grad():  # a backward runs with grad mode off
            torch.autograd.grad((y * 3).sum(), [y])

    w = torch.randn(3, device="openreg", requires_grad=True)
    node = w.view_as(w).grad_fn.next_functions[0][0]
    node.register_hook(grad_of_y)
    with openreg_lab.trace() as t:
        (w * 2).sum().backward()
    ev = t.events
    nodes = ev[ev["kind"] == "backward"]
    accumulate = nodes[nodes["name"] == "torch::autograd::AccumulateGrad"].iloc[0]
    assert sorted(nodes.loc[nodes["parent"] == accumulate["id"], "name"]) == ["MulBackward0", "SumBackward0"]
    assert len(nodes) == 5  # SumBackward0, MulBackward0, AccumulateGrad, and the hook's two
    assert_well_nested(t)


def test_a_trace_that_ends_inside_a_hook_leaves_its_node_running():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).openreg()
    x = torch.randn(2, 4, device="openreg")
    traces = [openreg_lab.trace()]

    def swap(grad_inputs, grad_outputs):  # ends the trace and opens the next, on the engine's thread
        traces[0].__exit__(None, None, None)
        traces.append(openreg_lab.trace().__enter__())
        torch.neg(grad_outputs[0])

    accumulate = model.weight.view_as(model.weight).grad_fn.next_functions[0][0]
    hook = accumulate.register_hook(swap)
    traces[0].__enter__()
    model(x).sum().backward()
    traces[1].__exit__(None, None, None)
    hook.remove()
    first = traces[0].events
    nodes = first[first["kind"] == "backward"]
    assert backward_names(traces[0]) == LINEAR_NODES
    # the weight's AccumulateGrad was running when the trace ended: -1, as any event then
    assert nodes["dur_ns"].tolist().count(-1) == 1
    assert nodes.loc[nodes["dur_ns"] < 0, "name"].tolist() == ["torch::autograd::AccumulateGrad"]
    second = traces[1].events  # the hook's op, at top level (its node began before this trace)
    assert second.loc[second["kind"] == "op", "name"].tolist() == ["aten::neg", "aten::empty.memory_format"]
    assert second.loc[second["name"] == "aten::neg", "parent"].tolist() == [-1]
    # The next trace is whole again.
    with openreg_lab.trace() as t:
        model(x).sum().backward()
    assert backward_names(t) == LINEAR_NODES
    assert_well_nested(t)


def test_autocast_casts_are_events_with_cache_hits():
    a = torch.randn(8, 8, device="openreg")
    w = torch.randn(8, 8, device="openreg", requires_grad=True)  # a leaf: the weight cache keeps it
    with openreg_lab.trace() as t, torch.autocast("openreg", dtype=torch.bfloat16):
        torch.mm(a, w)
        torch.mm(a, w)
    casts = t.casts()
    assert casts["op"].tolist() == ["aten::mm"] * 4
    assert casts["argument"].tolist() == ["self", "mat2", "self", "mat2"]
    assert set(casts["from_dtype"]) == {"float32"} and set(casts["to_dtype"]) == {"bfloat16"}
    assert casts["bytes"].tolist() == [128] * 4
    assert casts["cache_hit"].tolist() == [False, False, False, True]
    mm = top_level(t)
    assert mm["name"].tolist() == ["aten::mm", "aten::mm"]
    assert set(mm["dispatch"]) == {"AutocastPrivateUse1 > AutogradPrivateUse1 > PrivateUse1"}
    assert set(mm["kernel"]) == {"native"}


def test_cpu_only_work_is_not_recorded():
    with openreg_lab.trace() as t:
        torch.randn(10).sum()
    assert len(t) == 0
    assert t.summary().empty and t.fallbacks().empty and t.copies().empty and t.casts().empty


def test_summary_counts_calls_kernels_and_bytes():
    x = torch.randn(1000, device="openreg")
    with openreg_lab.trace() as t:
        for _ in range(3):
            x + x
        torch.logcumsumexp(x, 0)
    s = t.summary().set_index("name")
    assert s.loc["aten::add.Tensor", "calls"] == 3
    assert s.loc["aten::add.Tensor", "native"] == 3
    assert s.loc["aten::_logcumsumexp", "fallback"] == 1
    assert s.loc["aten::_logcumsumexp", "bytes_copied"] == 8000
    assert s.loc["aten::logcumsumexp", "composite"] == 1
    assert (s["self_ns"] <= s["total_ns"]).all()


def test_columns_are_the_documented_ones():
    with openreg_lab.trace() as t:
        torch.ones(3, device="openreg")
    required = ["id", "parent", "kind", "name", "kernel", "dispatch", "device", "thread", "start_ns",
                "dur_ns", "bytes", "src", "dst", "from_dtype", "to_dtype", "shapes", "dtypes",
                "source"]  # fmt: skip
    assert list(t.events.columns[: len(required)]) == required
    assert t.events["id"].tolist() == list(range(len(t)))
    assert (t.events["start_ns"].diff().dropna() >= 0).all()


def test_reading_a_running_trace_is_a_clear_error():
    with openreg_lab.trace() as t:
        with pytest.raises(RuntimeError, match="still recording"):
            t.events  # noqa: B018
    with pytest.raises(RuntimeError, match="already been used"), t:
        pass


def test_a_trace_is_true_while_recording_and_after():
    # bool() fell back to __len__, which raises while the trace records: `if t:` in the block raised.
    t = openreg_lab.trace()
    assert bool(t)  # not started
    with t:
        torch.ones(3, device="openreg")
        assert bool(t) and (t or None) is t
        with pytest.raises(RuntimeError, match="still recording"):
            len(t)
    assert bool(t) and len(t) == len(t.events) > 0
    with openreg_lab.trace() as empty:
        pass
    assert bool(empty) and len(empty) == 0  # a handle, not a container tested for emptiness


def test_bad_capacity_is_rejected():
    with pytest.raises(ValueError, match="positive number of events"):
        openreg_lab.trace(capacity=0)


def test_kernels_registered_at_runtime_are_seen():
    # Note [Stale dispatch tables]: a kernel added after the recorder first met the op.
    lib = torch.library.Library("openreg_trace_stale", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    x = torch.ones(4, device="openreg")

    def run() -> str:
        with openreg_lab.trace() as t:
            torch.ops.openreg_trace_stale.twice(x)
        return top_level(t).iloc[0]["kernel"]

    assert run() == "fallback"
    on_device = torch.library.Library("openreg_trace_stale", "IMPL")
    on_device.impl("twice", lambda x: x + x, "PrivateUse1")
    assert run() == "native"
    on_device._destroy()
    assert run() == "fallback"


@pytest.mark.parametrize(
    ("rank", "world", "expected"),
    [("1", "4", (1, 4)), ("x", "4", (None, None)), ("1", None, (None, None)), (None, None, (None, None))],
)
def test_a_trace_outside_a_group_takes_its_rank_from_the_launcher(monkeypatch, rank, world, expected):
    """Note [A run id for every trace]: RANK and WORLD_SIZE, both integers, or no rank at all."""
    for name, value in (("RANK", rank), ("WORLD_SIZE", world)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with openreg_lab.trace(host=False) as t:
        pass
    assert (t.job.rank, t.job.world_size) == expected
