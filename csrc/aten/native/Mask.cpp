// The operators Hugging Face models build attention masks with: all and any
// (every overload: over everything, one dim, a list of dims, and their out=
// forms), isneginf and isposinf, tril and triu (functional, in-place, out=);
// and isnan, with which the Hugging Face Trainer checks every step's loss.
// isnan has no out= form: the CPU's isnan is self != self, and so is this
// one (ne's CPU kernel on host views).
//
// Each is the CPU's own kernel computing on host views of device memory (Note
// [Host kernels on host views] in HostKernel.h): these are cheap, memory-bound
// operators, and what matters for the models that call them every step is
// that no byte goes to the host and back.

#include "aten/native/HostKernel.h"

#include "aten/Registration.h"

#include <ATen/ops/all_ops.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/empty_like_ops.h>
#include <ATen/ops/isneginf_ops.h>
#include <ATen/ops/isposinf_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/tril_ops.h>
#include <ATen/ops/triu_ops.h>

namespace openreg {
namespace {

using native::HostKernel;
using native::reduced_shape;
using Dims = at::OptionalIntArrayRef;

// all and any: bool results (uint8 for uint8 input, as on the CPU).
struct Reduced {
  static c10::ScalarType dtype(const at::Tensor& self) {
    return self.scalar_type() == c10::kByte ? c10::kByte : c10::kBool;
  }
  static c10::DimVector shape(const at::Tensor& self) {
    return reduced_shape(self, std::nullopt, false);
  }
  static c10::DimVector shape(const at::Tensor& self, int64_t dim, bool keepdim) {
    return reduced_shape(self, at::IntArrayRef(dim), keepdim);
  }
  // An empty list of dims reduces nothing (each element tested alone, as on
  // the CPU), unlike sum's, which reduces everything; no list reduces all.
  static c10::DimVector shape(const at::Tensor& self, Dims dims, bool keepdim) {
    if (dims.has_value() && dims->empty()) {
      return c10::DimVector(self.sizes());
    }
    return reduced_shape(self, dims, keepdim);
  }
  template <class... Args>
  static at::Tensor make(const at::Tensor& self, Args... args) {
    return native::empty(shape(self, args...), self.options().dtype(dtype(self)));
  }
};

// isneginf and isposinf: a bool tensor laid out like the input.
struct Elementwise {
  static c10::IntArrayRef shape(const at::Tensor& self) {
    return self.sizes();
  }
  static at::Tensor make(const at::Tensor& self) {
    return at::_ops::empty_like::call(self, c10::kBool, std::nullopt, std::nullopt, std::nullopt,
                                      c10::MemoryFormat::Preserve);
  }
};

// isnan(self) is self != self, into a bool `out` laid out like the input.
struct IsNanOut {
  static at::Tensor& call(const at::Tensor& self, at::Tensor& out) {
    return at::_ops::ne_Tensor_out::call(self, self, out);
  }
};

// tril and triu: contiguous, like the input's dtype.
struct Triangle {
  static c10::IntArrayRef shape(const at::Tensor& self, const c10::SymInt& /*diagonal*/) {
    return self.sizes();
  }
  static at::Tensor make(const at::Tensor& self, const c10::SymInt& /*diagonal*/) {
    return native::empty(self.sizes(), self.options());
  }
};

// Note [Host kernels on host views]: the in-place form writes through the view.
template <class Op>
at::Tensor& triangle_(at::Tensor& self, c10::SymInt diagonal) {
  at::Tensor host = host_view(self);
  InternalScope internal;  // Note [The backend's own dispatcher calls]
  Op::call(host, std::move(diagonal));
  return self;
}

}  // namespace

// The functional and out= forms of one operator overload.
#define OPENREG_HOST_KERNEL(m, name, out_name, Kernel) \
  OPENREG_IMPL(m, name, Kernel::functional);           \
  OPENREG_IMPL(m, out_name, Kernel::out)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using AllAll = HostKernel<at::_ops::all_all_out, Reduced>;
  using AllDim = HostKernel<at::_ops::all_out, Reduced, int64_t, bool>;
  using AllDims = HostKernel<at::_ops::all_dims_out, Reduced, Dims, bool>;
  using AnyAll = HostKernel<at::_ops::any_all_out, Reduced>;
  using AnyDim = HostKernel<at::_ops::any_out, Reduced, int64_t, bool>;
  using AnyDims = HostKernel<at::_ops::any_dims_out, Reduced, Dims, bool>;
  using IsNegInf = HostKernel<at::_ops::isneginf_out, Elementwise>;
  using IsPosInf = HostKernel<at::_ops::isposinf_out, Elementwise>;
  using Tril = HostKernel<at::_ops::tril_out, Triangle, c10::SymInt>;
  using Triu = HostKernel<at::_ops::triu_out, Triangle, c10::SymInt>;
  OPENREG_HOST_KERNEL(m, "all", "all.all_out", AllAll);
  OPENREG_HOST_KERNEL(m, "all.dim", "all.out", AllDim);
  OPENREG_HOST_KERNEL(m, "all.dims", "all.dims_out", AllDims);
  OPENREG_HOST_KERNEL(m, "any", "any.all_out", AnyAll);
  OPENREG_HOST_KERNEL(m, "any.dim", "any.out", AnyDim);
  OPENREG_HOST_KERNEL(m, "any.dims", "any.dims_out", AnyDims);
  OPENREG_HOST_KERNEL(m, "isneginf", "isneginf.out", IsNegInf);
  OPENREG_HOST_KERNEL(m, "isposinf", "isposinf.out", IsPosInf);
  OPENREG_IMPL(m, "isnan", (HostKernel<IsNanOut, Elementwise>::functional));
  OPENREG_HOST_KERNEL(m, "tril", "tril.out", Tril);
  OPENREG_HOST_KERNEL(m, "triu", "triu.out", Triu);
  OPENREG_IMPL(m, "tril_", triangle_<at::_ops::tril_>);
  OPENREG_IMPL(m, "triu_", triangle_<at::_ops::triu_>);
}

}  // namespace openreg
