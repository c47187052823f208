// The boxed CPU fallback: runs any operator that has no openreg kernel on the
// CPU, as a real accelerator backend would, and puts the results back on the
// device.
//
// For one call it applies the fallback policy (FallbackPolicy.h), before any
// data moves, then runs the call through the loop it shares with the generic
// native path (Note [One boxed call, two ways to run it] in BoxedCall.h),
// its own way: every openreg tensor argument is copied to the host through
// the backend's copy path (Copy.cpp), mutated arguments (in-place and out=
// ops) are copied back into the original openreg tensors, and fresh results
// move to the device.
// View operators (results that alias an input, not written) are the exception:
// they run on host views of the inputs (Note [Device memory is host memory])
// and their results become views of the original openreg storage, so nothing
// is copied and later writes through the view reach the original tensor.

#include "aten/fallback/Fallback.h"

#include "aten/HostView.h"
#include "aten/KernelScopes.h"  // Note [The lab's seam]
#include "aten/fallback/BoxedArguments.h"
#include "aten/fallback/BoxedCall.h"
#include "aten/fallback/FallbackCount.h"
#include "aten/fallback/FallbackPolicy.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace openreg {
namespace {

// An openreg tensor that shares `base`'s storage with the layout of
// `host_result`, a CPU view computed on host_view(base).
at::Tensor device_view(const at::Tensor& base, const at::Tensor& host_result) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(base.storage()), base.key_set(), host_result.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(host_result.sizes(), host_result.strides(),
                                                   host_result.storage_offset());
  return out;
}

class Fallback final : public BoxedCall {
 public:
  Fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack)
      : BoxedCall(op, stack, "openreg's CPU fallback"), host_keys_(host_dispatch_keys()) {}

  void run() {
    check_fallback_allowed(schema_.operator_name());
    // An operator whose only kernels are another backend's (CUDA's fused RNN
    // cells, say) cannot run on the CPU either: say so, naming openreg,
    // instead of the dispatcher's error about the 'CPU' backend.
    TORCH_CHECK_NOT_IMPLEMENTED(
        op_.hasComputedKernelForDispatchKey(host_keys_.highestPriorityTypeId()),
        "openreg: ", c10::toString(schema_.operator_name()),
        " has no openreg kernel, and openreg's CPU fallback cannot run it: PyTorch has no CPU "
        "kernel for this operator (only other backends register one). An openreg kernel "
        "(csrc/aten/native/) is needed.");
    FallbackScope traced(schema_);
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    aliasing_ = returns_views() && !has_layout_arguments();
    run_on_host();
  }

 private:
  void before_arguments() override {
    if (!aliasing_) {
      copy_spans_to_host();
    }
  }

  void run_kernel() override {
    op_.redispatchBoxed(host_keys_, stack_);
  }

  void after_kernel() override {
    if (!aliasing_) {
      copy_spans_to_device();
    }
  }

  c10::IValue result_to_device(const c10::IValue& result, const c10::IValue* aliased) override {
    if (aliased != nullptr && aliasing_) {
      return to_device_view(result, *aliased);
    }
    return to_device(result);
  }

  // The CPU keys the call runs on: CPU, plus SparseCPU, SparseCsrCPU or
  // QuantizedCPU when an argument has that layout (Note [Sparse and
  // quantized tensors through the fallback] in LayoutFallback.cpp).
  c10::DispatchKeySet host_dispatch_keys() const {
    c10::DispatchKeySet keys(c10::DispatchKey::CPU);
    for (size_t i = 0; i < num_args_; ++i) {
      for_each_tensor((*stack_)[first_arg_ + i],
                      [&](const at::Tensor& t) { keys = keys | host_layout_key(t); });
    }
    return keys;
  }

  bool has_layout_arguments() const {
    bool found = false;
    for (size_t i = 0; i < num_args_; ++i) {
      for_each_tensor((*stack_)[first_arg_ + i],
                      [&](const at::Tensor& t) { found = found || !is_plain(t); });
    }
    return found;
  }

  bool returns_views() const {
    for (const c10::Argument& ret : schema_.returns()) {
      if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) {
        return true;
      }
    }
    return false;
  }

  at::Tensor tensor_to_host(const at::Tensor& t, bool is_out) override {
    if (!on_openreg(t)) {
      return t;
    }
    if (!is_plain(t)) {
      // indices and values (sparse), bytes and quantizer, or the buffer and
      // sizes of a nested tensor (which moves only when contiguous)
      const at::Tensor& whole = t.is_nested() && !t.is_contiguous() ? t.contiguous() : t;
      return with_requires_grad(t, whole.to(c10::kCPU));
    }
    if (aliasing_) {
      return host_view(t);
    }
    if (auto span = spans_.find(t.storage().unsafeGetStorageImpl()); span != spans_.end()) {
      return on_span(span->second, t);
    }
    if (is_out) {
      // An out= tensor is only written: give the CPU kernel a host buffer of
      // the same layout instead of copying contents it will overwrite.
      return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
    }
    auto it = moved_.find(t.unsafeGetTensorImpl());
    if (it != moved_.end()) {
      return it->second;
    }
    at::Tensor cpu = with_requires_grad(t, t.to(c10::kCPU));
    moved_.emplace(t.unsafeGetTensorImpl(), cpu);
    return cpu;
  }

  // A few CPU kernels read requires_grad to decide what to save for their
  // backward (_sparse_mm_reduce_impl keeps its argmax indices only then);
  // the host copy must say what the argument says.
  static at::Tensor with_requires_grad(const at::Tensor& t, at::Tensor cpu) {
    if (t.requires_grad() && !cpu.requires_grad()) {
      cpu.requires_grad_(true);
    }
    return cpu;
  }

  void write_back(const c10::IValue& original, const c10::IValue& host) override {
    if (aliasing_) {
      return;  // a view op: it ran on host views and wrote nothing
    }
    auto copy = [this](const at::Tensor& dst, const at::Tensor& src) {
      if (!on_openreg(dst)) {
        return;
      }
      if (!is_plain(dst)) {
        dst.copy_(src);  // sparse: copy_sparse_to_sparse_ resizes dst too
        return;
      }
      auto span = spans_.find(dst.storage().unsafeGetStorageImpl());
      if (span != spans_.end() && src.storage().is_alias_of(span->second.host.storage())) {
        return;  // written in place on the span, copied back whole
      }
      if (dst.sizes() != src.sizes()) {
        dst.resize_(src.sizes());  // an out= tensor the CPU kernel resized
      }
      dst.copy_(src);
    };
    for_each_tensor_pair(original, host, copy);
  }

  at::Tensor tensor_to_device(const at::Tensor& t) {
    if (!t.defined() || on_openreg(t)) {
      return t;
    }
    if (t.is_nested() && !t.is_contiguous()) {
      return t.contiguous().to(device_);  // a nested view (transpose) moves only whole
    }
    return t.to(device_);
  }

  c10::IValue to_device(const c10::IValue& v) {
    return map_tensors(v, [&](const at::Tensor& t) { return tensor_to_device(t); });
  }

  c10::IValue to_device_view(const c10::IValue& v, const c10::IValue& base) {
    auto one = [&](const at::Tensor& r) -> at::Tensor {
      const at::Tensor& b = base.toTensor();
      if (on_openreg(b) && r.defined() && r.storage().data() == b.storage().data()) {
        return device_view(b, r);
      }
      return tensor_to_device(r);  // the CPU kernel returned a fresh tensor
    };
    if (!base.isTensor()) {
      return to_device(v);
    }
    return map_tensors(v, one);
  }

  // Note [The fallback keeps layouts and aliasing]
  // A tensor copied to the host on its own becomes a dense tensor with a
  // storage of its own. Usually that is all the CPU kernel needs, but not
  // when the layout or the aliasing is part of the semantics: an out= that
  // partially overlaps an input must raise, an in-place op on an expanded
  // tensor must write it as the CPU does (threshold_ accepts it), and
  // autograd formulas that branch on A.is_contiguous() (linalg_det's) must see
  // the forward run on the layout the backward will see. So the openreg
  // arguments over one device storage are copied to the host as one byte
  // span of that storage (the range they cover), and each becomes a CPU
  // tensor with its own sizes, strides and offset on that span; written spans
  // go back whole. This is done for a storage when a tensor over it is not
  // dense (stride 0, gaps) or when two arguments share it and one is written.
  struct Span {
    at::Tensor device;  // uint8 openreg view of the byte range
    at::Tensor host;    // its host copy
    int64_t begin = 0;  // first byte of the range in the storage
    bool written = false;
  };

  template <class F>
  void for_each_openreg_argument(F&& f) {
    for (size_t i = 0; i < num_args_; ++i) {
      const c10::IValue& v = (*stack_)[first_arg_ + i];
      if (v.isTensor()) {
        if (on_openreg(v.toTensor()) && is_plain(v.toTensor())) {
          f(v.toTensor(), written_[i]);
        }
      } else if (is_tensor_list(v)) {
        for (const c10::IValue& e : v.toListRef()) {
          if (e.isTensor() && on_openreg(e.toTensor()) && is_plain(e.toTensor())) {
            f(e.toTensor(), written_[i]);
          }
        }
      }
    }
  }

  void copy_spans_to_host() {
    struct Use {
      int tensors = 0;
      bool written = false;
      bool not_dense = false;
      int64_t begin = INT64_MAX;
      int64_t end = 0;
    };
    std::unordered_map<const c10::StorageImpl*, Use> uses;
    std::unordered_map<const c10::StorageImpl*, at::Tensor> any_tensor;
    for_each_openreg_argument([&](const at::Tensor& t, bool written) {
      const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
      Use& u = uses[impl];
      any_tensor.emplace(impl, t);
      ++u.tensors;
      u.written = u.written || written;
      u.not_dense = u.not_dense || !t.is_non_overlapping_and_dense();
      if (t.numel() > 0) {
        int64_t last = t.storage_offset();
        for (int64_t d = 0; d < t.dim(); ++d) {
          last += (t.size(d) - 1) * t.stride(d);
        }
        const int64_t item = static_cast<int64_t>(t.itemsize());
        u.begin = std::min(u.begin, t.storage_offset() * item);
        u.end = std::max(u.end, (last + 1) * item);
      }
    });
    for (auto& [impl, u] : uses) {
      if (!(u.not_dense || (u.tensors > 1 && u.written)) || u.end <= 0) {
        continue;
      }
      // Aligned to 16 bytes, so that every tensor's offset in the span is a
      // whole number of its elements.
      const int64_t begin = u.begin / 16 * 16;
      const at::Tensor& t = any_tensor.at(impl);
      at::Tensor bytes = at::empty({0}, t.options().dtype(at::kByte));
      bytes.set_(t.storage(), begin, {u.end - begin}, {1});
      spans_.emplace(impl, Span{bytes, bytes.to(c10::kCPU), begin, u.written});
    }
  }

  static at::Tensor on_span(const Span& span, const at::Tensor& t) {
    const int64_t item = static_cast<int64_t>(t.itemsize());
    at::Tensor h = at::empty({0}, t.options().device(c10::kCPU));
    h.set_(span.host.storage(), (t.storage_offset() * item - span.begin) / item, t.sizes(),
           t.strides());
    h._set_conj(t.is_conj());
    h._set_neg(t.is_neg());
    return h;
  }

  void copy_spans_to_device() {
    for (auto& [impl, span] : spans_) {
      if (span.written) {
        span.device.copy_(span.host);
      }
    }
  }

  const c10::DispatchKeySet host_keys_;
  bool aliasing_ = false;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> moved_;
  std::unordered_map<const c10::StorageImpl*, Span> spans_;
};

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  KernelScope traced(op, *stack);  // Note [Op events from openreg's kernels]
  // A lab's coverage profile may run the operator on its generic native path
  // instead (the lab's Note [Profiles]).
  const seam::Hooks* lab = seam::hooks();
  if (lab != nullptr && lab->run_generic(op, stack)) {
    return;
  }
  count_fallback();
  Fallback(op, stack).run();
}

void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  KernelScope traced(op, *stack);
  count_fallback();
  Fallback(op, stack).run();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace openreg
