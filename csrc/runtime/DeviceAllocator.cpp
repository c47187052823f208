#include "runtime/DeviceAllocator.h"

#include "runtime/Device.h"
#include "runtime/Seam.h"  // Note [The lab's seam]
#include "runtime/SharedSegment.h"

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace openreg {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;

// The lab's memory hooks (Note [The lab's seam]): nothing while no lab is
// loaded. `stack` comes from lab_memory_stack, called before the allocator
// takes its lock (the lab may take the GIL there).
uint32_t lab_memory_stack(bool free) {
  const seam::Hooks* lab = seam::hooks();
  return lab != nullptr ? lab->memory_stack(free) : 0;
}

void lab_record_memory(seam::MemoryAction action, c10::DeviceIndex device, int64_t bytes,
                       const void* address, int64_t total, uint32_t stack,
                       uint64_t device_free = 0) {
  if (const seam::Hooks* lab = seam::hooks()) {
    lab->record_memory(action, device, bytes, address, total, stack, device_free);
  }
}

uint32_t lab_block_stack(uint64_t address) {
  const seam::Hooks* lab = seam::hooks();
  return lab != nullptr ? lab->block_stack(address) : 0;
}

uint64_t lab_history_appended() {
  const seam::Hooks* lab = seam::hooks();
  return lab != nullptr ? lab->history_appended() : 0;
}

struct Block {
  void* ptr;
  size_t size;       // rounded size, what the block reserves
  size_t requested;  // what the caller asked for
  c10::DeviceIndex device;
  SharedSegment shared{};  // fd >= 0 once sent to another process
  // A block of the small pool that moved into a shared segment: its memory
  // before the move, freed with the block (Note [Sharing device memory across
  // processes]).
  void* retired = nullptr;
};

// Note [Large blocks are mappings of their own]
// A block of the large pool (kSmallBlockLimit, 1 MiB, or more) is mapped
// from the host by itself (anonymous, private, page-aligned): its pages hold
// nothing else, so it moves into a shared segment in place (Note [Sharing
// device memory across processes]). The price is the host's: a fresh block
// costs an mmap and a munmap (+2-3 us), and after empty_cache its pages fault
// in again where malloc would hand back pages it had touched (a fresh 1 MiB
// block written once: 2.5-2.7x, 350 us against 130 us, in
// benchmarks/bench_ipc.py alloc; 1.1x when the memory is new to malloc too;
// a cached block costs what it did). Smaller blocks come from malloc:
// mapped, a fresh block of 4-64 KiB written once took 3-9x as long, and tens
// of thousands of them would reach the kernel's limit on a process's
// mappings (vm.max_map_count, 65530 by default: 140,000 blocks of 4 KiB with
// every other one freed did, and munmap then fails). Both kinds are private
// copies after fork (Note [Fork safety]).
bool own_mapping(size_t size) {
  return size >= kSmallBlockLimit;
}

void* take_from_host(size_t size) {
  if (own_mapping(size)) {
    void* ptr = mmap(nullptr, page_rounded(size), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return ptr == MAP_FAILED ? nullptr : ptr;
  }
  return std::aligned_alloc(64, size == 0 ? 64 : size);
}

void return_to_host(void* ptr, size_t size) {
  if (own_mapping(size)) {
    munmap(ptr, page_rounded(size));
  } else {
    std::free(ptr);
  }
}

// Memory another process shared with this one (Note [Sharing device memory
// across processes]): mapped here, owned by the sender's allocator.
struct Import {
  SharedSegment segment;
  size_t nbytes;
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
  std::map<const char*, Block*> live;      // start -> block in use, by address
  std::multimap<size_t, Block*> cache;     // rounded size -> free block
  std::map<const char*, Import*> imports;  // start -> memory mapped from another process
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

std::atomic<OomObserver> g_oom_observer{nullptr};  // Note [Out of memory, observed]

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
    // Before the lock: it may take the GIL (Note [The memory history]).
    const uint32_t stack = lab_memory_stack(false);
    std::unique_lock<std::mutex> lock(dev.mutex);
    Block* block = take_cached(dev, size);
    if (block == nullptr) {
      block = reserve(dev, device, size, nbytes, stack);
    }
    if (block == nullptr) {
      std::string message = out_of_memory_message(dev, device, nbytes);
      lock.unlock();  // the observer may look at the allocator (Note [Out of memory, observed])
      if (OomObserver observer = g_oom_observer.load(std::memory_order_acquire)) {
        message += observer(device, nbytes);
      }
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    }
    block->requested = nbytes;
    dev.live.emplace(static_cast<const char*>(block->ptr), block);
    update(dev.stats.allocation, 1, size, true);
    update(dev.stats.active, 1, size, true);
    update(dev.stats.allocated_bytes, size, size, true);
    update(dev.stats.active_bytes, size, size, true);
    update(dev.stats.requested_bytes, nbytes, size, true);
    lab_record_memory(seam::MemoryAction::Alloc, device, static_cast<int64_t>(nbytes), block->ptr,
                      allocated_bytes(dev), stack);
    return block;
  }

  void free(Block* block) {
    DeviceMemory& dev = devices_[block->device];
    const uint32_t stack = lab_memory_stack(/*free=*/true);  // before the lock, as allocate's
    std::lock_guard<std::mutex> lock(dev.mutex);
    dev.live.erase(static_cast<const char*>(block->ptr));
    update(dev.stats.allocation, 1, block->size, false);
    update(dev.stats.active, 1, block->size, false);
    update(dev.stats.allocated_bytes, block->size, block->size, false);
    update(dev.stats.active_bytes, block->size, block->size, false);
    update(dev.stats.requested_bytes, block->requested, block->size, false);
    lab_record_memory(seam::MemoryAction::Free, block->device,
                      static_cast<int64_t>(block->requested), block->ptr, allocated_bytes(dev),
                      stack);
    if (block->shared.fd >= 0) {
      // Never cached: a receiver may still map it (Note [Sharing device memory
      // across processes]). The host keeps the pages for as long as it does.
      lab_record_memory(seam::MemoryAction::SegmentReturned, block->device,
                        static_cast<int64_t>(block->size), block->ptr, allocated_bytes(dev), stack);
      release_shared_segment(block->shared);
      std::free(block->retired);
      dev.stats.num_device_free += 1;
      update(dev.stats.segment, 1, block->size, false);
      update(dev.stats.reserved_bytes, block->size, block->size, false);
      delete block;
      return;
    }
    dev.cache.emplace(block->size, block);
  }

  // Moves `block` into a shared segment unless it is in one already; returns
  // its memory file and address (Note [Sharing device memory across
  // processes]). The block keeps its size, so the statistics do not move; a
  // large block keeps its address too, a small one gets a new one, where the
  // caller points the storage.
  std::pair<int, void*> make_shared(Block* block) {
    DeviceMemory& dev = devices_[block->device];
    std::lock_guard<std::mutex> lock(dev.mutex);
    if (block->shared.fd < 0) {
      if (own_mapping(block->size)) {
        block->shared = share_in_place(block->ptr, block->size, block->device);
      } else {
        SharedSegment segment = create_shared_segment(block->size, block->device);
        std::memcpy(segment.ptr, block->ptr, block->size);
        dev.live.erase(static_cast<const char*>(block->ptr));
        block->retired = block->ptr;  // a kernel started before the move may still write it
        block->ptr = segment.ptr;
        block->shared = segment;
        dev.live.emplace(static_cast<const char*>(block->ptr), block);
      }
      dev.stats.num_device_alloc += 1;
      dev.stats.num_device_free += 1;
    }
    return {block->shared.fd, block->ptr};
  }

  Import* add_import(SharedSegment segment, size_t nbytes, c10::DeviceIndex device) {
    DeviceMemory& dev = at(device);
    auto* import = new Import{segment, nbytes, device};
    std::lock_guard<std::mutex> lock(dev.mutex);
    dev.imports.emplace(static_cast<const char*>(segment.ptr), import);
    return import;
  }

  void remove_import(Import* import) {
    DeviceMemory& dev = devices_[import->device];
    {
      std::lock_guard<std::mutex> lock(dev.mutex);
      dev.imports.erase(static_cast<const char*>(import->segment.ptr));
    }
    release_shared_segment(import->segment);
    delete import;
  }

  void empty_cache() {
    for (auto& dev : devices_) {
      std::lock_guard<std::mutex> lock(dev.mutex);
      release_cache(dev);
    }
  }

  std::vector<DeviceAllocator::BlockInfo> blocks(c10::DeviceIndex device,
                                                 uint64_t* history_appended) {
    DeviceMemory& dev = at(device);
    std::lock_guard<std::mutex> lock(dev.mutex);
    std::vector<DeviceAllocator::BlockInfo> out;
    out.reserve(dev.live.size() + dev.cache.size());
    for (const auto& [start, block] : dev.live) {
      const auto address = reinterpret_cast<uintptr_t>(start);
      out.push_back({address, block->size, block->requested, true, lab_block_stack(address)});
    }
    for (const auto& [size, block] : dev.cache) {
      out.push_back({reinterpret_cast<uintptr_t>(block->ptr), size, block->requested, false, 0});
    }
    if (history_appended != nullptr) {
      // Under the lock the history's entries of this device are appended under.
      *history_appended = lab_history_appended();
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.address < b.address; });
    return out;
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
      auto imp = dev.imports.upper_bound(c);
      if (imp != dev.imports.begin() &&
          c < std::prev(imp)->first + std::prev(imp)->second->segment.length) {
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

  Block* reserve(DeviceMemory& dev, c10::DeviceIndex device, size_t size, size_t requested,
                 uint32_t stack) {
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    auto reserved = [&] { return static_cast<size_t>(dev.stats.reserved_bytes[agg].current); };
    if (dev.limit != 0 && reserved() + size > dev.limit && !dev.cache.empty()) {
      release_cache(dev, stack);
      dev.stats.num_alloc_retries += 1;
    }
    void* ptr = nullptr;
    if (dev.limit == 0 || reserved() + size <= dev.limit) {
      ptr = take_from_host(size);  // Note [Large blocks are mappings of their own]
    }
    if (ptr == nullptr) {
      dev.stats.num_ooms += 1;
      size_t total = dev.limit;  // what the device has, as getMemoryInfo says it
      if (total == 0) {
        total = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) *
                static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
      }
      const size_t available = total > reserved() ? total - reserved() : 0;
      lab_record_memory(seam::MemoryAction::Oom, device, static_cast<int64_t>(requested), nullptr,
                        allocated_bytes(dev), stack, available);
      return nullptr;
    }
    dev.stats.num_device_alloc += 1;
    update(dev.stats.segment, 1, size, true);
    update(dev.stats.reserved_bytes, size, size, true);
    lab_record_memory(seam::MemoryAction::SegmentTaken, device, static_cast<int64_t>(size), ptr,
                      allocated_bytes(dev), stack);
    return new Block{ptr, size, requested, device};
  }

  // The OutOfMemoryError's message for a request of `requested` bytes.
  std::string out_of_memory_message(DeviceMemory& dev, c10::DeviceIndex device, size_t requested) {
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    const size_t allocated = static_cast<size_t>(dev.stats.allocated_bytes[agg].current);
    const size_t reserved = static_cast<size_t>(dev.stats.reserved_bytes[agg].current);
    const std::string limit = dev.limit == 0 ? std::string("no limit (the host is out of memory)")
                                             : "limit " + format_bytes(dev.limit);
    return c10::str("openreg:", static_cast<int>(device), " out of memory: tried to allocate ",
                    format_bytes(requested), " (", requested, " bytes); ", format_bytes(allocated),
                    " is allocated by tensors and ", format_bytes(reserved), " reserved in total, ",
                    limit,
                    ". Free some tensors, or raise the limit with "
                    "torch.openreg.set_memory_limit(nbytes_or_None, device=",
                    static_cast<int>(device), ") or OPENREG_MEMORY_LIMIT.");
  }

  // `stack`: the allocation that made room, if any (for the memory history).
  void release_cache(DeviceMemory& dev, uint32_t stack = 0) {
    for (auto& [size, block] : dev.cache) {
      lab_record_memory(seam::MemoryAction::SegmentReturned, block->device,
                        static_cast<int64_t>(size), block->ptr, allocated_bytes(dev), stack);
      return_to_host(block->ptr, size);
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

void delete_import(void* ctx) {
  memory().remove_import(static_cast<Import*>(ctx));
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

std::vector<DeviceAllocator::BlockInfo> DeviceAllocator::blocks(c10::DeviceIndex device,
                                                                uint64_t* history_appended) {
  return memory().blocks(device, history_appended);
}

void set_oom_observer(OomObserver observer) {
  g_oom_observer.store(observer, std::memory_order_release);
}

std::optional<c10::DeviceIndex> DeviceAllocator::device_of(const void* ptr) {
  return memory().device_of(ptr);
}

// Note [Sharing device memory across processes]
// torch.multiprocessing pickles an openreg storage (a tensor pickles as its
// storage plus offset, sizes and strides) as the memory file of a shared
// segment (openreg_lab/device/_sharing.py); the receiver maps the same pages,
// so a write on either side is seen by the other, as CUDA's IPC handles do.
//
// - Where shared memory comes from: a block moves into a segment of its own
//   (a memory file, SharedSegment.h) the first time it is sent. A block of
//   1 MiB or more (Note [Large blocks are mappings of their own]) moves in
//   place: its bytes are copied into the file, then the file is mapped over
//   the block's own pages (mmap MAP_FIXED), so its address, the storage's
//   DataPtr and any pointer into it stay what they were. A smaller block may
//   share its pages with other allocations, so it moves to the segment's
//   address, where the storage's DataPtr is pointed; its old memory is kept
//   until the block is freed.
//   Allocations that are never sent keep the fast path (the cache).
// - Why not a segment for every block: benchmarks/bench_ipc.py (two runs
//   on a 2-core machine under load 20, so ranges) times a fresh block at
//   3-20 us and the bare syscalls of a segment (memfd_create, ftruncate,
//   mmap, munmap, close; no page touched) at 25-400 us, 5x-77x: every new
//   block would pay that, shared or not, and a tiny tensor would hold a
//   whole page and a file descriptor. Moved lazily, only what is sent pays,
//   about what torch's own first send of a CPU tensor costs (0.4x-1.4x).
//   One shared arena per device would avoid the move, but after fork parent
//   and child would write the same blocks (Note [Fork safety] relies on the
//   child's memory being a copy).
// - A write by another thread while the storage is first sent (Hogwild
//   workers, a queue fed while a model trains) never reaches freed memory
//   and never faults: the kernel swaps the pages in one step for the other
//   threads, and a small block's old memory outlives every kernel that can
//   still hold its address. What the move may cost is the write itself: in a
//   block of 1 MiB or more, a byte written after the copy read it and before
//   the file is mapped went to the private page the mapping drops, so it is
//   lost; in a smaller block, a kernel that started before the move writes
//   the old memory to its end, so what it writes after the copy is lost.
//   Every write that ends before the send begins, or begins after it
//   returns, is kept, on both sides; later sends move nothing and lose
//   nothing. A raw pointer taken before the first send (data_ptr()) stays
//   valid while the storage lives: the block's own for 1 MiB or more, the
//   old memory (no longer the storage's) for a smaller one.
// - Lifetime: a shared block is never cached. When the sender frees it, it
//   is unmapped and its file closed, but the host keeps the pages while a
//   receiver maps them (or a message in flight holds a duplicate of the
//   file), so a receiver never reads freed or reused memory and no
//   reference counts cross processes.
// - Statistics: the sender counts the block while it holds it (a send moves
//   no bytes in its statistics); when freed, a shared block leaves
//   memory_reserved at once instead of staying in the cache. The receiver
//   counts nothing: the memory is the sender's, as with CUDA's IPC.
// - A received storage can be sent on (the receiver keeps the file); it is
//   not resizable. Memory openreg did not allocate (a storage over foreign
//   memory) cannot be shared and says so.
// - fork: a shared segment stays shared between parent and child, like a CPU
//   storage in shared memory; blocks never sent stay private copies
//   (Note [Fork safety]).
DeviceAllocator::SharedHandle DeviceAllocator::share(c10::StorageImpl& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  const c10::Device device = data.device();
  if (data.get_deleter() == &delete_import) {
    auto* import = static_cast<Import*>(data.get_context());
    return {import->segment.fd, storage.nbytes(), import->device};
  }
  TORCH_CHECK(data.get_deleter() == &delete_block && data.get_context() != nullptr,
              "an openreg storage of ", storage.nbytes(), " bytes on ", device,
              " over memory openreg's allocator did not allocate cannot be shared between "
              "processes: send a clone() of the tensor instead");
  auto* block = static_cast<Block*>(data.get_context());
  const auto [fd, ptr] = memory().make_shared(block);
  if (data.get() != ptr) {
    c10::DataPtr old = storage.set_data_ptr(c10::DataPtr(ptr, block, &delete_block, device));
    old.release_context();  // the block lives on, at its new address
  }
  return {fd, storage.nbytes(), block->device};
}

c10::Storage DeviceAllocator::import_shared(int fd, size_t nbytes, c10::DeviceIndex device) {
  if (device < 0 || device >= device_count()) {
    close(fd);
    TORCH_CHECK(false, "an openreg storage on openreg:", static_cast<int>(device),
                " was received from another process, but this process has ",
                static_cast<int>(device_count()),
                " openreg devices: give both the same OPENREG_DEVICE_COUNT");
  }
  const SharedSegment segment = map_shared_segment(fd, nbytes);
  Import* import = memory().add_import(segment, nbytes, device);
  c10::DataPtr data(segment.ptr, import, &delete_import,
                    c10::Device(c10::DeviceType::PrivateUse1, device));
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

DeviceAllocator& device_allocator() {
  static DeviceAllocator allocator;
  return allocator;
}

}  // namespace openreg
