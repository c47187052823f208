#include "trace/Compiled.h"

#include "trace/Clock.h"
#include "trace/Recorder.h"

#include <algorithm>

namespace openreg::trace {

namespace {

// A token is the event's buffer index in the low 32 bits and the recording's
// generation (truncated) above it, so an event opened in an earlier recording
// is never ended in the next one.
constexpr int64_t kIndexMask = 0xffffffffLL;
constexpr uint64_t kGenerationMask = 0x7fffffffULL;

int64_t token(int32_t index, uint64_t generation) {
  return static_cast<int64_t>((generation & kGenerationMask) << 32) | index;
}

int64_t begin(Kind kind, uint32_t name, uint32_t dispatch, int8_t device) {
  if (!enabled()) {
    return -1;
  }
  Writer w;
  if (!w) {
    return -1;
  }
  Event e = blank_event(kind, now_ns());
  e.dur_ns = -1;  // until it ends
  e.name = name;
  e.dispatch = dispatch;
  e.device = device;
  const int32_t index = w.append(e);
  if (index < 0) {
    return -1;
  }
  w->scopes.push_back(index);
  return token(index, w->generation);
}

}  // namespace

int64_t compiled_begin(uint32_t name, uint32_t fused, int8_t device) {
  return begin(Kind::Compiled, name, fused, device);
}

int64_t compile_begin(uint32_t name) {
  return begin(Kind::Compile, name, 0, kNoDevice);
}

void scope_end(int64_t t, uint32_t reason) {
  if (t < 0 || !enabled()) {
    return;
  }
  const int64_t end = now_ns();
  Writer w;
  if (!w || (w->generation & kGenerationMask) != static_cast<uint64_t>(t >> 32)) {
    return;
  }
  const auto index = static_cast<int32_t>(t & kIndexMask);
  if (index >= static_cast<int32_t>(w->events.size())) {
    return;
  }
  w->events[index].dur_ns = end - w->events[index].start_ns;
  if (reason != 0) {
    w->events[index].dispatch = reason;
  }
  // Scopes nest: an exception may have skipped the end of inner ones.
  while (!w->scopes.empty() && w->scopes.back() >= index) {
    w->scopes.pop_back();
  }
}

void record_compile(uint32_t name, uint32_t reason, int64_t start_ns) {
  if (!enabled()) {
    return;
  }
  Writer w;
  if (!w) {
    return;
  }
  const int64_t end = now_ns();
  Event e = blank_event(Kind::Compile, start_ns > 0 ? std::min(start_ns, end) : end);
  e.dur_ns = end - e.start_ns;
  e.name = name;
  e.dispatch = reason;
  w.append(e);
}

namespace {
struct Node {
  uint32_t frame = 0;
  uint32_t source = 0;
};
thread_local Node tls_node;  // Note [The node an allocation is for]
}  // namespace

void set_node(uint32_t frame, uint32_t source) noexcept {
  tls_node = {frame, source};
}

uint32_t node_frame() noexcept {
  return tls_node.frame;
}

uint32_t node_source() noexcept {
  return tls_node.source;
}

}  // namespace openreg::trace
