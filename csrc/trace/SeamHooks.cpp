#include "trace/SeamHooks.h"

#include "trace/Collective.h"
#include "trace/Hooks.h"
#include "trace/KernelEvents.h"
#include "trace/MemoryHistory.h"
#include "trace/Recorder.h"

namespace openreg::trace {
namespace {

// The seam's plain types as the recorder's own (Collective.h, Hooks.h).
CollectiveInfo recorder_info(const seam::CollectiveInfo& info) {
  CollectiveInfo out;
  out.name = info.name;
  out.group = info.group;
  out.seq = info.seq;
  out.bytes = info.bytes;
  out.dtype = info.dtype;
  out.device = info.device;
  out.rank = info.rank;
  out.size = info.size;
  out.peer = info.peer;
  return out;
}

seam::CollectiveEvent begin_collective_hook(const seam::CollectiveInfo& info) {
  const CollectiveHandle h = begin_collective(recorder_info(info));
  return {h.buffer, h.generation, h.index};
}

void end_collective_hook(const seam::CollectiveEvent& event, int64_t end_ns) {
  end_collective({static_cast<ThreadBuffer*>(event.owner), event.generation, event.index}, end_ns);
}

void collective_wait_hook(const seam::CollectiveInfo& info, int64_t start_ns) {
  record_collective_wait(recorder_info(info), start_ns);
}

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
  table.begin_collective = &begin_collective_hook;
  table.end_collective = &end_collective_hook;
  table.record_collective_wait = &collective_wait_hook;
}

}  // namespace openreg::trace
