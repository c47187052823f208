#include "runtime/HostAllocator.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace openreg {
namespace {

constexpr size_t kPageBytes = 4096;

struct PinnedMemory {
  std::mutex mutex;
  std::map<const char*, size_t> blocks;  // start -> size, ordered for lookups
  at::HostStats stats;
};

PinnedMemory& pinned() {
  static PinnedMemory* p = new PinnedMemory();  // outlives late frees
  return *p;
}

void free_pinned(void* ptr) {
  PinnedMemory& p = pinned();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    auto it = p.blocks.find(static_cast<const char*>(ptr));
    TORCH_INTERNAL_ASSERT(it != p.blocks.end(), "unknown pinned block");
    p.stats.active_requests.decrease(1);
    p.stats.active_bytes.decrease(it->second);
    p.stats.allocations.decrease(1);
    p.stats.allocated_bytes.decrease(it->second);
    p.stats.num_host_free += 1;
    p.blocks.erase(it);
  }
  std::free(ptr);
}

}  // namespace

c10::DataPtr HostAllocator::allocate(size_t nbytes) {
  const size_t size = (nbytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  void* ptr = std::aligned_alloc(kPageBytes, size == 0 ? kPageBytes : size);
  TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "openreg: could not pin ", nbytes,
                   " bytes of host memory");
  PinnedMemory& p = pinned();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    p.blocks.emplace(static_cast<const char*>(ptr), size);
    p.stats.active_requests.increase(1);
    p.stats.active_bytes.increase(size);
    p.stats.allocations.increase(1);
    p.stats.allocated_bytes.increase(size);
    p.stats.num_host_alloc += 1;
  }
  return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
}

void HostAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

bool HostAllocator::record_event(void*, void*, c10::Stream) {
  return true;  // work is synchronous: nothing can still be reading the block
}

void HostAllocator::empty_cache() {
  // Pinned blocks are returned to the host when freed; nothing is cached.
}

at::HostStats HostAllocator::get_stats() {
  PinnedMemory& p = pinned();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.stats;
}

void HostAllocator::reset_accumulated_stats() {
  PinnedMemory& p = pinned();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (auto* s : {&p.stats.active_requests, &p.stats.active_bytes, &p.stats.allocations,
                  &p.stats.allocated_bytes}) {
    s->reset_accumulated();
  }
  p.stats.num_host_alloc = 0;
  p.stats.num_host_free = 0;
}

void HostAllocator::reset_peak_stats() {
  PinnedMemory& p = pinned();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (auto* s : {&p.stats.active_requests, &p.stats.active_bytes, &p.stats.allocations,
                  &p.stats.allocated_bytes}) {
    s->reset_peak();
  }
}

bool HostAllocator::is_pinned(const void* ptr) {
  PinnedMemory& p = pinned();
  const char* c = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(p.mutex);
  auto it = p.blocks.upper_bound(c);
  if (it == p.blocks.begin()) {
    return false;
  }
  --it;
  return c < it->first + it->second;
}

HostAllocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

}  // namespace openreg
