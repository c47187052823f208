#pragma once

// Note [The lab's seam]
// The table of hooks through which openreg-lab (its recorder, csrc/trace, and
// its coverage profiles, csrc/coverage) attaches to the template: the folders
// a vendor copies (csrc/runtime, csrc/aten, csrc/distributed and the device's
// Python binding, csrc/python/device). The template includes no lab header
// (tests/layout/test_layers.py checks it) and builds and runs without the lab
// (`make template-check`): while no lab is loaded the table is null, and each
// place below costs one relaxed atomic load (hooks()) and does nothing else.
// The lab fills a table when its extension loads and hands it over with
// attach(); from then on it lives as long as the process.
//
// The hooks take plain types only (this header's structs, ATen's and c10's):
// no recorder type crosses the seam. What each hook is for, and who calls it:
// - kernels: kernel_begin / kernel_begin_boxed / kernel_end, the Op event of
//   a native kernel (OPENREG_IMPL in aten/Registration.h) or of the boxed
//   fallback, through KernelScope (aten/KernelScopes.h), which asks the gate
//   `kernel_events` first; fallback_begin / fallback_end, the CPU side of a
//   fallback call (FallbackScope, same header);
// - copies and casts: record_copy (aten/Copy.cpp) and record_cast
//   (aten/Autocast.cpp), timed from now_ns() (runtime/Clock.h) when the gate
//   `recording` is on;
// - memory: memory_stack before the allocator locks, record_memory for what
//   it did, block_stack and history_appended for its snapshot
//   (runtime/DeviceAllocator.cpp);
// - collectives: none. The backend (csrc/distributed) is plain; the lab wraps
//   it in its checked collectives (csrc/checked), which record each one;
// - coverage profiles: kernel_taken (a profile took openreg's kernel of an
//   operator away: aten/Convolution.cpp, aten/native/AttentionChoice.cpp),
//   run_generic (the fallback asks whether a profile runs the operator on its
//   generic native path instead) and profile_name (the fallback policy's
//   message names the profile).
// A vendor who copies the template keeps this header and Seam.cpp as they
// are; without the lab every hook is simply never called.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/operator_name.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/FunctionRef.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace at {
class Tensor;
}  // namespace at

namespace openreg::seam {

// What the lab keeps of one open scope between its begin and end hooks;
// `open` false: there is nothing to end.
struct Scope {
  bool open = false;
  int32_t index = -1;
  uint64_t generation = 0;
};

// Receives the tensor and device arguments of one kernel call
// (visit_arg in aten/KernelScopes.h feeds it).
class ArgSink {
 public:
  virtual void tensor(const at::Tensor& t) = 0;
  virtual void device(c10::Device d) = 0;

 protected:
  ~ArgSink() = default;
};

// What the allocator did: a block handed out or freed, a segment taken from
// the host or returned to it, a request the device could not meet.
enum class MemoryAction : int8_t { Alloc, Free, SegmentTaken, SegmentReturned, Oom };

struct Hooks {
  // Gates the template reads before the hooks that need a clock reading or
  // argument visiting: a recording is on; it takes op events from kernels.
  const std::atomic<bool>* recording = nullptr;
  const std::atomic<bool>* kernel_events = nullptr;

  // Kernels. `name` is a native kernel's registered name ("add.Tensor"); its
  // address identifies the operator. `args` visits the call's arguments.
  void (*kernel_begin)(Scope& scope, const char* name,
                       c10::function_ref<void(ArgSink&)> args) = nullptr;
  void (*kernel_begin_boxed)(Scope& scope, const c10::OperatorHandle& op,
                             const torch::jit::Stack& stack) = nullptr;
  void (*kernel_end)(Scope& scope) = nullptr;
  void (*fallback_begin)(Scope& scope, const c10::FunctionSchema& op) = nullptr;
  void (*fallback_end)(Scope& scope) = nullptr;

  // Copies and casts that started at `start_ns` (0 when `recording` was off).
  void (*record_copy)(int64_t start_ns, c10::Device src, c10::Device dst, int64_t bytes) = nullptr;
  void (*record_cast)(int64_t start_ns, const c10::FunctionSchema& op, size_t arg_index,
                      c10::Device device, at::ScalarType from, at::ScalarType to, int64_t bytes,
                      bool cache_hit) = nullptr;

  // Memory. `stack` is memory_stack()'s, taken before the allocator's lock
  // (it may take the GIL); `total` the bytes allocated on the device after
  // the action; `device_free` (Oom) what the device had free.
  uint32_t (*memory_stack)(bool free) = nullptr;
  void (*record_memory)(MemoryAction action, c10::DeviceIndex device, int64_t bytes,
                        const void* address, int64_t total, uint32_t stack,
                        uint64_t device_free) = nullptr;
  uint32_t (*block_stack)(uint64_t address) = nullptr;  // a live block's stack, 0: none
  uint64_t (*history_appended)() = nullptr;             // read under the allocator's lock

  // Coverage profiles.
  bool (*kernel_taken)(const c10::OperatorName& op) = nullptr;
  bool (*run_generic)(const c10::OperatorHandle& op, torch::jit::Stack* stack) = nullptr;
  std::string (*profile_name)() = nullptr;  // "" when no profile is active
};

namespace detail {
extern std::atomic<const Hooks*> g_hooks;
}  // namespace detail

// The lab's table, or null while no lab is loaded: one relaxed load. A table
// is complete before it is published (attach), and never changes after.
inline const Hooks* hooks() noexcept {
  return detail::g_hooks.load(std::memory_order_relaxed);
}

// Publishes the lab's table (the lab's extension, when it loads); `table`
// lives as long as the process.
void attach(const Hooks* table) noexcept;

}  // namespace openreg::seam
