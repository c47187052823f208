#pragma once

// Note [Op events from openreg's kernels]
// By default op events come from RecordFunction (OpObserver.h): every
// operator call, composites and autograd nodes included, at the price of
// RecordFunction existing for every call of the process while a trace is
// open (benchmarks/bench_trace.py: about 1.15x a training step before the
// recorder does anything). trace(ops="kernels") installs no callback; the op
// events come from the places where openreg itself runs an operator:
// - every native kernel, wrapped at registration by OPENREG_IMPL
//   (aten/Registration.h) in a KernelScope;
// - the boxed CPU fallback (and the sparse, quantized and nested ones), in a
//   KernelScope of the operator it runs.
// These are the events of the default mode whose kernel is native, generic or
// fallback, with the same names, shapes and devices. Not recorded: composite
// operators (aten::linear around its addmm), calls that end in another
// backend, autograd nodes (Backward events; the ops a backward pass runs are
// recorded), and kernels registered for PrivateUse1 from outside openreg
// (torch.library, from Python or C++): the default mode counts those as
// native, here only the ops they call are seen. An event's dispatch path is the one from its
// kernel's own dispatch (e.g. "PrivateUse1"), since the keys above it have already been passed by
// then, and its autograd sequence number is -1. When no trace is open, or RecordFunction is the
// source, a kernel pays one relaxed load (kernel_events(), Recorder.h).

#include "trace/Recorder.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/TensorBase.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/operator_name.h>
#include <c10/core/Device.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <optional>

namespace openreg::trace {

struct OpInfo;  // OpLookup.h

// Receives the tensor and device arguments of one call.
class ArgSink {
 public:
  virtual void tensor(const at::Tensor& t) = 0;
  virtual void device(c10::Device d) = 0;

 protected:
  ~ArgSink() = default;
};

// The argument types that carry tensors or a device; every other type
// (scalars, sizes, dtypes, ...) matches the template and carries nothing.
// As in the default mode, the tensors of a Tensor?[] list (index's indices)
// are not an op's arguments for its shapes and devices.
inline void visit_arg(ArgSink& sink, const at::Tensor& t) {
  sink.tensor(t);
}
inline void visit_arg(ArgSink& sink, const std::optional<at::Tensor>& t) {
  if (t.has_value()) {
    sink.tensor(*t);
  }
}
inline void visit_arg(ArgSink& sink, at::TensorList list) {
  for (const at::Tensor& t : list) {
    sink.tensor(t);
  }
}
inline void visit_arg(ArgSink& sink, const at::ITensorListRef& list) {
  for (const at::Tensor& t : list) {
    sink.tensor(t);
  }
}
inline void visit_arg(ArgSink& sink, c10::Device d) {
  sink.device(d);
}
inline void visit_arg(ArgSink& sink, std::optional<c10::Device> d) {
  if (d.has_value()) {
    sink.device(*d);
  }
}
template <class T>
void visit_arg(ArgSink& /*unused*/, const T& /*unused*/) {}

// The Op event of one call that openreg runs, open while the scope lives.
class KernelScope {
 public:
  // A native kernel registered under `name` ("add.Tensor", an aten
  // operator); the name's address identifies the operator (a string literal
  // of the registration, aten/Registration.h).
  template <class... Args>
  KernelScope(const char* name, const Args&... args) {
    if (kernel_events()) {
      begin_native(name, [&](ArgSink& sink) { (visit_arg(sink, args), ...); });
    }
  }
  // The boxed fallback running `op` on `stack`: no event when a native
  // kernel of the same operator handed its call over (that kernel's event is
  // the op's).
  KernelScope(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
    if (kernel_events()) {
      begin_boxed(op, stack);
    }
  }
  ~KernelScope() {
    if (recorded_) {
      end();
    }
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  void begin_native(const char* name, c10::function_ref<void(ArgSink&)> args);
  void begin_boxed(const c10::OperatorHandle& op, const torch::jit::Stack& stack);
  void open(OpInfo& info, c10::function_ref<void(ArgSink&)> args);
  void end();
  bool recorded_ = false;
  uint64_t generation_ = 0;
  uint32_t outer_ = 0;  // the enclosing scope's operator (0: none)
};

}  // namespace openreg::trace
