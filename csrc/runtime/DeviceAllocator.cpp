#include "runtime/DeviceAllocator.h"

#include "runtime/Device.h"
#include "trace/Hooks.h"

#include <c10/util/Exception.h>

#include <pthread.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

namespace openreg {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;

struct Block {
  void* ptr;
  size_t size;       // rounded size, what the block reserves
  size_t requested;  // what the caller asked for
  c10::DeviceIndex device;
};

size_t round_size(size_t nbytes) {
  return (nbytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}

std::string format_bytes(size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%zu bytes", n);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

size_t default_limit_from_env() {
  const char* env = std::getenv("OPENREG_MEMORY_LIMIT");
  size_t value = 0;
  if (env == nullptr || *env == '\0') {
    return 0;
  }
  TORCH_CHECK(parse_bytes(env, &value) && value > 0, "OPENREG_MEMORY_LIMIT='", env,
              "' is not a memory size: use a whole number of bytes from 1 to 2**63 - 1, "
              "or a number with K, M or G (e.g. 512M, 1.5G, 2GiB), or unset it for no limit");
  return value;
}

// One simulated device's memory. Guarded by its own mutex.
struct DeviceMemory {
  std::mutex mutex;
  std::map<const char*, Block*> live;   // start -> block in use, by address
  std::multimap<size_t, Block*> cache;  // rounded size -> free block
  DeviceStats stats;
  size_t limit = 0;  // 0: no limit
};

using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

// Bytes in blocks handed out on `dev` (what the recorder's alloc/free events
// report as the running total).
int64_t allocated_bytes(const DeviceMemory& dev) {
  return dev.stats.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
}

// Adds (or removes) `amount` to `stat` for the aggregate and for the pool a
// block of `block_size` bytes belongs to (small below 1 MiB, as on CUDA).
void update(StatArray& stat, size_t amount, size_t block_size, bool increase) {
  const StatType pool = block_size < kSmallBlockLimit ? StatType::SMALL_POOL : StatType::LARGE_POOL;
  for (StatType type : {StatType::AGGREGATE, pool}) {
    auto& s = stat[static_cast<size_t>(type)];
    if (increase) {
      s.increase(amount);
    } else {
      s.decrease(amount);
    }
  }
}

class Memory {
 public:
  Memory() {
    const size_t limit = default_limit_from_env();
    for (auto& dev : devices_) {
      dev.limit = limit;
    }
  }

  DeviceMemory& at(c10::DeviceIndex device) {
    check_device_index(device);
    return devices_[device];
  }

  // Unchecked access, for the fork handlers (Note [Fork safety]).
  DeviceMemory& raw(c10::DeviceIndex device) {
    return devices_[device];
  }

  Block* allocate(c10::DeviceIndex device, size_t nbytes) {
    DeviceMemory& dev = at(device);
    const size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(dev.mutex);
    Block* block = take_cached(dev, size);
    if (block == nullptr) {
      block = reserve(dev, device, size, nbytes);
    }
    block->requested = nbytes;
    dev.live.emplace(static_cast<const char*>(block->ptr), block);
    update(dev.stats.allocation, 1, size, true);
    update(dev.stats.active, 1, size, true);
    update(dev.stats.allocated_bytes, size, size, true);
    update(dev.stats.active_bytes, size, size, true);
    update(dev.stats.requested_bytes, nbytes, size, true);
    trace::record_memory(trace::Kind::Alloc, device, static_cast<int64_t>(nbytes),
                         allocated_bytes(dev));
    return block;
  }

  void free(Block* block) {
    DeviceMemory& dev = devices_[block->device];
    std::lock_guard<std::mutex> lock(dev.mutex);
    dev.live.erase(static_cast<const char*>(block->ptr));
    update(dev.stats.allocation, 1, block->size, false);
    update(dev.stats.active, 1, block->size, false);
    update(dev.stats.allocated_bytes, block->size, block->size, false);
    update(dev.stats.active_bytes, block->size, block->size, false);
    update(dev.stats.requested_bytes, block->requested, block->size, false);
    trace::record_memory(trace::Kind::Free, block->device, static_cast<int64_t>(block->requested),
                         allocated_bytes(dev));
    dev.cache.emplace(block->size, block);
  }

  void empty_cache() {
    for (auto& dev : devices_) {
      std::lock_guard<std::mutex> lock(dev.mutex);
      release_cache(dev);
    }
  }

  std::optional<c10::DeviceIndex> device_of(const void* ptr) {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      DeviceMemory& dev = devices_[d];
      std::lock_guard<std::mutex> lock(dev.mutex);
      // Tensors may point inside a block (storage offsets): search by range.
      const char* c = static_cast<const char*>(ptr);
      auto it = dev.live.upper_bound(c);
      if (it != dev.live.begin() && c < std::prev(it)->first + std::prev(it)->second->size) {
        return d;
      }
    }
    return std::nullopt;
  }

 private:
  Block* take_cached(DeviceMemory& dev, size_t size) {
    auto it = dev.cache.find(size);
    if (it == dev.cache.end()) {
      return nullptr;
    }
    Block* block = it->second;
    dev.cache.erase(it);
    return block;
  }

  Block* reserve(DeviceMemory& dev, c10::DeviceIndex device, size_t size, size_t requested) {
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    auto reserved = [&] { return static_cast<size_t>(dev.stats.reserved_bytes[agg].current); };
    if (dev.limit != 0 && reserved() + size > dev.limit && !dev.cache.empty()) {
      release_cache(dev);
      dev.stats.num_alloc_retries += 1;
    }
    void* ptr = nullptr;
    if (dev.limit == 0 || reserved() + size <= dev.limit) {
      ptr = std::aligned_alloc(64, size == 0 ? 64 : size);
    }
    if (ptr == nullptr) {
      dev.stats.num_ooms += 1;
      const size_t allocated = static_cast<size_t>(dev.stats.allocated_bytes[agg].current);
      const std::string limit = dev.limit == 0 ? std::string("no limit (the host is out of memory)")
                                               : "limit " + format_bytes(dev.limit);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "openreg:", static_cast<int>(device),
                       " out of memory: tried to allocate ", format_bytes(requested), " (",
                       requested, " bytes); ", format_bytes(allocated),
                       " is allocated by tensors and ", format_bytes(reserved()),
                       " reserved in total, ", limit,
                       ". Free some tensors, or raise the limit with "
                       "torch.openreg.set_memory_limit(nbytes_or_None, device=",
                       static_cast<int>(device), ") or OPENREG_MEMORY_LIMIT.");
    }
    dev.stats.num_device_alloc += 1;
    update(dev.stats.segment, 1, size, true);
    update(dev.stats.reserved_bytes, size, size, true);
    return new Block{ptr, size, requested, device};
  }

  void release_cache(DeviceMemory& dev) {
    for (auto& [size, block] : dev.cache) {
      std::free(block->ptr);
      dev.stats.num_device_free += 1;
      update(dev.stats.segment, 1, size, false);
      update(dev.stats.reserved_bytes, size, size, false);
      delete block;
    }
    dev.cache.clear();
  }

  std::array<DeviceMemory, kMaxDevices> devices_;
};

Memory& memory();

// Note [Fork safety]: fork() copies only the calling thread, so a mutex that
// another thread held at that moment stays locked forever in the child (an
// autograd worker allocating on openreg while the main thread forks a
// DataLoader worker). The prepare handler takes every device's mutex, so the
// fork happens between two allocator operations; both parent and child then
// release them. The child's copy of the allocator matches its copy of the
// memory (host memory, copied by fork), so it may keep using openreg.
void lock_all_for_fork() {
  for (c10::DeviceIndex d = 0; d < kMaxDevices; ++d) {
    memory().raw(d).mutex.lock();
  }
}

void unlock_all_after_fork() {
  for (c10::DeviceIndex d = kMaxDevices; d-- > 0;) {
    memory().raw(d).mutex.unlock();
  }
}

Memory& memory() {
  // Leaked on purpose: tensors may be freed during interpreter shutdown,
  // after static destructors would have run.
  static Memory* m = [] {
    auto* created = new Memory();
    pthread_atfork(&lock_all_for_fork, &unlock_all_after_fork, &unlock_all_after_fork);
    return created;
  }();
  return *m;
}

void delete_block(void* ctx) {
  memory().free(static_cast<Block*>(ctx));
}

}  // namespace

c10::DataPtr DeviceAllocator::allocate(size_t nbytes) {
  const c10::DeviceIndex device = current_device();
  Block* block = memory().allocate(device, nbytes);
  return {block->ptr, block, &delete_block, c10::Device(c10::DeviceType::PrivateUse1, device)};
}

c10::DeleterFnPtr DeviceAllocator::raw_deleter() const {
  return nullptr;  // blocks need their context to be freed
}

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

void DeviceAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  memory().empty_cache();
}

void DeviceAllocator::recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) {
  // Work on openreg runs synchronously (see Stream.h), so a block can never be
  // in use by a stream after its tensor dies: nothing to track.
}

DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  DeviceMemory& dev = memory().at(device);
  std::lock_guard<std::mutex> lock(dev.mutex);
  return dev.stats;
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  DeviceMemory& dev = memory().at(device);
  std::lock_guard<std::mutex> lock(dev.mutex);
  auto reset = [](StatArray& stat) {
    for (auto& s : stat) {
      s.reset_accumulated();
    }
  };
  DeviceStats& st = dev.stats;
  for (auto* arr :
       {&st.allocation, &st.segment, &st.active, &st.inactive_split, &st.allocated_bytes,
        &st.reserved_bytes, &st.active_bytes, &st.inactive_split_bytes, &st.requested_bytes}) {
    reset(*arr);
  }
  st.num_alloc_retries = 0;
  st.num_ooms = 0;
  st.num_device_alloc = 0;
  st.num_device_free = 0;
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  DeviceMemory& dev = memory().at(device);
  std::lock_guard<std::mutex> lock(dev.mutex);
  DeviceStats& st = dev.stats;
  for (auto* arr :
       {&st.allocation, &st.segment, &st.active, &st.inactive_split, &st.allocated_bytes,
        &st.reserved_bytes, &st.active_bytes, &st.inactive_split_bytes, &st.requested_bytes}) {
    for (auto& s : *arr) {
      s.reset_peak();
    }
  }
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  DeviceMemory& dev = memory().at(device);
  std::lock_guard<std::mutex> lock(dev.mutex);
  const auto agg = static_cast<size_t>(StatType::AGGREGATE);
  const size_t reserved = static_cast<size_t>(dev.stats.reserved_bytes[agg].current);
  size_t total = dev.limit;
  if (total == 0) {
    total =
        static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  }
  return {total > reserved ? total - reserved : 0, total};
}

void DeviceAllocator::set_limit(c10::DeviceIndex device, std::optional<size_t> nbytes) {
  TORCH_CHECK_VALUE(!nbytes.has_value() || *nbytes > 0,
                    "set_memory_limit: the limit must be a positive number of bytes, "
                    "or None for no limit");
  DeviceMemory& dev = memory().at(device);
  std::lock_guard<std::mutex> lock(dev.mutex);
  dev.limit = nbytes.value_or(0);
}

std::optional<size_t> DeviceAllocator::limit(c10::DeviceIndex device) {
  DeviceMemory& dev = memory().at(device);
  std::lock_guard<std::mutex> lock(dev.mutex);
  if (dev.limit == 0) {
    return std::nullopt;
  }
  return dev.limit;
}

std::optional<c10::DeviceIndex> DeviceAllocator::device_of(const void* ptr) {
  return memory().device_of(ptr);
}

DeviceAllocator& device_allocator() {
  static DeviceAllocator allocator;
  return allocator;
}

}  // namespace openreg
