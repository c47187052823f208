"""``torch.cuda.memory``'s memory debugging under ``from_cuda()``: the history and snapshots are
openreg's, allocator settings apply where they mean something, and every other private name a script
may call raises CudaNotMappedError naming it (Note [torch.cuda.memory's private names])."""

from __future__ import annotations

import pickle
import re

import pytest
import torch
from torch.cuda import _memory_viz

import openreg_lab
import openreg_lab.memory

REAL_MEMORY = torch.cuda.memory


@pytest.fixture(autouse=True)
def _no_history_after():
    yield
    openreg_lab.memory._record_memory_history(enabled=None)


def test_a_cuda_scripts_memory_history_and_snapshot_are_openregs(tmp_path):
    with openreg_lab.from_cuda():
        torch.cuda.memory._record_memory_history(max_entries=1000)
        x = torch.ones(250, device="cuda")
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._dump_snapshot(str(tmp_path / "snap.pickle"))
        segments = torch.cuda.memory_snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
    (alloc,) = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] == x.data_ptr()]
    assert alloc["size"] == 1000 and alloc["frames"][0]["filename"] == __file__
    with open(tmp_path / "snap.pickle", "rb") as f:
        assert pickle.load(f)["device_traces"][0] == snap["device_traces"][0]
    assert x.data_ptr() in {s["address"] for s in segments}
    assert "total_reserved" in _memory_viz.segsum(snap)
    assert openreg_lab.memory._snapshot.__module__ == "openreg_lab.recording.snapshot"
    assert torch.cuda.memory._snapshot is REAL_MEMORY._snapshot  # torch's own again after the block


def test_allocator_settings_apply_where_they_mean_something_for_openreg():
    limits = [torch.openreg.get_memory_limit(i) for i in range(torch.openreg.device_count())]
    sizes = [torch.openreg.get_device_properties(i).total_memory for i in range(torch.openreg.device_count())]
    try:
        with openreg_lab.from_cuda():
            settings = torch.cuda.memory._set_allocator_settings
            settings("expandable_segments:False,max_split_size_mb:128,backend:native")
            assert [torch.openreg.get_memory_limit(i) for i in range(len(limits))] == limits
            settings("per_process_memory_fraction:0.5")
            assert [torch.openreg.get_memory_limit(i) for i in range(len(limits))] == [s // 2 for s in sizes]
            for setting, why in (
                ("expandable_segments:True", "segments are fixed blocks"),
                ("garbage_collection_threshold:0.6", "frees its cache only when a device's cap is reached"),
                ("roundup_power2_divisions:[256:4,>:1]", "rounds every request up to 512 bytes"),
                ("backend:cudaMallocAsync", "one allocator"),
                ("pinned_use_cuda_host_register:True", "pinned memory"),
            ):
                with pytest.raises(
                    openreg_lab.CudaNotMappedError,
                    match=rf"^the allocator setting {re.escape(setting)} has .*{why}",
                ):
                    settings(f"per_process_memory_fraction:0.25,{setting}")
                assert torch.openreg.get_memory_limit(0) == sizes[0] // 2  # nothing applied
            with pytest.raises(ValueError, match="unknown key 'bogus'"):
                settings("bogus:1")
            with pytest.raises(ValueError, match="expected key:value, got 'max_split_size_mb'"):
                settings("max_split_size_mb")
            with pytest.raises(ValueError, match=r"per_process_memory_fraction is within \[0, 1\], got '2'"):
                settings("per_process_memory_fraction:2")
    finally:
        for i, limit in enumerate(limits):
            torch.openreg.set_memory_limit(limit, i)


def _private_cuda_calls() -> list[str]:
    """torch.cuda.memory's private functions and classes that are CUDA's (defined there, or torch's
    placeholders for CUDA bindings), but those openreg maps."""
    mapped = {"_record_memory_history", "_record_memory_history_impl", "_record_memory_history_legacy",
              "_snapshot", "_dump_snapshot", "_set_allocator_settings"}  # fmt: skip
    names = []
    for name in dir(REAL_MEMORY):
        real = getattr(REAL_MEMORY, name)
        module = getattr(real, "__module__", "") or ""
        if not name.startswith("_") or name.startswith("__") or name in mapped:
            continue
        if (isinstance(real, type) and module in ("torch.cuda.memory", "torch._utils")) or (
            callable(real) and not isinstance(real, type) and module == "torch.cuda.memory"
        ):
            names.append(name)
    return names


def test_every_other_private_memory_call_raises_cuda_not_mapped_naming_it():
    names = _private_cuda_calls()
    assert {"_allocation_traceback", "_set_memory_metadata", "_save_segment_usage", "_CUDAAllocator",
            "_MemPool"} <= set(names)  # fmt: skip
    with openreg_lab.from_cuda():
        for name in names:
            with pytest.raises(
                openreg_lab.CudaNotMappedError, match=rf"^torch\.cuda\.memory\.{name}\(\) has no"
            ):
                getattr(torch.cuda.memory, name)()
        with pytest.raises(openreg_lab.CudaNotMappedError, match=r"write torch\.cuda\._memory_viz\.segments"):
            torch.cuda.memory._save_segment_usage("out.svg")
        # what torch.cuda.memory imports for itself stays torch's
        assert torch.cuda.memory._get_device_index is REAL_MEMORY._get_device_index
        assert torch.cuda.memory._C is torch._C
