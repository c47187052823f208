#pragma once

// Device memory: host RAM handed out per simulated device, with a small cache,
// CUDA-style statistics and an optional per-device capacity.
//
// Every allocation is rounded up to kRoundBytes and tagged with its device;
// blocks of kSmallBlockLimit or more are mappings of their own, smaller ones
// come from malloc (Note [Large blocks are mappings of their own]).
// A freed block goes to its device's cache (counted in memory_reserved) and is
// reused by the next request of the same rounded size; empty_cache() returns
// cached blocks to the host. When a device has a limit, a request that would
// push reserved memory over it first flushes that device's cache, then raises
// torch.OutOfMemoryError naming the device, the request and the usage.
//
// A storage sent to another process moves into a shared segment the first
// time it is sent; the receiver maps that segment (Note [Sharing device
// memory across processes] in DeviceAllocator.cpp).

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace openreg {

constexpr size_t kRoundBytes = 512;
constexpr size_t kSmallBlockLimit = 1 << 20;  // "small pool" below 1 MiB

class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override {
    return true;
  }
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  // (free, total): total is the limit when one is set, else host RAM.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Capacity of `device` in bytes; nullopt removes the limit.
  void set_limit(c10::DeviceIndex device, std::optional<size_t> nbytes);
  std::optional<size_t> limit(c10::DeviceIndex device);

  // The device whose memory contains `ptr`, if any.
  std::optional<c10::DeviceIndex> device_of(const void* ptr);

  // What another process needs to map `storage`: its memory file (owned by
  // the storage: dup it to send it), its size and device. Moves a block of
  // this allocator into a shared segment the first time; raises a one-line
  // error for memory openreg did not allocate.
  struct SharedHandle {
    int fd;
    size_t nbytes;
    c10::DeviceIndex device;
  };
  SharedHandle share(c10::StorageImpl& storage);

  // A storage over the shared segment `fd` sent by another process (takes
  // ownership of `fd`). Not resizable; not counted in this process's
  // statistics (the sender counts it, as CUDA's IPC does).
  c10::Storage import_shared(int fd, size_t nbytes, c10::DeviceIndex device);

  // The blocks `device` holds now, in use or cached, by address: what a
  // memory snapshot lists as segments (each segment is one block here).
  // `history_appended`, if given, gets the memory history's count of entries
  // at that moment (Note [The memory history] in trace/MemoryHistory.h).
  struct BlockInfo {
    uintptr_t address;
    size_t size;       // the block's (the request rounded up to kRoundBytes)
    size_t requested;  // the last request it served
    bool allocated;    // false: cached, free for the next request of its size
    uint32_t stack;    // the memory history's stack of its allocation (0: none)
  };
  std::vector<BlockInfo> blocks(c10::DeviceIndex device, uint64_t* history_appended = nullptr);
};

// Note [Out of memory, observed]
// Before it raises torch.OutOfMemoryError, the allocator calls the observer,
// if one is set, with the device and the request, and appends what it returns
// to the error's message (CUDA's allocator has the same kind of hook,
// torch._C._cuda_attach_out_of_memory_observer). openreg-lab sets one that
// writes a memory snapshot of that moment and names it. The allocator's lock
// is not held, so the observer may read the allocator (blocks(), statistics)
// and allocate; it runs on the thread whose allocation failed.
using OomObserver = std::string (*)(c10::DeviceIndex device, size_t requested);
void set_oom_observer(OomObserver observer);

DeviceAllocator& device_allocator();

}  // namespace openreg
