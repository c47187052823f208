// The operators every PrivateUse1 backend must provide before anything else
// works: factories, views, resizing, set_, reading a scalar, fill and zero.
// Copies live in Copy.cpp, random sampling in Random.cpp.

#include "aten/HostView.h"
#include "aten/Registration.h"
#include "runtime/DeviceAllocator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>

namespace openreg {
namespace {

constexpr auto kKey = c10::DispatchKey::PrivateUse1;

// --- factories --------------------------------------------------------------

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory.value_or(false),
              "only CPU tensors can be pinned; create the tensor on cpu and call "
              ".pin_memory()");
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, &device_allocator(), c10::DispatchKeySet(kKey),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, &device_allocator(),
                                           c10::DispatchKeySet(kKey), c10::dtype_or_default(dtype));
}

// --- storage: resize_ and set_ ------------------------------------------------

// Grows the storage of `self` so that it holds at least `nbytes`.
void ensure_storage_bytes(const at::Tensor& self, size_t nbytes) {
  c10::StorageImpl* storage = self.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (nbytes <= storage->nbytes()) {
    return;
  }
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  c10::DeviceGuard guard(self.device());
  c10::DataPtr fresh = device_allocator().allocate(nbytes);
  if (storage->nbytes() > 0) {
    std::memcpy(fresh.get(), storage->data(), storage->nbytes());
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

void fit_storage(const at::Tensor& self) {
  if (self.numel() == 0) {
    return;
  }
  const size_t nbytes = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                         self.itemsize(), self.storage_offset());
  ensure_storage_bytes(self, nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, /*stride=*/std::nullopt,
                               /*resize_storage=*/false);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ",
                *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  fit_storage(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device() == self.device(), "set_: expected a storage on ", self.device(),
              ", got one on ", source.device());
  TORCH_CHECK(storage_offset >= 0, "Tensor: invalid storage offset ", storage_offset);
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) {
    impl->set_storage_keep_dtype(std::move(source));
  }
  impl->set_sizes_and_strides(size, stride, storage_offset);
  fit_storage(self);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {1});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) {
    return self;
  }
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                     source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, &device_allocator(),
                     /*resizable=*/true);
  return set_storage(self, std::move(empty), 0, {0}, {1});
}

// --- reading and writing values ----------------------------------------------

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(host_view(self));
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  host_view(self).fill_(value);
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  host_view(self).fill_(host_view(value));
  return self;
}

at::Tensor& zero_(at::Tensor& self) {
  host_view(self).zero_();
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "empty.memory_format", empty_memory_format);
  OPENREG_IMPL(m, "empty_strided", empty_strided);

  // Views share the input's storage; ATen's device-generic versions apply.
  OPENREG_IMPL(m, "as_strided", at::native::as_strided_tensorimpl);
  OPENREG_IMPL(m, "view", at::native::view);
  OPENREG_IMPL(m, "_reshape_alias", at::native::_reshape_alias);
  OPENREG_IMPL(m, "unfold", at::native::unfold);
  OPENREG_IMPL(m, "view_as_real", at::native::view_as_real);
  OPENREG_IMPL(m, "view_as_complex", at::native::view_as_complex);

  OPENREG_IMPL(m, "resize_", resize_);
  OPENREG_IMPL(m, "set_.source_Storage_storage_offset", set_storage);
  OPENREG_IMPL(m, "set_.source_Storage", set_source_storage);
  OPENREG_IMPL(m, "set_.source_Tensor", set_source_tensor);
  OPENREG_IMPL(m, "set_", set_empty);

  OPENREG_IMPL(m, "_local_scalar_dense", local_scalar_dense);
  OPENREG_IMPL(m, "fill_.Scalar", fill_scalar);
  OPENREG_IMPL(m, "fill_.Tensor", fill_tensor);
  OPENREG_IMPL(m, "zero_", zero_);
}

}  // namespace openreg
