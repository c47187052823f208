#include "trace/MemoryHistory.h"

#include "trace/Clock.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

namespace openreg::trace {
namespace {

// Note [The memory history] (MemoryHistory.h).
struct History {
  std::mutex mutex;  // taken under the allocator's device lock, never the other way
  HistoryOptions options;
  std::vector<HistoryEntry> ring;
  size_t next = 0;                              // the oldest entry once the ring is full
  std::unordered_map<uint64_t, uint32_t> live;  // a live block's address -> its stack
};

std::atomic<bool> g_history_on{false};
std::atomic<int8_t> g_history_context{0};
std::atomic<uint64_t> g_history_appended{0};  // changed under History::mutex
std::atomic<StackProvider> g_stack_provider{nullptr};

History& history();

// Note [The recorder across fork] (Recorder.cpp): a reader of the history may
// hold its mutex when another thread forks. Its holders wait for nothing, and
// these handlers are registered when the extension loads, before the
// allocator's, so the prepare handler takes it after the device locks, in the
// order appends take them.
void lock_history_for_fork() {
  history().mutex.lock();
}

void unlock_history_after_fork() {
  history().mutex.unlock();
}

History& history() {
  static auto* h = [] {
    auto* created = new History();  // leaked: tensors may be freed at exit
    pthread_atfork(&lock_history_for_fork, &unlock_history_after_fork, &unlock_history_after_fork);
    return created;
  }();
  return *h;
}

[[maybe_unused]] const bool kHistoryForkHandlers = (history(), true);

// The ring's entries, oldest first.
std::vector<HistoryEntry> in_order(const History& h) {
  std::vector<HistoryEntry> out;
  out.reserve(h.ring.size());
  out.insert(out.end(), h.ring.begin() + static_cast<std::ptrdiff_t>(h.next), h.ring.end());
  out.insert(out.end(), h.ring.begin(), h.ring.begin() + static_cast<std::ptrdiff_t>(h.next));
  return out;
}

}  // namespace

bool history_on() noexcept {
  return g_history_on.load(std::memory_order_relaxed);
}

void configure_history(const HistoryOptions& options) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (!options.enabled || options.clear) {
    h.ring = {};
    h.next = 0;
    h.live.clear();
    g_history_appended.store(0);
  }
  if (options.enabled && h.options.enabled && options.max_entries != h.options.max_entries) {
    // Keep the newest entries that fit; the rest count as dropped.
    std::vector<HistoryEntry> kept = in_order(h);
    const size_t n = std::min<size_t>(kept.size(), options.max_entries);
    h.ring.assign(kept.end() - static_cast<std::ptrdiff_t>(n), kept.end());
    h.next = 0;
  }
  if (options.context == StackContext::None) {
    h.live.clear();
  }
  h.options = options;
  h.options.clear = false;
  g_history_context.store(
      static_cast<int8_t>(options.enabled ? options.context : StackContext::None));
  g_history_on.store(options.enabled);
}

uint32_t memory_stack(bool free) {
  if (!history_on()) {
    return 0;
  }
  const auto context = static_cast<StackContext>(g_history_context.load(std::memory_order_relaxed));
  if (context == StackContext::None || (free && context != StackContext::All)) {
    return 0;
  }
  const StackProvider provider = g_stack_provider.load(std::memory_order_acquire);
  return provider != nullptr ? provider() : 0;
}

void record_history(HistoryAction action, c10::DeviceIndex device, uint64_t address, int64_t size,
                    uint32_t stack) {
  if (!history_on()) {
    return;
  }
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  const HistoryOptions& o = h.options;
  if (!o.enabled) {
    return;  // turned off meanwhile
  }
  if (o.context != StackContext::None) {
    if (action == HistoryAction::Alloc && stack != 0) {
      h.live[address] = stack;
    } else if (action == HistoryAction::Alloc || action == HistoryAction::Free) {
      h.live.erase(address);
    }
  }
  const auto bit = 1u << static_cast<unsigned>(action);
  if (!o.entries || o.max_entries == 0 || (o.skip & bit) != 0) {
    return;
  }
  // "state" keeps stacks for live blocks only; a free's stack is wanted with "all".
  const bool keep_stack = action == HistoryAction::Free ? o.context == StackContext::All
                                                        : o.context >= StackContext::Alloc;
  const HistoryEntry e{now_ns(),
                       address,
                       size,
                       keep_stack ? stack : 0,
                       static_cast<int8_t>(action),
                       static_cast<int8_t>(device),
                       0};
  if (h.ring.size() < o.max_entries) {
    h.ring.push_back(e);
  } else {
    h.ring[h.next] = e;
    h.next = (h.next + 1) % h.ring.size();
  }
  g_history_appended.fetch_add(1, std::memory_order_relaxed);
}

uint64_t history_appended() noexcept {
  return g_history_appended.load(std::memory_order_relaxed);
}

uint32_t block_stack(uint64_t address) {
  if (!history_on()) {
    return 0;
  }
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  auto it = h.live.find(address);
  return it == h.live.end() ? 0 : it->second;
}

HistoryCopy read_history() {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  HistoryCopy out;
  out.entries = in_order(h);
  out.appended = g_history_appended.load();
  out.max_entries = h.options.max_entries;
  out.options = h.options;
  return out;
}

void set_stack_provider(StackProvider provider) {
  g_stack_provider.store(provider, std::memory_order_release);
}

}  // namespace openreg::trace
