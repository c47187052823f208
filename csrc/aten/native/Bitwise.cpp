// bitwise_and (`&`) on integral and bool tensors: what Hugging Face models
// combine their causal and padding masks with, every step. Functional,
// in-place and out= forms; the Scalar overloads are PyTorch's composites over
// these. Dtypes and layouts as in Binary.cpp (Loops.h); a floating dtype goes
// to the fallback, which gives the CPU's error.

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"
#include "aten/native/Loops.h"

#include <ATen/ops/bitwise_and_ops.h>

namespace openreg {
namespace {

using at::Tensor;
using c10::ScalarType;
using loops::Loop;
using loops::Mode;

bool bitwise_native(ScalarType dtype) {
  return loops::is_integral(dtype, /*include_bool=*/true);
}

Tensor bitwise_and_run(const Tensor& self, const Tensor& other, const Tensor& out, Mode mode,
                       ScalarType dtype) {
  loops::check_overlap(out, {self, other});
  const Tensor a = loops::to_compute(self, dtype);
  const Tensor b = loops::to_compute(other, dtype);
  return loops::run_elementwise(out, mode, dtype, {a, b}, [&](const Loop& loop) {
    if (dtype == ScalarType::Bool) {
      loop.run<bool, bool, bool>([](bool x, bool y) { return x && y; });
      return;
    }
    loops::dispatch_integral(dtype, [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      loop.run<T, T, T>([](T x, T y) -> T { return x & y; });
    });
  });
}

Tensor bitwise_and(const Tensor& self, const Tensor& other) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!bitwise_native(dtype)) {
    return fallback<at::_ops::bitwise_and_Tensor>(self, other);
  }
  return bitwise_and_run(self, other, Tensor(), Mode::Functional, dtype);
}

Tensor& bitwise_and_(Tensor& self, const Tensor& other) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!bitwise_native(dtype)) {
    return fallback<at::_ops::bitwise_and__Tensor>(self, other);
  }
  bitwise_and_run(self, other, self, Mode::InPlace, dtype);
  return self;
}

Tensor& bitwise_and_out(const Tensor& self, const Tensor& other, Tensor& out) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!bitwise_native(dtype)) {
    return fallback<at::_ops::bitwise_and_Tensor_out>(self, other, out);
  }
  bitwise_and_run(self, other, out, Mode::Out, dtype);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "bitwise_and.Tensor", bitwise_and);
  OPENREG_IMPL(m, "bitwise_and_.Tensor", bitwise_and_);
  OPENREG_IMPL(m, "bitwise_and.Tensor_out", bitwise_and_out);
}

}  // namespace openreg
