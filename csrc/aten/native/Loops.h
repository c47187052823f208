#pragma once

// Shared helpers for openreg's hand-written elementwise kernels
// (csrc/aten/native/{Binary,Unary,Activation,Ternary,Foreach}.cpp).
//
// A kernel is written once as a functor over C++ values (`op(a, b)`), and run
// by a `Loop` in one of two ways:
//  - contiguous operands of one shape (the common case in training): a plain
//    loop over the arrays, which the compiler vectorises, split over threads
//    with at::parallel_for for big tensors. No TensorIterator is built.
//  - anything else (broadcasting, strides, CPU scalars): an at::TensorIterator
//    handles shapes and strides, and its for_each runs our row loops.
// Kernels compute on device memory directly: Note [Device memory is host
// memory] in aten/HostView.h.
//
// Note [Dtypes in openreg elementwise kernels]
// TensorIterator inserts dtype casts only when the common device is CPU, so on
// openreg every operand reaches the loop in its own dtype. `run_elementwise`
// therefore expects inputs already converted to the dtype the kernel reads
// (`to_dtype`, a native device copy) and computes into a temporary, then
// copies, when the output has another dtype (out= of another dtype, or
// in-place on a tensor of a wider dtype). 16-bit floats are computed in float
// (at::opmath_type), as on CPU. A 0-dim CPU tensor operand ("CPU scalar") is
// read once by the kernel and folded into the functor (`read_scalar`); its
// data pointer is ordinary host memory. Inputs whose result dtype a kernel
// does not compute (complex, ...) go to the CPU fallback (aten/fallback/Fallback.h).

#include "aten/native/Common.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/DynamicCast.h>
#include <c10/core/ScalarType.h>

#include <cstring>
#include <initializer_list>
#include <tuple>
#include <type_traits>
#include <utility>

namespace openreg::loops {

static_assert(native::kGrainSize == at::internal::GRAIN_SIZE);

using c10::ScalarType;

// --- dtypes ------------------------------------------------------------------

template <typename T>
struct Tag {
  using type = T;
};

// The C++ type of a `Tag` passed to a dispatch lambda: `using T = TYPE_OF(tag);`
#define OPENREG_TYPE_OF(tag) typename std::decay_t<decltype(tag)>::type

template <typename T>
using opmath_t = at::opmath_type<T>;

using native::is_floating;

inline bool is_integral(ScalarType t, bool include_bool) {
  switch (t) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Short:
    case ScalarType::Int:
    case ScalarType::Long:
      return true;
    case ScalarType::Bool:
      return include_bool;
    default:
      return false;
  }
}

// Every dtype an openreg elementwise kernel may compute in.
inline bool is_native(ScalarType t) {
  return is_floating(t) || is_integral(t, /*include_bool=*/true);
}

// Note [Narrow integers]
// uint8, int8 and int16 are computed in int64 and narrowed when the result is
// written (`compute_dtype`, run_elementwise): the results are the same, since
// integer arithmetic wraps modulo 2^n either way, and no loop is compiled for
// three more dtypes. dispatch_integral runs the int64 loop for them, callers
// convert inputs with to_compute(t, dtype) and Scalar arguments with
// scalar_to<T>(s, dtype); Loop::run checks that element sizes match.
inline ScalarType compute_dtype(ScalarType t) {
  const bool narrow = t == ScalarType::Byte || t == ScalarType::Char || t == ScalarType::Short;
  return narrow ? ScalarType::Long : t;
}

// Calls f(Tag<T>{}) for the C++ type T of `t`; `t` must be one of the dtypes
// named by the function.
template <typename F>
void dispatch_floating(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float:
      return f(Tag<float>{});
    case ScalarType::Double:
      return f(Tag<double>{});
    case ScalarType::Half:
      return f(Tag<c10::Half>{});
    case ScalarType::BFloat16:
      return f(Tag<c10::BFloat16>{});
    default:
      TORCH_INTERNAL_ASSERT(false, "openreg: no floating kernel for ", t);
  }
}

// Integral dtypes; narrow ones run the int64 loop (Note [Narrow integers]).
template <typename F>
void dispatch_integral(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Short:
      return f(Tag<int64_t>{});
    case ScalarType::Int:
      return f(Tag<int32_t>{});
    case ScalarType::Long:
      return f(Tag<int64_t>{});
    default:
      TORCH_INTERNAL_ASSERT(false, "openreg: no integral kernel for ", t);
  }
}

// Floating, integral and bool.
template <typename F>
void dispatch_all(ScalarType t, F&& f) {
  if (t == ScalarType::Bool) {
    return f(Tag<bool>{});
  }
  if (is_floating(t)) {
    return dispatch_floating(t, std::forward<F>(f));
  }
  return dispatch_integral(t, std::forward<F>(f));
}

// Floating and integral, without bool.
template <typename F>
void dispatch_numeric(ScalarType t, F&& f) {
  if (is_floating(t)) {
    return dispatch_floating(t, std::forward<F>(f));
  }
  return dispatch_integral(t, std::forward<F>(f));
}

// --- scalars and conversions ---------------------------------------------------

// A 0-dim CPU tensor mixed with openreg tensors (a Python number, or a
// tensor like torch.tensor(2.0)).
inline bool is_cpu_scalar(const at::Tensor& t) {
  return t.defined() && t.dim() == 0 && t.device().is_cpu();
}

// The value of a CPU scalar converted to T.
template <typename T>
T read_scalar(const at::Tensor& t) {
  return c10::fetch_and_cast<T>(t.scalar_type(), t.const_data_ptr());
}

// `t` in `dtype`: itself if it already is, else a copy (native on openreg).
inline at::Tensor to_dtype(const at::Tensor& t, ScalarType dtype) {
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

// An input of an operator whose common dtype is `dtype`, in the dtype its
// kernel reads: compute_dtype(dtype). A narrow integer operand goes through
// `dtype` first, so that a scalar out of its range wraps as on CPU.
inline at::Tensor to_compute(const at::Tensor& t, ScalarType dtype) {
  const ScalarType compute = compute_dtype(dtype);
  if (compute != dtype && t.scalar_type() != dtype) {
    return to_dtype(t.to(dtype), compute);
  }
  return to_dtype(t, compute);
}

// A Scalar argument (alpha, a bound, an exponent) of an operator computing in
// `dtype`, as the C++ type T of its kernel: converted (checked, like the CPU
// kernels' Scalar::to) to dtype's own type first, then to T.
template <typename T>
T scalar_to(const c10::Scalar& s, ScalarType dtype) {
  switch (dtype) {
    case ScalarType::Byte:
      return static_cast<T>(s.to<uint8_t>());
    case ScalarType::Char:
      return static_cast<T>(s.to<int8_t>());
    case ScalarType::Short:
      return static_cast<T>(s.to<int16_t>());
    default:
      return s.to<T>();
  }
}

inline bool on_openreg(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

// A scalar operand: a CPU scalar tensor or a c10::Scalar argument. `to<T>()`
// converts like a copy would (no overflow check), as the CPU kernels see a
// wrapped scalar after TensorIterator's cast.
class ScalarArg {
 public:
  explicit ScalarArg(const at::Tensor& t) : dtype_(t.scalar_type()), tensor_(t.const_data_ptr()) {}

  explicit ScalarArg(const c10::Scalar& s) {
    if (s.isBoolean()) {
      dtype_ = ScalarType::Bool;
      b_ = s.toBool();
    } else if (s.isIntegral(/*includeBool=*/false)) {
      dtype_ = ScalarType::Long;
      i_ = s.toLong();
    } else {
      TORCH_INTERNAL_ASSERT(s.isFloatingPoint(), "openreg: complex scalar in a real kernel");
      dtype_ = ScalarType::Double;
      d_ = s.toDouble();
    }
  }

  template <typename T>
  T to() const {
    const void* p = tensor_;
    if (p == nullptr) {
      p = dtype_ == ScalarType::Bool   ? static_cast<const void*>(&b_)
          : dtype_ == ScalarType::Long ? static_cast<const void*>(&i_)
                                       : static_cast<const void*>(&d_);
    }
    return c10::fetch_and_cast<T>(dtype_, p);
  }

 private:
  ScalarType dtype_ = ScalarType::Undefined;
  const void* tensor_ = nullptr;
  double d_ = 0;
  int64_t i_ = 0;
  bool b_ = false;
};

// A Python number as a CPU scalar tensor (a "wrapped number", which type
// promotion treats as weakly typed), for kernels that take scalars as tensors.
inline at::Tensor wrapped_scalar(const c10::Scalar& s) {
  at::Tensor t = at::scalar_tensor(s, at::TensorOptions().dtype(s.type()));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

// at::result_type, without the dispatcher call in the common cases.
inline ScalarType result_type(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() ? a.scalar_type() : at::result_type(a, b);
}

inline ScalarType result_type(const at::Tensor& a, const c10::Scalar& s) {
  const ScalarType t = a.scalar_type();
  const bool keeps_dtype = (is_floating(t) && !s.isComplex()) ||
                           (is_integral(t, false) && (s.isIntegral(false) || s.isBoolean())) ||
                           (t == ScalarType::Bool && s.isBoolean());
  return keeps_dtype ? t : at::result_type(a, s);
}

// Integer inputs of "float" operators (div, exp, sigmoid, ...) compute in the
// default dtype.
inline ScalarType promote_to_float(ScalarType t) {
  return c10::isIntegralType(t, /*includeBool=*/true) ? c10::get_default_dtype_as_scalartype() : t;
}

// --- row loops ---------------------------------------------------------------

namespace detail {

template <typename T>
C10_ALWAYS_INLINE T load(const char* p) {
  return *reinterpret_cast<const T*>(p);
}

// Note [In-place rows]
// An in-place op (add_, relu_, ...) runs the same row loops with its output
// operand pointing at one of its inputs. That is safe as written: element i
// is read and then written at the same address, and no element reads another
// element's output. So the pointers carry no __restrict__ (which would promise
// that they never meet): the compiler guards the vectorised loop with a
// run-time check of how they overlap, and whichever loop runs computes each
// element on its own, so the result is the CPU's. Outputs that overlap an input
// only partly, where the order of element writes would show, never get here:
// TensorIterator's overlap checks reject them first, as on the CPU.

// out[i] = op(in[i]...) over n contiguous elements: the loop the compiler
// vectorises (Note [In-place rows]).
template <typename out_t, typename... in_t, typename Op, size_t... I>
C10_ALWAYS_INLINE void contiguous_row(char* const* data, int64_t n, const Op& op,
                                      std::index_sequence<I...>) {
  out_t* out = reinterpret_cast<out_t*>(data[0]);
  const std::tuple<const in_t*...> in(reinterpret_cast<const in_t*>(data[I + 1])...);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = op(std::get<I>(in)[i]...);
  }
}

template <typename out_t, typename... in_t, typename Op, size_t... I>
C10_ALWAYS_INLINE void strided_row(char* const* data, const int64_t* strides, int64_t n,
                                   const Op& op, std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<out_t*>(data[0] + i * strides[0]) =
        op(load<in_t>(data[I + 1] + i * strides[I + 1])...);
  }
}

template <typename out_t, typename... in_t, size_t... I>
C10_ALWAYS_INLINE bool is_contiguous_row(const int64_t* strides, std::index_sequence<I...>) {
  return strides[0] == static_cast<int64_t>(sizeof(out_t)) &&
         ((strides[I + 1] == static_cast<int64_t>(sizeof(in_t))) && ...);
}

// One row of n elements with byte strides `strides` (operand 0 is the
// output).
template <typename out_t, typename... in_t, typename Op>
C10_ALWAYS_INLINE void row(char* const* data, const int64_t* strides, int64_t n, const Op& op) {
  using Seq = std::index_sequence_for<in_t...>;
  if (is_contiguous_row<out_t, in_t...>(strides, Seq{})) {
    contiguous_row<out_t, in_t...>(data, n, op, Seq{});
  } else {
    strided_row<out_t, in_t...>(data, strides, n, op, Seq{});
  }
}

}  // namespace detail

// Calls chunk(begin, end) over [0, n): inline below the grain size, else
// split over threads. Not a template, so it is compiled once.
inline void parallel_chunks(int64_t n, c10::function_ref<void(int64_t, int64_t)> chunk) {
  if (n < at::internal::GRAIN_SIZE) {
    chunk(0, n);
  } else {
    at::parallel_for(0, n, at::internal::GRAIN_SIZE, chunk);
  }
}

// A row loop with its functor type erased: the only code compiled per
// kernel. The 2-d iteration and the threading around it (below) are
// compiled once per file, whatever the kernel.
using RowFn = void (*)(char* const* data, const int64_t* strides, int64_t n, const void* op);

// Output and inputs of one kernel, at most.
constexpr int kMaxOperands = 4;

// The functor is copied: its captured scalars then cannot alias the output,
// so the compiler keeps them in registers and vectorises the row.
template <typename Op, typename out_t, typename... in_t>
void row_fn(char* const* data, const int64_t* strides, int64_t n, const void* op) {
  const Op local = *static_cast<const Op*>(op);
  detail::row<out_t, in_t...>(data, strides, n, local);
}

// The row compiled for AVX2 and AVX-512 too: Note [SIMD clones] in Common.h.
template <typename Op, typename out_t, typename... in_t>
OPENREG_SIMD_CLONES void row_fn_simd(char* const* data, const int64_t* strides, int64_t n,
                                     const void* op) {
  const Op local = *static_cast<const Op*>(op);
  detail::row<out_t, in_t...>(data, strides, n, local);
}

// Runs a row function over every element of a built iterator.
inline void iterate(at::TensorIteratorBase& iter, RowFn fn, const void* op) {
  const int ntensors = iter.ntensors();
  iter.for_each([=](char** data, const int64_t* strides, int64_t size0, int64_t size1) {
    char* ptrs[kMaxOperands];
    for (int k = 0; k < ntensors; ++k) {
      ptrs[k] = data[k];
    }
    const int64_t* outer = strides + ntensors;
    for (int64_t j = 0; j < size1; ++j) {
      if (j > 0) {
        for (int k = 0; k < ntensors; ++k) {
          ptrs[k] += outer[k];
        }
      }
      fn(ptrs, strides, size0, op);
    }
  });
}

// Runs a row function over n contiguous elements; base[k] is operand k's
// data and sizes[k] its element size.
inline void apply_contiguous(int64_t n, int ntensors, char* const* base, const int64_t* sizes,
                             RowFn fn, const void* op) {
  parallel_chunks(n, [=](int64_t begin, int64_t end) {
    char* data[kMaxOperands];
    for (int k = 0; k < ntensors; ++k) {
      data[k] = base[k] + begin * sizes[k];
    }
    fn(data, sizes, end - begin, op);
  });
}

// Where a kernel's loop runs: contiguous arrays or a TensorIterator. Kernels
// call `loop.run<out_t, in_t...>(op)` and need not know which.
class Loop {
 public:
  explicit Loop(at::TensorIteratorBase& iter) : iter_(&iter), ntensors_(iter.ntensors()) {
    TORCH_INTERNAL_ASSERT(ntensors_ <= kMaxTensors);
    for (int k = 0; k < ntensors_; ++k) {
      itemsize_[k] = iter.element_size(k);
    }
  }

  Loop(int64_t n, const at::Tensor& out, std::initializer_list<at::Tensor> inputs)
      : n_(n), ntensors_(1 + static_cast<int>(inputs.size())) {
    TORCH_INTERNAL_ASSERT(ntensors_ <= kMaxTensors);
    data_[0] = static_cast<char*>(out.data_ptr());
    itemsize_[0] = out.element_size();
    int k = 1;
    for (const at::Tensor& t : inputs) {
      itemsize_[k] = t.element_size();
      data_[k++] = const_cast<char*>(static_cast<const char*>(t.const_data_ptr()));
    }
  }

  template <typename out_t, typename... in_t, typename Op>
  void run(const Op& op) const {
    const int64_t sizes[] = {static_cast<int64_t>(sizeof(out_t)),
                             static_cast<int64_t>(sizeof(in_t))...};
    run_rows(&row_fn<Op, out_t, in_t...>, &op, sizes, 1 + static_cast<int>(sizeof...(in_t)));
  }

  // As run, with the row compiled for AVX2 and AVX-512 too (Note [SIMD
  // clones] in Common.h); it triples the row's code.
  template <typename out_t, typename... in_t, typename Op>
  void run_simd(const Op& op) const {
    const int64_t sizes[] = {static_cast<int64_t>(sizeof(out_t)),
                             static_cast<int64_t>(sizeof(in_t))...};
    run_rows(&row_fn_simd<Op, out_t, in_t...>, &op, sizes, 1 + static_cast<int>(sizeof...(in_t)));
  }

  // run_simd for rows of float and double, run for the other types: the hot
  // arithmetic kernels (add, mul, div, relu, ...). Their rows are memory
  // bound only once data leaves the caches; on a few MiB they run at the
  // width of their vectors. A 1 Mi-float x.mul_(s), which allocates nothing
  // so that the loop is all there is, took 3.8 times CPU's time on one
  // thread in SSE2 (4 floats an instruction, against AVX-512's 16). Their
  // integer and 16-bit rows stay compiled once.
  template <typename out_t, typename... in_t, typename Op>
  void run_vec(const Op& op) const {
    if constexpr (std::is_floating_point_v<out_t> && (std::is_floating_point_v<in_t> && ...)) {
      run_simd<out_t, in_t...>(op);
    } else {
      run<out_t, in_t...>(op);
    }
  }

 private:
  // The part of run() that does not depend on the kernel: compiled once.
  C10_NOINLINE void run_rows(RowFn fn, const void* op, const int64_t* sizes, int ntensors) const {
    TORCH_INTERNAL_ASSERT(ntensors == ntensors_);
    for (int k = 0; k < ntensors_; ++k) {
      TORCH_INTERNAL_ASSERT(sizes[k] == itemsize_[k], "openreg: operand ", k, " has ", itemsize_[k],
                            "-byte elements, the kernel reads ", sizes[k]);
    }
    if (iter_ != nullptr) {
      iterate(*iter_, fn, op);
    } else {
      apply_contiguous(n_, ntensors_, data_, sizes, fn, op);
    }
  }

  static constexpr int kMaxTensors = kMaxOperands;
  at::TensorIteratorBase* iter_ = nullptr;
  int64_t n_ = 0;
  int ntensors_ = 0;
  char* data_[kMaxTensors] = {};
  int64_t itemsize_[kMaxTensors] = {};
};

// --- vectorisable math --------------------------------------------------------------
// Note [Vectorisable math]
// libm's expf and erff are scalar calls, so a loop that calls them is never
// vectorised. These float versions use only arithmetic and selects:
//  - exp: exp(x) = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2) / 2
//    (ln 2 split in two for an exact reduction), e^r by its Taylor series to
//    degree 7 (truncation below 1e-8), 2^n built in the exponent bits in two
//    halves so that results down to denormals and up to overflow come out
//    right. Within 2 ulp of the correctly rounded value.
//  - erf, from exp(-z^2): the Abramowitz and Stegun formula 7.1.26,
//    |error| <= 1.5e-7, the approximation ATen's own vectorised erf uses.

namespace vmath {

C10_ALWAYS_INLINE float exp(float x) {
  // Clamp (NaN to the low end) so that n stays a small integer; the ends
  // still overflow to inf and underflow to 0 through the scaling.
  float xc = x > -104.0f ? x : -104.0f;
  xc = xc < 89.0f ? xc : 89.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * 1.44269504088896341f + kRound) - kRound;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t k = static_cast<int32_t>(n);
  const int32_t k1 = k >> 1;
  const int32_t k2 = k - k1;
  float s1;
  float s2;
  const int32_t b1 = (k1 + 127) << 23;
  const int32_t b2 = (k2 + 127) << 23;
  std::memcpy(&s1, &b1, sizeof(float));
  std::memcpy(&s2, &b2, sizeof(float));
  const float y = p * s1 * s2;
  return x != x ? x : y;
}

// erf(z), given e = exp(-z * z).
C10_ALWAYS_INLINE float erf_from_exp(float z, float e) {
  const float a = z < 0.0f ? -z : z;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float r = 1.0f - poly * e;
  return z < 0.0f ? -r : r;
}

}  // namespace vmath

// --- running an elementwise kernel ---------------------------------------------

enum class Mode { Functional, InPlace, Out };

inline void check_can_cast(ScalarType result, const at::Tensor& out) {
  TORCH_CHECK(c10::canCast(result, out.scalar_type()), "result type ", result,
              " can't be cast to the desired output type ", out.scalar_type());
}

// The out= tensor of an operator whose CPU kernel requires every operand to
// have one dtype (ATen's unary ops: neg, abs, sign, gelu, silu): a copy of
// another dtype is refused, with TensorIterator's message.
inline void check_same_dtype_out(const at::Tensor& out, ScalarType dtype) {
  TORCH_CHECK(out.scalar_type() == dtype, "Found dtype ", out.scalar_type(), " but expected ",
              dtype);
}

// TensorIterator's overlap rules (no internal overlap in the output, no
// partial overlap between output and an input), checked on the operator's own
// arguments before an input is converted to its compute dtype: a converted
// copy overlaps nothing, so run_elementwise alone would miss them.
inline void check_overlap(const at::Tensor& out, std::initializer_list<at::Tensor> inputs) {
  if (!out.defined()) {
    return;
  }
  at::assert_no_internal_overlap(out);
  for (const at::Tensor& t : inputs) {
    if (t.defined()) {
      at::assert_no_partial_overlap(out, t);
    }
  }
}

namespace detail {

// An out= tensor must be on the device of the openreg operands (TensorIterator
// would accept a CPU output next to 0-dim operands).
inline void check_out_device(const at::Tensor& out, std::initializer_list<at::Tensor> inputs) {
  for (const at::Tensor& t : inputs) {
    if (on_openreg(t)) {
      TORCH_CHECK(out.device() == t.device(),
                  "Expected all tensors to be on the same device, but found at least two "
                  "devices, ",
                  t.device(), " and ", out.device(), "!");
      return;
    }
  }
}

// Resizes an out= tensor to the shape of `like` with ATen's out= rules (the
// deprecation warning for non-empty outputs, the overlap checks): building a
// TensorIterator does exactly that, and avoids ATen/native/Resize.h, which
// costs seconds of compile time in every file that includes it.
inline void resize_output_like(const at::Tensor& out, const at::Tensor& like) {
  at::TensorIteratorConfig()
      .check_all_same_dtype(false)
      .add_output(out)
      .add_const_input(like)
      .build();
}

inline bool fast_path_ok(const at::Tensor& out, std::initializer_list<at::Tensor> inputs) {
  const at::Tensor& first = *inputs.begin();
  if (!on_openreg(first) || !first.is_contiguous()) {
    return false;
  }
  for (const at::Tensor& t : inputs) {
    if (t.device() != first.device() || !t.sizes().equals(first.sizes()) || !t.is_contiguous()) {
      return false;
    }
  }
  if (out.defined()) {
    if (out.device() != first.device() || !out.sizes().equals(first.sizes()) ||
        !out.is_contiguous()) {
      return false;
    }
    for (const at::Tensor& t : inputs) {
      at::assert_no_partial_overlap(out, t);
    }
  }
  return true;
}

}  // namespace detail

// Runs an elementwise kernel with TensorIterator semantics (broadcasting,
// out= resizing, overlap checks, in-place shape rules) and returns the result.
//   out:      undefined (Mode::Functional), self (Mode::InPlace) or out=
//   result:   the operator's result dtype
//   written:  the dtype the kernel writes (result, or a wider compute dtype);
//             an output of another dtype gets a copy
//   inputs:   tensors in the dtypes the kernel reads (Note [Dtypes in openreg
//             elementwise kernels])
//   kernel:   kernel(loop) runs loop.run<out_t, in_t...>(op)
// Not a template: compiled once, whatever the kernel.
C10_NOINLINE inline at::Tensor run_elementwise(const at::Tensor& out, Mode mode, ScalarType result,
                                               ScalarType written,
                                               std::initializer_list<at::Tensor> inputs,
                                               c10::function_ref<void(const Loop&)> kernel) {
  if (mode == Mode::Out) {
    detail::check_out_device(out, inputs);
  }
  if (out.defined() && (out.scalar_type() != written || written != result)) {
    check_can_cast(result, out);
    // The temporary holds `result`, not `written`: a narrow integer result
    // wraps to its own width before it is widened into `out`, as on CPU
    // (uint8 1 - 3 is 254, never -2), even into an int64 `out`.
    at::Tensor tmp =
        run_elementwise(at::Tensor(), Mode::Functional, result, written, inputs, kernel);
    if (mode == Mode::InPlace) {
      TORCH_CHECK(tmp.sizes().equals(out.sizes()), "output with shape ", out.sizes(),
                  " doesn't match the broadcast shape ", tmp.sizes());
    } else {
      detail::resize_output_like(out, tmp);
    }
    out.copy_(tmp);
    return out;
  }
  if (!out.defined() && written != result) {
    return run_elementwise(at::Tensor(), Mode::Functional, written, written, inputs, kernel)
        .to(result);
  }
  if (detail::fast_path_ok(out, inputs)) {
    const at::Tensor& first = *inputs.begin();
    at::Tensor result_tensor =
        out.defined() ? out : at::empty(first.sizes(), first.options().dtype(written));
    kernel(Loop(first.numel(), result_tensor, inputs));
    return result_tensor;
  }
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(true)
      .allow_cpu_scalars(true)
      .check_all_same_dtype(false)
      .resize_outputs(mode != Mode::InPlace);
  if (!out.defined()) {
    config.declare_static_dtype(written);
  }
  config.add_output(out);
  for (const at::Tensor& t : inputs) {
    config.add_const_input(t);
  }
  at::TensorIterator iter = config.build();
  kernel(Loop(iter));
  return iter.output();
}

// The common case: the kernel writes compute_dtype(result) (Note [Narrow
// integers]).
inline at::Tensor run_elementwise(const at::Tensor& out, Mode mode, ScalarType result,
                                  std::initializer_list<at::Tensor> inputs,
                                  c10::function_ref<void(const Loop&)> kernel) {
  return run_elementwise(out, mode, result, compute_dtype(result), inputs, kernel);
}

// A unary operator with result dtype `dtype`: kernel(loop) over self read as
// compute_dtype(dtype) (Note [Narrow integers]).
inline at::Tensor run_unary(const at::Tensor& self, const at::Tensor& out, Mode mode,
                            ScalarType dtype, c10::function_ref<void(const Loop&)> kernel) {
  check_overlap(out, {self});
  return run_elementwise(out, mode, dtype, {to_compute(self, dtype)}, kernel);
}

}  // namespace openreg::loops
