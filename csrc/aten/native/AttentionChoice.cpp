// The backend choice of scaled_dot_product_attention for openreg tensors.
//
// torch.nn.functional.scaled_dot_product_attention asks the device's
// _fused_sdp_choice_stub which backend to run; CPU and CUDA register theirs,
// a PrivateUse1 backend registers its own with
// REGISTER_PRIVATEUSE1_DISPATCH. The aten::_fused_sdp_choice operator (what
// torch._fused_sdp_choice calls) is a separate entry of the same decision and
// gets the same function, so that both answer alike. The decision itself is
// Note [Fused attention on openreg] (Attention.cpp).

#include "aten/Registration.h"
#include "aten/native/Attention.h"
#include "runtime/Seam.h"  // Note [The lab's seam]

#include <ATen/Context.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_cpu_dispatch.h>

namespace openreg {
namespace {

// Whether the fused kernel is in the dispatcher's table: the lab's backend
// profiles (its Note [Profiles]) switch openreg's kernels off, and then scaled
// dot product attention takes the math path, as on a backend without the
// kernel.
bool fused_kernel_active() {
  const seam::Hooks* lab = seam::hooks();
  if (lab == nullptr) {
    return true;
  }
  static const c10::OperatorName op("aten::_scaled_dot_product_fused_attention_overrideable", "");
  return !lab->kernel_taken(op);
}

// A dropout_p below 0 (or NaN) is refused where the CPU refuses it: on the
// arguments for which the CPU's own choice (its aten::_fused_sdp_choice
// kernel, called directly) is its flash kernel, which raises for any dropout_p
// other than 0. Elsewhere the CPU takes the math path, which applies dropout
// only above 0, and so does openreg. (Above 1 the math path's dropout raises
// on both; at 1 it drops everything on both.) Note [Fused attention on
// openreg].
void check_dropout(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                   const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  if (dropout_p >= 0.0) {
    return;
  }
  // The CPU's choice raises (after warning why each kernel cannot run) when
  // the user switched math off and flash cannot run: then it is not flash.
  struct Quiet final : c10::WarningHandler {
    void process(const c10::Warning& /*warning*/) override {}
  } quiet;
  int64_t cpu_choice = static_cast<int64_t>(sdp::SDPBackend::error);
  try {
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    cpu_choice = at::cpu::_fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal,
                                            scale, enable_gqa);
  } catch (const c10::Error&) {
    // no backend for the CPU: not its flash kernel
  }
  TORCH_CHECK(cpu_choice != static_cast<int64_t>(sdp::SDPBackend::flash_attention),
              "scaled_dot_product_attention: dropout probability has to be between 0 and 1, but "
              "got dropout_p=",
              dropout_p, " (pass 0.0 for no dropout)");
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  check_dropout(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  const auto& ctx = at::globalContext();
  const char* reason =
      attention::unsupported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa);
  if (reason == nullptr && !fused_kernel_active()) {
    reason = "the active backend profile has no fused attention kernel";
  }
  if (reason == nullptr && query.dim() != 4) {
    // The kernel runs 3-D inputs too, but CPU sends them to the math path
    // (its flash kernel takes 4-D only): so does openreg, so that both round
    // 16-bit intermediates alike.
    reason = "query, key and value are not 4-D (batch, heads, L, E)";
  }
  if (ctx.userEnabledOverrideableSDP() && reason == nullptr) {
    return static_cast<int64_t>(sdp::SDPBackend::overrideable);
  }
  if (ctx.userEnabledMathSDP()) {
    return static_cast<int64_t>(sdp::SDPBackend::math);
  }
  // The user switched math off (torch.nn.attention.sdpa_kernel): say why the
  // fused kernel was not used either, as CPU and CUDA do before their
  // "No viable backend" error.
  TORCH_WARN("openreg's fused attention kernel not used because: ",
             reason != nullptr ? reason : "the overrideable backend is disabled");
  return static_cast<int64_t>(sdp::SDPBackend::error);
}

}  // namespace
}  // namespace openreg

namespace at::native {
// The macro defines a static registrar, which must not be in an anonymous
// namespace.
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &openreg::fused_sdp_choice)
}  // namespace at::native

namespace openreg {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "_fused_sdp_choice", fused_sdp_choice);
}

}  // namespace openreg
