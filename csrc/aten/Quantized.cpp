// Quantized tensors on openreg: the kernels of the QuantizedPrivateUse1 key
// that create a quantized tensor or read its quantizer. A quantized openreg
// tensor is a QTensorImpl over openreg memory (the integer representation,
// one qint8 / quint8 / qint32 per element) with a quantizer on the host
// (scale and zero point, or per-channel scales and zero points). The
// functions registered here are PyTorch's own device-generic ones, the same
// that QuantizedCPU and QuantizedCUDA register; none of them touches the
// elements. The bytes move through _copy_from, registered for this key in
// Copy.cpp.
//
// Everything that computes (quantize_per_tensor of an openreg tensor,
// dequantize, int_repr, quantized arithmetic, ...) runs on the CPU through
// the fallback of the quantized key (Note [Sparse and quantized tensors
// through the fallback] in LayoutFallback.cpp).
//
// These kernels are registered for the quantized key, not for PrivateUse1, so
// native_ops.yaml (the dense key's kernels) does not list them.

#include "aten/Registration.h"

#include <c10/core/DeviceGuard.h>

#include <ATen/ops/_empty_affine_quantized_native.h>
#include <ATen/ops/_empty_per_channel_affine_quantized_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/empty_quantized_native.h>
#include <ATen/ops/empty_strided_native.h>
#include <ATen/ops/q_per_channel_axis_native.h>
#include <ATen/ops/q_per_channel_scales_native.h>
#include <ATen/ops/q_per_channel_zero_points_native.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/view_native.h>

namespace openreg {
namespace {

// The factories run under a guard for their `device=` argument, as the
// dispatcher's generated wrappers do for CUDA (see Sparse.cpp).
at::Tensor empty_affine(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                        std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                        std::optional<bool> pin_memory, double scale, int64_t zero_point,
                        std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::empty_affine_quantized(size, dtype, layout, device, pin_memory, scale,
                                            zero_point, memory_format);
}

at::Tensor empty_per_channel(c10::IntArrayRef size, const at::Tensor& scales,
                             const at::Tensor& zero_points, int64_t axis,
                             std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                             std::optional<bool> pin_memory,
                             std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::empty_per_channel_affine_quantized(size, scales, zero_points, axis, dtype,
                                                        layout, device, pin_memory, memory_format);
}

at::Tensor empty_like_quantized(c10::IntArrayRef size, const at::Tensor& qtensor,
                                std::optional<c10::ScalarType> dtype,
                                std::optional<c10::Layout> layout,
                                std::optional<c10::Device> device, std::optional<bool> pin_memory,
                                std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  return at::native::empty_quantized(size, qtensor, dtype, layout, device, pin_memory,
                                     memory_format);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  // factories: every quantized result, and every .to("openreg"), starts here
  OPENREG_IMPL(m, "_empty_affine_quantized", empty_affine);
  OPENREG_IMPL(m, "_empty_per_channel_affine_quantized", empty_per_channel);
  OPENREG_IMPL(m, "empty_quantized", empty_like_quantized);
  OPENREG_IMPL(m, "clone", at::native::quantized_clone);
  // A quantized tensor needs a quantizer: a plain factory given a quantized
  // dtype raises, as on CPU and CUDA. (Through the fallback it would build a
  // CPU tensor and copy it here, which calls the factory again, forever.)
  OPENREG_IMPL(m, "empty.memory_format", at::native::empty_unknown_quantized);
  OPENREG_IMPL(m, "empty_strided", at::native::empty_strided_unknown_quantized);
  // the quantizer
  OPENREG_IMPL(m, "qscheme", at::native::qscheme_quant);
  OPENREG_IMPL(m, "q_scale", at::native::q_scale_quant);
  OPENREG_IMPL(m, "q_zero_point", at::native::q_zero_point_quant);
  OPENREG_IMPL(m, "q_per_channel_scales", at::native::q_per_channel_scales);
  OPENREG_IMPL(m, "q_per_channel_zero_points", at::native::q_per_channel_zero_points);
  OPENREG_IMPL(m, "q_per_channel_axis", at::native::q_per_channel_axis);
  // views: new sizes and strides over the same bytes and the same quantizer
  OPENREG_IMPL(m, "view", at::native::view);
  OPENREG_IMPL(m, "as_strided", at::native::as_strided_qtensorimpl);
  OPENREG_IMPL(m, "_reshape_alias", at::native::_reshape_alias);
  OPENREG_IMPL(m, "unfold", at::native::unfold);
  OPENREG_IMPL(m, "unsqueeze", at::native::unsqueeze_quantized);
  OPENREG_IMPL(m, "squeeze",
               static_cast<at::Tensor (*)(const at::Tensor&)>(at::native::squeeze_quantized));
  OPENREG_IMPL(
      m, "squeeze.dim",
      static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(at::native::squeeze_quantized));
  OPENREG_IMPL(m, "squeeze.dims",
               static_cast<at::Tensor (*)(const at::Tensor&, c10::IntArrayRef)>(
                   at::native::squeeze_quantized));
}

}  // namespace openreg
