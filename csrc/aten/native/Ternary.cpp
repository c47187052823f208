// Elementwise operators with three operands: where, masked_fill_, lerp,
// addcmul and addcdiv. How a kernel runs, and how dtypes are handled:
// Loops.h.

#include "aten/native/Loops.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/native/Lerp.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/where_ops.h>

#include <cstring>

namespace openreg {
namespace {

using at::Tensor;
using c10::Scalar;
using c10::ScalarType;
using loops::Loop;
using loops::Mode;

// --- where, masked_fill_: they only move elements -----------------------------------
// Only the element size matters, so one loop per size serves every dtype of
// that size (complex64 included).

template <typename F>
bool dispatch_bits(int64_t itemsize, F&& f) {
  switch (itemsize) {
    case 1:
      f(loops::Tag<uint8_t>{});
      return true;
    case 2:
      f(loops::Tag<uint16_t>{});
      return true;
    case 4:
      f(loops::Tag<uint32_t>{});
      return true;
    case 8:
      f(loops::Tag<uint64_t>{});
      return true;
    default:
      return false;
  }
}

bool bits_native(ScalarType dtype) {
  const int64_t size = static_cast<int64_t>(c10::elementSize(dtype));
  return size == 1 || size == 2 || size == 4 || size == 8;
}

Tensor bool_condition(const Tensor& condition) {
  if (condition.scalar_type() == ScalarType::Byte) {
    TORCH_WARN_ONCE(
        "where received a uint8 condition tensor. This behavior is deprecated and will be removed "
        "in a future version of PyTorch. Use a boolean condition instead.");
    return condition.to(ScalarType::Bool);
  }
  TORCH_CHECK(condition.scalar_type() == ScalarType::Bool,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  return condition;
}

Tensor where_run(const Tensor& condition, const Tensor& self, const Tensor& other,
                 const Tensor& out, ScalarType dtype) {
  loops::check_overlap(out, {condition, self, other});
  const Tensor c = bool_condition(condition);
  const Tensor a = loops::to_dtype(self, dtype);
  const Tensor b = loops::to_dtype(other, dtype);
  const Mode mode = out.defined() ? Mode::Out : Mode::Functional;
  return loops::run_elementwise(out, mode, dtype, dtype, {c, a, b}, [dtype](const Loop& loop) {
    dispatch_bits(c10::elementSize(dtype), [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      loop.run<T, bool, T, T>([](bool c, T x, T y) { return c ? x : y; });
    });
  });
}

Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other) {
  const ScalarType dtype = loops::result_type(self, other);
  if (!bits_native(dtype)) {
    return fallback<at::_ops::where_self>(condition, self, other);
  }
  return where_run(condition, self, other, Tensor(), dtype);
}

Tensor& where_out(const Tensor& condition, const Tensor& self, const Tensor& other, Tensor& out) {
  const ScalarType dtype = loops::result_type(self, other);
  TORCH_CHECK(out.scalar_type() == dtype, "Expected out type to be ", dtype, " but got ",
              out.scalar_type());
  if (!bits_native(dtype)) {
    return fallback<at::_ops::where_self_out>(condition, self, other, out);
  }
  where_run(condition, self, other, out, dtype);
  return out;
}

Tensor& masked_fill_run(Tensor& self, const Tensor& mask, const Scalar& value) {
  TORCH_CHECK(mask.scalar_type() == ScalarType::Bool,
              "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  at::assert_no_partial_overlap(self, mask);
  const Tensor m = mask.expand(self.sizes());
  // The value in self's dtype, converted as CPU's fill does, then as raw bits.
  const Tensor v = at::scalar_tensor(value, at::TensorOptions().dtype(self.scalar_type()));
  const ScalarType dtype = self.scalar_type();
  loops::run_elementwise(self, Mode::InPlace, dtype, dtype, {self, m}, [&](const Loop& loop) {
    dispatch_bits(self.element_size(), [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      T bits;
      std::memcpy(&bits, v.const_data_ptr(), sizeof(T));
      loop.run<T, T, bool>([bits](T x, bool fill) { return fill ? bits : x; });
    });
  });
  return self;
}

Tensor& masked_fill__scalar(Tensor& self, const Tensor& mask, const Scalar& value) {
  if (!bits_native(self.scalar_type())) {
    return fallback<at::_ops::masked_fill__Scalar>(self, mask, value);
  }
  return masked_fill_run(self, mask, value);
}

Tensor& masked_fill__tensor(Tensor& self, const Tensor& mask, const Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  if (!bits_native(self.scalar_type())) {
    return fallback<at::_ops::masked_fill__Tensor>(self, mask, value);
  }
  return masked_fill_run(self, mask, value.item());
}

// --- lerp -----------------------------------------------------------------------------
// ATen's formula (at::native::lerp), in opmath precision; floating dtypes.

void check_lerp(const Tensor& self, const Tensor& end) {
  TORCH_CHECK(self.dtype() == end.dtype(), "expected dtype ", self.dtype(),
              " for `end` but got dtype ", end.dtype());
}

Tensor lerp_scalar_run(const Tensor& self, const Tensor& end, const Scalar& weight,
                       const Tensor& out, Mode mode) {
  check_lerp(self, end);
  const ScalarType dtype = self.scalar_type();
  return loops::run_elementwise(out, mode, dtype, {self, end}, [&](const Loop& loop) {
    loops::dispatch_floating(dtype, [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      using acc = loops::opmath_t<T>;
      const acc w = weight.to<acc>();
      loop.run<T, T, T>(
          [w](T x, T y) { return static_cast<T>(at::native::lerp<acc, acc>(x, y, w)); });
    });
  });
}

Tensor lerp_tensor_run(const Tensor& self, const Tensor& end, const Tensor& weight,
                       const Tensor& out, Mode mode) {
  check_lerp(self, end);
  TORCH_CHECK(self.dtype() == weight.dtype(), "expected dtype ", self.dtype(),
              " for `weight` but got dtype ", weight.dtype());
  const ScalarType dtype = self.scalar_type();
  return loops::run_elementwise(out, mode, dtype, {self, end, weight}, [&](const Loop& loop) {
    loops::dispatch_floating(dtype, [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      using acc = loops::opmath_t<T>;
      loop.run<T, T, T, T>(
          [](T x, T y, T w) { return static_cast<T>(at::native::lerp<acc, acc>(x, y, w)); });
    });
  });
}

Tensor lerp_scalar(const Tensor& self, const Tensor& end, const Scalar& weight) {
  if (!loops::is_floating(self.scalar_type())) {
    return fallback<at::_ops::lerp_Scalar>(self, end, weight);
  }
  return lerp_scalar_run(self, end, weight, Tensor(), Mode::Functional);
}

Tensor& lerp__scalar(Tensor& self, const Tensor& end, const Scalar& weight) {
  if (!loops::is_floating(self.scalar_type())) {
    return fallback<at::_ops::lerp__Scalar>(self, end, weight);
  }
  lerp_scalar_run(self, end, weight, self, Mode::InPlace);
  return self;
}

Tensor& lerp_scalar_out(const Tensor& self, const Tensor& end, const Scalar& weight, Tensor& out) {
  if (!loops::is_floating(self.scalar_type())) {
    return fallback<at::_ops::lerp_Scalar_out>(self, end, weight, out);
  }
  lerp_scalar_run(self, end, weight, out, Mode::Out);
  return out;
}

Tensor lerp_tensor(const Tensor& self, const Tensor& end, const Tensor& weight) {
  if (!loops::is_floating(self.scalar_type())) {
    return fallback<at::_ops::lerp_Tensor>(self, end, weight);
  }
  return lerp_tensor_run(self, end, weight, Tensor(), Mode::Functional);
}

Tensor& lerp__tensor(Tensor& self, const Tensor& end, const Tensor& weight) {
  if (!loops::is_floating(self.scalar_type())) {
    return fallback<at::_ops::lerp__Tensor>(self, end, weight);
  }
  lerp_tensor_run(self, end, weight, self, Mode::InPlace);
  return self;
}

Tensor& lerp_tensor_out(const Tensor& self, const Tensor& end, const Tensor& weight, Tensor& out) {
  if (!loops::is_floating(self.scalar_type())) {
    return fallback<at::_ops::lerp_Tensor_out>(self, end, weight, out);
  }
  lerp_tensor_run(self, end, weight, out, Mode::Out);
  return out;
}

// --- addcmul, addcdiv -------------------------------------------------------------------
// self + value * t1 * t2 and self + value * t1 / t2, in the promoted dtype,
// with `value` in opmath precision (float for 16-bit types), as on CPU.

ScalarType promoted(const Tensor& a, const Tensor& b, const Tensor& c) {
  if (a.scalar_type() == b.scalar_type() && a.scalar_type() == c.scalar_type()) {
    return a.scalar_type();
  }
  return at::native::result_type({a, b, c});
}

template <bool kDiv>
Tensor addc_run(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value,
                const Tensor& out, Mode mode, ScalarType dtype) {
  loops::check_overlap(out, {self, t1, t2});
  const Tensor a = loops::to_compute(self, dtype);
  const Tensor b = loops::to_compute(t1, dtype);
  const Tensor c = loops::to_compute(t2, dtype);
  return loops::run_elementwise(out, mode, dtype, {a, b, c}, [&](const Loop& loop) {
    auto body = [&](auto tag) {
      using T = OPENREG_TYPE_OF(tag);
      using acc = loops::opmath_t<T>;
      const acc v = loops::scalar_to<acc>(value, dtype);
      loop.run<T, T, T, T>([v](T x, T y, T z) {
        if constexpr (kDiv) {
          return static_cast<T>(static_cast<acc>(x) +
                                v * static_cast<acc>(y) / static_cast<acc>(z));
        } else {
          return static_cast<T>(static_cast<acc>(x) +
                                v * static_cast<acc>(y) * static_cast<acc>(z));
        }
      });
    };
    if constexpr (kDiv) {
      loops::dispatch_floating(dtype, body);
    } else {
      loops::dispatch_numeric(dtype, body);
    }
  });
}

// addcmul computes floating and integral dtypes, addcdiv floating ones (it
// rejects integer division, as on CPU).
template <bool kDiv>
bool addc_native(const Tensor& t1, const Tensor& t2, ScalarType dtype) {
  if constexpr (kDiv) {
    TORCH_CHECK(!(c10::isIntegralType(t1.scalar_type(), /*includeBool=*/true) &&
                  c10::isIntegralType(t2.scalar_type(), /*includeBool=*/true)),
                "Integer division with addcdiv is no longer supported, and in a future release "
                "addcdiv will perform a true division of tensor1 and tensor2. The historic "
                "addcdiv behavior can be implemented as (input + value * torch.trunc(tensor1 / "
                "tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / "
                "tensor2) for float inputs. The future addcdiv behavior is just the latter "
                "implementation: (input + value * tensor1 / tensor2), for all dtypes.");
    return loops::is_floating(dtype);
  }
  return loops::is_native(dtype) && dtype != ScalarType::Bool;
}

template <bool kDiv, typename Op>
Tensor addc(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  const ScalarType dtype = promoted(self, t1, t2);
  if (!addc_native<kDiv>(t1, t2, dtype)) {
    return fallback<Op>(self, t1, t2, value);
  }
  return addc_run<kDiv>(self, t1, t2, value, Tensor(), Mode::Functional, dtype);
}

template <bool kDiv, typename Op>
Tensor& addc_(Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  const ScalarType dtype = promoted(self, t1, t2);
  if (!addc_native<kDiv>(t1, t2, dtype)) {
    return fallback<Op>(self, t1, t2, value);
  }
  addc_run<kDiv>(self, t1, t2, value, self, Mode::InPlace, dtype);
  return self;
}

template <bool kDiv, typename Op>
Tensor& addc_out(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value,
                 Tensor& out) {
  const ScalarType dtype = promoted(self, t1, t2);
  if (!addc_native<kDiv>(t1, t2, dtype)) {
    return fallback<Op>(self, t1, t2, value, out);
  }
  addc_run<kDiv>(self, t1, t2, value, out, Mode::Out, dtype);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "where.self", where);
  OPENREG_IMPL(m, "where.self_out", where_out);
  OPENREG_IMPL(m, "masked_fill_.Scalar", masked_fill__scalar);
  OPENREG_IMPL(m, "masked_fill_.Tensor", masked_fill__tensor);

  OPENREG_IMPL(m, "lerp.Scalar", lerp_scalar);
  OPENREG_IMPL(m, "lerp_.Scalar", lerp__scalar);
  OPENREG_IMPL(m, "lerp.Scalar_out", lerp_scalar_out);
  OPENREG_IMPL(m, "lerp.Tensor", lerp_tensor);
  OPENREG_IMPL(m, "lerp_.Tensor", lerp__tensor);
  OPENREG_IMPL(m, "lerp.Tensor_out", lerp_tensor_out);

  OPENREG_IMPL(m, "addcmul", (addc<false, at::_ops::addcmul>));
  OPENREG_IMPL(m, "addcmul_", (addc_<false, at::_ops::addcmul_>));
  OPENREG_IMPL(m, "addcmul.out", (addc_out<false, at::_ops::addcmul_out>));
  OPENREG_IMPL(m, "addcdiv", (addc<true, at::_ops::addcdiv>));
  OPENREG_IMPL(m, "addcdiv_", (addc_<true, at::_ops::addcdiv_>));
  OPENREG_IMPL(m, "addcdiv.out", (addc_out<true, at::_ops::addcdiv_out>));
}

}  // namespace openreg
