#pragma once

// The boxed CPU fallback (Fallback.cpp), callable from native kernels.
//
// A native kernel that does not handle some input (a dtype it was not written
// for, say) hands the whole call to the fallback instead of failing:
//
//   if (!is_native_dtype(self.scalar_type())) {
//     return openreg::fallback<at::_ops::add_Tensor>(self, other, alpha);
//   }
//
// The call then behaves exactly as if openreg had no kernel for the op: the
// fallback policy applies and the data moves through the copy path.
//
// The operator is named by its class, at::_ops::<name>_<overload> (from the
// light <ATen/ops/<name>_ops.h>). PyTorch's ATEN_OP(<name>_<overload>) macro
// expands to the same name, but it is defined in <ATen/Operators.h>, which
// includes every operator's header: kernels do not use it.

#include <ATen/native/CPUFallback.h>

namespace openreg {

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The CPU round trip itself, without cpu_fallback's profile check: the
// fallback of the sparse and quantized keys (LayoutFallback.cpp).
void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

template <class Op, class... Args>
decltype(auto) fallback(Args&&... args) {
  return at::native::call_fallback_fn<&cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

}  // namespace openreg
