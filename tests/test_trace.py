"""The recorder: exact events for known ops (issue 4, points 1, 2, 3 and 5)."""

from __future__ import annotations

import inspect

import pytest
import torch

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
        y = torch.cumsum(x, 0)
    assert torch.equal(y.cpu(), torch.cumsum(x.cpu(), 0))
    fb = of_kind(t, "fallback")
    assert fb["name"].tolist() == ["aten::cumsum.out"]
    op = t.events.set_index("id").loc[int(fb["parent"].iloc[0])]
    assert op["name"] == "aten::cumsum.out" and op["kernel"] == "fallback"
    copies = of_kind(t, "copy")
    assert copies["name"].tolist() == ["D2H", "H2D"]
    assert copies["bytes"].tolist() == [1000 * FLOAT, 1000 * FLOAT]
    assert (copies["parent"] == fb["id"].iloc[0]).all()
    assert copies["src"].tolist() == ["openreg:0", "cpu"]
    assert copies["dst"].tolist() == ["cpu", "openreg:0"]
    # The functional op is a composite of its out= form (a structured op).
    assert top_level(t)["name"].tolist() == ["aten::cumsum"]
    assert top_level(t)["kernel"].tolist() == ["composite"]


def test_fallbacks_table_splits_time_and_bytes():
    x = torch.randn(1000, device="openreg")
    with openreg_lab.trace(stack=True) as t:
        torch.cumsum(x, 0)
        line = inspect.currentframe().f_lineno - 1
    fb = t.fallbacks()
    row = fb.set_index("name").loc["aten::cumsum.out"]
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
        torch.cumsum(x, 0)
    s = t.summary().set_index("name")
    assert s.loc["aten::add.Tensor", "calls"] == 3
    assert s.loc["aten::add.Tensor", "native"] == 3
    assert s.loc["aten::cumsum.out", "fallback"] == 1
    assert s.loc["aten::cumsum.out", "bytes_copied"] == 8000
    assert s.loc["aten::cumsum", "composite"] == 1
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
