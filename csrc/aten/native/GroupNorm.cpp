// Group normalisation, forward and backward: native_group_norm and
// native_group_norm_backward, what F.group_norm and nn.GroupNorm reach (every
// ResNet block of a diffusion UNet runs two).
//
// The CPU's own kernels compute on host views of device memory (Note [Host
// kernels on host views] in HostKernel.h). The CPU has no out= kernel for
// either: its functional kernels run on the host views, and each result they
// allocate on the host is moved into device memory of the same sizes, strides
// and dtype. So every layout (channels-last stays channels-last), dtype (mean
// and rstd in float for a 16-bit input with float parameters), empty batch,
// error and value is the CPU's.
//
// PyTorch's kernel for a backend it does not know, math_group_norm, is a
// composite of var_mean, batch-norm-like arithmetic and a backward of many
// ops (and, in some versions, refuses a channels-last input): openreg no
// longer runs it.

#include "aten/native/HostKernel.h"

#include "aten/Registration.h"

#include <ATen/ops/native_group_norm_backward_ops.h>
#include <ATen/ops/native_group_norm_ops.h>

#include <array>
#include <tuple>

namespace openreg {
namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using GroupNormResults = std::tuple<Tensor, Tensor, Tensor>;

void gn_check_devices(const Tensor& input, std::initializer_list<OptTensor> others) {
  for (const OptTensor& t : others) {
    if (t.has_value() && t->defined()) {
      native::check_same_device(input, *t);
    }
  }
}

GroupNormResults gn_staged(const GroupNormResults& host, c10::Device device) {
  return {native::to_device_memory(std::get<0>(host), device),
          native::to_device_memory(std::get<1>(host), device),
          native::to_device_memory(std::get<2>(host), device)};
}

GroupNormResults group_norm(const Tensor& X, const OptTensor& gamma, const OptTensor& beta,
                            int64_t N, int64_t C, int64_t HxW, int64_t group, double eps) {
  gn_check_devices(X, {gamma, beta});
  GroupNormResults host;
  {
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    host = at::_ops::native_group_norm::call(host_view(X), host_view(gamma), host_view(beta), N, C,
                                             HxW, group, eps);
  }
  return gn_staged(host, X.device());
}

GroupNormResults group_norm_backward(const Tensor& dY, const Tensor& X, const Tensor& mean,
                                     const Tensor& rstd, const OptTensor& gamma, int64_t N,
                                     int64_t C, int64_t HxW, int64_t group,
                                     std::array<bool, 3> mask) {
  gn_check_devices(X, {dY, mean, rstd, gamma});
  GroupNormResults host;
  {
    InternalScope internal;
    host = at::_ops::native_group_norm_backward::call(host_view(dY), host_view(X), host_view(mean),
                                                      host_view(rstd), host_view(gamma), N, C, HxW,
                                                      group, mask);
  }
  return gn_staged(host, X.device());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "native_group_norm", group_norm);
  OPENREG_IMPL(m, "native_group_norm_backward", group_norm_backward);
}

}  // namespace openreg
