// Activations and their backward formulas: relu, threshold_backward, gelu
// ('none' and 'tanh'), silu, sigmoid and tanh. Each is registered in its
// functional, in-place (where ATen has one) and out= forms. How a kernel runs,
// and how dtypes are handled: Loops.h.

#include "aten/native/Loops.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/native/Gelu.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>

#include <cmath>
#include <string_view>

namespace openreg {
namespace {

using at::Tensor;
using c10::Scalar;
using c10::ScalarType;
using loops::Loop;
using loops::Mode;
using loops::run_unary;

// A backward formula: (grad_output, x) -> grad_input, in their promoted dtype.
Tensor activation_run_backward(const Tensor& grad_output, const Tensor& x, const Tensor& grad_input,
                               ScalarType dtype, c10::function_ref<void(const Loop&)> kernel) {
  const Mode mode = grad_input.defined() ? Mode::Out : Mode::Functional;
  return loops::run_elementwise(
      grad_input, mode, dtype, {loops::to_compute(grad_output, dtype), loops::to_compute(x, dtype)},
      kernel);
}

// --- relu, threshold_backward -----------------------------------------------------------

// max(x, 0), keeping NaN (as CPU's clamp_min does).
void relu_kernel(const Loop& loop, ScalarType dtype) {
  loops::dispatch_numeric(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    loop.run_vec<T, T>([](T x) OPENREG_INLINE_LAMBDA { return x < T(0) ? T(0) : x; });
  });
}

bool relu_native(const Tensor& self) {
  TORCH_CHECK(self.scalar_type() != ScalarType::Bool, "Boolean inputs not supported for relu");
  return loops::is_native(self.scalar_type());
}

Tensor relu(const Tensor& self) {
  if (!relu_native(self)) {
    return fallback<at::_ops::relu>(self);
  }
  const ScalarType dtype = self.scalar_type();
  return run_unary(self, Tensor(), Mode::Functional, dtype,
                   [dtype](const Loop& loop) { relu_kernel(loop, dtype); });
}

Tensor& relu_(Tensor& self) {
  if (!relu_native(self)) {
    return fallback<at::_ops::relu_>(self);
  }
  const ScalarType dtype = self.scalar_type();
  run_unary(self, self, Mode::InPlace, dtype,
            [dtype](const Loop& loop) { relu_kernel(loop, dtype); });
  return self;
}

Tensor& relu_out(const Tensor& self, Tensor& out) {
  if (!relu_native(self)) {
    return fallback<at::_ops::relu_out>(self, out);
  }
  const ScalarType dtype = self.scalar_type();
  run_unary(self, out, Mode::Out, dtype, [dtype](const Loop& loop) { relu_kernel(loop, dtype); });
  return out;
}

// grad_input = self <= threshold ? 0 : grad_output
Tensor threshold_backward_run(const Tensor& grad_output, const Tensor& self,
                              const Scalar& threshold, const Tensor& grad_input) {
  const ScalarType dtype = loops::result_type(self, grad_output);
  return activation_run_backward(grad_output, self, grad_input, dtype, [&](const Loop& loop) {
    loops::dispatch_numeric(dtype, [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      const T th = loops::scalar_to<T>(threshold, dtype);
      loop.run_vec<T, T, T>([th](T g, T x) OPENREG_INLINE_LAMBDA { return x <= th ? T(0) : g; });
    });
  });
}

bool threshold_native(const Tensor& grad_output, const Tensor& self) {
  const ScalarType dtype = loops::result_type(self, grad_output);
  return loops::is_native(dtype) && dtype != ScalarType::Bool;
}

Tensor threshold_backward(const Tensor& grad_output, const Tensor& self, const Scalar& threshold) {
  if (!threshold_native(grad_output, self)) {
    return fallback<at::_ops::threshold_backward>(grad_output, self, threshold);
  }
  return threshold_backward_run(grad_output, self, threshold, Tensor());
}

Tensor& threshold_backward_out(const Tensor& grad_output, const Tensor& self,
                               const Scalar& threshold, Tensor& grad_input) {
  if (!threshold_native(grad_output, self)) {
    return fallback<at::_ops::threshold_backward_grad_input>(grad_output, self, threshold,
                                                             grad_input);
  }
  threshold_backward_run(grad_output, self, threshold, grad_input);
  return grad_input;
}

// --- smooth activations: floating dtypes ----------------------------------------------------
// Each functor maps opmath values (float for 16-bit types); `f` is the
// activation, `df(g, x)` its backward. With kVec (float rows run with
// run_simd) they use the vectorisable exp and erf of Loops.h (Note
// [Vectorisable math]), otherwise libm's. No branches: they would stop the
// vectoriser.

template <typename acc, bool kVec>
C10_ALWAYS_INLINE acc exp_(acc x) {
  if constexpr (kVec) {
    return loops::vmath::exp(x);
  } else {
    return std::exp(x);
  }
}

// gelu(x) = x * Phi(x), Phi the normal CDF: 0.5 * (1 + erf(x / sqrt(2))).
template <typename acc, bool kVec>
struct Gelu {
  static constexpr bool kVectorise = true;

  // erf(z), and exp(-z^2) in e when the caller needs it.
  C10_ALWAYS_INLINE static acc erf(acc z, acc& e) {
    if constexpr (kVec) {
      e = loops::vmath::exp(-z * z);
      return loops::vmath::erf_from_exp(z, e);
    } else {
      e = std::exp(-z * z);
      return std::erf(z);
    }
  }

  C10_ALWAYS_INLINE acc f(acc x) const {
    const acc z = x * kSqrtHalf;
    if constexpr (kVec) {
      acc e;
      return acc(0.5) * x * (acc(1) + erf(z, e));
    } else {
      return acc(0.5) * x * (acc(1) + std::erf(z));
    }
  }

  C10_ALWAYS_INLINE acc df(acc g, acc x) const {
    acc e;
    const acc cdf = acc(0.5) * (acc(1) + erf(x * kSqrtHalf, e));
    return g * (cdf + x * kInvSqrt2Pi * e);
  }

  static constexpr acc kSqrtHalf = acc(0.70710678118654752440);    // 1/sqrt(2)
  static constexpr acc kInvSqrt2Pi = acc(0.39894228040143267794);  // 1/sqrt(2 pi)
};

// gelu's 'tanh' approximation: 0.5 * x * (1 + tanh(u)), u = sqrt(2/pi) * (x +
// 0.044715 x^3). The vectorised form writes 0.5 * (1 + tanh(u)) as
// sigmoid(2u) and 1 - tanh(u)^2 as 4 sigmoid(2u) sigmoid(-2u), which keeps
// its precision where tanh(u) is close to -1 or 1.
template <typename acc, bool kVec>
struct GeluTanh {
  static constexpr bool kVectorise = true;

  C10_ALWAYS_INLINE static acc inner(acc x) {
    return kBeta * (x + kKappa * x * x * x);
  }

  C10_ALWAYS_INLINE acc f(acc x) const {
    const acc u = inner(x);
    if constexpr (kVec) {
      return x / (acc(1) + loops::vmath::exp(acc(-2) * u));
    } else {
      return acc(0.5) * x * (acc(1) + std::tanh(u));
    }
  }

  C10_ALWAYS_INLINE acc df(acc g, acc x) const {
    const acc u = inner(x);
    const acc slope = kBeta * (acc(1) + acc(3) * kKappa * x * x);  // du/dx
    if constexpr (kVec) {
      const acc s = acc(1) / (acc(1) + loops::vmath::exp(acc(-2) * u));  // sigmoid(2u)
      const acc r = acc(1) / (acc(1) + loops::vmath::exp(acc(2) * u));   // sigmoid(-2u)
      return g * (s + acc(2) * x * s * r * slope);
    } else {
      const acc t = std::tanh(u);
      return g * (acc(0.5) * (acc(1) + t) + acc(0.5) * x * (acc(1) - t * t) * slope);
    }
  }

  static constexpr acc kBeta = acc(0.79788456080286535588);  // sqrt(2/pi)
  static constexpr acc kKappa = acc(0.044715);
};

template <typename acc, bool kVec>
struct Silu {
  static constexpr bool kVectorise = true;
  C10_ALWAYS_INLINE acc f(acc x) const {
    return x / (acc(1) + exp_<acc, kVec>(-x));
  }
  C10_ALWAYS_INLINE acc df(acc g, acc x) const {
    const acc s = acc(1) / (acc(1) + exp_<acc, kVec>(-x));
    return g * s * (acc(1) + x * (acc(1) - s));
  }
};

// sigmoid and tanh: the backward takes the forward's output y, not x, and is
// plain arithmetic (memory-bound: no SIMD clones). tanh keeps libm's tanh.
template <typename acc, bool kVec>
struct Sigmoid {
  static constexpr bool kVectorise = true;
  C10_ALWAYS_INLINE acc f(acc x) const {
    return acc(1) / (acc(1) + exp_<acc, kVec>(-x));
  }
  C10_ALWAYS_INLINE acc df(acc g, acc y) const {
    return g * (acc(1) - y) * y;
  }
};

template <typename acc, bool kVec>
struct Tanh {
  static constexpr bool kVectorise = false;
  C10_ALWAYS_INLINE acc f(acc x) const {
    return std::tanh(x);
  }
  C10_ALWAYS_INLINE acc df(acc g, acc y) const {
    return g * (acc(1) - y * y);
  }
};

template <template <typename, bool> class F>
void activation_forward_kernel(const Loop& loop, ScalarType dtype) {
  loops::dispatch_floating(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = loops::opmath_t<T>;
    if constexpr (std::is_same_v<T, float> && F<float, true>::kVectorise) {
      const F<float, true> fn{};
      loop.run_simd<T, T>([fn](float x) OPENREG_INLINE_LAMBDA { return fn.f(x); });
    } else {
      const F<acc, false> fn{};
      loop.run<T, T>([fn](T x) { return static_cast<T>(fn.f(static_cast<acc>(x))); });
    }
  });
}

// Only the gelu and silu backwards compute exp or erf; the others are plain
// arithmetic.
template <template <typename, bool> class F>
void activation_backward_kernel(const Loop& loop, ScalarType dtype) {
  constexpr bool kVectorise = std::is_same_v<F<float, true>, Gelu<float, true>> ||
                              std::is_same_v<F<float, true>, GeluTanh<float, true>> ||
                              std::is_same_v<F<float, true>, Silu<float, true>>;
  loops::dispatch_floating(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = loops::opmath_t<T>;
    if constexpr (std::is_same_v<T, float> && kVectorise) {
      const F<float, true> fn{};
      loop.run_simd<T, T, T>([fn](float g, float x) OPENREG_INLINE_LAMBDA { return fn.df(g, x); });
    } else {
      const F<acc, false> fn{};
      loop.run<T, T, T>([fn](T g, T x) {
        return static_cast<T>(fn.df(static_cast<acc>(g), static_cast<acc>(x)));
      });
    }
  });
}

// sigmoid and tanh compute integers in the default float dtype; gelu and silu
// only take floating dtypes.
template <bool kPromote>
ScalarType forward_dtype(const Tensor& self) {
  return kPromote ? loops::promote_to_float(self.scalar_type()) : self.scalar_type();
}

template <template <typename, bool> class F, bool kPromote, typename Op>
Tensor activation_forward(const Tensor& self) {
  const ScalarType dtype = forward_dtype<kPromote>(self);
  if (!loops::is_floating(dtype)) {
    return fallback<Op>(self);
  }
  return run_unary(self, Tensor(), Mode::Functional, dtype,
                   [dtype](const Loop& loop) { activation_forward_kernel<F>(loop, dtype); });
}

template <template <typename, bool> class F, bool kPromote, typename Op>
Tensor& forward_(Tensor& self) {
  const ScalarType dtype = forward_dtype<kPromote>(self);
  if (!loops::is_floating(dtype)) {
    return fallback<Op>(self);
  }
  run_unary(self, self, Mode::InPlace, dtype,
            [dtype](const Loop& loop) { activation_forward_kernel<F>(loop, dtype); });
  return self;
}

template <template <typename, bool> class F, bool kPromote, typename Op>
Tensor& activation_forward_out(const Tensor& self, Tensor& out) {
  const ScalarType dtype = forward_dtype<kPromote>(self);
  if (!loops::is_floating(dtype)) {
    return fallback<Op>(self, out);
  }
  if constexpr (!kPromote) {  // silu: ATen's unary_op, one dtype for all operands
    loops::check_same_dtype_out(out, dtype);
  }
  run_unary(self, out, Mode::Out, dtype,
            [dtype](const Loop& loop) { activation_forward_kernel<F>(loop, dtype); });
  return out;
}

template <template <typename, bool> class F, typename Op>
Tensor activation_backward(const Tensor& grad_output, const Tensor& x) {
  const ScalarType dtype = loops::result_type(grad_output, x);
  if (!loops::is_floating(dtype)) {
    return fallback<Op>(grad_output, x);
  }
  return activation_run_backward(grad_output, x, Tensor(), dtype, [dtype](const Loop& loop) {
    activation_backward_kernel<F>(loop, dtype);
  });
}

template <template <typename, bool> class F, typename Op>
Tensor& activation_backward_out(const Tensor& grad_output, const Tensor& x, Tensor& grad_input) {
  const ScalarType dtype = loops::result_type(grad_output, x);
  if (!loops::is_floating(dtype)) {
    return fallback<Op>(grad_output, x, grad_input);
  }
  activation_run_backward(grad_output, x, grad_input, dtype, [dtype](const Loop& loop) {
    activation_backward_kernel<F>(loop, dtype);
  });
  return grad_input;
}

// gelu takes its approximation as a string.
void gelu_forward(const Loop& loop, ScalarType dtype, bool tanh) {
  if (tanh) {
    activation_forward_kernel<GeluTanh>(loop, dtype);
  } else {
    activation_forward_kernel<Gelu>(loop, dtype);
  }
}

void gelu_backward_kernel(const Loop& loop, ScalarType dtype, bool tanh) {
  if (tanh) {
    activation_backward_kernel<GeluTanh>(loop, dtype);
  } else {
    activation_backward_kernel<Gelu>(loop, dtype);
  }
}

bool gelu_tanh(std::string_view approximate) {
  return at::native::get_gelutype_enum(approximate) == at::native::GeluType::Tanh;
}

Tensor gelu(const Tensor& self, std::string_view approximate) {
  const bool tanh = gelu_tanh(approximate);
  const ScalarType dtype = self.scalar_type();
  if (!loops::is_floating(dtype)) {
    return fallback<at::_ops::gelu>(self, approximate);
  }
  return run_unary(self, Tensor(), Mode::Functional, dtype,
                   [&](const Loop& loop) { gelu_forward(loop, dtype, tanh); });
}

Tensor& gelu_(Tensor& self, std::string_view approximate) {
  const bool tanh = gelu_tanh(approximate);
  const ScalarType dtype = self.scalar_type();
  if (!loops::is_floating(dtype)) {
    return fallback<at::_ops::gelu_>(self, approximate);
  }
  run_unary(self, self, Mode::InPlace, dtype,
            [&](const Loop& loop) { gelu_forward(loop, dtype, tanh); });
  return self;
}

Tensor& gelu_out(const Tensor& self, std::string_view approximate, Tensor& out) {
  const bool tanh = gelu_tanh(approximate);
  const ScalarType dtype = self.scalar_type();
  if (!loops::is_floating(dtype)) {
    return fallback<at::_ops::gelu_out>(self, approximate, out);
  }
  loops::check_same_dtype_out(out, dtype);
  run_unary(self, out, Mode::Out, dtype,
            [&](const Loop& loop) { gelu_forward(loop, dtype, tanh); });
  return out;
}

Tensor gelu_backward(const Tensor& grad_output, const Tensor& self, std::string_view approximate) {
  const bool tanh = gelu_tanh(approximate);
  const ScalarType dtype = loops::result_type(grad_output, self);
  if (!loops::is_floating(dtype)) {
    return fallback<at::_ops::gelu_backward>(grad_output, self, approximate);
  }
  return activation_run_backward(grad_output, self, Tensor(), dtype, [&](const Loop& loop) {
    gelu_backward_kernel(loop, dtype, tanh);
  });
}

Tensor& gelu_backward_out(const Tensor& grad_output, const Tensor& self,
                          std::string_view approximate, Tensor& grad_input) {
  const bool tanh = gelu_tanh(approximate);
  const ScalarType dtype = loops::result_type(grad_output, self);
  if (!loops::is_floating(dtype)) {
    return fallback<at::_ops::gelu_backward_grad_input>(grad_output, self, approximate, grad_input);
  }
  activation_run_backward(grad_output, self, grad_input, dtype,
                          [&](const Loop& loop) { gelu_backward_kernel(loop, dtype, tanh); });
  return grad_input;
}

}  // namespace

// The functional, in-place and out= forms of an activation, and the
// functional and grad_input= forms of its backward.
#define OPENREG_ACTIVATION(m, name, F, kPromote)                                              \
  OPENREG_IMPL(m, #name, (activation_forward<F, kPromote, at::_ops::name>));                  \
  OPENREG_IMPL(m, #name "_", (forward_<F, kPromote, at::_ops::name##_>));                     \
  OPENREG_IMPL(m, #name ".out", (activation_forward_out<F, kPromote, at::_ops::name##_out>)); \
  OPENREG_IMPL(m, #name "_backward", (activation_backward<F, at::_ops::name##_backward>));    \
  OPENREG_IMPL(m, #name "_backward.grad_input",                                               \
               (activation_backward_out<F, at::_ops::name##_backward_grad_input>))

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "relu", relu);
  OPENREG_IMPL(m, "relu_", relu_);
  OPENREG_IMPL(m, "relu.out", relu_out);
  OPENREG_IMPL(m, "threshold_backward", threshold_backward);
  OPENREG_IMPL(m, "threshold_backward.grad_input", threshold_backward_out);

  OPENREG_IMPL(m, "gelu", gelu);
  OPENREG_IMPL(m, "gelu_", gelu_);
  OPENREG_IMPL(m, "gelu.out", gelu_out);
  OPENREG_IMPL(m, "gelu_backward", gelu_backward);
  OPENREG_IMPL(m, "gelu_backward.grad_input", gelu_backward_out);

  OPENREG_ACTIVATION(m, silu, Silu, false);
  OPENREG_ACTIVATION(m, sigmoid, Sigmoid, true);
  OPENREG_ACTIVATION(m, tanh, Tanh, true);
}

}  // namespace openreg
