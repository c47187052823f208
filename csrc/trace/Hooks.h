#pragma once

// What the backend calls at its decision points, through the lab's table of
// hooks (trace/SeamHooks.cpp). Each hook starts with
// enabled(): one relaxed atomic load when no trace is open (Recorder.h).
// Operator calls themselves are observed through RecordFunction
// (OpObserver.cpp); the hooks here add what only the backend knows.

#include "aten/KernelScopes.h"
#include "runtime/Seam.h"
#include "trace/Clock.h"
#include "trace/Recorder.h"

#include <ATen/core/function_schema.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string_view>

namespace openreg::trace {

// The fallback hooks of the lab's table (Note [The lab's seam] in
// runtime/Seam.h), around the CPU side of an op run by the boxed fallback
// (the template's FallbackScope), from its first copy to CPU to its last
// copy back; the enclosing op's kernel becomes `fallback`.
void fallback_begin(seam::Scope& scope, const c10::FunctionSchema& op);
void fallback_end(seam::Scope& scope);

// The template's scope around the backend's own dispatcher calls (Note [The
// backend's own dispatcher calls] in aten/KernelScopes.h): the recorder asks
// InternalScope::inside().
using ::openreg::InternalScope;

inline int8_t device_code(c10::Device d) {
  return d.is_cpu() ? kCpu : static_cast<int8_t>(d.index());
}

// A copy of `bytes` from `src` to `dst` that started at `start_ns`.
void record_copy(int64_t start_ns, c10::Device src, c10::Device dst, int64_t bytes);

// Autocast cast `arg_index` of a call to `op` (Autocast.cpp).
void record_cast(int64_t start_ns, const c10::FunctionSchema& op, size_t arg_index,
                 c10::Device device, at::ScalarType from, at::ScalarType to, int64_t bytes,
                 bool cache_hit);

// What the allocator did (Note [Memory events] in Event.h): `kind` is Alloc,
// Free, Segment (`taken`: from the host, else given back) or Oom; `bytes` the
// request or the segment's size, `address` the block's, `total` the bytes
// allocated on the device afterwards. Also an entry of the memory history
// when one is recorded (Note [The memory history] in MemoryHistory.h), with
// `stack` (memory_stack(), taken before the allocator's lock) and, for Oom,
// the bytes the device had free.
void record_memory(Kind kind, c10::DeviceIndex device, int64_t bytes, const void* address,
                   int64_t total, bool taken = true, uint32_t stack = 0, uint64_t device_free = 0);

// Says which kernel the innermost open op really ran, where its dispatch table
// cannot tell (e.g. a profile's composite redirect registered as a kernel).
void mark_kernel(Kernel kernel);

// An instant, e.g. "profile: mps".
void record_mark(std::string_view name);

// The end of training step `number` (openreg_lab.step(), an optimizer step).
void record_step(int64_t number);

// Note [Module spans]
// An nn.Module's forward from `start_ns` to now, named `name` (an interned
// path such as "GPT2LMHeadModel.transformer.h.3.attn"), recorded when the
// forward returns (openreg_lab/recording/modules.py's global hooks). It is
// not the parent of the ops and allocations that ran inside it: those keep
// their op parents, and the module of an event is the innermost span around
// it on its thread (recording/memory.py reads it that way), so the op tree and
// every table built on it look as they do without modules.
void record_module(uint32_t name, int64_t start_ns);

}  // namespace openreg::trace
