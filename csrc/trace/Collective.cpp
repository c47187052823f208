#include "trace/Collective.h"

#include "trace/Clock.h"
#include "trace/Hooks.h"
#include "trace/Intern.h"

#include <algorithm>
#include <mutex>
#include <string>

namespace openreg::trace {

namespace {

int8_t rank_code(int rank) {
  return static_cast<int8_t>(std::clamp(rank, -1, 127));
}

Event collective_event(const CollectiveInfo& info, int64_t start_ns) {
  Event e = blank_event(Kind::Collective, start_ns);
  e.name = intern(info.name);
  e.dispatch = intern(info.group);
  e.seq = info.seq;
  e.bytes = info.bytes;
  e.device = device_code(info.device);
  e.src = rank_code(info.rank);
  e.dst = rank_code(info.peer);
  e.reserved = static_cast<uint32_t>(info.size);
  e.from_dtype = info.dtype == at::ScalarType::Undefined ? -1 : static_cast<int8_t>(info.dtype);
  return e;
}

}  // namespace

CollectiveHandle begin_collective(const CollectiveInfo& info) {
  if (!enabled()) {
    return {};
  }
  Event e = collective_event(info, now_ns());
  e.dur_ns = -1;  // until it completes
  Writer w;
  if (!w) {
    return {};
  }
  CollectiveHandle h;
  h.index = w.append(e);
  if (h.index >= 0) {
    h.buffer = w.operator->();
    h.generation = w->generation;
  }
  return h;
}

void end_collective(const CollectiveHandle& h, int64_t end_ns) {
  if (h.buffer == nullptr) {
    return;
  }
  std::lock_guard<SpinLock> lock(h.buffer->lock);
  if (h.buffer->generation != h.generation ||
      static_cast<size_t>(h.index) >= h.buffer->events.size()) {
    return;  // its recording ended and the buffer was cleared
  }
  Event& e = h.buffer->events[h.index];
  e.dur_ns = end_ns - e.start_ns;
}

void record_collective_wait(const CollectiveInfo& info, int64_t start_ns) {
  if (!enabled()) {
    return;
  }
  const int64_t end = now_ns();
  Event e = collective_event(info, start_ns);
  e.name = intern(std::string("wait ").append(info.name));
  e.dur_ns = end - start_ns;
  e.flags = kWait;
  Writer w;
  if (w) {
    w.append(e);
  }
}

}  // namespace openreg::trace
