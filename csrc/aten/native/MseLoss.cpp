// The mean squared error loss, forward and backward: mse_loss and
// mse_loss_backward, what F.mse_loss and nn.MSELoss reach (a diffusion
// model's training loss).
//
// The CPU's own kernels on host views of device memory (Note [Host kernels on
// host views] in HostKernel.h). The forward is the CPU's functional kernel,
// whose result (a scalar, or the elementwise loss with reduction="none") is
// moved into device memory: its out= kernel sizes a reduced result like the
// broadcast inputs first, which a host view cannot grow into. The backward's
// gradient, shaped and laid out as the CPU's (the input's sizes, contiguous),
// is allocated on the device and filled by the CPU's out= kernel; a call whose
// operands broadcast beyond the input or differ in dtype runs the CPU's
// functional kernel instead, with its result (or error).

#include "aten/native/HostKernel.h"

#include "aten/Registration.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/mse_loss_backward_ops.h>
#include <ATen/ops/mse_loss_ops.h>

namespace openreg {
namespace {

using at::Tensor;

Tensor mse_loss(const Tensor& self, const Tensor& target, int64_t reduction) {
  native::check_same_device(self, target);
  Tensor host;
  {
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    host = at::_ops::mse_loss::call(host_view(self), host_view(target), reduction);
  }
  return native::to_device_memory(host, self.device());
}

// Whether the loss's operands broadcast to the input's own sizes.
bool mse_broadcasts_to_self(const Tensor& grad_output, const Tensor& self, const Tensor& target) {
  try {
    const c10::DimVector shape = at::infer_size_dimvector(
        at::infer_size_dimvector(self.sizes(), target.sizes()), grad_output.sizes());
    return c10::IntArrayRef(shape).equals(self.sizes());
  } catch (const c10::Error&) {
    return false;  // the CPU's kernel raises its error
  }
}

Tensor mse_loss_backward(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                         int64_t reduction) {
  native::check_same_device(self, target);
  native::check_same_device(self, grad_output);
  const auto dtype = self.scalar_type();
  const bool direct = native::is_floating(dtype) && target.scalar_type() == dtype &&
                      grad_output.scalar_type() == dtype &&
                      mse_broadcasts_to_self(grad_output, self, target);
  if (!direct) {
    Tensor host;
    {
      InternalScope internal;
      host = at::_ops::mse_loss_backward::call(host_view(grad_output), host_view(self),
                                               host_view(target), reduction);
    }
    return native::to_device_memory(host, self.device());
  }
  Tensor grad_input =
      native::empty(self.sizes(), self.options().memory_format(c10::MemoryFormat::Contiguous));
  Tensor host = host_view(grad_input);
  InternalScope internal;
  at::_ops::mse_loss_backward_grad_input::call(host_view(grad_output), host_view(self),
                                               host_view(target), reduction, host);
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "mse_loss", mse_loss);
  OPENREG_IMPL(m, "mse_loss_backward", mse_loss_backward);
}

}  // namespace openreg
