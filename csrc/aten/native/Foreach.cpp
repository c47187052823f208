// The _foreach_* operators that optimizers call (torch.optim with
// foreach=True): arithmetic with a scalar, a scalar list or a tensor list,
// maximum/minimum, sqrt, neg, lerp, addcmul, addcdiv and zero_.
//
// ATen's CPU kernels for these are loops over the lists calling the
// per-tensor operator (add_, mul_, ...) through the dispatcher. openreg runs
// each tuple of tensors (self[i], other[i], ...) that is contiguous, float or
// double, of one shape and on one openreg device directly, with the per-tensor
// kernels' formulas, and hands any other tuple to the per-tensor operator,
// exactly as the CPU does (which then runs natively or falls back). How a loop
// runs: Loops.h.

#include "aten/native/Loops.h"

#include "aten/Registration.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/native/Lerp.h>
#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_maximum_ops.h>
#include <ATen/ops/_foreach_minimum_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_neg_ops.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_foreach_sub_ops.h>
#include <ATen/ops/_foreach_zero_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/zero_ops.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace openreg {
namespace {

using at::Tensor;
using at::TensorList;
using c10::Scalar;
using c10::ScalarType;
using loops::Loop;
using ScalarList = at::ArrayRef<Scalar>;

// --- checks (ATen's messages) ----------------------------------------------------------

void check_lists(TensorList self) {
  TORCH_CHECK(!self.empty(), "Tensor list must have at least one tensor.");
}

void check_lists(TensorList self, TensorList other) {
  check_lists(self);
  check_lists(other);
  TORCH_CHECK(self.size() == other.size(),
              "Tensor lists must have the same number of tensors, got ", self.size(), " and ",
              other.size());
}

void check_lists(TensorList self, TensorList a, TensorList b) {
  check_lists(self, a);
  check_lists(self, b);
}

void check_scalars(TensorList self, ScalarList scalars) {
  check_lists(self);
  TORCH_CHECK(self.size() == scalars.size(),
              "Tensor list must have same number of elements as scalar list.");
}

// --- the fast path -------------------------------------------------------------------------

bool fast_dtype(ScalarType t) {
  return t == ScalarType::Float || t == ScalarType::Double;
}

// Whether one tuple runs here: `self` (the output of an in-place operator,
// or the model of a functional one) and its partners are contiguous, of one
// float or double dtype, shape and openreg device, and the partners do not
// partially overlap `self`.
bool fast_tuple(const Tensor& self, std::initializer_list<Tensor> others) {
  if (!loops::on_openreg(self) || !fast_dtype(self.scalar_type()) || !self.is_contiguous()) {
    return false;
  }
  for (const Tensor& t : others) {
    if (!t.defined() || t.device() != self.device() || t.scalar_type() != self.scalar_type() ||
        !t.sizes().equals(self.sizes()) || !t.is_contiguous()) {
      return false;
    }
    const at::MemOverlapStatus overlap = at::get_overlap_status(self, t);
    if (overlap != at::MemOverlapStatus::No && overlap != at::MemOverlapStatus::Full) {
      return false;
    }
  }
  return true;
}

// Runs kernel(loop, tag) over `out` and `inputs` (a fast tuple).
template <typename Kernel>
void run_tuple(const Tensor& out, std::initializer_list<Tensor> inputs, const Kernel& kernel) {
  const Loop loop(out.numel(), out, inputs);
  if (out.scalar_type() == ScalarType::Float) {
    kernel(loop, loops::Tag<float>{});
  } else {
    kernel(loop, loops::Tag<double>{});
  }
}

// A functional operator's result for a fast tuple.
Tensor fresh_like(const Tensor& self) {
  return at::empty(self.sizes(), self.options());
}

// --- arithmetic: add, sub, mul, div ----------------------------------------------------------
// With a scalar, the formulas and scalar precisions of the per-tensor
// kernels (Binary.cpp): add and sub round the scalar to the tensor's dtype,
// mul and div use it in opmath; with a list, add and sub take alpha.

enum class Arith { Add, Sub, Mul, Div };

template <typename T>
void scalar_kernel(const Loop& loop, Arith op, const Scalar& s) {
  const loops::ScalarArg arg(s);
  const T v = arg.to<T>();
  switch (op) {
    case Arith::Add:
    case Arith::Sub: {
      const T add = op == Arith::Sub ? -v : v;
      loop.run<T, T>([add](T x) { return x + add; });
      return;
    }
    case Arith::Mul:
      loop.run<T, T>([v](T x) { return x * v; });
      return;
    case Arith::Div:
      loop.run<T, T>([v](T x) { return x / v; });
      return;
  }
}

template <typename T>
void list_kernel(const Loop& loop, Arith op, const Scalar& alpha) {
  switch (op) {
    case Arith::Add:
    case Arith::Sub: {
      const T a = op == Arith::Sub ? -alpha.to<T>() : alpha.to<T>();
      loop.run<T, T, T>([a](T x, T y) { return x + a * y; });
      return;
    }
    case Arith::Mul:
      loop.run<T, T, T>([](T x, T y) { return x * y; });
      return;
    case Arith::Div:
      loop.run<T, T, T>([](T x, T y) { return x / y; });
      return;
  }
}

// The per-tensor operators, for tuples off the fast path.
Tensor& scalar_op_(Arith op, Tensor& t, const Scalar& s) {
  switch (op) {
    case Arith::Add:
      return at::_ops::add__Scalar::call(t, s, 1);
    case Arith::Sub:
      return at::_ops::sub__Scalar::call(t, s, 1);
    case Arith::Mul:
      return at::_ops::mul__Scalar::call(t, s);
    case Arith::Div:
      return at::_ops::div__Scalar::call(t, s);
  }
  return t;
}

Tensor scalar_op(Arith op, const Tensor& t, const Scalar& s) {
  switch (op) {
    case Arith::Add:
      return at::_ops::add_Scalar::call(t, s, 1);
    case Arith::Sub:
      return at::_ops::sub_Scalar::call(t, s, 1);
    case Arith::Mul:
      return at::_ops::mul_Scalar::call(t, s);
    case Arith::Div:
      return at::_ops::div_Scalar::call(t, s);
  }
  return Tensor();
}

Tensor& list_op_(Arith op, Tensor& t, const Tensor& o, const Scalar& alpha) {
  switch (op) {
    case Arith::Add:
      return at::_ops::add__Tensor::call(t, o, alpha);
    case Arith::Sub:
      return at::_ops::sub__Tensor::call(t, o, alpha);
    case Arith::Mul:
      return at::_ops::mul__Tensor::call(t, o);
    case Arith::Div:
      return at::_ops::div__Tensor::call(t, o);
  }
  return t;
}

Tensor list_op(Arith op, const Tensor& t, const Tensor& o, const Scalar& alpha) {
  switch (op) {
    case Arith::Add:
      return at::_ops::add_Tensor::call(t, o, alpha);
    case Arith::Sub:
      return at::_ops::sub_Tensor::call(t, o, alpha);
    case Arith::Mul:
      return at::_ops::mul_Tensor::call(t, o);
    case Arith::Div:
      return at::_ops::div_Tensor::call(t, o);
  }
  return Tensor();
}

// A scalar of a fast tuple: complex ones promote, so they take the slow path.
bool fast_scalar(const Scalar& s) {
  return !s.isComplex();
}

// alpha of a fast tuple: a bool alpha is an error the per-tensor operator
// reports.
bool fast_alpha(const Scalar& alpha) {
  return !alpha.isComplex() && !alpha.isBoolean();
}

void scalar_tuple_(Arith op, const Tensor& t, const Scalar& s) {
  if (fast_scalar(s) && fast_tuple(t, {})) {
    run_tuple(t, {t}, [&](const Loop& loop, auto tag) {
      scalar_kernel<OPENREG_TYPE_OF(tag)>(loop, op, s);
    });
  } else {
    Tensor self = t;
    scalar_op_(op, self, s);
  }
}

Tensor scalar_tuple(Arith op, const Tensor& t, const Scalar& s) {
  if (fast_scalar(s) && fast_tuple(t, {})) {
    Tensor out = fresh_like(t);
    run_tuple(out, {t}, [&](const Loop& loop, auto tag) {
      scalar_kernel<OPENREG_TYPE_OF(tag)>(loop, op, s);
    });
    return out;
  }
  return scalar_op(op, t, s);
}

template <Arith kOp>
void foreach_scalar_(TensorList self, const Scalar& scalar) {
  check_lists(self);
  for (const Tensor& t : self) {
    scalar_tuple_(kOp, t, scalar);
  }
}

template <Arith kOp>
std::vector<Tensor> foreach_scalar(TensorList self, const Scalar& scalar) {
  check_lists(self);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (const Tensor& t : self) {
    result.push_back(scalar_tuple(kOp, t, scalar));
  }
  return result;
}

template <Arith kOp>
void foreach_scalar_list_(TensorList self, ScalarList scalars) {
  check_scalars(self, scalars);
  for (size_t i = 0; i < self.size(); ++i) {
    scalar_tuple_(kOp, self[i], scalars[i]);
  }
}

template <Arith kOp>
std::vector<Tensor> foreach_scalar_list(TensorList self, ScalarList scalars) {
  check_scalars(self, scalars);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    result.push_back(scalar_tuple(kOp, self[i], scalars[i]));
  }
  return result;
}

template <Arith kOp>
void foreach_list_(TensorList self, TensorList other, const Scalar& alpha) {
  check_lists(self, other);
  for (size_t i = 0; i < self.size(); ++i) {
    if (fast_alpha(alpha) && fast_tuple(self[i], {other[i]})) {
      run_tuple(self[i], {self[i], other[i]}, [&](const Loop& loop, auto tag) {
        list_kernel<OPENREG_TYPE_OF(tag)>(loop, kOp, alpha);
      });
    } else {
      Tensor t = self[i];
      list_op_(kOp, t, other[i], alpha);
    }
  }
}

template <Arith kOp>
std::vector<Tensor> foreach_list(TensorList self, TensorList other, const Scalar& alpha) {
  check_lists(self, other);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    if (fast_alpha(alpha) && fast_tuple(self[i], {other[i]})) {
      Tensor out = fresh_like(self[i]);
      run_tuple(out, {self[i], other[i]}, [&](const Loop& loop, auto tag) {
        list_kernel<OPENREG_TYPE_OF(tag)>(loop, kOp, alpha);
      });
      result.push_back(out);
    } else {
      result.push_back(list_op(kOp, self[i], other[i], alpha));
    }
  }
  return result;
}

// mul and div lists have no alpha.
template <Arith kOp>
void foreach_list_no_alpha_(TensorList self, TensorList other) {
  foreach_list_<kOp>(self, other, 1);
}

template <Arith kOp>
std::vector<Tensor> foreach_list_no_alpha(TensorList self, TensorList other) {
  return foreach_list<kOp>(self, other, 1);
}

// --- maximum, minimum ---------------------------------------------------------------------
// ATen's foreach maximum/minimum are clamp_min/clamp_max with a tensor bound,
// which propagate NaN like maximum/minimum: the per-tensor path uses those.

template <bool kMax>
void foreach_minmax_kernel(const Loop& loop, auto tag) {
  using T = OPENREG_TYPE_OF(tag);
  loop.run<T, T, T>([](T x, T y) {
    if (x != x || y != y) {
      return std::numeric_limits<T>::quiet_NaN();
    }
    return (kMax ? x < y : y < x) ? y : x;
  });
}

template <bool kMax>
void foreach_minmax_(TensorList self, TensorList other) {
  check_lists(self, other);
  for (size_t i = 0; i < self.size(); ++i) {
    if (fast_tuple(self[i], {other[i]})) {
      run_tuple(self[i], {self[i], other[i]},
                [](const Loop& loop, auto tag) { foreach_minmax_kernel<kMax>(loop, tag); });
    } else {
      Tensor t = self[i];
      if (kMax) {
        at::_ops::maximum_out::call(t, other[i], t);
      } else {
        at::_ops::minimum_out::call(t, other[i], t);
      }
    }
  }
}

template <bool kMax>
std::vector<Tensor> foreach_minmax(TensorList self, TensorList other) {
  check_lists(self, other);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    if (fast_tuple(self[i], {other[i]})) {
      Tensor out = fresh_like(self[i]);
      run_tuple(out, {self[i], other[i]},
                [](const Loop& loop, auto tag) { foreach_minmax_kernel<kMax>(loop, tag); });
      result.push_back(out);
    } else {
      result.push_back(kMax ? at::_ops::maximum::call(self[i], other[i])
                            : at::_ops::minimum::call(self[i], other[i]));
    }
  }
  return result;
}

// --- sqrt, neg --------------------------------------------------------------------------------

template <bool kSqrt>
void unary_kernel(const Loop& loop, auto tag) {
  using T = OPENREG_TYPE_OF(tag);
  if constexpr (kSqrt) {
    loop.run<T, T>([](T x) { return std::sqrt(x); });
  } else {
    loop.run<T, T>([](T x) { return -x; });
  }
}

template <bool kSqrt>
void foreach_unary_(TensorList self) {
  check_lists(self);
  for (const Tensor& t : self) {
    if (fast_tuple(t, {})) {
      run_tuple(t, {t}, [](const Loop& loop, auto tag) { unary_kernel<kSqrt>(loop, tag); });
    } else if (kSqrt) {
      Tensor s = t;
      at::_ops::sqrt_::call(s);
    } else {
      Tensor s = t;
      at::_ops::neg_::call(s);
    }
  }
}

template <bool kSqrt>
std::vector<Tensor> foreach_unary(TensorList self) {
  check_lists(self);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (const Tensor& t : self) {
    if (fast_tuple(t, {})) {
      Tensor out = fresh_like(t);
      run_tuple(out, {t}, [](const Loop& loop, auto tag) { unary_kernel<kSqrt>(loop, tag); });
      result.push_back(out);
    } else {
      result.push_back(kSqrt ? at::_ops::sqrt::call(t) : at::_ops::neg::call(t));
    }
  }
  return result;
}

// --- lerp ------------------------------------------------------------------------------------

void foreach_lerp__scalar(TensorList self, TensorList end, const Scalar& weight) {
  check_lists(self, end);
  for (size_t i = 0; i < self.size(); ++i) {
    if (fast_scalar(weight) && fast_tuple(self[i], {end[i]})) {
      run_tuple(self[i], {self[i], end[i]}, [&](const Loop& loop, auto tag) {
        using T = OPENREG_TYPE_OF(tag);
        const T w = weight.to<T>();
        loop.run<T, T, T>([w](T x, T y) { return at::native::lerp(x, y, w); });
      });
    } else {
      Tensor t = self[i];
      at::_ops::lerp__Scalar::call(t, end[i], weight);
    }
  }
}

std::vector<Tensor> foreach_lerp_scalar(TensorList self, TensorList end, const Scalar& weight) {
  check_lists(self, end);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    if (fast_scalar(weight) && fast_tuple(self[i], {end[i]})) {
      Tensor out = fresh_like(self[i]);
      run_tuple(out, {self[i], end[i]}, [&](const Loop& loop, auto tag) {
        using T = OPENREG_TYPE_OF(tag);
        const T w = weight.to<T>();
        loop.run<T, T, T>([w](T x, T y) { return at::native::lerp(x, y, w); });
      });
      result.push_back(out);
    } else {
      result.push_back(at::_ops::lerp_Scalar::call(self[i], end[i], weight));
    }
  }
  return result;
}

void foreach_lerp__list(TensorList self, TensorList end, TensorList weight) {
  check_lists(self, end, weight);
  for (size_t i = 0; i < self.size(); ++i) {
    if (fast_tuple(self[i], {end[i], weight[i]})) {
      run_tuple(self[i], {self[i], end[i], weight[i]}, [](const Loop& loop, auto tag) {
        using T = OPENREG_TYPE_OF(tag);
        loop.run<T, T, T, T>([](T x, T y, T w) { return at::native::lerp(x, y, w); });
      });
    } else {
      Tensor t = self[i];
      at::_ops::lerp__Tensor::call(t, end[i], weight[i]);
    }
  }
}

std::vector<Tensor> foreach_lerp_list(TensorList self, TensorList end, TensorList weight) {
  check_lists(self, end, weight);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    if (fast_tuple(self[i], {end[i], weight[i]})) {
      Tensor out = fresh_like(self[i]);
      run_tuple(out, {self[i], end[i], weight[i]}, [](const Loop& loop, auto tag) {
        using T = OPENREG_TYPE_OF(tag);
        loop.run<T, T, T, T>([](T x, T y, T w) { return at::native::lerp(x, y, w); });
      });
      result.push_back(out);
    } else {
      result.push_back(at::_ops::lerp_Tensor::call(self[i], end[i], weight[i]));
    }
  }
  return result;
}

// --- addcmul, addcdiv ----------------------------------------------------------------------
// self + value * t1 * t2 and self + value * t1 / t2 (Ternary.cpp's formulas).

template <bool kDiv>
void addc_kernel(const Loop& loop, auto tag, const Scalar& value) {
  using T = OPENREG_TYPE_OF(tag);
  const T v = value.to<T>();
  if constexpr (kDiv) {
    loop.run<T, T, T, T>([v](T x, T y, T z) { return x + v * y / z; });
  } else {
    loop.run<T, T, T, T>([v](T x, T y, T z) { return x + v * y * z; });
  }
}

template <bool kDiv>
void addc_tuple_(const Tensor& t, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  if (fast_scalar(value) && fast_tuple(t, {t1, t2})) {
    run_tuple(t, {t, t1, t2},
              [&](const Loop& loop, auto tag) { addc_kernel<kDiv>(loop, tag, value); });
  } else if (kDiv) {
    Tensor self = t;
    at::_ops::addcdiv_::call(self, t1, t2, value);
  } else {
    Tensor self = t;
    at::_ops::addcmul_::call(self, t1, t2, value);
  }
}

template <bool kDiv>
Tensor addc_tuple(const Tensor& t, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  if (fast_scalar(value) && fast_tuple(t, {t1, t2})) {
    Tensor out = fresh_like(t);
    run_tuple(out, {t, t1, t2},
              [&](const Loop& loop, auto tag) { addc_kernel<kDiv>(loop, tag, value); });
    return out;
  }
  return kDiv ? at::_ops::addcdiv::call(t, t1, t2, value)
              : at::_ops::addcmul::call(t, t1, t2, value);
}

template <bool kDiv>
void foreach_addc__scalar(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  check_lists(self, t1, t2);
  for (size_t i = 0; i < self.size(); ++i) {
    addc_tuple_<kDiv>(self[i], t1[i], t2[i], value);
  }
}

template <bool kDiv>
std::vector<Tensor> foreach_addc_scalar(TensorList self, TensorList t1, TensorList t2,
                                        const Scalar& value) {
  check_lists(self, t1, t2);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    result.push_back(addc_tuple<kDiv>(self[i], t1[i], t2[i], value));
  }
  return result;
}

template <bool kDiv>
void foreach_addc__scalar_list(TensorList self, TensorList t1, TensorList t2, ScalarList scalars) {
  check_lists(self, t1, t2);
  check_scalars(self, scalars);
  for (size_t i = 0; i < self.size(); ++i) {
    addc_tuple_<kDiv>(self[i], t1[i], t2[i], scalars[i]);
  }
}

template <bool kDiv>
std::vector<Tensor> foreach_addc_scalar_list(TensorList self, TensorList t1, TensorList t2,
                                             ScalarList scalars) {
  check_lists(self, t1, t2);
  check_scalars(self, scalars);
  std::vector<Tensor> result;
  result.reserve(self.size());
  for (size_t i = 0; i < self.size(); ++i) {
    result.push_back(addc_tuple<kDiv>(self[i], t1[i], t2[i], scalars[i]));
  }
  return result;
}

// --- zero_ ------------------------------------------------------------------------------------

void foreach_zero_(TensorList self) {
  check_lists(self);
  for (const Tensor& t : self) {
    if (loops::on_openreg(t) && t.is_contiguous()) {
      // Zero is all-zero bits in every dtype. An empty tensor may have no data
      // at all, and memset on a null pointer is undefined even for 0 bytes.
      if (t.nbytes() > 0) {
        std::memset(t.data_ptr(), 0, t.nbytes());
      }
    } else {
      Tensor s = t;
      at::_ops::zero_::call(s);
    }
  }
}

}  // namespace

// The in-place and functional forms of a foreach operator.
#define OPENREG_FOREACH(m, name, overload, inplace, functional) \
  OPENREG_IMPL(m, #name "_." #overload, inplace);               \
  OPENREG_IMPL(m, #name "." #overload, functional)

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_FOREACH(m, _foreach_add, Scalar, foreach_scalar_<Arith::Add>, foreach_scalar<Arith::Add>);
  OPENREG_FOREACH(m, _foreach_sub, Scalar, foreach_scalar_<Arith::Sub>, foreach_scalar<Arith::Sub>);
  OPENREG_FOREACH(m, _foreach_mul, Scalar, foreach_scalar_<Arith::Mul>, foreach_scalar<Arith::Mul>);
  OPENREG_FOREACH(m, _foreach_div, Scalar, foreach_scalar_<Arith::Div>, foreach_scalar<Arith::Div>);
  OPENREG_FOREACH(m, _foreach_add, ScalarList, foreach_scalar_list_<Arith::Add>,
                  foreach_scalar_list<Arith::Add>);
  OPENREG_FOREACH(m, _foreach_sub, ScalarList, foreach_scalar_list_<Arith::Sub>,
                  foreach_scalar_list<Arith::Sub>);
  OPENREG_FOREACH(m, _foreach_mul, ScalarList, foreach_scalar_list_<Arith::Mul>,
                  foreach_scalar_list<Arith::Mul>);
  OPENREG_FOREACH(m, _foreach_div, ScalarList, foreach_scalar_list_<Arith::Div>,
                  foreach_scalar_list<Arith::Div>);
  OPENREG_FOREACH(m, _foreach_add, List, foreach_list_<Arith::Add>, foreach_list<Arith::Add>);
  OPENREG_FOREACH(m, _foreach_sub, List, foreach_list_<Arith::Sub>, foreach_list<Arith::Sub>);
  OPENREG_FOREACH(m, _foreach_mul, List, foreach_list_no_alpha_<Arith::Mul>,
                  foreach_list_no_alpha<Arith::Mul>);
  OPENREG_FOREACH(m, _foreach_div, List, foreach_list_no_alpha_<Arith::Div>,
                  foreach_list_no_alpha<Arith::Div>);
  OPENREG_FOREACH(m, _foreach_maximum, List, foreach_minmax_<true>, foreach_minmax<true>);
  OPENREG_FOREACH(m, _foreach_minimum, List, foreach_minmax_<false>, foreach_minmax<false>);
  OPENREG_FOREACH(m, _foreach_lerp, Scalar, foreach_lerp__scalar, foreach_lerp_scalar);
  OPENREG_FOREACH(m, _foreach_lerp, List, foreach_lerp__list, foreach_lerp_list);
  OPENREG_FOREACH(m, _foreach_addcmul, Scalar, foreach_addc__scalar<false>,
                  foreach_addc_scalar<false>);
  OPENREG_FOREACH(m, _foreach_addcdiv, Scalar, foreach_addc__scalar<true>,
                  foreach_addc_scalar<true>);
  OPENREG_FOREACH(m, _foreach_addcmul, ScalarList, foreach_addc__scalar_list<false>,
                  foreach_addc_scalar_list<false>);
  OPENREG_FOREACH(m, _foreach_addcdiv, ScalarList, foreach_addc__scalar_list<true>,
                  foreach_addc_scalar_list<true>);
  OPENREG_IMPL(m, "_foreach_sqrt_", foreach_unary_<true>);
  OPENREG_IMPL(m, "_foreach_sqrt", foreach_unary<true>);
  OPENREG_IMPL(m, "_foreach_neg_", foreach_unary_<false>);
  OPENREG_IMPL(m, "_foreach_neg", foreach_unary<false>);
  OPENREG_IMPL(m, "_foreach_zero_", foreach_zero_);
}

}  // namespace openreg
