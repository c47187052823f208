"""What the allocator did, event by event (Note [Memory events]): each alloc, free, segment and
out-of-memory event names its block's address; the allocator's blocks now; the out-of-memory
observer; module spans (Note [Module spans])."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import openreg_lab
from openreg_lab import _C
from openreg_lab.recording import modules

ROUND = _C._memory_round_bytes
KINDS = ("alloc", "free", "segment", "oom")


def _memory(t: openreg_lab.Trace) -> list[tuple[str, int, int]]:
    ev = t.events
    ev = ev[ev["kind"].isin(KINDS)]
    return list(zip(ev["name"], ev["bytes"], ev["address"], strict=True))


def test_a_new_block_is_a_segment_then_an_alloc_and_empty_cache_gives_it_back():
    torch.openreg.empty_cache()
    nbytes = 4 * 1000 + 4  # a size no earlier test left in the cache, rounded up to a block
    with openreg_lab.trace() as t:
        x = torch.empty(nbytes // 4, dtype=torch.float32, device="openreg")
        address = x.untyped_storage().data_ptr()
        del x
        y = torch.empty(nbytes // 4, dtype=torch.float32, device="openreg")  # the cached block again
        assert y.untyped_storage().data_ptr() == address
        del y
        torch.openreg.empty_cache()
    block = -(-nbytes // ROUND) * ROUND
    assert _memory(t) == [
        ("segment_alloc", block, address),
        ("alloc", nbytes, address),
        ("free", nbytes, address),
        ("alloc", nbytes, address),  # from the cache: no segment event
        ("free", nbytes, address),
        ("segment_free", block, address),
    ]
    ev = t.events[t.events["kind"].isin(KINDS)]
    assert ev["total"].tolist()[:3] == [ev["total"].iloc[0], ev["total"].iloc[0] + block, ev["total"].iloc[0]]
    assert (t.events.loc[~t.events["kind"].isin(KINDS), "address"] == -1).all()


def test_the_blocks_of_a_device_are_its_live_and_cached_blocks():
    torch.openreg.empty_cache()
    before = {b[0] for b in _C._memory_blocks(0)}
    a = torch.empty(300, dtype=torch.uint8, device="openreg")
    b = torch.empty(2000, dtype=torch.uint8, device="openreg")
    cached = b.untyped_storage().data_ptr()
    del b
    now = {blk[0]: blk for blk in _C._memory_blocks(0) if blk[0] not in before}
    assert now == {
        a.untyped_storage().data_ptr(): (a.untyped_storage().data_ptr(), ROUND, 300, True),
        cached: (cached, 4 * ROUND, 2000, False),
    }
    addresses = [blk[0] for blk in _C._memory_blocks(0)]
    assert addresses == sorted(addresses)


def test_an_out_of_memory_is_an_event_and_the_observer_adds_to_the_message():
    seen: list[tuple[int, int, int]] = []

    def observer(device: int, requested: int) -> str:
        seen.append((device, requested, len(_C._memory_blocks(device))))  # may read the allocator
        return " [snapshot: x.pickle]"

    torch.openreg.empty_cache()  # a cached 2 MiB block of an earlier test would serve the request
    torch.openreg.set_memory_limit(1 << 20, device=1)
    _C._set_oom_observer(observer)
    try:
        with openreg_lab.trace() as t, pytest.raises(torch.OutOfMemoryError) as raised:
            torch.empty(2 << 20, dtype=torch.uint8, device="openreg:1")
        _C._set_oom_observer(None)
        with pytest.raises(torch.OutOfMemoryError) as again:
            torch.empty(2 << 20, dtype=torch.uint8, device="openreg:1")
    finally:
        _C._set_oom_observer(None)
        torch.openreg.set_memory_limit(None, device=1)
    assert str(raised.value).endswith("or OPENREG_MEMORY_LIMIT. [snapshot: x.pickle]")
    assert "snapshot" not in str(again.value)
    assert seen[0][:2] == (1, 2 << 20)
    oom = t.events[t.events["kind"] == "oom"]
    assert oom[["name", "device", "bytes", "address"]].values.tolist() == [["oom", "openreg:1", 2 << 20, 0]]


def test_an_observer_that_raises_leaves_the_out_of_memory_error(recwarn):
    def broken(device: int, requested: int) -> str:
        raise ValueError("observer broke")

    torch.openreg.empty_cache()  # a cached 2 MiB block of an earlier test would serve the request
    torch.openreg.set_memory_limit(1 << 20, device=1)
    _C._set_oom_observer(broken)
    try:
        with pytest.raises(torch.OutOfMemoryError, match="openreg:1 out of memory"):
            torch.empty(2 << 20, dtype=torch.uint8, device="openreg:1")
    finally:
        _C._set_oom_observer(None)
        torch.openreg.set_memory_limit(None, device=1)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.proj(x)) + nn.Identity()(x)  # a module the block does not hold


def test_module_spans_name_each_forward_by_its_path_and_own_the_events_inside():
    model = nn.Sequential(_Block(), nn.Linear(4, 2)).to("openreg")
    x = torch.randn(3, 4, device="openreg")
    with openreg_lab.trace() as plain:
        model(x)
    assert not (plain.events["kind"] == "module").any()  # modules come with stack=True
    with openreg_lab.trace(stack=True) as t:
        model(x)
    spans = t.events[t.events["kind"] == "module"]
    assert spans["name"].tolist() == [  # in the order they began
        "Sequential", "Sequential.0", "Sequential.0.proj", "Sequential.0.act", "Sequential.0.Identity",
        "Sequential.1",
    ]  # fmt: skip
    assert (spans["parent"] == -1).all()  # a span parents nothing and is parented by no op
    ops = t.events[t.events["kind"] == "op"]
    assert not t.events["parent"].isin(spans["id"]).any()
    f = t.columns.fields
    rows = ops["id"].to_numpy()
    owner = [t.columns.strings[i] if i else None for i in modules.module_of(f, rows)]
    by_op = dict(zip(ops["name"], owner, strict=False))
    assert by_op["aten::addmm"] in ("Sequential.0.proj", "Sequential.1")
    assert by_op["aten::relu"] == "Sequential.0.act"


def test_no_module_span_is_recorded_outside_a_trace_or_inside_compiled_code():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).to("openreg")
    x = torch.randn(2, 4, device="openreg")
    model(x)  # no trace: the hooks are not installed
    assert modules._users == 0 and not modules._handles
    compiled = torch.compile(model, backend="eager", fullgraph=True)  # a graph break would raise
    with openreg_lab.trace(stack=True) as t:
        compiled(x)
    # One span for the call of torch.compile's wrapper, named after the model; none inside.
    assert t.events.loc[t.events["kind"] == "module", "name"].tolist() == ["Sequential"]
    assert modules._users == 0 and not modules._handles
    # Note [A global hook with keyword arguments leaves a mark]: none is left once the trace closed,
    # so torch.compile(module) does not warn about global hooks afterwards.
    assert not torch.nn.modules.module._has_any_global_hook()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(x)
