#pragma once

// The scopes the template opens around the calls it runs, for the lab
// (Note [The lab's seam] in runtime/Seam.h): a native kernel's or the
// fallback's Op event (KernelScope), the CPU side of a fallback call
// (FallbackScope), and the backend's own dispatcher calls (InternalScope).
// Without the lab each costs one relaxed load.

#include "runtime/Seam.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/TensorBase.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <atomic>
#include <optional>

namespace openreg {

// The argument types that carry tensors or a device; every other type
// (scalars, sizes, dtypes, ...) matches the template and carries nothing.
// The tensors of a Tensor?[] list (index's indices) are not visited.
inline void visit_arg(seam::ArgSink& sink, const at::Tensor& t) {
  sink.tensor(t);
}
inline void visit_arg(seam::ArgSink& sink, const std::optional<at::Tensor>& t) {
  if (t.has_value()) {
    sink.tensor(*t);
  }
}
inline void visit_arg(seam::ArgSink& sink, at::TensorList list) {
  for (const at::Tensor& t : list) {
    sink.tensor(t);
  }
}
inline void visit_arg(seam::ArgSink& sink, const at::ITensorListRef& list) {
  for (const at::Tensor& t : list) {
    sink.tensor(t);
  }
}
inline void visit_arg(seam::ArgSink& sink, c10::Device d) {
  sink.device(d);
}
inline void visit_arg(seam::ArgSink& sink, std::optional<c10::Device> d) {
  if (d.has_value()) {
    sink.device(*d);
  }
}
template <class T>
void visit_arg(seam::ArgSink& /*unused*/, const T& /*unused*/) {}

// The Op event of one call that openreg runs, open while the scope lives
// (Note [Op events from openreg's kernels] in the lab's trace/KernelEvents.h).
class KernelScope {
 public:
  // A native kernel registered under `name` ("add.Tensor"); the name's
  // address identifies the operator (aten/Registration.h).
  template <class... Args>
  explicit KernelScope(const char* name, const Args&... args) {
    const seam::Hooks* h = seam::hooks();
    if (h != nullptr && h->kernel_events->load(std::memory_order_relaxed)) {
      hooks_ = h;
      h->kernel_begin(scope_, name, [&](seam::ArgSink& sink) { (visit_arg(sink, args), ...); });
    }
  }
  // The boxed fallback running `op` on `stack`.
  KernelScope(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
    const seam::Hooks* h = seam::hooks();
    if (h != nullptr && h->kernel_events->load(std::memory_order_relaxed)) {
      hooks_ = h;
      h->kernel_begin_boxed(scope_, op, stack);
    }
  }
  ~KernelScope() {
    if (scope_.open) {
      hooks_->kernel_end(scope_);
    }
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  seam::Scope scope_;
  const seam::Hooks* hooks_ = nullptr;
};

// The CPU side of an op run by the boxed fallback, from its first copy to
// CPU to its last copy back.
class FallbackScope {
 public:
  explicit FallbackScope(const c10::FunctionSchema& op) : hooks_(seam::hooks()) {
    if (hooks_ != nullptr && hooks_->recording->load(std::memory_order_relaxed)) {
      hooks_->fallback_begin(scope_, op);
    }
  }
  ~FallbackScope() {
    if (scope_.open) {
      hooks_->fallback_end(scope_);
    }
  }
  FallbackScope(const FallbackScope&) = delete;
  FallbackScope& operator=(const FallbackScope&) = delete;

 private:
  seam::Scope scope_;
  const seam::Hooks* hooks_;
};

// Note [The backend's own dispatcher calls]
// Inside the fallback and the copy path the backend calls CPU operators of
// its own (the CPU kernel, the byte copy). They are how openreg works, not
// calls the user made, so the lab does not record them as ops: their cost
// shows as the duration of the enclosing fallback or copy event. The depth is
// counted only while a lab is loaded (the lab reads inside()).
class InternalScope {
 public:
  InternalScope() noexcept : active_(seam::hooks() != nullptr) {
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

}  // namespace openreg
