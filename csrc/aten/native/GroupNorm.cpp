// native_group_norm on openreg: what F.group_norm and nn.GroupNorm reach.
//
// PyTorch's kernel for a backend it does not know is math_group_norm (its
// CompositeExplicitAutograd kernel), which views the input as
// (1, N * groups, -1) and so raises "view size is not compatible" for any
// input that is not contiguous, a channels_last one included. CPU's kernel
// takes the input in its suggested memory format and returns the output in
// it. openreg runs math_group_norm (batch norm and addcmul on openreg's own
// kernels) on the input made contiguous, and gives the output the memory
// format CPU gives it; mean and rstd are (N, groups) either way. The backward
// (native_group_norm_backward) has only CPU and CUDA kernels and runs through
// the CPU fallback, which handles any layout.

#include "aten/Registration.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/native_group_norm_native.h>

#include <optional>
#include <tuple>

namespace openreg {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, int64_t N, int64_t C, int64_t HxW, int64_t group,
    double eps) {
  if (input.is_contiguous()) {
    return at::native::math_group_norm(input, weight, bias, N, C, HxW, group, eps);
  }
  auto [y, mean, rstd] =
      at::native::math_group_norm(input.contiguous(), weight, bias, N, C, HxW, group, eps);
  return {y.contiguous(input.suggest_memory_format()), mean, rstd};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "native_group_norm", native_group_norm);
}

}  // namespace openreg
