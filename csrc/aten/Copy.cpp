// Copies into, out of and between openreg devices. Every byte that crosses
// the host/device boundary, or moves between two openreg devices, goes
// through `_copy_from` here (copy_, .to(), .cpu(), the CPU fallback, ...).

#include "aten/Copy.h"

#include "aten/HostView.h"
#include "aten/KernelScopes.h"  // Note [The lab's seam]
#include "aten/Registration.h"
#include "runtime/Clock.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>

namespace openreg {
namespace {

thread_local uint64_t tls_copies = 0;

bool on_openreg(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

// `t` as a plain CPU tensor over the same bytes: host_view for openreg
// tensors, and for a quantized CPU tensor an alias without its quantizer.
// The CPU copy kernel then copies a quantized tensor's integer representation
// as it copies any other elements (copy_ has already given dst the quantizer
// of src); given a quantized tensor on one side only, it would refuse.
at::Tensor plain_view(const at::Tensor& t) {
  if (!t.is_quantized() || on_openreg(t)) {
    return host_view(t);
  }
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(t.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

// copy_ of `self` into `dst`, where at least one of them is on openreg.
// See Note [Device memory is host memory]: the CPU copy kernel moves the
// bytes, converting dtype and layout on the way.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst,
                     bool /*non_blocking: see Note [Synchronous execution]*/) {
  TORCH_CHECK(self.device().is_cpu() || on_openreg(self), "copy from ", self.device(),
              " to openreg is not supported: move the tensor to cpu first");
  TORCH_CHECK(dst.device().is_cpu() || on_openreg(dst), "copy from openreg to ", dst.device(),
              " is not supported: move the tensor to cpu first");
  c10::OptionalDeviceGuard guard(on_openreg(dst) ? dst.device() : self.device());
  const seam::Hooks* lab = seam::hooks();  // Note [The lab's seam]
  const int64_t start =
      lab != nullptr && lab->recording->load(std::memory_order_relaxed) ? now_ns() : 0;
  {
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    plain_view(dst).copy_(plain_view(self));
  }
  ++tls_copies;
  if (lab != nullptr) {
    lab->record_copy(start, self.device(), dst.device(), static_cast<int64_t>(dst.nbytes()));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

}  // namespace

uint64_t copies_on_this_thread() noexcept {
  return tls_copies;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "_copy_from", copy_from);
  OPENREG_IMPL(m, "_copy_from_and_resize", copy_from_and_resize);
}

// A quantized tensor's bytes move the same way: copy_ has already given dst
// src's quantizer, and the host views copy the integer representation.
TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  OPENREG_IMPL(m, "_copy_from", copy_from);
}

// Note [Copies resolve conjugate and negative bits]
// A lazily conjugated (x.conj()) or negated view reaches _copy_from with its
// conj/neg bit set. The Conjugate and Negative dispatch keys would then
// materialise the source first, with clone(), which copies through _copy_from
// again, with the bit still set: endless recursion. _copy_from above honours
// the bits itself (host_view carries them, the CPU copy resolves them), so the
// dispatcher is told to pass these calls straight through.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace openreg
