#include "aten/HostView.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

namespace openreg {

at::Tensor host_view(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) {
    return t;
  }
  const c10::Storage& storage = t.storage();
  c10::Storage alias(c10::Storage::use_byte_size_t(), storage.nbytes(),
                     c10::DataPtr(const_cast<void*>(storage.data()), c10::Device(c10::kCPU)),
                     /*allocator=*/nullptr,
                     /*resizable=*/false);
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(alias), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  out._set_conj(t.is_conj());
  out._set_neg(t.is_neg());
  return out;
}

std::optional<at::Tensor> host_view(const std::optional<at::Tensor>& t) {
  if (!t.has_value()) {
    return std::nullopt;
  }
  return host_view(*t);
}

std::vector<at::Tensor> host_views(at::TensorList ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) {
    out.push_back(host_view(t));
  }
  return out;
}

}  // namespace openreg
