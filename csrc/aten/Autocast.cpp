// The AutocastPrivateUse1 kernels: torch.autocast("openreg", dtype=...).
//
// With autocast on, the dispatcher sends each call to an operator on the lists
// below here first. The kernel (one boxed function per policy) casts the
// floating-point openreg arguments as the policy says, each through
// cast_argument(), then redispatches the call past autocast, so it continues to
// autograd and the openreg kernel with the new dtypes.
//
// The lists are not ours: they are the AT_FORALL_* X-macros PyTorch itself
// uses for CUDA (ATen/autocast_mode.h), so openreg autocasts exactly the ops
// CUDA does. CUDA-only ops (cudnn_*) are left out; binary_cross_entropy is
// banned as on CUDA.

#include "aten/Autocast.h"

#include "aten/Copy.h"
#include "aten/KernelScopes.h"  // Note [The lab's seam]
#include "runtime/Clock.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace openreg {
namespace {

constexpr auto kDevice = c10::DeviceType::PrivateUse1;

thread_local CastCounts tls_counts;

at::ScalarType lower_precision() {
  return at::autocast::get_autocast_dtype(kDevice);
}

// The widest floating dtype among the eligible tensors of a call (float32 if
// any is float32, else the autocast dtype), as at::autocast::prioritize.
at::ScalarType widest(const std::vector<at::Tensor>& tensors) {
  at::ScalarType out = lower_precision();
  for (const at::Tensor& t : tensors) {
    if (!at::autocast::is_eligible(t, kDevice)) {
      continue;
    }
    const at::ScalarType s = t.scalar_type();
    TORCH_CHECK(s == at::kFloat || s == out || out == at::kFloat,
                "autocast on openreg: unexpected floating dtype ", s, " among the arguments");
    if (s == at::kFloat) {
      out = at::kFloat;
    }
  }
  return out;
}

// All tensors among the call's arguments (for Promote).
std::vector<at::Tensor> tensors_in(torch::jit::Stack& stack, size_t first, size_t n) {
  std::vector<at::Tensor> out;
  for (size_t i = first; i < first + n; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      out.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        out.push_back(t);
      }
    }
  }
  return out;
}

void cast_arguments(const c10::FunctionSchema& schema, torch::jit::Stack& stack, size_t first,
                    at::ScalarType to) {
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    c10::IValue& v = stack[first + i];
    if (v.isTensor()) {
      v = cast_argument(schema, i, v.toTensor(), to);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list = v.toTensorList();
      c10::List<at::Tensor> cast;
      cast.reserve(list.size());
      for (const at::Tensor& t : list) {
        cast.push_back(cast_argument(schema, i, t, to));
      }
      v = cast;
    }
  }
}

// Fp32SetOptDtype: when the first argument is eligible and no dtype was
// given, run the op with dtype=float32 (it then computes in float32 without
// casting its input first).
void set_opt_dtype(const c10::FunctionSchema& schema, torch::jit::Stack& stack, size_t first) {
  const c10::IValue& arg0 = stack[first];
  if (!arg0.isTensor() || !at::autocast::is_eligible(arg0.toTensor(), kDevice)) {
    return;
  }
  auto index = schema.argumentIndexWithName("dtype");
  TORCH_INTERNAL_ASSERT(index.has_value(), schema.name(), " has no dtype argument");
  c10::IValue& dtype = stack[first + *index];
  if (dtype.isNone()) {
    dtype = static_cast<int64_t>(at::kFloat);
  }
}

template <CastPolicy P>
void autocast_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                     torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t first = stack->size() - schema.arguments().size();
  if constexpr (P == CastPolicy::Banned) {
    // PyTorch's own wording for CUDA and CPU, so that code matching it (and
    // PyTorch's tests of a PrivateUse1 backend) sees the same error here.
    TORCH_CHECK(false,
                "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
                "autocast. A sigmoid usually comes right before them: use "
                "torch.nn.functional.binary_cross_entropy_with_logits or "
                "torch.nn.BCEWithLogitsLoss instead (they fuse the two and are safe to "
                "autocast), or run ",
                c10::toString(schema.operator_name()), " outside the autocast region");
  } else if constexpr (P == CastPolicy::LowerPrecision) {
    cast_arguments(schema, *stack, first, lower_precision());
  } else if constexpr (P == CastPolicy::Fp32) {
    cast_arguments(schema, *stack, first, at::kFloat);
  } else if constexpr (P == CastPolicy::Promote) {
    cast_arguments(schema, *stack, first,
                   widest(tensors_in(*stack, first, schema.arguments().size())));
  } else {
    set_opt_dtype(schema, *stack, first);
  }
  // Ops this one calls are not autocast again; the call itself goes on to the
  // next key (a redispatch, not a new call: the recorder sees one op).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastPrivateUse1);
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER,
                                                c10::DispatchKey::AutocastPrivateUse1),
                     stack);
}

std::vector<AutocastRule> build_rules() {
  std::vector<AutocastRule> rules;
  auto add = [&](std::string op, CastPolicy policy) {
    rules.push_back({"aten::" + std::move(op), policy});
  };
  // The X-macros pass (op) or (op, overload).
#define OPENREG_OP_NAME_1(op) #op
#define OPENREG_OP_NAME_2(op, overload) #op "." #overload
#define OPENREG_OP_NAME_PICK(_1, _2, NAME, ...) NAME
#define OPENREG_OP_NAME(...) \
  OPENREG_OP_NAME_PICK(__VA_ARGS__, OPENREG_OP_NAME_2, OPENREG_OP_NAME_1, )(__VA_ARGS__)
#define OPENREG_LOWER(...) add(OPENREG_OP_NAME(__VA_ARGS__), CastPolicy::LowerPrecision);
#define OPENREG_FP32(...) add(OPENREG_OP_NAME(__VA_ARGS__), CastPolicy::Fp32);
#define OPENREG_SET_OPT(...) add(OPENREG_OP_NAME(__VA_ARGS__), CastPolicy::Fp32SetOptDtype);
#define OPENREG_PROMOTE(...) add(OPENREG_OP_NAME(__VA_ARGS__), CastPolicy::Promote);
// norm.Scalar and norm.ScalarOpt_dim: CUDA re-dispatches them to the overload
// taking dtype=float32; casting the input to float32 computes the same thing.
#define OPENREG_APPEND_DTYPE(op, name, ...) add(name, CastPolicy::Fp32);
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_LOWER)
  AT_FORALL_FP32(OPENREG_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_SET_OPT)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(OPENREG_APPEND_DTYPE)
  AT_FORALL_PROMOTE(OPENREG_PROMOTE)
#undef OPENREG_APPEND_DTYPE
#undef OPENREG_PROMOTE
#undef OPENREG_SET_OPT
#undef OPENREG_FP32
#undef OPENREG_LOWER
#undef OPENREG_OP_NAME
#undef OPENREG_OP_NAME_PICK
#undef OPENREG_OP_NAME_2
#undef OPENREG_OP_NAME_1
  add("binary_cross_entropy", CastPolicy::Banned);
  return rules;
}

torch::CppFunction kernel_for(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::LowerPrecision:
      return torch::CppFunction::makeFromBoxedFunction<
          &autocast_kernel<CastPolicy::LowerPrecision>>();
    case CastPolicy::Fp32:
      return torch::CppFunction::makeFromBoxedFunction<&autocast_kernel<CastPolicy::Fp32>>();
    case CastPolicy::Fp32SetOptDtype:
      return torch::CppFunction::makeFromBoxedFunction<
          &autocast_kernel<CastPolicy::Fp32SetOptDtype>>();
    case CastPolicy::Promote:
      return torch::CppFunction::makeFromBoxedFunction<&autocast_kernel<CastPolicy::Promote>>();
    case CastPolicy::Banned:
      break;
  }
  return torch::CppFunction::makeFromBoxedFunction<&autocast_kernel<CastPolicy::Banned>>();
}

}  // namespace

std::string to_string(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::LowerPrecision:
      return "lower_precision_fp";
    case CastPolicy::Fp32:
      return "fp32";
    case CastPolicy::Fp32SetOptDtype:
      return "fp32_set_opt_dtype";
    case CastPolicy::Promote:
      return "promote";
    case CastPolicy::Banned:
      return "banned";
  }
  return "?";
}

const std::vector<AutocastRule>& autocast_rules() {
  static const std::vector<AutocastRule> rules = build_rules();
  return rules;
}

at::Tensor cast_argument(const c10::FunctionSchema& op, size_t arg_index, const at::Tensor& t,
                         at::ScalarType to) {
  if (!at::autocast::is_eligible(t, kDevice) || t.scalar_type() == to) {
    return t;
  }
  const seam::Hooks* lab = seam::hooks();  // Note [The lab's seam]
  const int64_t start =
      lab != nullptr && lab->recording->load(std::memory_order_relaxed) ? now_ns() : 0;
  const uint64_t copies_before = copies_on_this_thread();
  at::Tensor out = at::autocast::cached_cast(to, t, kDevice);
  // A fresh cast copies through _copy_from; a weight-cache hit copies nothing.
  const bool cache_hit = copies_on_this_thread() == copies_before;
  tls_counts.casts += 1;
  tls_counts.cache_hits += cache_hit ? 1 : 0;
  if (lab != nullptr) {
    lab->record_cast(start, op, arg_index, t.device(), t.scalar_type(), to,
                     static_cast<int64_t>(out.nbytes()), cache_hit);
  }
  return out;
}

CastCounts cast_counts_on_this_thread() noexcept {
  return tls_counts;
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  for (const AutocastRule& rule : autocast_rules()) {
    const std::string name = rule.op.substr(std::string("aten::").size());
    m.impl(name.c_str(), kernel_for(rule.policy));
  }
}

}  // namespace openreg
