// Compressed sparse tensors (CSR, CSC, BSR, BSC) on openreg: the kernels of
// the SparseCsrPrivateUse1 key that build, describe or copy one, as Sparse.cpp
// does for COO. A compressed openreg tensor is a SparseCsrTensorImpl over
// dense openreg tensors (compressed indices, plain indices, values); the
// functions registered here are PyTorch's device-generic ones, the same that
// SparseCsrCPU and SparseCsrCUDA register, and move no element to the host.
// Everything that computes (to_dense, matmul, add, sum, ...) runs on the CPU
// through the fallback of this key (LayoutFallback.cpp).
//
// Registered for the compressed sparse key, not for PrivateUse1, so
// native_ops.yaml does not list them.

#include "aten/Registration.h"

#include <c10/core/DeviceGuard.h>

#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>

namespace openreg {
namespace {

// Under a guard for `device=`, as in Sparse.cpp.
at::Tensor empty_compressed(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                            std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                            std::optional<bool> pin_memory,
                            std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::empty_sparse_compressed(size, dtype, layout, device, pin_memory,
                                             memory_format);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  // factories
  OPENREG_IMPL(m, "empty.memory_format", empty_compressed);
  OPENREG_IMPL(m, "empty_like", at::native::empty_like_sparse_csr);
  // the structure
  OPENREG_IMPL(m, "sparse_dim", at::native::sparse_dim_sparse_csr);
  OPENREG_IMPL(m, "dense_dim", at::native::dense_dim_sparse_csr);
  OPENREG_IMPL(m, "_nnz", at::native::_nnz_sparse_csr);
  OPENREG_IMPL(m, "crow_indices", at::native::crow_indices_sparse_csr);
  OPENREG_IMPL(m, "col_indices", at::native::col_indices_sparse_csr);
  OPENREG_IMPL(m, "ccol_indices", at::native::ccol_indices_sparse_csr);
  OPENREG_IMPL(m, "row_indices", at::native::row_indices_sparse_csr);
  OPENREG_IMPL(m, "values", at::native::values_sparse_csr);
  // resizing, clearing, copying
  OPENREG_IMPL(m, "resize_", at::native::resize_sparse_csr_);
  OPENREG_IMPL(m, "resize_as_sparse_", at::native::resize_as_sparse_compressed_);
  OPENREG_IMPL(m, "zero_", at::native::zero_sparse_csr_);
  OPENREG_IMPL(m, "copy_", at::native::copy_sparse_compressed_);
  OPENREG_IMPL(m, "clone", at::native::clone_sparse_compressed);
}

}  // namespace openreg
