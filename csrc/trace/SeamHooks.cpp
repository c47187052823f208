#include "trace/SeamHooks.h"

#include "trace/Hooks.h"
#include "trace/KernelEvents.h"
#include "trace/MemoryHistory.h"
#include "trace/Recorder.h"

namespace openreg::trace {
namespace {

void record_memory_hook(seam::MemoryAction action, c10::DeviceIndex device, int64_t bytes,
                        const void* address, int64_t total, uint32_t stack, uint64_t device_free) {
  Kind kind = Kind::Oom;
  bool taken = true;
  switch (action) {
    case seam::MemoryAction::Alloc:
      kind = Kind::Alloc;
      break;
    case seam::MemoryAction::Free:
      kind = Kind::Free;
      break;
    case seam::MemoryAction::SegmentTaken:
      kind = Kind::Segment;
      break;
    case seam::MemoryAction::SegmentReturned:
      kind = Kind::Segment;
      taken = false;
      break;
    case seam::MemoryAction::Oom:
      break;
  }
  record_memory(kind, device, bytes, address, total, taken, stack, device_free);
}

uint32_t memory_stack_hook(bool free) {
  return memory_stack(free);
}

uint64_t history_appended_hook() {
  return history_appended();
}

}  // namespace

void fill_hooks(seam::Hooks& table) {
  table.recording = &g_enabled;
  table.kernel_events = &g_kernel_events;
  table.kernel_begin = &kernel_begin;
  table.kernel_begin_boxed = &kernel_begin_boxed;
  table.kernel_end = &kernel_end;
  table.fallback_begin = &fallback_begin;
  table.fallback_end = &fallback_end;
  table.record_copy = &record_copy;
  table.record_cast = &record_cast;
  table.memory_stack = &memory_stack_hook;
  table.record_memory = &record_memory_hook;
  table.block_stack = &block_stack;
  table.history_appended = &history_appended_hook;
}

}  // namespace openreg::trace
