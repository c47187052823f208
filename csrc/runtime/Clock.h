#pragma once

// The device's clock: monotonic nanoseconds (CLOCK_MONOTONIC through the
// vDSO, ~20 ns). Profiler events (ProfilerStubs.cpp) and the times handed to
// the lab's hooks (Note [The lab's seam]) are readings of it; the lab's
// recorder reads the same clock (trace/Clock.h).

#include <chrono>
#include <cstdint>

namespace openreg {

inline int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace openreg
