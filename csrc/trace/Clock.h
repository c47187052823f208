#pragma once

// The recorder's one clock: monotonic nanoseconds (CLOCK_MONOTONIC through
// the vDSO, ~20 ns). Every event's start_ns and dur_ns come from here.

#include <chrono>
#include <cstdint>

namespace openreg::trace {

inline int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace openreg::trace
