// Cumulative scans: cumsum and cumprod in their functional, in-place and out=
// forms. Hugging Face models call cumsum every step (GPT-2 finds packed
// sequences with it when a batch has no attention mask, and position ids are
// an attention mask's cumsum); cumprod takes the same path.
//
// Each is the CPU's own kernel computing on host views of device memory (Note
// [Host kernels on host views] in HostKernel.h). The result has the input's
// sizes, contiguous, and the CPU's dtype: `dtype=` when given, else int64 for
// integral and bool inputs, else the input's. An out= tensor keeps its own
// dtype, which the CPU's kernel checks against `dtype=` with its message.

#include "aten/native/HostKernel.h"

#include "aten/Registration.h"

#include <ATen/ops/cumprod_ops.h>
#include <ATen/ops/cumsum_ops.h>

namespace openreg {
namespace {

using Dtype = std::optional<c10::ScalarType>;

struct ScanResult {
  static c10::ScalarType dtype(const at::Tensor& self, Dtype dtype) {
    if (dtype.has_value()) {
      return *dtype;
    }
    const bool integral = c10::isIntegralType(self.scalar_type(), /*includeBool=*/true);
    return integral ? c10::kLong : self.scalar_type();
  }
  static c10::IntArrayRef shape(const at::Tensor& self, int64_t /*dim*/, Dtype /*dtype*/) {
    return self.sizes();
  }
  static at::Tensor make(const at::Tensor& self, int64_t /*dim*/, Dtype dtype) {
    return native::empty(self.sizes(), self.options().dtype(ScanResult::dtype(self, dtype)));
  }
};

// Note [Host kernels on host views]: the in-place form writes through the view.
template <class Op>
at::Tensor& scan_(at::Tensor& self, int64_t dim, Dtype dtype) {
  at::Tensor host = host_view(self);
  InternalScope internal;  // Note [The backend's own dispatcher calls]
  Op::call(host, dim, dtype);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using CumSum = native::HostKernel<at::_ops::cumsum_out, ScanResult, int64_t, Dtype>;
  using CumProd = native::HostKernel<at::_ops::cumprod_out, ScanResult, int64_t, Dtype>;
  OPENREG_IMPL(m, "cumsum", CumSum::functional);
  OPENREG_IMPL(m, "cumsum.out", CumSum::out);
  OPENREG_IMPL(m, "cumsum_", scan_<at::_ops::cumsum_>);
  OPENREG_IMPL(m, "cumprod", CumProd::functional);
  OPENREG_IMPL(m, "cumprod.out", CumProd::out);
  OPENREG_IMPL(m, "cumprod_", scan_<at::_ops::cumprod_>);
}

}  // namespace openreg
