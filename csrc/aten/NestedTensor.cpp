// Nested tensors (the strided NestedTensorImpl layout) on openreg: the kernels
// of the NestedTensorPrivateUse1 key that copy or describe one. A nested
// openreg tensor keeps its elements in one openreg buffer and the sizes,
// strides and offsets of its components in CPU tensors; the functions
// registered here are PyTorch's device-generic ones, the same that
// NestedTensorCPU and NestedTensorCUDA register, and move the buffer only
// through the dense copy path. Everything that computes (mul, add, softmax,
// to_padded_tensor, ...) runs on the CPU through the fallback of this key
// (LayoutFallback.cpp). Jagged nested tensors (layout=torch.jagged) are a
// Python subclass over ordinary openreg tensors and need none of this.
//
// Registered for the nested key, not for PrivateUse1, so native_ops.yaml does
// not list them.

#include "aten/Registration.h"

#include <ATen/ops/_nested_tensor_size_native.h>
#include <ATen/ops/_nested_tensor_storage_offsets_native.h>
#include <ATen/ops/_nested_tensor_strides_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/is_same_size_native.h>

namespace openreg {

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  // moving and copying: the buffer goes through _copy_from
  OPENREG_IMPL(m, "_to_copy", at::native::_to_copy_nested);
  OPENREG_IMPL(m, "copy_", at::native::copy_nested_);
  OPENREG_IMPL(m, "clone", at::native::clone_nested);
  OPENREG_IMPL(m, "empty_like", at::native::empty_like_nested);
  // the structure
  OPENREG_IMPL(m, "_nested_tensor_size", at::native::_nested_tensor_size);
  OPENREG_IMPL(m, "_nested_tensor_strides", at::native::_nested_tensor_strides);
  OPENREG_IMPL(m, "_nested_tensor_storage_offsets", at::native::_nested_tensor_storage_offsets);
  OPENREG_IMPL(m, "is_same_size", at::native::nested_is_same_size);
}

}  // namespace openreg
