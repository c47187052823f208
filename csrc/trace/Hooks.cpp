#include "trace/Hooks.h"

#include "trace/Compiled.h"
#include "trace/MemoryHistory.h"
#include "trace/OpNames.h"

#include <algorithm>

namespace openreg::trace {

namespace {

// Sets the kernel of the innermost open event, if it is an op.
void mark_innermost(Writer& w, Kernel kernel) {
  const int32_t owner = w.innermost();
  if (owner >= 0 && w->events[owner].kind == static_cast<int8_t>(Kind::Op)) {
    w->events[owner].kernel = static_cast<int8_t>(kernel);
  }
}

}  // namespace

void fallback_begin(seam::Scope& scope, const c10::FunctionSchema& op) {
  if (!enabled()) {
    return;
  }
  Writer w;
  if (!w) {
    return;
  }
  mark_innermost(w, Kernel::Fallback);
  Event e = blank_event(Kind::Fallback, now_ns());
  e.dur_ns = -1;  // until it ends
  e.kernel = static_cast<int8_t>(Kernel::Fallback);
  e.name = op_name_id(op);
  scope.index = w.append(e);
  if (scope.index >= 0) {
    w->scopes.push_back(scope.index);
    scope.generation = w->generation;
    scope.open = true;
  }
}

void fallback_end(seam::Scope& scope) {
  Writer w;
  if (!w || w->generation != scope.generation) {
    return;
  }
  w->events[scope.index].dur_ns = now_ns() - w->events[scope.index].start_ns;
  if (!w->scopes.empty() && w->scopes.back() == scope.index) {
    w->scopes.pop_back();
  }
}

namespace {

uint32_t direction(c10::Device src, c10::Device dst) {
  static const uint32_t h2d = intern("H2D");
  static const uint32_t d2h = intern("D2H");
  static const uint32_t d2d = intern("D2D");
  if (src.is_cpu()) {
    return h2d;
  }
  return dst.is_cpu() ? d2h : d2d;
}

}  // namespace

void record_copy(int64_t start_ns, c10::Device src, c10::Device dst, int64_t bytes) {
  if (!enabled()) {
    return;
  }
  const int64_t end = now_ns();
  Writer w;
  if (!w) {
    return;
  }
  Event e = blank_event(Kind::Copy, start_ns);
  e.dur_ns = end - start_ns;
  e.name = direction(src, dst);
  e.bytes = bytes;
  e.src = device_code(src);
  e.dst = device_code(dst);
  e.device = dst.is_cpu() ? e.src : e.dst;
  w.append(e);
}

void record_cast(int64_t start_ns, const c10::FunctionSchema& op, size_t arg_index,
                 c10::Device device, at::ScalarType from, at::ScalarType to, int64_t bytes,
                 bool cache_hit) {
  if (!enabled()) {
    return;
  }
  const int64_t end = now_ns();
  const uint32_t name = op_name_id(op);
  const uint32_t argument = intern(op.arguments()[arg_index].name());
  Writer w;
  if (!w) {
    return;
  }
  Event e = blank_event(Kind::Cast, start_ns);
  e.dur_ns = end - start_ns;
  e.name = name;
  e.dispatch = argument;
  e.bytes = bytes;
  e.device = device_code(device);
  e.from_dtype = static_cast<int8_t>(from);
  e.to_dtype = static_cast<int8_t>(to);
  e.flags = cache_hit ? kCacheHit : 0;
  w.append(e);
}

void record_memory(Kind kind, c10::DeviceIndex device, int64_t bytes, const void* address,
                   int64_t total, bool taken, uint32_t stack, uint64_t device_free) {
  if (history_on()) {
    HistoryAction action = HistoryAction::Oom;
    switch (kind) {
      case Kind::Alloc:
        action = HistoryAction::Alloc;
        break;
      case Kind::Free:
        action = HistoryAction::Free;
        break;
      case Kind::Segment:
        action = taken ? HistoryAction::SegmentAlloc : HistoryAction::SegmentFree;
        break;
      default:
        break;
    }
    const auto where = reinterpret_cast<uintptr_t>(address);
    record_history(action, device, action == HistoryAction::Oom ? device_free : where, bytes,
                   stack);
  }
  if (!enabled()) {
    return;
  }
  static const uint32_t names[] = {intern("alloc"), intern("free"), intern("segment_alloc"),
                                   intern("segment_free"), intern("oom")};
  Writer w;
  if (!w) {
    return;
  }
  Event e = blank_event(kind, now_ns());
  switch (kind) {
    case Kind::Alloc:
      e.name = names[0];
      break;
    case Kind::Free:
      e.name = names[1];
      break;
    case Kind::Segment:
      e.name = taken ? names[2] : names[3];
      break;
    default:
      e.name = names[4];
      break;
  }
  e.bytes = bytes;
  e.seq = total;
  e.device = static_cast<int8_t>(device);
  if (kind == Kind::Alloc) {
    e.source = node_source();  // Note [The node an allocation is for]
  }
  set_address(e, address);
  w.append(e);
}

void mark_kernel(Kernel kernel) {
  if (!enabled()) {
    return;
  }
  Writer w;
  if (w) {
    mark_innermost(w, kernel);
  }
}

void record_mark(std::string_view name) {
  if (!enabled()) {
    return;
  }
  const uint32_t id = intern(name);
  Writer w;
  if (!w) {
    return;
  }
  Event e = blank_event(Kind::Mark, now_ns());
  e.name = id;
  w.append(e);
}

void record_step(int64_t number) {
  if (!enabled()) {
    return;
  }
  static const uint32_t id = intern("step");
  Writer w;
  if (!w) {
    return;
  }
  Event e = blank_event(Kind::Step, now_ns());
  e.name = id;
  e.seq = number;
  w.append(e);
}

void record_module(uint32_t name, int64_t start_ns) {
  if (!enabled()) {
    return;
  }
  Writer w;
  if (!w) {
    return;
  }
  const int64_t end = now_ns();
  Event e = blank_event(Kind::Module, std::min(start_ns, end));
  e.dur_ns = end - e.start_ns;
  e.name = name;
  w.append(e);
}

}  // namespace openreg::trace
