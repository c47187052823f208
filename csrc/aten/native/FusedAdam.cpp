// The fused Adam and AdamW steps (torch.optim.Adam/AdamW with fused=True, the
// Hugging Face Trainer's default optimizer): _fused_adam_ and _fused_adamw_,
// with a float or a Tensor learning rate. The functional and out= forms are
// PyTorch's composites over these.
//
// The CPU's own fused kernel computes on host views of device memory (Note
// [Host kernels on host views] in HostKernel.h): every parameter, gradient and
// state is updated in place on the device, amsgrad, maximize, grad_scale and
// found_inf behave exactly as on the CPU, and no byte moves.

#include "aten/native/HostKernel.h"

#include "aten/Registration.h"

#include <ATen/ops/_fused_adam_ops.h>
#include <ATen/ops/_fused_adamw_ops.h>

#include <optional>
#include <type_traits>
#include <vector>

namespace openreg {
namespace {

using at::TensorList;
using OptTensor = std::optional<at::Tensor>;

// Every tensor of the step on the parameters' device.
void check_devices(TensorList self, std::initializer_list<TensorList> lists,
                   std::initializer_list<const OptTensor*> scalars) {
  if (self.empty()) {
    return;  // the CPU kernel raises its own error
  }
  const at::Tensor& first = self[0];
  for (const at::Tensor& t : self) {
    native::check_same_device(first, t);
  }
  for (TensorList list : lists) {
    for (const at::Tensor& t : list) {
      native::check_same_device(first, t);
    }
  }
  for (const OptTensor* t : scalars) {
    if (t->has_value() && (*t)->defined()) {
      native::check_same_device(first, **t);
    }
  }
}

// Note [Host kernels on host views]
template <class Op, class Lr>
void fused_step(TensorList self, TensorList grads, TensorList exp_avgs, TensorList exp_avg_sqs,
                TensorList max_exp_avg_sqs, TensorList state_steps, Lr lr, double beta1,
                double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                const OptTensor& grad_scale, const OptTensor& found_inf) {
  check_devices(self, {grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps},
                {&grad_scale, &found_inf});
  std::optional<at::Tensor> host_lr;
  if constexpr (std::is_same_v<Lr, const at::Tensor&>) {
    if (!self.empty()) {
      native::check_same_device(self[0], lr);
    }
    host_lr = host_view(lr);
  }
  const std::vector<at::Tensor> p = host_views(self);
  const std::vector<at::Tensor> g = host_views(grads);
  const std::vector<at::Tensor> m = host_views(exp_avgs);
  const std::vector<at::Tensor> v = host_views(exp_avg_sqs);
  const std::vector<at::Tensor> vmax = host_views(max_exp_avg_sqs);
  const std::vector<at::Tensor> steps = host_views(state_steps);
  const OptTensor scale = host_view(grad_scale);
  const OptTensor inf = host_view(found_inf);
  InternalScope internal;  // Note [The backend's own dispatcher calls]
  if constexpr (std::is_same_v<Lr, const at::Tensor&>) {
    Op::call(p, g, m, v, vmax, steps, *host_lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
             scale, inf);
  } else {
    Op::call(p, g, m, v, vmax, steps, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, scale,
             inf);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "_fused_adam_", (fused_step<at::_ops::_fused_adam_, double>));
  OPENREG_IMPL(m, "_fused_adam_.tensor_lr",
               (fused_step<at::_ops::_fused_adam__tensor_lr, const at::Tensor&>));
  OPENREG_IMPL(m, "_fused_adamw_", (fused_step<at::_ops::_fused_adamw_, double>));
  OPENREG_IMPL(m, "_fused_adamw_.tensor_lr",
               (fused_step<at::_ops::_fused_adamw__tensor_lr, const at::Tensor&>));
}

}  // namespace openreg
