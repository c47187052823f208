#pragma once

// Note [Device memory is host memory]
// openreg's device memory is ordinary host RAM handed out by
// runtime/DeviceAllocator. A kernel can therefore compute on an openreg tensor
// by wrapping the same bytes in a CPU tensor (`host_view`) and running CPU code
// on it: no data moves. Hand-written kernels, copies and the generic native
// path (Note [Generic native path]) use this; the CPU fallback deliberately
// does not (it copies, as a real accelerator must), so that the cost of
// falling back is visible.

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace openreg {

// A CPU tensor over the same memory as `t` (same storage bytes, offset, sizes,
// strides, dtype, conj/neg bits). Tensors that are not on openreg are
// returned unchanged. The view does not own the memory: keep `t` alive.
// Host views of one device storage share one CPU storage, so ATen sees them
// overlap (Note [Host views share one storage] in HostView.cpp).
at::Tensor host_view(const at::Tensor& t);

std::optional<at::Tensor> host_view(const std::optional<at::Tensor>& t);

std::vector<at::Tensor> host_views(at::TensorList ts);

}  // namespace openreg
