#pragma once

// A thread's events, in fixed chunks of 16384 (1 MiB): appending never moves
// what is already recorded (a growing std::vector would copy it all, and
// fault in fresh pages each time it doubles). Chunks of a finished recording
// go back to a small shared pool, so the next trace writes to memory that is
// already mapped.

#include "trace/Event.h"

#include <cstddef>
#include <memory>
#include <vector>

namespace openreg::trace {

class EventStore {
 public:
  static constexpr size_t kChunkBits = 14;
  static constexpr size_t kChunk = size_t{1} << kChunkBits;

  EventStore() = default;
  EventStore(const EventStore&) = delete;
  EventStore& operator=(const EventStore&) = delete;
  ~EventStore() {
    clear();
  }

  size_t size() const noexcept {
    return size_;
  }
  Event& operator[](size_t i) noexcept {
    return chunks_[i >> kChunkBits][i & (kChunk - 1)];
  }

  void push_back(const Event& e) {
    if (size_ == chunks_.size() * kChunk) {
      chunks_.push_back(take_chunk());
    }
    (*this)[size_++] = e;
  }

  // Appends events [first, size()) to `out`.
  void copy_to(std::vector<Event>& out, size_t first) const;

  // Empties the store; its chunks go back to the pool.
  void clear();

 private:
  using Chunk = std::unique_ptr<Event[]>;
  static Chunk take_chunk();

  std::vector<Chunk> chunks_;
  size_t size_ = 0;
};

}  // namespace openreg::trace
