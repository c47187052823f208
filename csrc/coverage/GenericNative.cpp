// The generic native path: see Note [Generic native path].

#include "coverage/GenericNative.h"

#include "aten/HostView.h"
#include "aten/fallback/BoxedArguments.h"
#include "aten/fallback/BoxedCall.h"
#include "runtime/DeviceAllocator.h"
#include "trace/Hooks.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <cstring>
#include <unordered_map>

namespace openreg {
namespace {

thread_local c10::DeviceIndex tls_divert_to = -1;  // >= 0 inside a generic call
thread_local uint64_t tls_generic_calls = 0;
std::atomic<c10::DeleterFnPtr> g_device_deleter{nullptr};

// The CPU allocator while a profile with generic kernels is active.
class DeviceMemoryForCpu final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (tls_divert_to < 0) {
      return base_.load(std::memory_order_relaxed)->allocate(nbytes);
    }
    c10::DataPtr ptr = device_allocator().allocate(nbytes);  // on the guarded device
    g_device_deleter.store(ptr.get_deleter(), std::memory_order_relaxed);
    ptr.unsafe_set_device(c10::Device(c10::kCPU));
    return ptr;
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return base_.load(std::memory_order_relaxed)->raw_deleter();
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  std::atomic<c10::Allocator*> base_{nullptr};
};

DeviceMemoryForCpu& wrapper() {
  static auto* w = new DeviceMemoryForCpu();  // leaked: storages keep pointing at it
  return *w;
}

// Installed above any other CPU allocator; removal puts the previous one back
// at the same (highest) priority, since c10 only lets an equal or higher
// priority replace an allocator. A library that later sets its own CPU
// allocator with a lower priority is then ignored by c10: a known limit.
constexpr uint8_t kPriority = UINT8_MAX;

class DivertGuard {
 public:
  explicit DivertGuard(c10::DeviceIndex d) : previous_(tls_divert_to) {
    tls_divert_to = d;
  }
  ~DivertGuard() {
    tls_divert_to = previous_;
  }
  DivertGuard(const DivertGuard&) = delete;
  DivertGuard& operator=(const DivertGuard&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// Keeps a CPU storage (device memory from the wrapper) alive for the openreg
// storage that now presents its bytes.
struct Keep {
  c10::Storage storage;
};

void delete_keep(void* ctx) {
  delete static_cast<Keep*>(ctx);
}

c10::DataPtr device_data_ptr(const c10::Storage& s, c10::Device device) {
  void* data = s.mutable_data();
  return {data, new Keep{s}, &delete_keep, device};
}

bool in_device_memory(const c10::Storage& s) {
  const c10::DeleterFnPtr d = g_device_deleter.load(std::memory_order_relaxed);
  return d != nullptr && s.data_ptr().get_deleter() == d;
}

void copy_metadata(const at::Tensor& dst, const at::Tensor& like) {
  dst.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                   like.storage_offset());
}

// A host alias of a device storage: like host_view's, but resizable, so that
// an out= argument of the wrong size can be resized (into device memory,
// through the wrapper).
c10::Storage writable_alias(const c10::Storage& storage) {
  return c10::Storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                      c10::DataPtr(const_cast<void*>(storage.data()), c10::Device(c10::kCPU)),
                      &wrapper(), /*resizable=*/true);
}

// `t` as a CPU tensor on `alias`, the host alias of its storage.
at::Tensor on_alias(const c10::Storage& alias, const at::Tensor& t) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(alias), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  copy_metadata(out, t);
  out._set_conj(t.is_conj());
  out._set_neg(t.is_neg());
  return out;
}

class GenericCall final : public BoxedCall {
 public:
  GenericCall(const c10::OperatorHandle& op, torch::jit::Stack* stack)
      : BoxedCall(op, stack, "openreg's generic native path") {}

  void run() {
    ++tls_generic_calls;
    run_on_host();
  }

 private:
  void run_kernel() override {
    DivertGuard divert(device_.index());
    op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack_);
  }

  c10::IValue result_to_device(const c10::IValue& result, const c10::IValue* /*aliased*/) override {
    return to_device(result);  // views of arguments are found by their bytes (inputs_)
  }

  at::Tensor tensor_to_host(const at::Tensor& t, bool /*is_out*/) override {
    if (!on_openreg(t)) {
      return t;
    }
    // Every argument over one device storage gets the same alias, so the CPU
    // kernel sees them overlap as it would on the CPU (Note [Host views share
    // one storage] in HostView.cpp).
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    auto it = aliases_.find(impl);
    if (it == aliases_.end()) {
      it = aliases_.emplace(impl, writable_alias(t.storage())).first;
    }
    inputs_.emplace(t.storage().data(), t);
    return on_alias(it->second, t);
  }

  // The kernel wrote through the host alias: the bytes are already in place;
  // only a new storage (a resize) or a new shape must reach the original.
  void write_back(const c10::IValue& original, const c10::IValue& host) override {
    auto one = [&](const at::Tensor& o, const at::Tensor& h) {
      if (!on_openreg(o)) {
        return;
      }
      if (h.storage().data() != o.storage().data()) {
        if (in_device_memory(h.storage())) {
          c10::StorageImpl* impl = o.storage().unsafeGetStorageImpl();
          impl->set_data_ptr_noswap(device_data_ptr(h.storage(), device_));
          impl->set_nbytes(h.storage().nbytes());
        } else {
          o.resize_(h.sizes());
          o.copy_(h);  // not device memory: move it, visibly
        }
      }
      if (o.sizes() != h.sizes() || o.strides() != h.strides() ||
          o.storage_offset() != h.storage_offset()) {
        copy_metadata(o, h);
      }
    };
    for_each_tensor_pair(original, host, one);
  }

  at::Tensor tensor_to_device(const at::Tensor& r) {
    if (!r.defined() || on_openreg(r)) {
      return r;
    }
    if (!is_plain(r)) {
      return r.to(device_);  // to_sparse, quantize_per_tensor, ...: rebuilt on openreg by copy
    }
    auto base = inputs_.find(r.storage().data());
    if (base != inputs_.end()) {
      // A view of an argument: the same view of the original openreg tensor.
      const at::Tensor& b = base->second;
      auto out = at::detail::make_tensor<c10::TensorImpl>(
          c10::TensorImpl::VIEW, c10::Storage(b.storage()), b.key_set(), r.dtype());
      copy_metadata(out, r);
      return out;
    }
    if (!in_device_memory(r.storage())) {
      return r.to(device_);  // not allocated by this call: through the copy path
    }
    c10::StorageImpl* impl = r.storage().unsafeGetStorageImpl();
    auto it = adopted_.find(impl);
    if (it == adopted_.end()) {
      c10::Storage s(c10::Storage::use_byte_size_t(), impl->nbytes(),
                     device_data_ptr(r.storage(), device_), &device_allocator(),
                     /*resizable=*/true);
      it = adopted_.emplace(impl, std::move(s)).first;
    }
    auto out = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(it->second), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r.dtype());
    copy_metadata(out, r);
    out._set_conj(r.is_conj());
    out._set_neg(r.is_neg());
    return out;
  }

  c10::IValue to_device(const c10::IValue& v) {
    return map_tensors(v, [&](const at::Tensor& t) { return tensor_to_device(t); });
  }

  std::unordered_map<const void*, at::Tensor> inputs_;  // host bytes -> original
  std::unordered_map<const c10::StorageImpl*, c10::Storage> adopted_;
  std::unordered_map<const c10::StorageImpl*, c10::Storage> aliases_;  // device -> host alias
};

}  // namespace

void generic_native(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  trace::mark_kernel(trace::Kernel::Generic);
  GenericCall(op, stack).run();
}

uint64_t generic_calls_on_this_thread() noexcept {
  return tls_generic_calls;
}

void divert_cpu_allocations(bool on) {
  DeviceMemoryForCpu& w = wrapper();
  c10::Allocator* current = c10::GetCPUAllocator();
  if (on && current != &w) {
    w.base_.store(current, std::memory_order_relaxed);
    c10::SetCPUAllocator(&w, kPriority);
  } else if (!on && current == &w) {
    c10::SetCPUAllocator(w.base_.load(std::memory_order_relaxed), kPriority);
  }
}

}  // namespace openreg
