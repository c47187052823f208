#pragma once

// Every native openreg kernel is registered through OPENREG_IMPL, never with
// a bare m.impl: this is the one place where instrumentation can wrap each
// native call. Each registered name must also be listed, under its family, in
// openreg_lab/dispatch/native_ops.yaml (tests/operators/test_native_ops.py checks both ways).
//
// The wrapper opens the call's Op event when a trace takes op events from
// the kernels (Note [Op events from openreg's kernels]); otherwise it costs
// one relaxed load and calls the kernel.

#include "aten/KernelScopes.h"  // Note [The lab's seam]

#include <torch/library.h>

#include <algorithm>
#include <cstddef>
#include <utility>

namespace openreg::detail {

// A registration's operator name as a template argument: its address is
// the same for every call, and identifies the operator to the recorder.
template <size_t N>
struct OpLiteral {
  char text[N];
  constexpr OpLiteral(const char (&s)[N]) {  // NOLINT: implicit from a literal
    std::copy_n(s, N, text);
  }
};

template <OpLiteral Name, auto Kernel, class Signature = decltype(Kernel)>
struct Traced;

template <OpLiteral Name, auto Kernel, class Return, class... Args>
struct Traced<Name, Kernel, Return (*)(Args...)> {
  static Return call(Args... args) {
    KernelScope scope(Name.text, args...);
    return Kernel(std::forward<Args>(args)...);
  }
};

}  // namespace openreg::detail

#define OPENREG_IMPL(m, name, fn) \
  (m).impl(name, TORCH_FN((::openreg::detail::Traced<name, fn>::call)))
