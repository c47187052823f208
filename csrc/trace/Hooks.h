#pragma once

// What the backend calls at its decision points. Each hook starts with
// enabled(): one relaxed atomic load when no trace is open (Recorder.h).
// Operator calls themselves are observed through RecordFunction
// (OpObserver.cpp); the hooks here add what only the backend knows.

#include "trace/Clock.h"
#include "trace/Recorder.h"

#include <ATen/core/function_schema.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string_view>

namespace openreg::trace {

// The CPU side of an op run by the boxed fallback, from its first copy to
// CPU to its last copy back; marks the enclosing op's kernel as `fallback`.
class FallbackScope {
 public:
  explicit FallbackScope(const c10::FunctionSchema& op) {
    if (enabled()) {
      begin(op);
    }
  }
  ~FallbackScope() {
    if (index_ >= 0) {
      end();
    }
  }
  FallbackScope(const FallbackScope&) = delete;
  FallbackScope& operator=(const FallbackScope&) = delete;

 private:
  void begin(const c10::FunctionSchema& op);
  void end();
  int32_t index_ = -1;
  uint64_t generation_ = 0;
};

// Note [The backend's own dispatcher calls]
// Inside the fallback and the copy path the backend calls CPU operators of
// its own (the CPU kernel, the byte copy). They are how openreg works, not
// calls the user made, so they are not recorded as ops: their cost shows as
// the duration of the enclosing fallback or copy event.
class InternalScope {
 public:
  InternalScope() noexcept : active_(enabled()) {
    if (active_) {
      ++depth();
    }
  }
  ~InternalScope() {
    if (active_) {
      --depth();
    }
  }
  InternalScope(const InternalScope&) = delete;
  InternalScope& operator=(const InternalScope&) = delete;

  static bool inside() noexcept {
    return depth() > 0;
  }

 private:
  static int& depth() noexcept {
    thread_local int d = 0;
    return d;
  }
  bool active_;
};

inline int8_t device_code(c10::Device d) {
  return d.is_cpu() ? kCpu : static_cast<int8_t>(d.index());
}

// A copy of `bytes` from `src` to `dst` that started at `start_ns`.
void record_copy(int64_t start_ns, c10::Device src, c10::Device dst, int64_t bytes);

// Autocast cast `arg_index` of a call to `op` (Autocast.cpp).
void record_cast(int64_t start_ns, const c10::FunctionSchema& op, size_t arg_index,
                 c10::Device device, at::ScalarType from, at::ScalarType to, int64_t bytes,
                 bool cache_hit);

// A device allocation (or free) of `bytes`; `total` = bytes allocated on the
// device afterwards.
void record_memory(Kind kind, c10::DeviceIndex device, int64_t bytes, int64_t total);

// Says which kernel the innermost open op really ran, where its dispatch table
// cannot tell (e.g. a profile's composite redirect registered as a kernel).
void mark_kernel(Kernel kernel);

// An instant, e.g. "profile: mps".
void record_mark(std::string_view name);

// The end of training step `number` (openreg_lab.step(), an optimizer step).
void record_step(int64_t number);

}  // namespace openreg::trace
