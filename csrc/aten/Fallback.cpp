// The boxed CPU fallback: runs any operator that has no openreg kernel on the
// CPU, as a real accelerator backend would, and puts the results back on the
// device.
//
// For one call it
//   1. applies the fallback policy (FallbackPolicy.h), before any data moves;
//   2. checks devices (Note [Fallback device rules]);
//   3. copies every openreg tensor argument to the host through the backend's
//      copy path (Copy.cpp), swaps openreg generators for their CPU engines and
//      openreg `device=` arguments for cpu;
//   4. runs the CPU kernel;
//   5. copies mutated arguments (in-place and out= ops) back into the original
//      openreg tensors, and moves fresh results to the device.
// View operators (results that alias an input, not written) are the exception:
// they run on host views of the inputs (Note [Device memory is host memory])
// and their results become views of the original openreg storage, so nothing
// is copied and later writes through the view reach the original tensor.

#include "aten/Fallback.h"

#include "aten/BoxedArguments.h"
#include "aten/FallbackCount.h"
#include "aten/FallbackPolicy.h"
#include "aten/GenericNative.h"
#include "aten/HostView.h"
#include "aten/Profile.h"
#include "runtime/Device.h"
#include "runtime/Generator.h"
#include "trace/Hooks.h"
#include "trace/KernelEvents.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace openreg {
namespace {

constexpr auto kOpenReg = c10::DeviceType::PrivateUse1;

// Note [Schemas that under-report mutation]
// A few legacy operators write to arguments their schema does not mark as
// mutable (no `(a!)`). The fallback must still copy those arguments back, or
// the write is silently lost. Each entry names the operator, the arguments it
// writes, and the bool argument that must be true for the write to happen.
struct HiddenMutation {
  const char* op;  // name without overload
  const char* overload;
  std::vector<const char*> args;
  const char* only_if;
};

const std::vector<HiddenMutation>& hidden_mutations() {
  static const std::vector<HiddenMutation> table = {
      // Updates the running statistics in training mode; its successor
      // _native_batch_norm_legit declares them as Tensor(a!).
      {"aten::native_batch_norm", "", {"running_mean", "running_var"}, "training"},
  };
  return table;
}

const HiddenMutation* hidden_mutation(const c10::FunctionSchema& schema) {
  for (const HiddenMutation& h : hidden_mutations()) {
    if (schema.name() == h.op && schema.overload_name() == h.overload) {
      return &h;
    }
  }
  return nullptr;
}

// Which arguments the call writes: by its schema, or by the table above.
std::vector<bool> written_arguments(const c10::FunctionSchema& schema,
                                    const torch::jit::Stack& stack, size_t first) {
  const size_t n = schema.arguments().size();
  std::vector<bool> written(n);
  for (size_t i = 0; i < n; ++i) {
    written[i] = is_written(schema.arguments()[i]);
  }
  if (const HiddenMutation* h = hidden_mutation(schema)) {
    auto flag = schema.argumentIndexWithName(h->only_if);
    if (!flag.has_value() || stack[first + *flag].toBool()) {
      for (const char* name : h->args) {
        if (auto i = schema.argumentIndexWithName(name)) {
          written[*i] = true;
        }
      }
    }
  }
  return written;
}

// An openreg tensor that shares `base`'s storage with the layout of
// `host_result`, a CPU view computed on host_view(base).
at::Tensor device_view(const at::Tensor& base, const at::Tensor& host_result) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(base.storage()), base.key_set(), host_result.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(host_result.sizes(), host_result.strides(),
                                                   host_result.storage_offset());
  return out;
}

class Fallback {
 public:
  Fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack)
      : op_(op),
        schema_(op.schema()),
        stack_(stack),
        num_args_(schema_.arguments().size()),
        first_arg_(stack->size() - num_args_),
        host_keys_(host_dispatch_keys()) {}

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
    trace::FallbackScope traced(schema_);
    trace::InternalScope internal;  // Note [The backend's own dispatcher calls]
    find_device();
    aliasing_ = returns_views() && !has_layout_arguments();
    c10::OptionalDeviceGuard guard(device_);

    written_ = written_arguments(schema_, *stack_, first_arg_);
    if (!aliasing_) {
      copy_spans_to_host();
    }
    std::vector<c10::IValue> originals(stack_->begin() + first_arg_, stack_->end());
    for (size_t i = 0; i < num_args_; ++i) {
      c10::IValue& v = (*stack_)[first_arg_ + i];
      v = to_host(v, schema_.arguments()[i]);
    }
    std::vector<c10::IValue> host_args(stack_->begin() + first_arg_, stack_->end());

    op_.redispatchBoxed(host_keys_, stack_);

    if (!aliasing_) {
      copy_spans_to_device();
      for (size_t i = 0; i < num_args_; ++i) {
        if (written_[i]) {
          write_back(originals[i], host_args[i]);
        }
      }
    }
    const size_t num_returns = schema_.returns().size();
    const size_t first_ret = stack_->size() - num_returns;
    for (size_t j = 0; j < num_returns; ++j) {
      const c10::Argument& ret = schema_.returns()[j];
      c10::IValue& v = (*stack_)[first_ret + j];
      const int arg = aliased_argument(schema_, ret);
      if (arg >= 0 && is_written(ret)) {
        v = originals[arg];  // in-place / out=: the caller's own tensor
      } else if (arg >= 0 && aliasing_) {
        v = to_device_view(v, originals[arg]);
      } else {
        v = to_device(v);
      }
    }
  }

 private:
  // Note [Fallback device rules]
  // The openreg tensors of one call must all be on the same device. CPU
  // tensors may join them only as 0-dim scalars, as the `indices` of an
  // indexing op, or as an argument the schema names `cpu_...` (a nested
  // tensor's sizes, which live on the host), as on CUDA. Anything else
  // raises PyTorch's usual "Expected all tensors to be on the same device".
  void find_device() {
    for (size_t i = 0; i < num_args_; ++i) {
      const c10::IValue& v = (*stack_)[first_arg_ + i];
      const bool indices = schema_.arguments()[i].name() == "indices";
      if (v.isTensor()) {
        check_tensor(v.toTensor(), schema_.arguments()[i].name().rfind("cpu_", 0) == 0);
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList()) {
          check_tensor(t, indices);
        }
      } else if (v.isList()) {
        for (const c10::IValue& e : v.toListRef()) {
          if (e.isTensor()) {
            check_tensor(e.toTensor(), indices);
          }
        }
      } else if (v.isDevice() && v.toDevice().type() == kOpenReg) {
        note_device(v.toDevice());
      }
    }
    for (const c10::Device& cpu : cpu_tensor_devices_) {
      if (device_.has_value()) {
        mismatch(*device_, cpu);
      }
    }
    if (!device_.has_value()) {
      device_ = c10::Device(kOpenReg, current_device());
    }
  }

  void check_tensor(const at::Tensor& t, bool indices) {
    if (!t.defined()) {
      return;
    }
    if (on_openreg(t)) {
      note_device(t.device());
    } else if (t.dim() > 0 && !indices) {
      cpu_tensor_devices_.push_back(t.device());
    }
  }

  void note_device(c10::Device d) {
    if (d.index() < 0) {
      d = c10::Device(kOpenReg, current_device());
    }
    if (!device_.has_value()) {
      device_ = d;
    } else if (*device_ != d) {
      mismatch(*device_, d);
    }
  }

  [[noreturn]] void mismatch(c10::Device a, c10::Device b) {
    TORCH_CHECK(false,
                "Expected all tensors to be on the same device, but found at least "
                "two devices, ",
                a, " and ", b, "! (in ", c10::toString(schema_.operator_name()),
                ", which runs through openreg's CPU fallback)");
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

  at::Tensor tensor_to_host(const at::Tensor& t, bool is_out = false) {
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

  c10::IValue to_host(const c10::IValue& v, const c10::Argument& arg) {
    if (v.isTensor()) {
      return tensor_to_host(v.toTensor(), arg.is_out());
    }
    if (is_tensor_list(v)) {
      return map_tensors(v, [&](const at::Tensor& t) { return tensor_to_host(t); });
    }
    if (v.isDevice() && v.toDevice().type() == kOpenReg) {
      return c10::Device(c10::kCPU);
    }
    if (is_optional_generator(arg)) {
      // Random ops sample with openreg's generator, not the CPU default one.
      std::optional<at::Generator> gen;
      if (v.isGenerator()) {
        gen = v.toGenerator();
      }
      if (!gen.has_value() || gen->device().type() == kOpenReg) {
        return engine_for(gen, device_->index());
      }
    }
    return v;
  }

  void write_back(const c10::IValue& original, const c10::IValue& host) {
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
      return t.contiguous().to(*device_);  // a nested view (transpose) moves only whole
    }
    return t.to(*device_);
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

  const c10::OperatorHandle& op_;
  const c10::FunctionSchema& schema_;
  torch::jit::Stack* stack_;
  const size_t num_args_;
  const size_t first_arg_;
  const c10::DispatchKeySet host_keys_;
  std::optional<c10::Device> device_;
  std::vector<c10::Device> cpu_tensor_devices_;
  bool aliasing_ = false;
  std::vector<bool> written_;  // per argument: does the op write it?
  std::unordered_map<const c10::TensorImpl*, at::Tensor> moved_;
  std::unordered_map<const c10::StorageImpl*, Span> spans_;
};

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  trace::KernelScope traced(op, *stack);     // Note [Op events from openreg's kernels]
  if (profile_covers(op.operator_name())) {  // Note [Profiles]
    generic_native(op, stack);
    return;
  }
  count_fallback();
  Fallback(op, stack).run();
}

void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  trace::KernelScope traced(op, *stack);
  count_fallback();
  Fallback(op, stack).run();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace openreg
