// Convolution on openreg: forward and backward, every kind at::convolution
// accepts (1-d, 2-d and 3-d, groups, stride, padding, dilation, transposed,
// channels-last), computed by the host's convolution on device memory.
//
// Convolution is the one operator family the boxed fallback cannot reach:
// at::_convolution sends every backend it does not know to
// convolution_overrideable (and its backward to
// convolution_backward_overrideable), whose default kernels throw. Those two
// operators exist for out-of-tree backends to register, and they are where
// Inductor's extern convolution calls arrive too (aten.convolution and
// aten.convolution_backward reach them through at::_convolution).
//
// Note [openreg's device DNN library]
// A real accelerator backend registers, at these two operators, the call into
// its vendor's DNN library (cuDNN, MIOpen, oneDNN for a GPU, ...): the
// convolution arithmetic is not written by the backend. openreg's "device DNN
// library" is the host's own convolution, as its device BLAS is the host's
// BLAS (Note [openreg's device BLAS] in native/LinearAlgebra.cpp). Each kernel
// checks devices itself, then runs at::convolution (at::convolution_backward)
// on host_view()s of the device tensors (Note [Device memory is host
// memory]): the CPU's algorithm choice (oneDNN where it applies, ATen's own
// kernels otherwise) reads device memory in place, nothing goes to the host
// through the copy path, and the op is recorded as native. The host library
// allocates its results itself, so each result is moved into device memory
// allocated for it with the same sizes and strides (a channels-last result
// stays channels-last) by one memcpy inside the kernel: the staging step a
// vendor library with its own workspace has too, counted in the op's time
// and in device memory, never as a copy event. Dtypes the host convolution
// lacks raise the CPU's own error.
//
// Under a profile (Note [Profiles]) that lacks these hooks, the emulated
// backend has no DNN library: the kernels then run exactly as the fallback
// runs any operator (the policy applies, the tensors go to the host through
// the copy path and the results come back), as the boxed fallback itself
// cannot run them.

#include "aten/HostView.h"
#include "aten/KernelScopes.h"  // Note [The lab's seam]
#include "aten/Registration.h"
#include "aten/fallback/FallbackPolicy.h"
#include "aten/native/HostKernel.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <c10/core/DeviceGuard.h>

namespace openreg {
namespace {

using native::to_device_memory;

void check_same_device(const at::Tensor& input, const at::Tensor& other, const char* what) {
  TORCH_CHECK(input.device() == other.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              input.device(), " and ", other.device(), "! (convolution ", what, ")");
}

// Whether the lab's active profile lacks the hook `name`: then it runs
// through the copy path.
bool via_cpu(const char* name) {
  const seam::Hooks* lab = seam::hooks();
  if (lab == nullptr) {
    return false;
  }
  static const c10::OperatorName forward("aten::convolution_overrideable", "");
  static const c10::OperatorName backward("aten::convolution_backward_overrideable", "");
  return lab->kernel_taken(std::string_view(name) == "forward" ? forward : backward);
}

// The op's schema, for the recorder's fallback event.
const c10::FunctionSchema& schema_of(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").schema();
}

at::Tensor convolution_via_cpu(const at::Tensor& input, const at::Tensor& weight,
                               const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                               c10::IntArrayRef output_padding, int64_t groups) {
  // The policy's message names convolution itself: the user called conv2d or
  // conv_transpose1d, never this hook.
  check_fallback_allowed(c10::OperatorName("aten::convolution_overrideable", ""),
                         "Convolution (conv1d/2d/3d and conv_transpose1d/2d/3d, which openreg's "
                         "aten::convolution_overrideable hands to the CPU's kernel)");
  static const c10::FunctionSchema& schema = schema_of("aten::convolution_overrideable");
  FallbackScope traced(schema);
  InternalScope internal;  // Note [The backend's own dispatcher calls]
  std::optional<at::Tensor> host_bias;
  if (bias.has_value() && bias->defined()) {
    host_bias = bias->cpu();
  }
  at::Tensor out = at::convolution(input.cpu(), weight.cpu(), host_bias, stride, padding, dilation,
                                   transposed, output_padding, groups);
  return out.to(input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_via_cpu(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask,
    int64_t channels) {
  check_fallback_allowed(c10::OperatorName("aten::convolution_backward_overrideable", ""),
                         "Convolution backward (openreg's aten::convolution_backward_overrideable "
                         "hands it to the CPU's kernel)");
  static const c10::FunctionSchema& schema = schema_of("aten::convolution_backward_overrideable");
  FallbackScope traced(schema);
  InternalScope internal;
  auto [gi, gw, gb] = at::convolution_backward(
      grad_output.cpu(), input.cpu(), weight.cpu(), at::OptionalIntArrayRef({channels}), stride,
      padding, dilation, transposed, output_padding, groups, output_mask);
  auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
  return {back(gi), back(gw), back(gb)};
}

// Note [openreg's device DNN library]
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups) {
  check_same_device(input, weight, "weight");
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    check_same_device(input, *bias, "bias");
  }
  c10::DeviceGuard guard(input.device());
  if (via_cpu("forward")) {
    return convolution_via_cpu(input, weight, bias, stride, padding, dilation, transposed,
                               output_padding, groups);
  }
  at::Tensor host;
  {
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    host = at::convolution(host_view(input), host_view(weight), host_view(bias), stride, padding,
                           dilation, transposed, output_padding, groups);
  }
  return to_device_memory(host, input.device());
}

// Note [openreg's device DNN library]
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  check_same_device(input, weight, "weight");
  check_same_device(input, grad_output, "grad_output");
  c10::DeviceGuard guard(input.device());
  // The bias has as many elements as the output has channels.
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  if (via_cpu("backward")) {
    return convolution_backward_via_cpu(grad_output, input, weight, stride, padding, dilation,
                                        transposed, output_padding, groups, output_mask, channels);
  }
  at::Tensor gi;
  at::Tensor gw;
  at::Tensor gb;
  {
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    std::tie(gi, gw, gb) =
        at::convolution_backward(host_view(grad_output), host_view(input), host_view(weight),
                                 at::OptionalIntArrayRef({channels}), stride, padding, dilation,
                                 transposed, output_padding, groups, output_mask);
  }
  const c10::Device device = input.device();
  return {to_device_memory(gi, device), to_device_memory(gw, device), to_device_memory(gb, device)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "convolution_overrideable", convolution_overrideable);
  OPENREG_IMPL(m, "convolution_backward_overrideable", convolution_backward_overrideable);
}

}  // namespace openreg
