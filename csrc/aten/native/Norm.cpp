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
using VectorNorm =
    HostKernel<at::_ops::linalg_vector_norm, at::_ops::linalg_vector_norm_out, const c10::Scalar&,
               at::OptionalIntArrayRef, bool, std::optional<c10::ScalarType>>;

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
