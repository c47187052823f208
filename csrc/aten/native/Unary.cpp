// Unary elementwise operators: exp, log, sqrt, rsqrt, sin, cos, reciprocal
// (which compute integer inputs in the default float dtype), neg, abs, sign
// (which keep the dtype), and clamp, clamp_min, clamp_max with scalar bounds.
// Each is registered in its functional, in-place and out= forms. How a kernel
// runs, and how dtypes are handled: Loops.h.

#include "aten/native/Loops.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/ops/abs_ops.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sign_ops.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/sqrt_ops.h>

#include <cmath>
#include <limits>
#include <optional>

namespace openreg {
namespace {

using at::Tensor;
using c10::Scalar;
using c10::ScalarType;
using loops::Loop;
using loops::Mode;
using loops::run_unary;

// --- floating operators: integers compute in the default float dtype --------------
// Each functor maps an opmath value (float for 16-bit types) to its result.

// exp runs float rows with SIMD clones and a vectorisable exp (Loops.h, Note
// [Vectorisable math]); the other functors keep libm's accuracy.
struct Exp {
  static constexpr bool kVectorise = true;
  template <typename T>
  C10_ALWAYS_INLINE static T f(T x) {
    if constexpr (std::is_same_v<T, float>) {
      return loops::vmath::exp(x);
    } else {
      return std::exp(x);
    }
  }
};

struct Log {
  static constexpr bool kVectorise = false;
  template <typename T>
  static T f(T x) {
    return std::log(x);
  }
};

struct Sqrt {
  static constexpr bool kVectorise = false;
  template <typename T>
  static T f(T x) {
    return std::sqrt(x);
  }
};

struct Rsqrt {
  static constexpr bool kVectorise = false;
  template <typename T>
  static T f(T x) {
    return T(1) / std::sqrt(x);
  }
};

struct Sin {
  static constexpr bool kVectorise = false;
  template <typename T>
  static T f(T x) {
    return std::sin(x);
  }
};

struct Cos {
  static constexpr bool kVectorise = false;
  template <typename T>
  static T f(T x) {
    return std::cos(x);
  }
};

struct Reciprocal {
  static constexpr bool kVectorise = false;
  template <typename T>
  static T f(T x) {
    return T(1) / x;
  }
};

template <typename F>
void floating_kernel(const Loop& loop, ScalarType dtype) {
  loops::dispatch_floating(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = loops::opmath_t<T>;
    if constexpr (std::is_same_v<T, float> && F::kVectorise) {
      loop.run_simd<T, T>([](float x) OPENREG_INLINE_LAMBDA { return F::f(x); });
    } else {
      loop.run<T, T>([](T x) { return static_cast<T>(F::f(static_cast<acc>(x))); });
    }
  });
}

// Op, InplaceOp, OutOp: the ATen operators, for the fallback.
template <typename F, typename Op>
Tensor floating_unary(const Tensor& self) {
  const ScalarType dtype = loops::promote_to_float(self.scalar_type());
  if (!loops::is_floating(dtype)) {
    return fallback<Op>(self);
  }
  return run_unary(self, Tensor(), Mode::Functional, dtype,
                   [dtype](const Loop& loop) { floating_kernel<F>(loop, dtype); });
}

template <typename F, typename Op>
Tensor& floating_unary_(Tensor& self) {
  const ScalarType dtype = loops::promote_to_float(self.scalar_type());
  if (!loops::is_floating(dtype)) {
    return fallback<Op>(self);
  }
  run_unary(self, self, Mode::InPlace, dtype,
            [dtype](const Loop& loop) { floating_kernel<F>(loop, dtype); });
  return self;
}

template <typename F, typename Op>
Tensor& floating_unary_out(const Tensor& self, Tensor& out) {
  const ScalarType dtype = loops::promote_to_float(self.scalar_type());
  if (!loops::is_floating(dtype)) {
    return fallback<Op>(self, out);
  }
  run_unary(self, out, Mode::Out, dtype,
            [dtype](const Loop& loop) { floating_kernel<F>(loop, dtype); });
  return out;
}

// --- neg, abs, sign: the dtype is kept ------------------------------------------------

enum class Keep { Neg, Abs, Sign };

template <Keep kOp>
void keep_kernel(const Loop& loop, ScalarType dtype) {
  if (dtype == ScalarType::Bool) {  // only sign: a bool is its own sign
    loop.run<bool, bool>([](bool x) { return x; });
    return;
  }
  loops::dispatch_numeric(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = loops::opmath_t<T>;
    loop.run<T, T>([](T x) {
      const acc a = x;
      const acc zero = 0;
      if constexpr (kOp == Keep::Neg) {
        return static_cast<T>(-a);
      } else if constexpr (kOp == Keep::Abs) {
        if constexpr (std::is_floating_point_v<acc>) {
          return static_cast<T>(std::abs(a));  // |-0.0| is +0.0
        } else {
          return static_cast<T>(a < zero ? -a : a);
        }
      } else {
        return static_cast<T>((zero < a) - (a < zero));  // 0 for NaN, as on CPU
      }
    });
  });
}

template <Keep kOp>
bool keep_native(const Tensor& self) {
  const ScalarType t = self.scalar_type();
  if (t == ScalarType::Bool) {
    TORCH_CHECK(kOp != Keep::Neg,
                "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
                "to invert a mask, use the `~` or `logical_not()` operator instead.");
    return kOp == Keep::Sign;
  }
  return loops::is_native(t);
}

template <Keep kOp, typename Op>
Tensor keep_unary(const Tensor& self) {
  if (!keep_native<kOp>(self)) {
    return fallback<Op>(self);
  }
  const ScalarType dtype = self.scalar_type();
  return run_unary(self, Tensor(), Mode::Functional, dtype,
                   [dtype](const Loop& loop) { keep_kernel<kOp>(loop, dtype); });
}

template <Keep kOp, typename Op>
Tensor& keep_unary_(Tensor& self) {
  if (!keep_native<kOp>(self)) {
    return fallback<Op>(self);
  }
  const ScalarType dtype = self.scalar_type();
  run_unary(self, self, Mode::InPlace, dtype,
            [dtype](const Loop& loop) { keep_kernel<kOp>(loop, dtype); });
  return self;
}

template <Keep kOp, typename Op>
Tensor& keep_unary_out(const Tensor& self, Tensor& out) {
  if (!keep_native<kOp>(self)) {
    return fallback<Op>(self, out);
  }
  const ScalarType dtype = self.scalar_type();
  loops::check_same_dtype_out(out, dtype);
  run_unary(self, out, Mode::Out, dtype,
            [dtype](const Loop& loop) { keep_kernel<kOp>(loop, dtype); });
  return out;
}

// --- clamp ----------------------------------------------------------------------------
// min(max(x, lo), hi) in the result dtype, with the bounds rounded to it. The
// result dtype is self's when floating, else promoted with the bounds; an
// in-place clamp may not promote. A NaN bound makes every element NaN.

ScalarType clamp_dtype(const Tensor& self, const std::optional<Scalar>& lo,
                       const std::optional<Scalar>& hi, const Tensor& out) {
  const ScalarType self_dtype = self.scalar_type();
  TORCH_CHECK(!c10::isComplexType(self_dtype), "clamp is not supported for complex types");
  TORCH_CHECK(!(lo.has_value() && lo->isComplex()) && !(hi.has_value() && hi->isComplex()),
              "clamp is not supported for complex types");
  if (c10::isFloatingType(self_dtype)) {
    return self_dtype;
  }
  ScalarType dtype = self_dtype;
  if (lo.has_value()) {
    dtype = c10::promoteTypes(dtype, loops::result_type(self, *lo));
  }
  if (hi.has_value()) {
    dtype = c10::promoteTypes(dtype, loops::result_type(self, *hi));
  }
  TORCH_CHECK(dtype == self_dtype || !out.defined() || !out.is_same(self), "result type ", dtype,
              " can't be cast to the desired output type ", self.dtype());
  return dtype;
}

void clamp_kernel(const Loop& loop, ScalarType dtype, const std::optional<Scalar>& lo,
                  const std::optional<Scalar>& hi) {
  loops::dispatch_numeric(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    const T low =
        lo.has_value() ? loops::scalar_to<T>(*lo, dtype) : std::numeric_limits<T>::lowest();
    const T high = hi.has_value() ? loops::scalar_to<T>(*hi, dtype) : std::numeric_limits<T>::max();
    // `b != b`: a NaN bound wins (the comparisons alone would drop it).
    loop.run<T, T>([low, high](T x) {
      const T t = (x < low || low != low) ? low : x;
      return (high < t || high != high) ? high : t;
    });
  });
}

Tensor clamp_run(const Tensor& self, const std::optional<Scalar>& lo,
                 const std::optional<Scalar>& hi, const Tensor& out, Mode mode, ScalarType dtype) {
  return run_unary(self, out, mode, dtype,
                   [&](const Loop& loop) { clamp_kernel(loop, dtype, lo, hi); });
}

bool clamp_native(ScalarType dtype) {
  return loops::is_native(dtype) && dtype != ScalarType::Bool;
}

Tensor clamp(const Tensor& self, const std::optional<Scalar>& min,
             const std::optional<Scalar>& max) {
  TORCH_CHECK(min.has_value() || max.has_value(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
  const ScalarType dtype = clamp_dtype(self, min, max, Tensor());
  if (!clamp_native(dtype)) {
    return fallback<at::_ops::clamp>(self, min, max);
  }
  return clamp_run(self, min, max, Tensor(), Mode::Functional, dtype);
}

Tensor& clamp_(Tensor& self, const std::optional<Scalar>& min, const std::optional<Scalar>& max) {
  TORCH_CHECK(min.has_value() || max.has_value(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
  const ScalarType dtype = clamp_dtype(self, min, max, self);
  if (!clamp_native(dtype)) {
    return fallback<at::_ops::clamp_>(self, min, max);
  }
  clamp_run(self, min, max, self, Mode::InPlace, dtype);
  return self;
}

Tensor& clamp_out(const Tensor& self, const std::optional<Scalar>& min,
                  const std::optional<Scalar>& max, Tensor& out) {
  TORCH_CHECK(min.has_value() || max.has_value(),
              "torch.clamp: At least one of 'min' or 'max' must not be None");
  const ScalarType dtype = clamp_dtype(self, min, max, out);
  if (!clamp_native(dtype)) {
    return fallback<at::_ops::clamp_out>(self, min, max, out);
  }
  clamp_run(self, min, max, out, Mode::Out, dtype);
  return out;
}

// clamp_min (kMin) and clamp_max (!kMin): clamp with one bound.
template <bool kMin, typename Op>
Tensor clamp_one(const Tensor& self, const Scalar& bound) {
  const std::optional<Scalar> lo = kMin ? std::optional<Scalar>(bound) : std::nullopt;
  const std::optional<Scalar> hi = kMin ? std::nullopt : std::optional<Scalar>(bound);
  const ScalarType dtype = clamp_dtype(self, lo, hi, Tensor());
  if (!clamp_native(dtype)) {
    return fallback<Op>(self, bound);
  }
  return clamp_run(self, lo, hi, Tensor(), Mode::Functional, dtype);
}

template <bool kMin, typename Op>
Tensor& clamp_one_(Tensor& self, const Scalar& bound) {
  const std::optional<Scalar> lo = kMin ? std::optional<Scalar>(bound) : std::nullopt;
  const std::optional<Scalar> hi = kMin ? std::nullopt : std::optional<Scalar>(bound);
  const ScalarType dtype = clamp_dtype(self, lo, hi, self);
  if (!clamp_native(dtype)) {
    return fallback<Op>(self, bound);
  }
  clamp_run(self, lo, hi, self, Mode::InPlace, dtype);
  return self;
}

template <bool kMin, typename Op>
Tensor& clamp_one_out(const Tensor& self, const Scalar& bound, Tensor& out) {
  const std::optional<Scalar> lo = kMin ? std::optional<Scalar>(bound) : std::nullopt;
  const std::optional<Scalar> hi = kMin ? std::nullopt : std::optional<Scalar>(bound);
  const ScalarType dtype = clamp_dtype(self, lo, hi, out);
  if (!clamp_native(dtype)) {
    return fallback<Op>(self, bound, out);
  }
  clamp_run(self, lo, hi, out, Mode::Out, dtype);
  return out;
}

}  // namespace

// The functional, in-place and out= forms of one operator.
#define OPENREG_FLOATING_UNARY(m, name, F)                             \
  OPENREG_IMPL(m, #name, (floating_unary<F, at::_ops::name>));         \
  OPENREG_IMPL(m, #name "_", (floating_unary_<F, at::_ops::name##_>)); \
  OPENREG_IMPL(m, #name ".out", (floating_unary_out<F, at::_ops::name##_out>))

#define OPENREG_KEEP_UNARY(m, name, kOp)                             \
  OPENREG_IMPL(m, #name, (keep_unary<kOp, at::_ops::name>));         \
  OPENREG_IMPL(m, #name "_", (keep_unary_<kOp, at::_ops::name##_>)); \
  OPENREG_IMPL(m, #name ".out", (keep_unary_out<kOp, at::_ops::name##_out>))

#define OPENREG_CLAMP_ONE(m, name, kMin)                             \
  OPENREG_IMPL(m, #name, (clamp_one<kMin, at::_ops::name>));         \
  OPENREG_IMPL(m, #name "_", (clamp_one_<kMin, at::_ops::name##_>)); \
  OPENREG_IMPL(m, #name ".out", (clamp_one_out<kMin, at::_ops::name##_out>))

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_FLOATING_UNARY(m, exp, Exp);
  OPENREG_FLOATING_UNARY(m, log, Log);
  OPENREG_FLOATING_UNARY(m, sqrt, Sqrt);
  OPENREG_FLOATING_UNARY(m, rsqrt, Rsqrt);
  OPENREG_FLOATING_UNARY(m, sin, Sin);
  OPENREG_FLOATING_UNARY(m, cos, Cos);
  OPENREG_FLOATING_UNARY(m, reciprocal, Reciprocal);

  OPENREG_KEEP_UNARY(m, neg, Keep::Neg);
  OPENREG_KEEP_UNARY(m, abs, Keep::Abs);
  OPENREG_KEEP_UNARY(m, sign, Keep::Sign);

  OPENREG_IMPL(m, "clamp", clamp);
  OPENREG_IMPL(m, "clamp_", clamp_);
  OPENREG_IMPL(m, "clamp.out", clamp_out);
  OPENREG_CLAMP_ONE(m, clamp_min, true);
  OPENREG_CLAMP_ONE(m, clamp_max, false);
}

}  // namespace openreg
