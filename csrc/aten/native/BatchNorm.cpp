// Batch normalisation, forward and backward: native_batch_norm (what
// nn.BatchNorm1d/2d/3d and F.batch_norm reach, in training and in eval) with
// its out= form and backward, and the variants torch.export and functional
// graphs call (_native_batch_norm_legit, with and without running statistics,
// _batch_norm_with_update, _batch_norm_no_update and batch_norm_backward).
//
// Note [Batch norm on host views]
// The CPU's own kernels compute on host views of device memory (Note [Host
// kernels on host views] in HostKernel.h). The forward allocates its results
// on the device as the CPU's functional kernel allocates them: the output in
// the input's layout (channels-last stays channels-last), the saved mean and
// inverse standard deviation of size C in training (float for a 16-bit input
// with float parameters, else the input's dtype) and empty in eval; then the
// CPU's out= kernel (batch_norm_cpu_out) fills them and updates the running
// statistics in place, with the CPU's momentum arithmetic, through their host
// views. For an input in no dense layout the CPU computes the saved mean
// first, with mean over all dimensions but the channels, and its kernel reads
// it: so does openreg. The CPU has no out= kernel for the backward: its
// functional kernel runs on host views, and the gradients it allocates on the
// host are moved into device memory of the same layout (the staging step of
// Note [Host kernels on host views]).

#include "aten/native/HostKernel.h"

#include "aten/Registration.h"

#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_batch_norm_ops.h>

#include <array>
#include <tuple>

namespace openreg {
namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;
using BatchNormResults = std::tuple<Tensor, Tensor, Tensor>;

const Tensor& bn_value(const OptTensor& t) {
  static const Tensor undefined;
  return t.has_value() ? *t : undefined;
}

void bn_check_devices(const Tensor& input, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others) {
    if (t->defined()) {
      native::check_same_device(input, *t);
    }
  }
}

// The CPU's test of a dense layout in batch norm: contiguous or channels-last.
bool bn_dense(const Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(c10::MemoryFormat::ChannelsLast) ||
         t.is_contiguous(c10::MemoryFormat::ChannelsLast3d);
}

// The dense layout `t` is in (contiguous first, where both apply).
c10::MemoryFormat bn_dense_format(const Tensor& t) {
  if (t.is_contiguous()) {
    return c10::MemoryFormat::Contiguous;
  }
  return t.is_contiguous(c10::MemoryFormat::ChannelsLast3d) ? c10::MemoryFormat::ChannelsLast3d
                                                            : c10::MemoryFormat::ChannelsLast;
}

// All dimensions but the channels (1).
c10::DimVector bn_reduced_dims(const Tensor& input) {
  c10::DimVector dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) {
    dims.push_back(d);
  }
  return dims;
}

// Note [Batch norm on host views]: the out= kernel on host views of `out`,
// `save_mean` and `save_invstd`, sized as it needs them.
void batch_norm_into(const Tensor& input, const Tensor& weight, const Tensor& bias,
                     const Tensor& running_mean, const Tensor& running_var, bool training,
                     double momentum, double eps, Tensor& out, Tensor& save_mean,
                     Tensor& save_invstd, bool mixed) {
  const Tensor host = host_view(input);
  Tensor host_out = host_view(out);
  Tensor host_mean = host_view(save_mean);
  Tensor host_invstd = host_view(save_invstd);
  InternalScope internal;  // Note [The backend's own dispatcher calls]
  if (training && !bn_dense(input) && input.numel() > 0) {
    at::_ops::mean_out::call(host, bn_reduced_dims(input), /*keepdim=*/false,
                             mixed ? std::optional(c10::kFloat) : std::nullopt, host_mean);
  }
  at::_ops::native_batch_norm_out::call(host, host_view(weight), host_view(bias),
                                        host_view(running_mean), host_view(running_var), training,
                                        momentum, eps, host_out, host_mean, host_invstd);
}

BatchNormResults batch_norm(const Tensor& input, const OptTensor& weight_opt,
                            const OptTensor& bias_opt, const OptTensor& running_mean_opt,
                            const OptTensor& running_var_opt, bool training, double momentum,
                            double eps) {
  const Tensor& weight = bn_value(weight_opt);
  const Tensor& bias = bn_value(bias_opt);
  const Tensor& running_mean = bn_value(running_mean_opt);
  const Tensor& running_var = bn_value(running_var_opt);
  bn_check_devices(input, {&weight, &bias, &running_mean, &running_var});
  // As the CPU's batch_norm_cpu lays out and types its results.
  const bool all_dense = bn_dense(input) && (!weight.defined() || weight.is_contiguous()) &&
                         (!bias.defined() || bias.is_contiguous()) &&
                         running_mean.is_contiguous() && running_var.is_contiguous();
  const auto format = all_dense ? bn_dense_format(input) : input.suggest_memory_format();
  const bool mixed = at::native::is_mixed_type(input, weight, bias, running_mean, running_var);
  const auto stats = input.options().dtype(mixed ? c10::kFloat : input.scalar_type());
  const int64_t channels = training ? input.size(1) : 0;
  Tensor out = native::empty(input.sizes(), input.options().memory_format(format));
  Tensor save_mean = native::empty({channels}, stats);
  Tensor save_invstd = native::empty({channels}, stats);
  batch_norm_into(input, weight, bias, running_mean, running_var, training, momentum, eps, out,
                  save_mean, save_invstd, mixed);
  return {out, save_mean, save_invstd};
}

std::tuple<Tensor&, Tensor&, Tensor&> batch_norm_out(
    const Tensor& input, const OptTensor& weight_opt, const OptTensor& bias_opt,
    const OptTensor& running_mean_opt, const OptTensor& running_var_opt, bool training,
    double momentum, double eps, Tensor& out, Tensor& save_mean, Tensor& save_invstd) {
  const Tensor& weight = bn_value(weight_opt);
  const Tensor& bias = bn_value(bias_opt);
  const Tensor& running_mean = bn_value(running_mean_opt);
  const Tensor& running_var = bn_value(running_var_opt);
  bn_check_devices(input,
                   {&weight, &bias, &running_mean, &running_var, &out, &save_mean, &save_invstd});
  // The CPU's out= kernel resizes these first (its host views cannot grow).
  native::resize_output(out, input.sizes());
  if (training) {
    native::resize_output(save_mean, {input.size(1)});
    native::resize_output(save_invstd, {input.size(1)});
  }
  const bool mixed = at::native::is_mixed_type(input, weight, bias, running_mean, running_var);
  batch_norm_into(input, weight, bias, running_mean, running_var, training, momentum, eps, out,
                  save_mean, save_invstd, mixed);
  return {out, save_mean, save_invstd};
}

BatchNormResults batch_norm_legit(const Tensor& input, const OptTensor& weight,
                                  const OptTensor& bias, Tensor& running_mean, Tensor& running_var,
                                  bool training, double momentum, double eps) {
  return batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
}

BatchNormResults batch_norm_legit_no_stats(const Tensor& input, const OptTensor& weight,
                                           const OptTensor& bias, bool training, double momentum,
                                           double eps) {
  return batch_norm(input, weight, bias, std::nullopt, std::nullopt, training, momentum, eps);
}

Tensor bn_reserve(const Tensor& input) {
  return native::empty({0}, input.options().dtype(c10::kByte));
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_with_update(
    const Tensor& input, const OptTensor& weight, const OptTensor& bias, Tensor& running_mean,
    Tensor& running_var, double momentum, double eps) {
  auto [out, mean, invstd] =
      batch_norm(input, weight, bias, running_mean, running_var, true, momentum, eps);
  return {out, mean, invstd, bn_reserve(input)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_no_update(
    const Tensor& input, const OptTensor& weight, const OptTensor& bias,
    const OptTensor& running_mean, const OptTensor& running_var, double momentum, double eps) {
  auto [out, mean, invstd] =
      batch_norm(input, weight, bias, running_mean, running_var, false, momentum, eps);
  return {out, mean, invstd, bn_reserve(input)};
}

// --- backward ------------------------------------------------------------------------

BatchNormResults batch_norm_backward(const Tensor& grad_out, const Tensor& input,
                                     const OptTensor& weight_opt, const OptTensor& running_mean_opt,
                                     const OptTensor& running_var_opt,
                                     const OptTensor& save_mean_opt,
                                     const OptTensor& save_invstd_opt, bool train, double eps,
                                     std::array<bool, 3> mask) {
  const Tensor& weight = bn_value(weight_opt);
  const Tensor& running_mean = bn_value(running_mean_opt);
  const Tensor& running_var = bn_value(running_var_opt);
  const Tensor& save_mean = bn_value(save_mean_opt);
  const Tensor& save_invstd = bn_value(save_invstd_opt);
  bn_check_devices(input,
                   {&grad_out, &weight, &running_mean, &running_var, &save_mean, &save_invstd});
  // Note [Batch norm on host views]: the CPU's functional backward, staged.
  Tensor grad_input;
  Tensor grad_weight;
  Tensor grad_bias;
  {
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    std::tie(grad_input, grad_weight, grad_bias) = at::_ops::native_batch_norm_backward::call(
        host_view(grad_out), host_view(input), host_view(weight), host_view(running_mean),
        host_view(running_var), host_view(save_mean), host_view(save_invstd), train, eps, mask);
  }
  const c10::Device device = input.device();
  return {native::to_device_memory(grad_input, device),
          native::to_device_memory(grad_weight, device),
          native::to_device_memory(grad_bias, device)};
}

BatchNormResults batch_norm_backward_new(const Tensor& grad_out, const Tensor& input,
                                         const Tensor& weight, const OptTensor& running_mean,
                                         const OptTensor& running_var, const OptTensor& save_mean,
                                         const OptTensor& save_var, bool update, double eps,
                                         std::array<bool, 3> mask, const Tensor& /*reserve*/) {
  return batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
                             save_var, update, eps, mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "native_batch_norm", batch_norm);
  OPENREG_IMPL(m, "native_batch_norm.out", batch_norm_out);
  OPENREG_IMPL(m, "native_batch_norm_backward", batch_norm_backward);
  OPENREG_IMPL(m, "_native_batch_norm_legit", batch_norm_legit);
  OPENREG_IMPL(m, "_native_batch_norm_legit.no_stats", batch_norm_legit_no_stats);
  OPENREG_IMPL(m, "_batch_norm_with_update", batch_norm_with_update);
  OPENREG_IMPL(m, "_batch_norm_no_update", batch_norm_no_update);
  OPENREG_IMPL(m, "batch_norm_backward", batch_norm_backward_new);
}

}  // namespace openreg
