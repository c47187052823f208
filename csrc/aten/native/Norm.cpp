// Vector norms, as gradient clipping computes them
// (torch.nn.utils.clip_grad_norm_): linalg_vector_norm (and its out= form)
// and _foreach_norm, one norm per tensor of a list.
//
// The CPU's own kernel computes on host views of device memory (Note [Host
// kernels on host views] in HostKernel.h); _foreach_norm is, as on the CPU,
// one vector norm per tensor.

#include "aten/native/HostKernel.h"

#include "aten/Registration.h"

#include <ATen/ops/_foreach_norm_ops.h>
#include <ATen/ops/linalg_vector_norm_ops.h>

#include <vector>

namespace openreg {
namespace {

using native::HostKernel;
using Dtype = std::optional<c10::ScalarType>;

// The norm's sizes, and its dtype: `dtype`, else the input's real dtype.
struct Norm {
  static c10::DimVector shape(const at::Tensor& self, const c10::Scalar& /*ord*/,
                              at::OptionalIntArrayRef dims, bool keepdim, Dtype /*dtype*/) {
    return native::reduced_shape(self, dims, keepdim);
  }
  static at::Tensor make(const at::Tensor& self, const c10::Scalar& ord,
                         at::OptionalIntArrayRef dims, bool keepdim, Dtype dtype) {
    const c10::ScalarType type = dtype.value_or(c10::toRealValueType(self.scalar_type()));
    return native::empty(shape(self, ord, dims, keepdim, dtype), self.options().dtype(type));
  }
};

using VectorNorm = HostKernel<at::_ops::linalg_vector_norm_out, Norm, const c10::Scalar&,
                              at::OptionalIntArrayRef, bool, Dtype>;

std::vector<at::Tensor> foreach_norm(at::TensorList self, const c10::Scalar& ord,
                                     std::optional<c10::ScalarType> dtype) {
  TORCH_CHECK(!self.empty(), "Tensor list must have at least one tensor.");
  std::vector<at::Tensor> result;
  result.reserve(self.size());
  for (const at::Tensor& t : self) {
    result.push_back(VectorNorm::functional(t, ord, std::nullopt, false, dtype));
  }
  return result;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "linalg_vector_norm", VectorNorm::functional);
  OPENREG_IMPL(m, "linalg_vector_norm.out", VectorNorm::out);
  OPENREG_IMPL(m, "_foreach_norm.Scalar", foreach_norm);
}

}  // namespace openreg
