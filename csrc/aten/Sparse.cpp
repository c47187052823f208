// Sparse COO tensors on openreg: the kernels of the SparsePrivateUse1 key
// that only build, describe or restructure a sparse tensor. A sparse openreg
// tensor is a SparseTensorImpl whose indices and values are ordinary (dense)
// openreg tensors; the functions registered here are PyTorch's own
// device-generic ones, the same that SparseCPU and SparseCUDA register. They
// move no element to the host: building a tensor aliases the given indices
// and values, an accessor returns them, a copy or clone copies them through
// the dense copy path (traced as copies).
//
// Everything that computes on a sparse tensor (to_dense, coalesce, add, mul,
// sparse.mm, sum, ...) runs on the CPU through the fallback of the sparse key
// (LayoutFallback.cpp), as the dense fallback does for dense operators.
//
// These kernels are registered for the sparse key, not for PrivateUse1, so
// native_ops.yaml (the dense key's kernels) does not list them.

#include "aten/Registration.h"

#include <c10/core/DeviceGuard.h>

#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>

namespace openreg {
namespace {

// The factories run under a guard for their `device=` argument, as the
// dispatcher's generated wrappers do for CUDA: a tensor built for openreg:1
// must not take the current device's index while its values are on 1.
at::Tensor empty_sparse(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                        std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                        std::optional<bool> pin_memory,
                        std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::empty_sparse(size, dtype, layout, device, pin_memory, memory_format);
}

at::Tensor with_dims(int64_t sparse_dim, int64_t dense_dim, c10::IntArrayRef size,
                     std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                     std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_sparse(sparse_dim, dense_dim, size, dtype, layout, device,
                                          pin_memory);
}

at::Tensor with_dims_and_tensors(int64_t sparse_dim, int64_t dense_dim, c10::SymIntArrayRef size,
                                 const at::Tensor& indices, const at::Tensor& values,
                                 std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout,
                                 std::optional<c10::Device> device, std::optional<bool> pin_memory,
                                 std::optional<bool> is_coalesced) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::new_with_dims_and_tensor_sparse_symint(sparse_dim, dense_dim, size, indices,
                                                            values, dtype, layout, device,
                                                            pin_memory, is_coalesced);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // factories: `torch.empty(..., layout=torch.sparse_coo)` and the
  // constructors every sparse result is built with
  OPENREG_IMPL(m, "empty.memory_format", empty_sparse);
  OPENREG_IMPL(m, "empty_like", at::native::empty_like_sparse_coo);
  OPENREG_IMPL(m, "_sparse_coo_tensor_with_dims", with_dims);
  OPENREG_IMPL(m, "_sparse_coo_tensor_with_dims_and_tensors", with_dims_and_tensors);
  // the structure: dimensions, number of entries, indices and values
  OPENREG_IMPL(m, "sparse_dim", at::native::sparse_dim_sparse);
  OPENREG_IMPL(m, "_dimI", at::native::sparse_dim_sparse);
  OPENREG_IMPL(m, "dense_dim", at::native::dense_dim_sparse);
  OPENREG_IMPL(m, "_dimV", at::native::dense_dim_sparse);
  OPENREG_IMPL(m, "_nnz", at::native::_nnz_sparse);
  OPENREG_IMPL(m, "is_coalesced", at::native::is_coalesced_sparse);
  OPENREG_IMPL(m, "_coalesced_", at::native::_coalesced_sparse_);
  OPENREG_IMPL(m, "_indices", at::native::_indices_sparse);
  OPENREG_IMPL(m, "_values", at::native::_values_sparse);
  OPENREG_IMPL(m, "indices", at::native::indices_sparse);
  OPENREG_IMPL(m, "values", at::native::values_sparse);
  // resizing, clearing, copying: metadata, or copies of indices and values
  OPENREG_IMPL(m, "sparse_resize_", at::native::sparse_resize_);
  OPENREG_IMPL(m, "sparse_resize_and_clear_", at::native::sparse_resize_and_clear_);
  OPENREG_IMPL(m, "resize_as_sparse_", at::native::resize_as_sparse_);
  OPENREG_IMPL(m, "zero_", at::native::zero_sparse_);
  OPENREG_IMPL(m, "copy_sparse_to_sparse_", at::native::copy_sparse_);
  OPENREG_IMPL(m, "copy_", at::native::copy_sparse_wrapper_);
  OPENREG_IMPL(m, "clone", at::native::clone_sparse);
}

}  // namespace openreg
