// 2-d upsampling, forward and backward, as UNets and decoders run it every
// step: upsample_nearest2d (F.interpolate(mode="nearest") and nn.Upsample)
// and upsample_bilinear2d (mode="bilinear", either align_corners), in their
// functional and out= forms.
//
// All four are structured: the CPU's kernel class runs on device memory as
// Note [Structured kernels on device memory] (Structured.h) says, so that
// sizes, scales, channels-last layouts, checks and results are the CPU's, and
// nothing is copied.

#include "aten/native/HostKernel.h"
#include "aten/native/Structured.h"

#include "aten/Registration.h"

#include <ATen/ops/upsample_bilinear2d_backward_native.h>
#include <ATen/ops/upsample_bilinear2d_native.h>
#include <ATen/ops/upsample_nearest2d_backward_native.h>
#include <ATen/ops/upsample_nearest2d_native.h>

namespace openreg {
namespace {

using at::IntArrayRef;
using at::Tensor;
using native::check_same_device;
using native::OnDevice;
using native::OnDeviceOut;
using Scale = std::optional<double>;

// The forward kernels take (input, output_size, [align_corners,] scales_h,
// scales_w); the backward ones (grad_output, output_size, input_size,
// [align_corners,] scales_h, scales_w). `Args` are the arguments after the
// first tensor, as the CPU's meta and impl take them.
template <class Op, class... Args>
void upsample_run(Op& op, const Tensor& input, Args... args) {
  const Tensor host = host_view(input);
  InternalScope internal;  // Note [The backend's own dispatcher calls]
  op.meta(host, args...);
  op.impl(host, args..., op.host(0));
}

template <class Kernel, class... Args>
Tensor upsample(const Tensor& input, Args... args) {
  OnDevice<Kernel, 1> op(input.device());
  upsample_run(op, input, args...);
  return op.result(0);
}

template <class Kernel, class... Args>
Tensor& upsample_out(const Tensor& input, Args... args, Tensor& out) {
  check_same_device(input, out);
  OnDeviceOut<Kernel, 1> op({out});
  upsample_run(op, input, args...);
  op.finish();
  return out;
}

using Nearest = at::native::structured_upsample_nearest2d_out_cpu;
using NearestBackward = at::native::structured_upsample_nearest2d_backward_out_cpu;
using Bilinear = at::native::structured_upsample_bilinear2d_out_cpu;
using BilinearBackward = at::native::structured_upsample_bilinear2d_backward_out_cpu;

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "upsample_nearest2d", (upsample<Nearest, IntArrayRef, Scale, Scale>));
  OPENREG_IMPL(m, "upsample_nearest2d.out", (upsample_out<Nearest, IntArrayRef, Scale, Scale>));
  OPENREG_IMPL(m, "upsample_nearest2d_backward",
               (upsample<NearestBackward, IntArrayRef, IntArrayRef, Scale, Scale>));
  OPENREG_IMPL(m, "upsample_nearest2d_backward.grad_input",
               (upsample_out<NearestBackward, IntArrayRef, IntArrayRef, Scale, Scale>));
  OPENREG_IMPL(m, "upsample_bilinear2d", (upsample<Bilinear, IntArrayRef, bool, Scale, Scale>));
  OPENREG_IMPL(m, "upsample_bilinear2d.out",
               (upsample_out<Bilinear, IntArrayRef, bool, Scale, Scale>));
  OPENREG_IMPL(m, "upsample_bilinear2d_backward",
               (upsample<BilinearBackward, IntArrayRef, IntArrayRef, bool, Scale, Scale>));
  OPENREG_IMPL(m, "upsample_bilinear2d_backward.grad_input",
               (upsample_out<BilinearBackward, IntArrayRef, IntArrayRef, bool, Scale, Scale>));
}

}  // namespace openreg
