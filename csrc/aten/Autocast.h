#pragma once

// Autocast for openreg (Autocast.cpp): which operators torch.autocast
// ("openreg", dtype=...) casts, and how.

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>

#include <cstdint>
#include <string>
#include <vector>

namespace openreg {

// How autocast treats an operator's floating-point openreg arguments. The
// lists are PyTorch's CUDA lists (the AT_FORALL_* macros of autocast_mode.h).
enum class CastPolicy {
  LowerPrecision,   // cast to the autocast dtype (float16 / bfloat16)
  Fp32,             // cast to float32
  Fp32SetOptDtype,  // no cast; run with dtype=float32 unless a dtype is given
  Promote,          // cast all to the widest floating type among them
  Banned,           // refuse: unsafe to autocast (binary_cross_entropy)
};

std::string to_string(CastPolicy policy);

struct AutocastRule {
  std::string op;  // "aten::mm", "aten::pow.Tensor_Scalar"
  CastPolicy policy;
};

// Every operator openreg registers an AutocastPrivateUse1 kernel for.
const std::vector<AutocastRule>& autocast_rules();

// Casts argument `arg_index` of a call to `op` to `to`, through autocast's
// weight cache, when autocast would (a floating openreg tensor of another
// dtype, not float64). Every autocast cast on openreg goes through here.
at::Tensor cast_argument(const c10::FunctionSchema& op, size_t arg_index, const at::Tensor& t,
                         at::ScalarType to);

// Casts made on the calling thread, and how many of them the weight cache
// served without copying.
struct CastCounts {
  uint64_t casts = 0;
  uint64_t cache_hits = 0;
};
CastCounts cast_counts_on_this_thread() noexcept;

}  // namespace openreg
