"""The device allocator: statistics, cache, capacity and out-of-memory errors."""

import gc

import pytest
import torch

from tests.support.processes import run_python

BLOCK = 512


def test_allocation_updates_stats_exactly():
    torch.openreg.empty_cache()
    base = torch.openreg.memory_allocated()
    x = torch.empty(1000, device="openreg")  # 4000 bytes -> 4096 rounded
    assert torch.openreg.memory_allocated() - base == 4096
    stats = torch.openreg.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.openreg.memory_allocated()
    assert stats["requested_bytes.all.current"] >= 4000
    del x
    assert torch.openreg.memory_allocated() == base


def test_freed_memory_is_cached_then_released():
    torch.openreg.empty_cache()
    reserved0 = torch.openreg.memory_reserved()
    x = torch.empty(1 << 20, device="openreg")
    nbytes = 4 << 20
    assert torch.openreg.memory_reserved() - reserved0 == nbytes
    del x
    assert torch.openreg.memory_reserved() - reserved0 == nbytes  # kept in the cache
    y = torch.empty(1 << 20, device="openreg")  # reuses the cached block
    assert torch.openreg.memory_reserved() - reserved0 == nbytes
    del y
    torch.openreg.empty_cache()
    assert torch.openreg.memory_reserved() == reserved0


def test_peak_and_reset():
    torch.openreg.reset_peak_memory_stats()
    base = torch.openreg.memory_allocated()
    x = torch.empty(256 * 1024, device="openreg")  # 1 MiB
    del x
    assert torch.openreg.max_memory_allocated() - base == 1 << 20
    torch.openreg.reset_peak_memory_stats()
    assert torch.openreg.max_memory_allocated() == torch.openreg.memory_allocated()


def test_accumulated_counters_and_reset():
    torch.openreg.reset_accumulated_memory_stats()
    for _ in range(3):
        torch.empty(10, device="openreg")
    stats = torch.openreg.memory_stats()
    assert stats["allocation.all.allocated"] == 3
    assert stats["allocation.all.freed"] == 3
    torch.openreg.reset_accumulated_memory_stats()
    assert torch.openreg.memory_stats()["allocation.all.allocated"] == 0


def test_small_and_large_pools():
    torch.openreg.reset_accumulated_memory_stats()
    small = torch.empty(16, device="openreg")
    large = torch.empty(1 << 20, device="openreg")
    stats = torch.openreg.memory_stats()
    assert stats["allocation.small_pool.allocated"] == 1
    assert stats["allocation.large_pool.allocated"] == 1
    del small, large


def test_thousand_cycles_do_not_grow():
    def cycle():
        y = torch.randn(100, device="openreg") * 2  # two blocks alive at once
        del y

    cycle()  # warm the cache to what one cycle needs
    gc.collect()
    base_alloc = torch.openreg.memory_allocated()
    base_reserved = torch.openreg.memory_reserved()
    for _ in range(1000):
        cycle()
    assert torch.openreg.memory_allocated() == base_alloc
    assert torch.openreg.memory_reserved() == base_reserved


def test_stats_are_per_device():
    base = [torch.openreg.memory_allocated(i) for i in (0, 1)]
    x = torch.empty(1024, device="openreg:1")
    assert torch.openreg.memory_allocated(1) - base[1] == 4096
    assert torch.openreg.memory_allocated(0) == base[0]
    assert torch.openreg.memory_allocated("openreg:1") == torch.openreg.memory_allocated(1)
    del x


def test_accelerator_memory_api_agrees():
    x = torch.empty(1000, device="openreg")
    assert torch.accelerator.memory_allocated(0) == torch.openreg.memory_allocated(0)
    assert torch.accelerator.memory_stats(0)["allocated_bytes.all.current"] == torch.openreg.memory_allocated(
        0
    )
    del x


def test_memory_limit_raises_out_of_memory_with_details():
    torch.openreg.empty_cache()
    used = torch.openreg.memory_reserved(1)
    torch.openreg.set_memory_limit(used + 8192, device=1)
    assert torch.openreg.get_memory_limit(1) == used + 8192
    keep = torch.empty(1024, device="openreg:1")  # 4 KiB fits
    with pytest.raises(torch.OutOfMemoryError) as err:
        torch.empty(4096, device="openreg:1")  # 16 KiB does not
    msg = str(err.value)
    assert "openreg:1 out of memory" in msg
    assert "tried to allocate 16.00 KiB (16384 bytes)" in msg
    assert "set_memory_limit" in msg
    assert torch.openreg.memory_stats(1)["num_ooms"] >= 1
    # Device 0 is not limited.
    torch.empty(4096, device="openreg:0")
    del keep


def test_limit_flushes_cache_before_failing():
    torch.openreg.empty_cache()
    used = torch.openreg.memory_reserved(0)
    torch.openreg.set_memory_limit(used + (64 << 10), device=0)
    a = torch.empty(12 << 10, device="openreg")  # 48 KiB, then cached
    del a
    retries = torch.openreg.memory_stats(0)["num_alloc_retries"]
    b = torch.empty(8 << 10, device="openreg")  # 32 KiB: fits only once the cache is flushed
    assert torch.openreg.memory_stats(0)["num_alloc_retries"] == retries + 1
    del b


def test_limit_removed_with_none():
    torch.openreg.set_memory_limit(BLOCK, device=0)
    torch.openreg.set_memory_limit(None, device=0)
    assert torch.openreg.get_memory_limit(0) is None
    torch.empty(1 << 16, device="openreg")


@pytest.mark.parametrize("bad", [0, -5, 1.5, "1G", True])
def test_bad_limit_is_rejected(bad):
    with pytest.raises((ValueError, TypeError), match="set_memory_limit"):
        torch.openreg.set_memory_limit(bad)


def test_mem_get_info_follows_limit():
    torch.openreg.empty_cache()
    reserved = torch.openreg.memory_reserved(1)
    torch.openreg.set_memory_limit(reserved + (1 << 20), device=1)
    free, total = torch.openreg.mem_get_info(1)
    assert total == reserved + (1 << 20)
    assert free == 1 << 20


def test_limit_from_environment():
    result = run_python(
        "import torch, openreg_lab\n"
        "print(torch.openreg.get_memory_limit(0), torch.openreg.get_memory_limit(1))\n"
        "try:\n    torch.empty(1 << 20, device='openreg')\n"
        "except torch.OutOfMemoryError:\n    print('OOM')\n",
        OPENREG_MEMORY_LIMIT="1M",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1048576", "1048576", "OOM"]


def test_bad_limit_environment_fails_import():
    result = run_python("import openreg_lab", OPENREG_MEMORY_LIMIT="lots")
    assert result.returncode != 0
    assert "OPENREG_MEMORY_LIMIT='lots' is not a memory size" in result.stderr


def test_pinned_memory():
    x = torch.randn(100)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned()
    assert torch.equal(p, x)
    assert not x.is_pinned()
    y = p.to("openreg", non_blocking=True)
    assert torch.equal(y.cpu(), x)
    back = torch.empty(100).pin_memory()
    back.copy_(y, non_blocking=True)
    assert torch.equal(back, x)


def test_pinned_stats_through_accelerator_api():
    before = torch._C._accelerator_getHostStats() if hasattr(torch._C, "_accelerator_getHostStats") else None
    p = torch.empty(1000).pin_memory()
    assert p.is_pinned()
    del p
    if before is not None:
        assert torch._C._accelerator_getHostStats()["num_host_alloc"] >= before["num_host_alloc"] + 1
    torch.accelerator.memory.empty_host_cache()
