// 2-d pooling, forward and backward, as CNNs run it every step:
// avg_pool2d, max_pool2d_with_indices (what F.max_pool2d and nn.MaxPool2d
// reach when training) in their functional and out= forms, and
// _adaptive_avg_pool2d (nn.AdaptiveAvgPool2d to any size but 1 x 1, which
// PyTorch computes as a mean).
//
// Each is the CPU's own kernel computing on host views of device memory.
// avg_pool2d and max_pool2d_with_indices are structured: the CPU's kernel
// class runs on device memory as Note [Structured kernels on device memory]
// (Structured.h) says, every layout the CPU takes (channels-last included)
// giving the CPU's layout. The adaptive pool is not structured: its result is
// allocated here as the CPU's kernel allocates it (the input's sizes with the
// last two replaced, in the input's suggested memory format), then the CPU's
// out= kernel fills it. Calls that path does not cover (other dimensions,
// dtypes, empty sizes: all errors on the CPU), and the backward, which has no
// out= kernel on the CPU, run the CPU's functional kernel on host views: its
// error, or its result moved into device memory (Note [Host kernels on host
// views] in HostKernel.h).

#include "aten/native/HostKernel.h"
#include "aten/native/Structured.h"

#include "aten/Registration.h"

#include <ATen/ops/_adaptive_avg_pool2d_backward_ops.h>
#include <ATen/ops/_adaptive_avg_pool2d_ops.h>
#include <ATen/ops/adaptive_avg_pool2d_native.h>
#include <ATen/ops/avg_pool2d_backward_native.h>
#include <ATen/ops/avg_pool2d_native.h>
#include <ATen/ops/max_pool2d_with_indices_backward_native.h>
#include <ATen/ops/max_pool2d_with_indices_native.h>

#include <tuple>

namespace openreg {
namespace {

using at::IntArrayRef;
using at::Tensor;
using native::check_same_device;
using native::OnDevice;
using native::OnDeviceOut;
using Divisor = std::optional<int64_t>;

// --- avg_pool2d --------------------------------------------------------------------

using AvgPool = at::native::structured_avg_pool2d_out_cpu;
using AvgPoolBackward = at::native::structured_avg_pool2d_backward_out_cpu;

template <class Op>
void avg_pool_run(Op& op, const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, bool ceil_mode, bool count_include_pad, Divisor divisor) {
  const Tensor host = host_view(self);
  InternalScope internal;  // Note [The backend's own dispatcher calls]
  auto p = op.meta(host, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor);
  op.impl(host, p.kH, p.kW, p.dH, p.dW, p.padH, p.padW, ceil_mode, count_include_pad, divisor,
          op.host(0));
}

Tensor avg_pool2d(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, bool ceil_mode, bool count_include_pad, Divisor divisor) {
  OnDevice<AvgPool, 1> op(self.device());
  avg_pool_run(op, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor);
  return op.result(0);
}

Tensor& avg_pool2d_out(const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                       IntArrayRef padding, bool ceil_mode, bool count_include_pad, Divisor divisor,
                       Tensor& out) {
  check_same_device(self, out);
  OnDeviceOut<AvgPool, 1> op({out});
  avg_pool_run(op, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor);
  op.finish();
  return out;
}

template <class Op>
void avg_pool_backward_run(Op& op, const Tensor& grad_output, const Tensor& self,
                           IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                           bool ceil_mode, bool count_include_pad, Divisor divisor) {
  check_same_device(self, grad_output);
  const Tensor grad = host_view(grad_output);
  const Tensor host = host_view(self);
  InternalScope internal;
  op.meta(grad, host, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor);
  op.impl(grad, host, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor,
          op.host(0));
}

Tensor avg_pool2d_backward(const Tensor& grad_output, const Tensor& self, IntArrayRef kernel_size,
                           IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                           bool count_include_pad, Divisor divisor) {
  OnDevice<AvgPoolBackward, 1> op(self.device());
  avg_pool_backward_run(op, grad_output, self, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor);
  return op.result(0);
}

Tensor& avg_pool2d_backward_out(const Tensor& grad_output, const Tensor& self,
                                IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                                bool ceil_mode, bool count_include_pad, Divisor divisor,
                                Tensor& grad_input) {
  check_same_device(self, grad_input);
  OnDeviceOut<AvgPoolBackward, 1> op({grad_input});
  avg_pool_backward_run(op, grad_output, self, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor);
  op.finish();
  return grad_input;
}

// --- max_pool2d_with_indices -----------------------------------------------------------

using MaxPool = at::native::structured_max_pool2d_with_indices_out_cpu;
using MaxPoolBackward = at::native::structured_max_pool2d_with_indices_backward_out_cpu;

template <class Op>
void max_pool_run(Op& op, const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
                  IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  const Tensor host = host_view(self);
  InternalScope internal;
  op.meta(host, kernel_size, stride, padding, dilation, ceil_mode);
  op.impl(host, kernel_size, stride, padding, dilation, ceil_mode, op.host(0), op.host(1));
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& self, IntArrayRef kernel_size,
                                                   IntArrayRef stride, IntArrayRef padding,
                                                   IntArrayRef dilation, bool ceil_mode) {
  OnDevice<MaxPool, 2> op(self.device());
  max_pool_run(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  return {op.result(0), op.result(1)};
}

std::tuple<Tensor&, Tensor&> max_pool2d_with_indices_out(const Tensor& self,
                                                         IntArrayRef kernel_size,
                                                         IntArrayRef stride, IntArrayRef padding,
                                                         IntArrayRef dilation, bool ceil_mode,
                                                         Tensor& out, Tensor& indices) {
  check_same_device(self, out);
  check_same_device(self, indices);
  OnDeviceOut<MaxPool, 2> op({out, indices});
  max_pool_run(op, self, kernel_size, stride, padding, dilation, ceil_mode);
  op.finish();
  return {out, indices};
}

template <class Op>
void max_pool_backward_run(Op& op, const Tensor& grad_output, const Tensor& self,
                           IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                           IntArrayRef dilation, bool ceil_mode, const Tensor& indices) {
  check_same_device(self, grad_output);
  check_same_device(self, indices);
  const Tensor grad = host_view(grad_output);
  const Tensor host = host_view(self);
  const Tensor index = host_view(indices);
  InternalScope internal;
  op.meta(grad, host, kernel_size, stride, padding, dilation, ceil_mode, index);
  op.impl(grad, host, kernel_size, stride, padding, dilation, ceil_mode, index, op.host(0));
}

Tensor max_pool2d_with_indices_backward(const Tensor& grad_output, const Tensor& self,
                                        IntArrayRef kernel_size, IntArrayRef stride,
                                        IntArrayRef padding, IntArrayRef dilation, bool ceil_mode,
                                        const Tensor& indices) {
  OnDevice<MaxPoolBackward, 1> op(self.device());
  max_pool_backward_run(op, grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                        indices);
  return op.result(0);
}

Tensor& max_pool2d_with_indices_backward_out(const Tensor& grad_output, const Tensor& self,
                                             IntArrayRef kernel_size, IntArrayRef stride,
                                             IntArrayRef padding, IntArrayRef dilation,
                                             bool ceil_mode, const Tensor& indices,
                                             Tensor& grad_input) {
  check_same_device(self, grad_input);
  OnDeviceOut<MaxPoolBackward, 1> op({grad_input});
  max_pool_backward_run(op, grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
                        indices);
  op.finish();
  return grad_input;
}

// --- _adaptive_avg_pool2d ------------------------------------------------------------------

// Whether the CPU's kernel accepts the call: a 3-d or 4-d floating input with
// no empty dimension but the batch, two output sizes, none negative.
bool adaptive_pool_runs(const Tensor& self, IntArrayRef output_size) {
  const int64_t dim = self.dim();
  if ((dim != 3 && dim != 4) || output_size.size() != 2 || output_size[0] < 0 ||
      output_size[1] < 0 || !native::is_floating(self.scalar_type())) {
    return false;
  }
  for (int64_t d = dim - 3; d < dim; ++d) {
    if (self.size(d) == 0) {
      return false;
    }
  }
  return true;
}

c10::MemoryFormat pooled_format(const Tensor& self) {
  return self.dim() == 4 ? self.suggest_memory_format() : c10::MemoryFormat::Contiguous;
}

Tensor adaptive_avg_pool2d(const Tensor& self, IntArrayRef output_size) {
  if (!adaptive_pool_runs(self, output_size)) {  // the CPU's error, or its result
    InternalScope internal;
    return native::to_device_memory(at::_ops::_adaptive_avg_pool2d::call(
                                        host_view(self), c10::fromIntArrayRefSlow(output_size)),
                                    self.device());
  }
  c10::DimVector sizes(self.sizes().begin(), self.sizes().end() - 2);
  sizes.append(output_size.begin(), output_size.end());
  Tensor out = native::empty(sizes, self.options().memory_format(pooled_format(self)));
  Tensor host = host_view(out);
  InternalScope internal;
  at::native::adaptive_avg_pool2d_out_cpu(host_view(self), output_size, host);
  TORCH_INTERNAL_ASSERT(host.sizes().equals(out.sizes()) && host.strides().equals(out.strides()));
  return out;
}

// The CPU has no out= kernel for the backward: its functional kernel, staged.
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Tensor& self) {
  check_same_device(self, grad_output);
  Tensor host;
  {
    InternalScope internal;
    host = at::_ops::_adaptive_avg_pool2d_backward::call(host_view(grad_output), host_view(self));
  }
  return native::to_device_memory(host, self.device());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "avg_pool2d", avg_pool2d);
  OPENREG_IMPL(m, "avg_pool2d.out", avg_pool2d_out);
  OPENREG_IMPL(m, "avg_pool2d_backward", avg_pool2d_backward);
  OPENREG_IMPL(m, "avg_pool2d_backward.grad_input", avg_pool2d_backward_out);
  OPENREG_IMPL(m, "max_pool2d_with_indices", max_pool2d_with_indices);
  OPENREG_IMPL(m, "max_pool2d_with_indices.out", max_pool2d_with_indices_out);
  OPENREG_IMPL(m, "max_pool2d_with_indices_backward", max_pool2d_with_indices_backward);
  OPENREG_IMPL(m, "max_pool2d_with_indices_backward.grad_input",
               max_pool2d_with_indices_backward_out);
  OPENREG_IMPL(m, "_adaptive_avg_pool2d", adaptive_avg_pool2d);
  OPENREG_IMPL(m, "_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward);
}

}  // namespace openreg
