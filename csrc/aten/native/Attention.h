#pragma once

// What openreg's fused attention kernel runs (native/Attention.cpp), shared by
// the kernel and the backend choice (native/AttentionChoice.cpp) so that the
// two never disagree: Note [Fused attention on openreg] in Attention.cpp.

#include <ATen/core/Tensor.h>

#include <optional>

namespace openreg::attention {

// Why the fused kernel cannot run scaled_dot_product_attention on these
// arguments, or nullptr when it can. Reads metadata only (it also runs on the
// fake tensors torch.compile traces with).
const char* unsupported(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                        const std::optional<at::Tensor>& attn_mask, double dropout_p,
                        bool is_causal, bool enable_gqa);

}  // namespace openreg::attention
