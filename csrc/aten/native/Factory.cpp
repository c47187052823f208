// Factories that compute their values on the device: arange. (Empty tensors,
// fill_ and zero_ are in ../Minimal.cpp, random ones in ../Random.cpp.)

#include "aten/native/Loops.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/AccumulateType.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/ops/arange_ops.h>
#include <ATen/ops/empty.h>

namespace openreg {
namespace {

using at::Tensor;
using c10::Scalar;
using c10::ScalarType;

// out[i] = start + step * i, computed in CPU's accumulate type (double for
// float, float for 16-bit floats, int64 for integers), then cast.
void arange_kernel(const Tensor& out, const Scalar& start, const Scalar& step) {
  loops::dispatch_numeric(out.scalar_type(), [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = at::acc_type<T, /*is_cuda=*/false>;
    const acc first = start.to<acc>();
    const acc delta = step.to<acc>();
    T* data = out.data_ptr<T>();
    loops::parallel_chunks(out.numel(), [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        data[i] = static_cast<T>(first + delta * static_cast<acc>(i));
      }
    });
  });
}

bool arange_native(ScalarType dtype) {
  return loops::is_native(dtype) && dtype != ScalarType::Bool;
}

Tensor& arange_out(const Scalar& start, const Scalar& end, const Scalar& step, Tensor& out) {
  const ScalarType dtype = out.scalar_type();
  if (!arange_native(dtype)) {
    return fallback<at::_ops::arange_start_out>(start, end, step, out);
  }
  // The size in double, or int64 for int64 outputs, as on every device.
  const int64_t size = dtype == ScalarType::Long
                           ? at::native::compute_arange_size<int64_t>(start, end, step)
                           : at::native::compute_arange_size<double>(start, end, step);
  if (out.numel() != size) {
    if (out.numel() > 0) {
      TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ",
                 out.numel(), " which does not match the computed number of elements ", size,
                 ". Note that this may occur as a result of rounding error. The out tensor will "
                 "be resized to a tensor of shape (",
                 size, ",).");
    }
    out.resize_({size});
  }
  // Narrow integers and strided outputs are computed in a contiguous buffer,
  // then copied (Note [Narrow integers] in Loops.h).
  const ScalarType compute = loops::compute_dtype(dtype);
  if (compute == dtype && out.is_contiguous()) {
    arange_kernel(out, start, step);
  } else {
    const Tensor tmp = at::empty(out.sizes(), out.options().dtype(compute));
    arange_kernel(tmp, start, step);
    out.copy_(tmp);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "arange.start_out", arange_out);
}

}  // namespace openreg
