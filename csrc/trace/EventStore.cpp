#include "trace/EventStore.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>

namespace openreg::trace {
namespace {

constexpr size_t kPoolChunks = 64;  // keep at most 64 MiB of events for reuse

struct Pool {
  std::mutex mutex;
  std::vector<std::unique_ptr<Event[]>> chunks;
};

Pool& pool();

// Note [The recorder across fork] (Recorder.cpp): fork() happens between two
// pool operations; a holder of the mutex waits for nothing else.
void lock_for_fork() {
  pool().mutex.lock();
}

void unlock_after_fork() {
  pool().mutex.unlock();
}

Pool& pool() {
  static auto* p = [] {
    auto* created = new Pool();  // leaked: threads may return chunks until exit
    pthread_atfork(&lock_for_fork, &unlock_after_fork, &unlock_after_fork);
    return created;
  }();
  return *p;
}

// Registered when the extension loads, before the allocator's handlers (made
// with its first allocation): prepare handlers run in the reverse order, so
// this lock is taken after the allocator's, whose holders may wait for it
// (an alloc event appended under the allocator's mutex).
[[maybe_unused]] const bool kForkHandlers = (pool(), true);

}  // namespace

EventStore::Chunk EventStore::take_chunk() {
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (!p.chunks.empty()) {
      Chunk c = std::move(p.chunks.back());
      p.chunks.pop_back();
      return c;
    }
  }
  return Chunk(new Event[kChunk]);
}

void EventStore::copy_to(std::vector<Event>& out, size_t first) const {
  out.reserve(out.size() + (size_ - std::min(first, size_)));
  for (size_t i = first; i < size_;) {
    const size_t in_chunk = i & (kChunk - 1);
    const size_t n = std::min(kChunk - in_chunk, size_ - i);
    const Event* chunk = chunks_[i >> kChunkBits].get();
    out.insert(out.end(), chunk + in_chunk, chunk + in_chunk + n);
    i += n;
  }
}

void EventStore::clear() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (Chunk& c : chunks_) {
    if (p.chunks.size() < kPoolChunks) {
      p.chunks.push_back(std::move(c));
    }
  }
  chunks_.clear();
  size_ = 0;
}

}  // namespace openreg::trace
