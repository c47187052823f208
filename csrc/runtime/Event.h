#pragma once

// Events of the simulated device: what the guard's record/query/elapsedTime
// hand back and forth as opaque `void*` handles. See Note [Synchronous
// execution] in Stream.h for why an event is complete once recorded.

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>

namespace openreg {

struct Event {
  c10::DeviceIndex device = -1;
  c10::StreamId stream = 0;
  bool timing = false;  // created with enable_timing=True
  bool recorded = false;
  int64_t time_ns = 0;  // steady clock at the last record()
};

// Creates the event behind `*handle` on first use, then records it on `stream`.
void record_event(void** handle, const c10::Stream& stream, c10::DeviceIndex device,
                  c10::EventFlag flag);

void destroy_event(void* handle) noexcept;

// Milliseconds from `start` to `end`, as CUDA's elapsed_time.
double elapsed_ms(void* start, void* end);

}  // namespace openreg
