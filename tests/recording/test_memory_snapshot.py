"""PyTorch's memory snapshot of openreg (openreg_lab.memory): the history's entries and stacks
(Note [The memory history]), the segments, the ring that keeps the newest entries, the pickle, and
PyTorch's own torch.cuda._memory_viz reading it with the sizes the allocator reports."""

from __future__ import annotations

import base64
import inspect
import pickle
import re
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.cuda import _memory_viz

import openreg_lab
import openreg_lab.memory as memory
from openreg_lab import _C

ROUND = _C._memory_round_bytes
HERE = __file__


@pytest.fixture(autouse=True)
def _no_history_after() -> Iterator[None]:
    yield
    memory._record_memory_history(enabled=None)


def _line(marker: str) -> int:
    """The line of this file that holds ``marker``."""
    lines = inspect.getsource(inspect.getmodule(_line)).splitlines()  # type: ignore[arg-type]
    return next(i for i, text in enumerate(lines, 1) if marker in text and "_line(" not in text)


def _entries(snap: dict[str, Any], addresses: set[int], device: int = 0) -> list[tuple[str, int, int]]:
    return [
        (e["action"], e["addr"], e["size"])
        for e in snap["device_traces"][device]
        if e.get("addr") in addresses
    ]


def _allocate(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8, device="openreg")  # allocation site


def test_history_records_each_action_with_its_python_stack():
    torch.openreg.empty_cache()
    memory._record_memory_history()
    x = _allocate(7001)  # a size no other test leaves in the cache
    address = x.untyped_storage().data_ptr()
    del x
    y = _allocate(7001)  # the cached block again
    snap = memory._snapshot()
    block = -(-7001 // ROUND) * ROUND
    assert _entries(snap, {address}) == [
        ("segment_alloc", address, block),
        ("alloc", address, 7001),
        ("free_requested", address, 7001),
        ("free_completed", address, 7001),
        ("alloc", address, 7001),
    ]
    alloc = [e for e in snap["device_traces"][0] if e.get("addr") == address][1]
    assert alloc["stream"] == 0 and alloc["category"] == "unknown"
    assert alloc["frames"][0] == {"filename": HERE, "line": _line("# allocation site"), "name": "_allocate"}
    assert alloc["frames"][1]["name"] == "test_history_records_each_action_with_its_python_stack"
    frees = [e for e in snap["device_traces"][0] if e["action"] == "free_completed" and e["addr"] == address]
    assert frees[0]["frames"][0]["name"] == "test_history_records_each_action_with_its_python_stack"
    (segment,) = [s for s in snap["segments"] if s["address"] == address]
    assert segment["device"] == 0 and segment["total_size"] == block and segment["stream"] == 0
    (b,) = segment["blocks"]
    assert (b["address"], b["size"], b["requested_size"], b["state"]) == (
        address,
        block,
        7001,
        "active_allocated",
    )
    second = [e for e in snap["device_traces"][0] if e.get("addr") == address][-1]
    assert b["frames"] == second["frames"] != alloc["frames"] and b["category"] == "unknown"  # y's line
    assert snap["dropped_entries"] == 0
    del y


def test_memory_viz_reads_the_snapshot_with_the_allocators_sizes():
    torch.openreg.empty_cache()
    memory._record_memory_history(max_entries=10_000)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).openreg()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 16, device="openreg")).sum().backward()
    opt.step()
    before = memory._snapshot()
    extra = _allocate(5001)
    after = memory._snapshot()
    allocated, reserved = torch.openreg.memory_allocated(), torch.openreg.memory_reserved()
    requested = torch.openreg.memory_stats()["requested_bytes.all.current"]
    # segsum: the reserved and allocated bytes, as the allocator counts them
    text = _memory_viz.segsum(after)
    assert f"total_reserved: {_memory_viz.Bytes(reserved)}\n" in text
    assert f"total_allocated: {_memory_viz.Bytes(requested)}\n" in text
    assert f"segments: {len(_C._memory_blocks(0))}\n" in text
    # the flamegraph's lines: every byte reserved, the held ones allocated
    lines = [
        line.rsplit(" ", 1) for line in _memory_viz.memory(after, format_flamegraph=lambda s: s).splitlines()
    ]
    assert sum(int(n) for _, n in lines) == reserved
    assert sum(int(n) for what, n in lines if ";active_allocated;" in what) == allocated
    by_segment = _memory_viz.segments(after, format_flamegraph=lambda s: s)
    assert f";seg_{extra.untyped_storage().data_ptr()};active_allocated;" in by_segment
    # trace: one line per entry, each allocation with its size
    entries = after["device_traces"][0]
    replay = _memory_viz.trace(after)
    assert f"{len(entries)} entries\n" in replay
    sizes = re.findall(r"^\w+ = (?:seg_\d+|\w+|MEM)\[\d+:([^\]]+)\]$", replay, re.M)
    assert sizes == [repr(_memory_viz.Bytes(e["size"])) for e in entries if e["action"] == "alloc"]
    # compare: the block allocated between the two snapshots is the only new segment
    with _capture_prints() as printed:
        _memory_viz.compare(before["segments"], after["segments"], format_flamegraph=lambda s: s)
    assert f"only_after = [{extra.untyped_storage().data_ptr()}]" in printed
    assert "only_before = []" in printed
    # the plots embed the snapshot itself
    for html in (_memory_viz.trace_plot(after), _memory_viz.segment_plot(after)):
        encoded = re.search(r'"base64": "([^"]+)"', html).group(1)
        assert pickle.loads(base64.b64decode(encoded)) == after
    del extra


class _capture_prints:
    def __enter__(self) -> str:
        import contextlib
        import io

        self._buffer = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self._buffer)
        self._redirect.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._redirect.__exit__(*exc)

    def __contains__(self, text: str) -> bool:
        return text in self._buffer.getvalue()


def test_dump_writes_the_snapshot_pickled(tmp_path):
    memory._record_memory_history()
    x = _allocate(3001)
    snap = memory._snapshot()
    path = tmp_path / "snap.pickle"
    memory._dump_snapshot(path)
    with open(path, "rb") as f:
        assert pickle.load(f) == snap
    with pytest.raises(IsADirectoryError):
        memory._dump_snapshot(tmp_path)  # Note [Where an output may go]
    del x


def test_the_ring_keeps_the_newest_entries_and_says_how_many_it_dropped(tmp_path):
    memory._record_memory_history(max_entries=3)
    kept = [_allocate(100 + i) for i in range(6)]  # six allocations from the cache or not
    snap = memory._snapshot()
    (entries,) = [t for t in snap["device_traces"] if t]
    last = [(e["action"], e["addr"], e["size"]) for e in entries if e["action"] == "alloc"]
    assert last[-1] == ("alloc", kept[-1].untyped_storage().data_ptr(), 105)
    assert len(entries) <= 3
    assert snap["max_entries"] == 3 and snap["dropped_entries"] >= 3
    assert snap["dropped_entries"] + len(entries) == _C._memory_history_read()["appended"]
    with pytest.warns(
        memory.SnapshotWarning, match=rf"kept its newest 3 entries and dropped {snap['dropped_entries']}"
    ):
        memory._dump_snapshot(tmp_path / "ring.pickle")
    del kept


def test_a_snapshot_without_history_lists_the_blocks_and_says_how_to_start_one():
    x = _allocate(2001)
    with pytest.warns(
        memory.SnapshotWarning, match=r"no memory history is recorded.*_record_memory_history\(\)"
    ):
        snap = memory._snapshot()
    assert all(trace == [] for trace in snap["device_traces"])
    assert x.untyped_storage().data_ptr() in {s["address"] for s in snap["segments"]}
    del x


def test_stopping_the_history_forgets_it_as_cuda_does():
    memory._record_memory_history()
    x = _allocate(1001)
    memory._record_memory_history(enabled=None)
    with pytest.warns(memory.SnapshotWarning):
        snap = memory._snapshot()
    assert all(trace == [] for trace in snap["device_traces"])
    (block,) = [s["blocks"][0] for s in snap["segments"] if s["address"] == x.untyped_storage().data_ptr()]
    assert block["frames"] == []
    del x


@pytest.mark.parametrize(
    ("context", "alloc_frames", "free_frames", "block_frames"),
    [
        (None, False, False, False),
        ("state", None, None, True),
        ("alloc", True, False, True),
        ("all", True, True, True),
    ],
)
def test_context_says_which_stacks_are_kept(context, alloc_frames, free_frames, block_frames):
    memory._record_memory_history(enabled="state" if context == "state" else "all", context=context)
    x, y = _allocate(901), _allocate(902)
    address = x.untyped_storage().data_ptr()
    del x
    snap = memory._snapshot()
    entries = {e["action"]: e for e in snap["device_traces"][0] if e.get("addr") == address}
    if alloc_frames is None:  # "state": no entries at all
        assert snap["device_traces"][0] == []
    else:
        assert bool(entries["alloc"]["frames"]) is alloc_frames
        assert bool(entries["free_completed"]["frames"]) is free_frames
    (block,) = [s["blocks"][0] for s in snap["segments"] if s["address"] == y.untyped_storage().data_ptr()]
    assert bool(block["frames"]) is block_frames
    del y


def test_skip_actions_leaves_those_entries_out():
    memory._record_memory_history(skip_actions=["free_requested", "segment_alloc"])
    x = _allocate(8001)
    address = x.untyped_storage().data_ptr()
    del x
    snap = memory._snapshot()
    assert _entries(snap, {address}) == [("alloc", address, 8001), ("free_completed", address, 8001)]


def test_an_out_of_memory_is_an_entry_with_what_the_device_had_free():
    memory._record_memory_history()
    torch.openreg.empty_cache()
    torch.openreg.set_memory_limit(64 * 1024)
    x = _allocate(10_000)
    with pytest.raises(torch.OutOfMemoryError):
        _allocate(100_000)  # too much
    snap = memory._snapshot()
    (oom,) = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
    assert oom["size"] == 100_000 and "addr" not in oom
    assert oom["device_free"] == 64 * 1024 - torch.openreg.memory_reserved()
    assert [(f["name"], f["line"]) for f in oom["frames"][:2]] == [
        ("_allocate", _line("# allocation site")),
        ("test_an_out_of_memory_is_an_entry_with_what_the_device_had_free", _line("# too much")),
    ]
    assert "raise OutOfMemoryError # 97.7KiB requested" in _memory_viz.trace(snap)
    del x


def test_each_device_has_its_own_trace_and_segments():
    memory._record_memory_history()
    x = torch.empty(600, dtype=torch.uint8, device="openreg:1")
    address = x.untyped_storage().data_ptr()
    snap = memory._snapshot()
    assert len(snap["device_traces"]) == torch.openreg.device_count()
    assert ("alloc", address, 600) in _entries(snap, {address}, device=1)
    assert _entries(snap, {address}, device=0) == []
    assert [s["device"] for s in snap["segments"] if s["address"] == address] == [1]
    del x


def test_a_lone_surrogate_in_a_file_name_stays_as_it_is_in_the_pickle(tmp_path):
    name = str(tmp_path / "caf\udce9.py")  # a file name whose byte is not UTF-8
    scope: dict[str, Any] = {"torch": torch}
    exec(compile("def allocate():\n    return torch.empty(77, device='openreg')\n", name, "exec"), scope)
    memory._record_memory_history()
    x = scope["allocate"]()
    memory._dump_snapshot(tmp_path / "s.pickle")
    with open(tmp_path / "s.pickle", "rb") as f:
        snap = pickle.load(f)
    (alloc,) = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] == x.data_ptr()]
    assert alloc["frames"][0] == {"filename": name, "line": 2, "name": "allocate"}
    del x


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"enabled": "yes"}, ValueError, "enabled is 'all', 'state' or None"),
        ({"context": "some"}, ValueError, "context is 'all', 'alloc', 'state' or None"),
        ({"stacks": "cpp"}, ValueError, "stacks is 'python' or 'all'"),
        ({"max_entries": 0}, ValueError, "max_entries is from 1"),
        ({"max_entries": 1.5}, TypeError, "max_entries is a number of entries"),
        ({"skip_actions": ["malloc"]}, ValueError, "unknown skip_actions ['malloc']"),
        ({"skip_actions": "alloc"}, TypeError, "skip_actions is a list"),
        ({"global_record_annotations": True}, ValueError, "records no annotations"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        memory._record_memory_history(**kwargs)


def test_the_older_boolean_form_is_read_as_torch_reads_it():
    memory._record_memory_history(True, trace_alloc_max_entries=5, trace_alloc_record_context=True)
    x = _allocate(4001)
    snap = memory._snapshot()
    assert snap["max_entries"] == 5
    (alloc,) = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] == x.data_ptr()]
    assert alloc["frames"][0]["name"] == "_allocate"
    memory._record_memory_history(False)
    assert _C._memory_history_read()["enabled"] is False
    del x


def test_a_trace_is_a_snapshot_of_its_memory_events():
    torch.openreg.empty_cache()
    keep = _allocate(5003)
    with openreg_lab.trace(stack=True, host=False) as t:
        x = torch.ones(1200, dtype=torch.uint8, device="openreg")  # traced allocation
        address = x.untyped_storage().data_ptr()
        del keep
    snap = memory.snapshot_of(t)
    ev = t.events[t.events["kind"].isin(["alloc", "free", "segment", "oom"])]
    expected = []
    for name, nbytes, addr in zip(ev["name"], ev["bytes"], ev["address"], strict=True):
        actions = {"free": ["free_requested", "free_completed"]}.get(name, [name])
        expected += [(a, addr, nbytes) for a in actions]
    assert [(e["action"], e["addr"], e["size"]) for e in snap["device_traces"][0]] == expected
    alloc = next(e for e in snap["device_traces"][0] if e["action"] == "alloc")
    line = _line("# traced allocation")
    assert alloc["frames"] == [
        {"filename": HERE, "line": line, "name": "aten::empty.memory_format"},
        {"filename": HERE, "line": line, "name": "aten::ones"},
    ]
    held = {s["address"]: s["blocks"][0]["state"] for s in snap["segments"]}
    assert held[address] == "active_allocated"
    assert all(state == "inactive" for a, state in held.items() if a != address)  # keep's block, cached
    assert snap["dropped_entries"] == 0
    assert f"{len(snap['device_traces'][0])} entries" in _memory_viz.trace(snap)
    del x


def test_a_traces_snapshot_carries_the_categories_of_its_memory_tables():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(
        "openreg"
    )
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 16, device="openreg")
    with openreg_lab.trace(stack=True, host=False) as t:
        for _ in range(2):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    alloc = t.memory().allocations().set_index("id")
    snap = memory.snapshot_of(t)
    entries = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    made = t.events[t.events["kind"] == "alloc"]["id"].tolist()
    assert len(entries) == len(made)
    assert [e["category"] for e in entries] == alloc.loc[made, "category"].tolist()
    found = {e["category"] for e in entries}
    assert {"gradient", "optimizer_state", "activation"} <= found  # the step's own, by the tables' rules
    by_address = {}
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            by_address[e["addr"]] = e["category"]
    held = [s for s in snap["segments"] if s["blocks"][0]["state"] == "active_allocated"]
    for s in held:
        if s["address"] in by_address:  # made in the trace: the block keeps its allocation's category
            assert s["blocks"][0]["category"] == by_address[s["address"]]
    grads = {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
    assert {by_address[a] for a in grads} == {"gradient"}
