// Convolution on openreg, through the CPU.
//
// Convolution is the one operator family the boxed fallback cannot reach:
// at::_convolution sends every backend it does not know to
// convolution_overrideable (and its backward to
// convolution_backward_overrideable), whose default kernels throw. Those two
// operators exist for out-of-tree backends to register. openreg registers them
// and runs them exactly as the fallback runs any operator: the fallback policy
// applies, the tensors go to the host through the copy path, the CPU kernel
// computes, and the results come back.

#include "aten/fallback/FallbackPolicy.h"
#include "trace/Hooks.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace openreg {
namespace {

// The op's schema, for the recorder's fallback event.
const c10::FunctionSchema& schema_of(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").schema();
}

void check_same_device(const at::Tensor& input, const at::Tensor& other, const char* what) {
  TORCH_CHECK(input.device() == other.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              input.device(), " and ", other.device(), "! (convolution ", what, ")");
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool transposed, c10::IntArrayRef output_padding,
                                    int64_t groups) {
  // The policy's message names convolution itself: the user called conv2d or
  // conv_transpose1d, never this hook, which openreg does register.
  check_fallback_allowed(c10::OperatorName("aten::convolution_overrideable", ""),
                         "Convolution (conv1d/2d/3d and conv_transpose1d/2d/3d, which openreg's "
                         "aten::convolution_overrideable hands to the CPU's kernel)");
  static const c10::FunctionSchema& schema = schema_of("aten::convolution_overrideable");
  trace::FallbackScope traced(schema);
  trace::InternalScope internal;  // Note [The backend's own dispatcher calls]
  check_same_device(input, weight, "weight");
  if (bias.has_value() && bias->defined()) {
    check_same_device(input, *bias, "bias");
  }
  c10::DeviceGuard guard(input.device());
  std::optional<at::Tensor> host_bias;
  if (bias.has_value() && bias->defined()) {
    host_bias = bias->cpu();
  }
  at::Tensor out = at::convolution(input.cpu(), weight.cpu(), host_bias, stride, padding, dilation,
                                   transposed, output_padding, groups);
  return out.to(input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  check_fallback_allowed(c10::OperatorName("aten::convolution_backward_overrideable", ""),
                         "Convolution backward (openreg's aten::convolution_backward_overrideable "
                         "hands it to the CPU's kernel)");
  static const c10::FunctionSchema& schema = schema_of("aten::convolution_backward_overrideable");
  trace::FallbackScope traced(schema);
  trace::InternalScope internal;
  check_same_device(input, weight, "weight");
  check_same_device(input, grad_output, "grad_output");
  c10::DeviceGuard guard(input.device());
  // The bias has as many elements as the output has channels.
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  auto [gi, gw, gb] = at::convolution_backward(
      grad_output.cpu(), input.cpu(), weight.cpu(), at::OptionalIntArrayRef({channels}), stride,
      padding, dilation, transposed, output_padding, groups, output_mask);
  auto back = [&](const at::Tensor& t) { return t.defined() ? t.to(input.device()) : t; };
  return {back(gi), back(gw), back(gb)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
}

}  // namespace openreg
