// Binary elementwise operators: add, sub, rsub, mul, div (true, trunc and
// floor), maximum, minimum, pow, and the comparisons eq, ne, lt, le, gt, ge.
// Each hot operator is registered in its functional, in-place and out= forms,
// so that none of them goes through PyTorch's generic structured wrapper.
// How a kernel runs, and how dtypes are handled: Loops.h.

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"
#include "aten/native/Loops.h"

#include <ATen/native/BinaryOps.h>
#include <ATen/native/Pow.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/rsub_ops.h>
#include <ATen/ops/sub_ops.h>
#include <c10/util/generic_math.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

namespace openreg {
namespace {

using at::Tensor;
using c10::Scalar;
using c10::ScalarType;
using loops::Loop;
using loops::Mode;
using loops::ScalarArg;

// --- drivers -------------------------------------------------------------------

// Runs kernel(loop) over self and other, both read as `compute`, writing
// `result`. A CPU scalar operand stays a (broadcast) loop input, converted to
// `compute` first, as on CPU.
template <typename Kernel>
Tensor binary(const Tensor& self, const Tensor& other, const Tensor& out, Mode mode,
              ScalarType compute, ScalarType result, const Kernel& kernel) {
  loops::check_overlap(out, {self, other});
  const Tensor a = loops::to_compute(self, compute);
  const Tensor b = loops::to_compute(other, compute);
  return loops::run_elementwise(out, mode, result, {a, b}, kernel);
}

template <typename Kernel>
Tensor binary(const Tensor& self, const Scalar& other, const Tensor& out, Mode mode,
              ScalarType compute, ScalarType result, const Kernel& kernel) {
  return binary(self, loops::wrapped_scalar(other), out, mode, compute, result, kernel);
}

// As binary, for the hot arithmetic operators: a CPU scalar `other` is not a
// loop input but reaches kernel(loop, scalar), to be folded into the functor
// (ATen's CPU kernels do the same). Contiguous `self` then takes the fast
// path. A CPU scalar `self` stays a loop input.
template <typename Kernel>
Tensor binary_folding(const Tensor& self, const Tensor& other, const Tensor& out, Mode mode,
                      ScalarType compute, const Kernel& kernel) {
  loops::check_overlap(out, {self, other});
  const Tensor a = loops::to_compute(self, compute);
  // Narrow integers do not fold: the scalar must wrap to `compute` first.
  const bool fold = loops::compute_dtype(compute) == compute;
  if (fold && loops::is_cpu_scalar(other) && !loops::is_cpu_scalar(self)) {
    const ScalarArg s(other);
    return loops::run_elementwise(out, mode, compute, {a},
                                  [&](const Loop& loop) { kernel(loop, &s); });
  }
  const Tensor b = loops::to_compute(other, compute);
  return loops::run_elementwise(out, mode, compute, {a, b},
                                [&](const Loop& loop) { kernel(loop, nullptr); });
}

template <typename Kernel>
Tensor binary_folding(const Tensor& self, const Scalar& other, const Tensor& out, Mode mode,
                      ScalarType compute, const Kernel& kernel) {
  if (loops::compute_dtype(compute) != compute) {
    return binary_folding(self, loops::wrapped_scalar(other), out, mode, compute, kernel);
  }
  loops::check_overlap(out, {self});
  const Tensor a = loops::to_dtype(self, compute);
  const ScalarArg s(other);
  return loops::run_elementwise(out, mode, compute, {a},
                                [&](const Loop& loop) { kernel(loop, &s); });
}

// --- kernels -------------------------------------------------------------------
// ATen's CPU kernels read a scalar `other` in different precisions: add, sub
// and the comparisons round it to the common dtype, mul and div keep it in
// opmath (float for 16-bit types). The kernels below do the same, so that
// float16 and bfloat16 results equal the CPU's bit for bit.

// self + alpha * other
void add_kernel(const Loop& loop, const ScalarArg* other, ScalarType dtype, const Scalar& alpha) {
  if (dtype == ScalarType::Bool) {
    const bool a = alpha.to<bool>();
    if (other == nullptr) {
      loop.run<bool, bool, bool>([a](bool x, bool y) { return x || (a && y); });
    } else {
      const bool s = a && other->to<bool>();
      loop.run<bool, bool>([s](bool x) { return x || s; });
    }
    return;
  }
  loops::dispatch_numeric(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = loops::opmath_t<T>;
    const acc a = static_cast<acc>(loops::scalar_to<T>(alpha, dtype));
    if (other == nullptr) {
      loop.run_vec<T, T, T>([a](T x, T y) OPENREG_INLINE_LAMBDA {
        return static_cast<T>(static_cast<acc>(x) + a * static_cast<acc>(y));
      });
    } else {
      const acc s = a * static_cast<acc>(other->to<T>());
      loop.run_vec<T, T>(
          [s](T x) OPENREG_INLINE_LAMBDA { return static_cast<T>(static_cast<acc>(x) + s); });
    }
  });
}

void mul_kernel(const Loop& loop, const ScalarArg* other, ScalarType dtype) {
  if (dtype == ScalarType::Bool) {
    if (other == nullptr) {
      loop.run<bool, bool, bool>([](bool x, bool y) { return x && y; });
    } else {
      const bool s = other->to<bool>();
      loop.run<bool, bool>([s](bool x) { return x && s; });
    }
    return;
  }
  loops::dispatch_numeric(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = loops::opmath_t<T>;
    if (other == nullptr) {
      loop.run_vec<T, T, T>([](T x, T y) OPENREG_INLINE_LAMBDA {
        return static_cast<T>(static_cast<acc>(x) * static_cast<acc>(y));
      });
    } else {
      const acc s = other->to<acc>();
      loop.run_vec<T, T>(
          [s](T x) OPENREG_INLINE_LAMBDA { return static_cast<T>(static_cast<acc>(x) * s); });
    }
  });
}

enum class Rounding { None, Trunc, Floor };

Rounding parse_rounding(std::optional<std::string_view> mode) {
  if (!mode.has_value()) {
    return Rounding::None;
  }
  if (*mode == "trunc") {
    return Rounding::Trunc;
  }
  if (*mode == "floor") {
    return Rounding::Floor;
  }
  TORCH_CHECK(false,
              "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '",
              *mode, "'");
}

template <typename T>
T int_div(T a, T b, Rounding rounding) {
  TORCH_CHECK(b != 0, "ZeroDivisionError");
  if (rounding == Rounding::Floor) {
    return c10::div_floor_integer(a, b);
  }
  if constexpr (std::is_signed_v<T>) {
    if (a == std::numeric_limits<T>::min() && b == T(-1)) {
      return a;  // wraps, instead of trapping
    }
  }
  return static_cast<T>(a / b);
}

template <typename acc>
acc float_div(acc a, acc b, Rounding rounding) {
  if (rounding == Rounding::Trunc) {
    return std::trunc(a / b);
  }
  return c10::div_floor_floating(a, b);
}

// self / other for every rounding mode. True division only sees floating
// dtypes (integers are promoted); trunc and floor also see integers.
void div_kernel(const Loop& loop, const ScalarArg* other, ScalarType dtype, Rounding rounding) {
  if (loops::is_integral(dtype, /*include_bool=*/false)) {
    loops::dispatch_integral(dtype, [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      if (other == nullptr) {
        loop.run<T, T, T>([rounding](T x, T y) { return int_div(x, y, rounding); });
      } else {
        const T s = other->to<T>();
        TORCH_CHECK(s != 0, "ZeroDivisionError");
        loop.run<T, T>([s, rounding](T x) { return int_div(x, s, rounding); });
      }
    });
    return;
  }
  loops::dispatch_floating(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = loops::opmath_t<T>;
    if (rounding == Rounding::None) {
      if (other == nullptr) {
        loop.run_vec<T, T, T>([](T x, T y) OPENREG_INLINE_LAMBDA {
          return static_cast<T>(static_cast<acc>(x) / static_cast<acc>(y));
        });
      } else {
        const acc s = other->to<acc>();
        loop.run_vec<T, T>(
            [s](T x) OPENREG_INLINE_LAMBDA { return static_cast<T>(static_cast<acc>(x) / s); });
      }
    } else if (other == nullptr) {
      // Between two tensors, ATen's CPU kernel works in T itself: the
      // quotient is rounded to T before trunc, and floor division does each
      // step in T (16-bit types round at every step).
      loop.run<T, T, T>([rounding](T x, T y) {
        if (rounding == Rounding::Trunc) {
          return static_cast<T>(std::trunc(static_cast<acc>(static_cast<T>(x / y))));
        }
        return static_cast<T>(c10::div_floor_floating(x, y));
      });
    } else {
      const acc s = other->to<acc>();
      loop.run<T, T>([s, rounding](T x) { return static_cast<T>(float_div<acc>(x, s, rounding)); });
    }
  });
}

// maximum / minimum: NaN wins, as on CPU.
template <bool kMax>
void binary_minmax_kernel(const Loop& loop, ScalarType dtype) {
  loops::dispatch_all(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    loop.run<T, T, T>([](T x, T y) -> T {
      if constexpr (std::is_same_v<T, bool>) {
        return kMax ? (x || y) : (x && y);
      } else if constexpr (std::is_integral_v<T>) {
        return kMax ? (x > y ? x : y) : (x < y ? x : y);
      } else {
        using acc = loops::opmath_t<T>;
        const acc a = x;
        const acc b = y;
        if (a != a || b != b) {
          return std::numeric_limits<T>::quiet_NaN();
        }
        return kMax ? (a < b ? y : x) : (b < a ? y : x);
      }
    });
  });
}

// pow(self, exponent) for a scalar exponent, with the CPU kernel's special
// cases (sqrt, rsqrt, reciprocal, square, cube, inverse square) and exponent
// precisions: float and double raise to a double exponent, bfloat16 and
// float16 to one rounded to their own dtype; only float16 has no special
// cases.
enum class PowCase { General, Sqrt, Rsqrt, Reciprocal, Square, Cube, InverseSquare };

template <typename E>
PowCase pow_case(E e) {
  if (e == E(0.5)) {
    return PowCase::Sqrt;
  }
  if (e == E(-0.5)) {
    return PowCase::Rsqrt;
  }
  if (e == E(-1)) {
    return PowCase::Reciprocal;
  }
  if (e == E(2)) {
    return PowCase::Square;
  }
  if (e == E(3)) {
    return PowCase::Cube;
  }
  if (e == E(-2)) {
    return PowCase::InverseSquare;
  }
  return PowCase::General;
}

template <typename acc, typename E>
acc pow_special(acc a, E e, PowCase c) {
  switch (c) {
    case PowCase::Sqrt:
      return std::sqrt(a);
    case PowCase::Rsqrt:
      return acc(1) / std::sqrt(a);
    case PowCase::Reciprocal:
      return acc(1) / a;
    case PowCase::Square:
      return a * a;
    case PowCase::Cube:
      return a * a * a;
    case PowCase::InverseSquare:
      return acc(1) / (a * a);
    case PowCase::General:
      break;
  }
  return static_cast<acc>(std::pow(a, e));
}

void pow_scalar_kernel(const Loop& loop, ScalarType dtype, const Scalar& exponent) {
  if (loops::is_integral(dtype, /*include_bool=*/false)) {
    loops::dispatch_integral(dtype, [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      const T e = loops::scalar_to<T>(exponent, dtype);
      loop.run<T, T>([e](T x) { return at::native::powi(x, e); });
    });
    return;
  }
  loops::dispatch_floating(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    using acc = loops::opmath_t<T>;
    constexpr bool k16 = std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>;
    using exp_t = std::conditional_t<k16, acc, double>;
    const exp_t e = k16 ? static_cast<exp_t>(exponent.to<T>()) : exponent.to<double>();
    const PowCase c = std::is_same_v<T, c10::Half> ? PowCase::General : pow_case(e);
    if (c == PowCase::Square) {
      loop.run<T, T>([](T x) {
        const acc a = x;
        return static_cast<T>(a * a);
      });
    } else {
      loop.run<T, T>([e, c](T x) { return static_cast<T>(pow_special<acc>(x, e, c)); });
    }
  });
}

// pow(self, exponent) for a tensor exponent.
void pow_tensor_kernel(const Loop& loop, ScalarType dtype) {
  loops::dispatch_numeric(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    loop.run<T, T, T>([](T x, T y) -> T {
      if constexpr (std::is_integral_v<T>) {
        return at::native::powi(x, y);
      } else {
        using acc = loops::opmath_t<T>;
        return static_cast<T>(std::pow(static_cast<acc>(x), static_cast<acc>(y)));
      }
    });
  });
}

// The six comparisons as one branch-free functor: x OP y is
// (lt & x<y) | (eq & x==y) | (gt & x>y), negated for ne. With a NaN all three
// are false, so only ne is true, as IEEE wants.
enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge };

struct CmpMask {
  bool lt, eq, gt, invert;
};

constexpr CmpMask cmp_mask(Cmp c) {
  switch (c) {
    case Cmp::Eq:
      return {false, true, false, false};
    case Cmp::Ne:
      return {false, true, false, true};
    case Cmp::Lt:
      return {true, false, false, false};
    case Cmp::Le:
      return {true, true, false, false};
    case Cmp::Gt:
      return {false, false, true, false};
    case Cmp::Ge:
      return {false, true, true, false};
  }
  return {false, false, false, false};
}

void compare_kernel(const Loop& loop, ScalarType dtype, Cmp cmp) {
  const CmpMask m = cmp_mask(cmp);
  loops::dispatch_all(dtype, [&](auto tag) {
    using T = OPENREG_TYPE_OF(tag);
    loop.run<bool, T, T>([m](T x, T y) -> bool {
      const bool r = (m.lt & (x < y)) | (m.eq & (x == y)) | (m.gt & (x > y));
      return r != m.invert;
    });
  });
}

// --- add, sub, rsub ------------------------------------------------------------

Tensor add_run(const Tensor& self, const Tensor& other, const Scalar& alpha, const Tensor& out,
               Mode mode, ScalarType dtype) {
  at::native::alpha_check(dtype, alpha);
  return binary_folding(self, other, out, mode, dtype, [&](const Loop& loop, const ScalarArg* s) {
    add_kernel(loop, s, dtype, alpha);
  });
}

Tensor add_run(const Tensor& self, const Scalar& other, const Scalar& alpha, const Tensor& out,
               Mode mode, ScalarType dtype) {
  at::native::alpha_check(dtype, alpha);
  return binary_folding(self, other, out, mode, dtype, [&](const Loop& loop, const ScalarArg* s) {
    add_kernel(loop, s, dtype, alpha);
  });
}

Tensor add_tensor(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::add_Tensor>(self, other, alpha);
  }
  return add_run(self, other, alpha, Tensor(), Mode::Functional, dtype);
}

Tensor& add__tensor(Tensor& self, const Tensor& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::add__Tensor>(self, other, alpha);
  }
  add_run(self, other, alpha, self, Mode::InPlace, dtype);
  return self;
}

Tensor& add_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::add_out>(self, other, alpha, out);
  }
  add_run(self, other, alpha, out, Mode::Out, dtype);
  return out;
}

Tensor add_scalar(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::add_Scalar>(self, other, alpha);
  }
  return add_run(self, other, alpha, Tensor(), Mode::Functional, dtype);
}

Tensor& add__scalar(Tensor& self, const Scalar& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::add__Scalar>(self, other, alpha);
  }
  add_run(self, other, alpha, self, Mode::InPlace, dtype);
  return self;
}

// sub is add with -alpha, as in ATen.
Tensor sub_tensor(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::sub_Tensor>(self, other, alpha);
  }
  at::native::sub_check(self, other);
  at::native::alpha_check(dtype, alpha);
  return add_run(self, other, -alpha, Tensor(), Mode::Functional, dtype);
}

Tensor& sub__tensor(Tensor& self, const Tensor& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::sub__Tensor>(self, other, alpha);
  }
  at::native::sub_check(self, other);
  at::native::alpha_check(dtype, alpha);
  add_run(self, other, -alpha, self, Mode::InPlace, dtype);
  return self;
}

Tensor& sub_out(const Tensor& self, const Tensor& other, const Scalar& alpha, Tensor& out) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::sub_out>(self, other, alpha, out);
  }
  at::native::sub_check(self, other);
  at::native::alpha_check(dtype, alpha);
  add_run(self, other, -alpha, out, Mode::Out, dtype);
  return out;
}

Tensor sub_scalar(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::sub_Scalar>(self, other, alpha);
  }
  at::native::sub_check(self, other);
  at::native::alpha_check(dtype, alpha);
  return add_run(self, other, -alpha, Tensor(), Mode::Functional, dtype);
}

Tensor& sub__scalar(Tensor& self, const Scalar& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::sub__Scalar>(self, other, alpha);
  }
  at::native::sub_check(self, other);
  at::native::alpha_check(dtype, alpha);
  add_run(self, other, -alpha, self, Mode::InPlace, dtype);
  return self;
}

// rsub(self, other, alpha) = other - alpha * self
Tensor rsub_tensor(const Tensor& self, const Tensor& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(other, self);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::rsub_Tensor>(self, other, alpha);
  }
  at::native::sub_check(other, self);
  at::native::alpha_check(dtype, alpha);
  return add_run(other, self, -alpha, Tensor(), Mode::Functional, dtype);
}

Tensor rsub_scalar(const Tensor& self, const Scalar& other, const Scalar& alpha) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::rsub_Scalar>(self, other, alpha);
  }
  at::native::sub_check(self, other);
  at::native::alpha_check(dtype, alpha);
  return add_run(loops::wrapped_scalar(other), self, -alpha, Tensor(), Mode::Functional, dtype);
}

// --- mul -------------------------------------------------------------------------

Tensor mul_tensor(const Tensor& self, const Tensor& other) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::mul_Tensor>(self, other);
  }
  return binary_folding(self, other, Tensor(), Mode::Functional, dtype,
                        [&](const Loop& loop, const ScalarArg* s) { mul_kernel(loop, s, dtype); });
}

Tensor& mul__tensor(Tensor& self, const Tensor& other) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::mul__Tensor>(self, other);
  }
  binary_folding(self, other, self, Mode::InPlace, dtype,
                 [&](const Loop& loop, const ScalarArg* s) { mul_kernel(loop, s, dtype); });
  return self;
}

Tensor& mul_out(const Tensor& self, const Tensor& other, Tensor& out) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::mul_out>(self, other, out);
  }
  binary_folding(self, other, out, Mode::Out, dtype,
                 [&](const Loop& loop, const ScalarArg* s) { mul_kernel(loop, s, dtype); });
  return out;
}

Tensor mul_scalar(const Tensor& self, const Scalar& other) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::mul_Scalar>(self, other);
  }
  return binary_folding(self, other, Tensor(), Mode::Functional, dtype,
                        [&](const Loop& loop, const ScalarArg* s) { mul_kernel(loop, s, dtype); });
}

Tensor& mul__scalar(Tensor& self, const Scalar& other) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<at::_ops::mul__Scalar>(self, other);
  }
  binary_folding(self, other, self, Mode::InPlace, dtype,
                 [&](const Loop& loop, const ScalarArg* s) { mul_kernel(loop, s, dtype); });
  return self;
}

// --- div -------------------------------------------------------------------------

// The dtype div computes in: true division promotes integers to the default
// float dtype; trunc and floor keep the common dtype. bool only divides truly.
ScalarType div_dtype(ScalarType common, Rounding rounding) {
  return rounding == Rounding::None ? loops::promote_to_float(common) : common;
}

bool div_native(ScalarType dtype, Rounding rounding) {
  return loops::is_native(dtype) && !(rounding != Rounding::None && dtype == ScalarType::Bool);
}

template <typename Other>
Tensor div_run(const Tensor& self, const Other& other, const Tensor& out, Mode mode,
               ScalarType dtype, Rounding rounding) {
  return binary_folding(self, other, out, mode, dtype, [&](const Loop& loop, const ScalarArg* s) {
    div_kernel(loop, s, dtype, rounding);
  });
}

Tensor div_tensor(const Tensor& self, const Tensor& other) {
  const ScalarType dtype = div_dtype(loops::result_type(self, other), Rounding::None);
  if (!div_native(dtype, Rounding::None)) {
    return fallback<at::_ops::div_Tensor>(self, other);
  }
  return div_run(self, other, Tensor(), Mode::Functional, dtype, Rounding::None);
}

Tensor& div__tensor(Tensor& self, const Tensor& other) {
  const ScalarType dtype = div_dtype(loops::result_type(self, other), Rounding::None);
  if (!div_native(dtype, Rounding::None)) {
    return fallback<at::_ops::div__Tensor>(self, other);
  }
  div_run(self, other, self, Mode::InPlace, dtype, Rounding::None);
  return self;
}

Tensor& div_out(const Tensor& self, const Tensor& other, Tensor& out) {
  const ScalarType dtype = div_dtype(loops::result_type(self, other), Rounding::None);
  if (!div_native(dtype, Rounding::None)) {
    return fallback<at::_ops::div_out>(self, other, out);
  }
  div_run(self, other, out, Mode::Out, dtype, Rounding::None);
  return out;
}

Tensor div_tensor_mode(const Tensor& self, const Tensor& other,
                       std::optional<std::string_view> rounding_mode) {
  const Rounding rounding = parse_rounding(rounding_mode);
  const ScalarType dtype = div_dtype(loops::result_type(self, other), rounding);
  if (!div_native(dtype, rounding)) {
    return fallback<at::_ops::div_Tensor_mode>(self, other, rounding_mode);
  }
  return div_run(self, other, Tensor(), Mode::Functional, dtype, rounding);
}

Tensor& div__tensor_mode(Tensor& self, const Tensor& other,
                         std::optional<std::string_view> rounding_mode) {
  const Rounding rounding = parse_rounding(rounding_mode);
  const ScalarType dtype = div_dtype(loops::result_type(self, other), rounding);
  if (!div_native(dtype, rounding)) {
    return fallback<at::_ops::div__Tensor_mode>(self, other, rounding_mode);
  }
  div_run(self, other, self, Mode::InPlace, dtype, rounding);
  return self;
}

Tensor& div_out_mode(const Tensor& self, const Tensor& other,
                     std::optional<std::string_view> rounding_mode, Tensor& out) {
  const Rounding rounding = parse_rounding(rounding_mode);
  const ScalarType dtype = div_dtype(loops::result_type(self, other), rounding);
  if (!div_native(dtype, rounding)) {
    return fallback<at::_ops::div_out_mode>(self, other, rounding_mode, out);
  }
  div_run(self, other, out, Mode::Out, dtype, rounding);
  return out;
}

Tensor div_scalar(const Tensor& self, const Scalar& other) {
  const ScalarType dtype = div_dtype(loops::result_type(self, other), Rounding::None);
  if (!div_native(dtype, Rounding::None)) {
    return fallback<at::_ops::div_Scalar>(self, other);
  }
  return div_run(self, other, Tensor(), Mode::Functional, dtype, Rounding::None);
}

Tensor& div__scalar(Tensor& self, const Scalar& other) {
  const ScalarType dtype = div_dtype(loops::result_type(self, other), Rounding::None);
  if (!div_native(dtype, Rounding::None)) {
    return fallback<at::_ops::div__Scalar>(self, other);
  }
  div_run(self, other, self, Mode::InPlace, dtype, Rounding::None);
  return self;
}

Tensor div_scalar_mode(const Tensor& self, const Scalar& other,
                       std::optional<std::string_view> rounding_mode) {
  const Rounding rounding = parse_rounding(rounding_mode);
  const ScalarType dtype = div_dtype(loops::result_type(self, other), rounding);
  if (!div_native(dtype, rounding)) {
    return fallback<at::_ops::div_Scalar_mode>(self, other, rounding_mode);
  }
  return div_run(self, other, Tensor(), Mode::Functional, dtype, rounding);
}

Tensor& div__scalar_mode(Tensor& self, const Scalar& other,
                         std::optional<std::string_view> rounding_mode) {
  const Rounding rounding = parse_rounding(rounding_mode);
  const ScalarType dtype = div_dtype(loops::result_type(self, other), rounding);
  if (!div_native(dtype, rounding)) {
    return fallback<at::_ops::div__Scalar_mode>(self, other, rounding_mode);
  }
  div_run(self, other, self, Mode::InPlace, dtype, rounding);
  return self;
}

// --- maximum, minimum ------------------------------------------------------------

template <bool kMax>
Tensor minmax(const Tensor& self, const Tensor& other) {
  using Op = std::conditional_t<kMax, at::_ops::maximum, at::_ops::minimum>;
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<Op>(self, other);
  }
  return binary(self, other, Tensor(), Mode::Functional, dtype, dtype,
                [&](const Loop& loop) { binary_minmax_kernel<kMax>(loop, dtype); });
}

template <bool kMax>
Tensor& minmax_out(const Tensor& self, const Tensor& other, Tensor& out) {
  using Op = std::conditional_t<kMax, at::_ops::maximum_out, at::_ops::minimum_out>;
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<Op>(self, other, out);
  }
  binary(self, other, out, Mode::Out, dtype, dtype,
         [&](const Loop& loop) { binary_minmax_kernel<kMax>(loop, dtype); });
  return out;
}

// --- pow -------------------------------------------------------------------------

bool pow_native(ScalarType dtype) {
  return loops::is_floating(dtype) || loops::is_integral(dtype, /*include_bool=*/false);
}

void check_pow_exponent(const Tensor& self, const Scalar& exponent) {
  TORCH_CHECK(!(c10::isIntegralType(self.scalar_type(), /*includeBool=*/true) &&
                exponent.isIntegral(/*includeBool=*/true) && exponent.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
}

Tensor pow_scalar_run(const Tensor& self, const Scalar& exponent, const Tensor& out, Mode mode,
                      ScalarType dtype) {
  check_pow_exponent(self, exponent);
  const Tensor a = loops::to_compute(self, dtype);
  return loops::run_elementwise(
      out, mode, dtype, {a}, [&](const Loop& loop) { pow_scalar_kernel(loop, dtype, exponent); });
}

Tensor pow_tensor_scalar(const Tensor& self, const Scalar& exponent) {
  const ScalarType dtype = loops::result_type(self, exponent);
  if (!pow_native(dtype)) {
    return fallback<at::_ops::pow_Tensor_Scalar>(self, exponent);
  }
  return pow_scalar_run(self, exponent, Tensor(), Mode::Functional, dtype);
}

Tensor& pow__scalar(Tensor& self, const Scalar& exponent) {
  const ScalarType dtype = loops::result_type(self, exponent);
  if (!pow_native(dtype)) {
    return fallback<at::_ops::pow__Scalar>(self, exponent);
  }
  pow_scalar_run(self, exponent, self, Mode::InPlace, dtype);
  return self;
}

Tensor& pow_tensor_scalar_out(const Tensor& self, const Scalar& exponent, Tensor& out) {
  const ScalarType dtype = loops::result_type(self, exponent);
  if (!pow_native(dtype)) {
    return fallback<at::_ops::pow_Tensor_Scalar_out>(self, exponent, out);
  }
  pow_scalar_run(self, exponent, out, Mode::Out, dtype);
  return out;
}

Tensor pow_tensor_run(const Tensor& self, const Tensor& exponent, const Tensor& out, Mode mode,
                      ScalarType dtype) {
  return binary(self, exponent, out, mode, dtype, dtype,
                [&](const Loop& loop) { pow_tensor_kernel(loop, dtype); });
}

Tensor pow_tensor_tensor(const Tensor& self, const Tensor& exponent) {
  const ScalarType dtype = loops::result_type(self, exponent);
  if (!pow_native(dtype)) {
    return fallback<at::_ops::pow_Tensor_Tensor>(self, exponent);
  }
  return pow_tensor_run(self, exponent, Tensor(), Mode::Functional, dtype);
}

Tensor& pow__tensor(Tensor& self, const Tensor& exponent) {
  const ScalarType dtype = loops::result_type(self, exponent);
  if (!pow_native(dtype)) {
    return fallback<at::_ops::pow__Tensor>(self, exponent);
  }
  pow_tensor_run(self, exponent, self, Mode::InPlace, dtype);
  return self;
}

Tensor& pow_tensor_tensor_out(const Tensor& self, const Tensor& exponent, Tensor& out) {
  const ScalarType dtype = loops::result_type(self, exponent);
  if (!pow_native(dtype)) {
    return fallback<at::_ops::pow_Tensor_Tensor_out>(self, exponent, out);
  }
  pow_tensor_run(self, exponent, out, Mode::Out, dtype);
  return out;
}

// --- comparisons -------------------------------------------------------------------

// Op: the ATen operator for the fallback; Other: Tensor or Scalar.
template <Cmp kCmp, typename Op, typename Other>
Tensor compare(const Tensor& self, const Other& other) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<Op>(self, other);
  }
  return binary(self, other, Tensor(), Mode::Functional, dtype, ScalarType::Bool,
                [&](const Loop& loop) { compare_kernel(loop, dtype, kCmp); });
}

template <Cmp kCmp, typename Op, typename Other>
Tensor& compare_out(const Tensor& self, const Other& other, Tensor& out) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!loops::is_native(dtype)) {
    return fallback<Op>(self, other, out);
  }
  binary(self, other, out, Mode::Out, dtype, ScalarType::Bool,
         [&](const Loop& loop) { compare_kernel(loop, dtype, kCmp); });
  return out;
}

}  // namespace

#define OPENREG_COMPARISON(m, name, kCmp)                                                         \
  OPENREG_IMPL(m, #name ".Tensor", (compare<kCmp, at::_ops::name##_Tensor, Tensor>));             \
  OPENREG_IMPL(m, #name ".Scalar", (compare<kCmp, at::_ops::name##_Scalar, Scalar>));             \
  OPENREG_IMPL(m, #name ".Tensor_out", (compare_out<kCmp, at::_ops::name##_Tensor_out, Tensor>)); \
  OPENREG_IMPL(m, #name ".Scalar_out", (compare_out<kCmp, at::_ops::name##_Scalar_out, Scalar>))

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "add.Tensor", add_tensor);
  OPENREG_IMPL(m, "add_.Tensor", add__tensor);
  OPENREG_IMPL(m, "add.out", add_out);
  OPENREG_IMPL(m, "add.Scalar", add_scalar);
  OPENREG_IMPL(m, "add_.Scalar", add__scalar);
  OPENREG_IMPL(m, "sub.Tensor", sub_tensor);
  OPENREG_IMPL(m, "sub_.Tensor", sub__tensor);
  OPENREG_IMPL(m, "sub.out", sub_out);
  OPENREG_IMPL(m, "sub.Scalar", sub_scalar);
  OPENREG_IMPL(m, "sub_.Scalar", sub__scalar);
  OPENREG_IMPL(m, "rsub.Tensor", rsub_tensor);
  OPENREG_IMPL(m, "rsub.Scalar", rsub_scalar);

  OPENREG_IMPL(m, "mul.Tensor", mul_tensor);
  OPENREG_IMPL(m, "mul_.Tensor", mul__tensor);
  OPENREG_IMPL(m, "mul.out", mul_out);
  OPENREG_IMPL(m, "mul.Scalar", mul_scalar);
  OPENREG_IMPL(m, "mul_.Scalar", mul__scalar);

  OPENREG_IMPL(m, "div.Tensor", div_tensor);
  OPENREG_IMPL(m, "div_.Tensor", div__tensor);
  OPENREG_IMPL(m, "div.out", div_out);
  OPENREG_IMPL(m, "div.Tensor_mode", div_tensor_mode);
  OPENREG_IMPL(m, "div_.Tensor_mode", div__tensor_mode);
  OPENREG_IMPL(m, "div.out_mode", div_out_mode);
  OPENREG_IMPL(m, "div.Scalar", div_scalar);
  OPENREG_IMPL(m, "div_.Scalar", div__scalar);
  OPENREG_IMPL(m, "div.Scalar_mode", div_scalar_mode);
  OPENREG_IMPL(m, "div_.Scalar_mode", div__scalar_mode);

  OPENREG_IMPL(m, "maximum", minmax<true>);
  OPENREG_IMPL(m, "maximum.out", minmax_out<true>);
  OPENREG_IMPL(m, "minimum", minmax<false>);
  OPENREG_IMPL(m, "minimum.out", minmax_out<false>);

  OPENREG_IMPL(m, "pow.Tensor_Scalar", pow_tensor_scalar);
  OPENREG_IMPL(m, "pow_.Scalar", pow__scalar);
  OPENREG_IMPL(m, "pow.Tensor_Scalar_out", pow_tensor_scalar_out);
  OPENREG_IMPL(m, "pow.Tensor_Tensor", pow_tensor_tensor);
  OPENREG_IMPL(m, "pow_.Tensor", pow__tensor);
  OPENREG_IMPL(m, "pow.Tensor_Tensor_out", pow_tensor_tensor_out);

  OPENREG_COMPARISON(m, eq, Cmp::Eq);
  OPENREG_COMPARISON(m, ne, Cmp::Ne);
  OPENREG_COMPARISON(m, lt, Cmp::Lt);
  OPENREG_COMPARISON(m, le, Cmp::Le);
  OPENREG_COMPARISON(m, gt, Cmp::Gt);
  OPENREG_COMPARISON(m, ge, Cmp::Ge);
}

}  // namespace openreg
