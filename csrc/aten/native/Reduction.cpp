// Reductions: sum, mean, amax/amin, max/min (full, and over one dim with
// indices), argmax/argmin, var and std, var_mean and std_mean.
//
// Every kernel here reads device memory in place (Note [Device memory is host
// memory]) and follows one plan (`Plan` below). The input is described as
//
//   out[a * K + k] = reduce over r of in[a * sA + r * sR + k * sK]
//
// with the reduced dimensions merged into one (R, sR), and the kept ones into
// an outer (A, sA) and an inner (K, sK) part; the output is contiguous in the
// order of the kept dimensions. When sR == 1 each output reduces a contiguous
// row ("row mode"). When sK == 1 neighbouring outputs are columns of the same
// rows: a chunk of kCols columns is reduced together, one row at a time, which
// vectorises across the columns and needs no copy ("column mode": sum over the
// batch, or over dim 0 of anything contiguous). Any other layout is first made
// contiguous on the device (a native copy) with the reduced dimensions last.
//
// Outputs are spread over threads with at::parallel_for; a single long row
// (a full reduction) is split into fixed-size chunks whose partial results are
// combined in order, so results do not depend on the number of threads.
//
// Precision: float sums are pairwise (row mode) or cascaded (column mode),
// like CPU's cascade sum; integer sums accumulate in int64; var/std take two
// passes (mean, then squared deviations) in double. Indices of max/min/argmax/
// argmin are those of the first maximum, or of the first NaN, as on CPU.
//
// Dtypes: float32, float64, float16, bfloat16, the signed integers, uint8 and
// bool where CPU accepts them (see "dtypes" below for how few loops that takes).
// Anything else (complex, ...) is handed to the CPU fallback (aten/fallback/Fallback.h)
// whole.

#include "aten/native/Common.h"
#include "aten/native/PairwiseSum.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/argmin_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/std_mean_ops.h>
#include <ATen/ops/std_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/var_mean_ops.h>
#include <ATen/ops/var_ops.h>
#include <c10/core/ScalarType.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/FunctionRef.h>

#include <algorithm>
#include <bitset>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace openreg {
namespace {

using at::ScalarType;
using native::check_out;
using native::empty;
using native::grain_rows;
using native::is_floating;
using native::resize_output;
using DimMask = std::bitset<at::dim_bitset_size>;
using Shape = c10::SmallVector<int64_t, 6>;

constexpr int64_t kRowChunk = 65536;  // piece of one long row reduced by one task
constexpr int64_t kCols = 128;        // columns reduced together in column mode
// Independent accumulators in a row loop (kLanesOf, PairwiseSum.h): 128 bytes
// of them, i.e. eight SSE registers, enough to hide the latency of the adds or
// compares.
using native::kLanesOf;
using native::pairwise_sum;

// --- dtypes -------------------------------------------------------------------
//
// The loops are instantiated for few types: float and double; int32 and int64
// for comparisons; every integral type (bool included) for sums, which read
// them as they are. The other native dtypes are converted on the device first
// (exactly, by the vectorised copy kernel), and results converted back:
// float16 and bfloat16 to float, which is what CPU accumulates them in, and
// uint8, int8, int16 and bool to int32 for comparisons. Compile time stays low,
// and the 16-bit floats are faster this way than converted one by one in the
// loops (this file is built without F16C).

template <typename T>
struct Tag {
  using type = T;
};

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

bool is_native_integral(ScalarType t) {
  return t == ScalarType::Byte || t == ScalarType::Char || t == ScalarType::Short ||
         t == ScalarType::Int || t == ScalarType::Long || t == ScalarType::Bool;
}

bool is_native(ScalarType t) {
  return is_floating(t) || is_native_integral(t);
}

// The dtype the float loops compute a floating dtype in.
ScalarType float_compute_type(ScalarType t) {
  return t == ScalarType::Half || t == ScalarType::BFloat16 ? ScalarType::Float : t;
}

// The dtype the comparison loops compute a native dtype in.
ScalarType compared_type(ScalarType t) {
  if (is_floating(t)) {
    return float_compute_type(t);
  }
  return t == ScalarType::Long ? ScalarType::Long : ScalarType::Int;
}

// Calls f(Tag<T>{}) with T the C++ type of `t`, which must be one of Ts: the
// loops are instantiated for those types only.
template <typename... Ts, typename F>
void visit(ScalarType t, F&& f) {
  const bool found = ((t == c10::CppTypeToScalarType<Ts>::value && (f(Tag<Ts>{}), true)) || ...);
  TORCH_INTERNAL_ASSERT(found, "openreg: no reduction loop for ", t);
}

// The float loops: float or double.
template <typename F>
void visit_float(ScalarType t, F&& f) {
  visit<float, double>(t, std::forward<F>(f));
}

// The comparison loops: float, double, int32 or int64.
template <typename F>
void visit_compared(ScalarType t, F&& f) {
  visit<float, double, int32_t, int64_t>(t, std::forward<F>(f));
}

// Integral sums: every integral dtype, bool included.
template <typename F>
void visit_integral(ScalarType t, F&& f) {
  visit<uint8_t, int8_t, int16_t, int32_t, int64_t, bool>(t, std::forward<F>(f));
}

// --- shapes, checks and outputs -------------------------------------------------

// Whether `self` has more dims than a DimMask has bits. Every entry point
// hands such a call to the CPU fallback, which then raises or computes exactly
// as the CPU does (ATen refuses more than 64 dims for a reduction over given
// dims, but reduces all dims of any tensor).
bool beyond_mask(const at::Tensor& self) {
  return self.dim() > static_cast<int64_t>(at::dim_bitset_size);
}

// Reduced dims as a bit mask; no dims (None or []) means all of them, as in ATen.
DimMask make_mask(const at::Tensor& self, at::OptionalIntArrayRef dim) {
  if (dim.has_value() && dim->empty()) {
    return at::dim_list_to_bitset(std::nullopt, self.dim());
  }
  return at::dim_list_to_bitset(dim, self.dim());
}

DimMask single_dim_mask(const at::Tensor& self, std::optional<int64_t> dim) {
  if (!dim.has_value()) {
    return make_mask(self, std::nullopt);
  }
  if (self.dim() == 0) {
    return DimMask();
  }
  // Through dim_list_to_bitset, as ATen: it wraps the dim and, like the CPU,
  // refuses tensors of more than 64 dims (the mask has 64 bits).
  const int64_t d = *dim;
  return at::dim_list_to_bitset(c10::IntArrayRef(d), self.dim());
}

Shape reduced_shape(const at::Tensor& self, const DimMask& mask, bool keepdim) {
  Shape shape;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!mask[d]) {
      shape.push_back(self.size(d));
    } else if (keepdim) {
      shape.push_back(1);
    }
  }
  return shape;
}

// Number of input elements reduced into each output.
int64_t reduced_count(const at::Tensor& self, const DimMask& mask) {
  int64_t n = 1;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (mask[d]) {
      n *= self.size(d);
    }
  }
  return n;
}

at::Tensor new_output(const at::Tensor& self, const Shape& shape, ScalarType dtype) {
  return empty(shape, self.options().dtype(dtype));
}

// Resizes an out= tensor and returns what the kernel should write to,
// contiguously: `out` itself, or a fresh tensor that finish_out copies back.
at::Tensor writable_out(const at::Tensor& self, const at::Tensor& out, const Shape& shape) {
  resize_output(out, shape);
  if (out.is_contiguous() && at::get_overlap_status(out, self) == at::MemOverlapStatus::No) {
    return out;
  }
  return empty(shape, out.options());
}

void finish_out(const at::Tensor& out, const at::Tensor& written) {
  if (!written.is_same(out)) {
    out.copy_(written);
  }
}

// `t` converted on the device to `dtype`, if it is not in it already.
at::Tensor converted(const at::Tensor& t, ScalarType dtype) {
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

// Where a kernel computing in `dtype` writes results meant for `out`: `out`
// itself, or a buffer that finish_out(out, buffer) converts into it.
at::Tensor output_buffer(const at::Tensor& out, ScalarType dtype) {
  return out.scalar_type() == dtype ? out : empty(out.sizes(), out.options().dtype(dtype));
}

// ATen's zero_numel_check_dims: reductions without an identity (max, ...)
// refuse to reduce over an empty dimension.
void check_nonempty_dims(const at::Tensor& self, at::IntArrayRef dims, const char* name) {
  TORCH_CHECK(!dims.empty(), name,
              ": Expected reduction dim to be specified for input.numel() == 0. "
              "Specify the reduction dim with the 'dim' argument.");
  for (const int64_t d : dims) {
    TORCH_CHECK_INDEX(self.size(d) != 0, name, ": Expected reduction dim ", d,
                      " to have non-zero size.");
  }
}

// The same for a single, already wrapped, dim.
void check_nonempty_dim(const at::Tensor& self, int64_t dim, const char* name) {
  if (self.dim() > 0) {
    TORCH_CHECK_INDEX(self.size(dim) != 0, name, ": Expected reduction dim ", dim,
                      " to have non-zero size.");
  }
}

// --- the plan -----------------------------------------------------------------

struct Plan {
  at::Tensor src;  // the tensor the offsets index: the input or a contiguous copy
  int64_t A = 1, R = 1, K = 1;
  int64_t sA = 0, sR = 1, sK = 0;
  bool rows = true;  // row mode (sR == 1); otherwise column mode (sK == 1)

  int64_t outputs() const {
    return A * K;
  }
  // A single long row: worth splitting into chunks.
  bool long_row() const {
    return rows && outputs() == 1 && R >= 2 * kRowChunk;
  }
};

// Merges `dims`, in this order, into one dimension of `t`; false if their
// strides do not nest.
bool merge(const at::Tensor& t, c10::ArrayRef<int64_t> dims, int64_t& size, int64_t& stride) {
  size = 1;
  stride = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = dims[i];
    if (i > 0 && stride != t.stride(d) * t.size(d)) {
      return false;
    }
    size *= t.size(d);
    stride = t.stride(d);
  }
  return true;
}

// `in_order`: keep the reduced dims in their logical order, so that r is the
// row-major index over them (argmax over all dims needs it); otherwise they are
// taken in memory order.
Plan make_plan(const at::Tensor& self, const DimMask& mask, bool in_order) {
  TORCH_INTERNAL_ASSERT(self.numel() > 0);
  Plan p;
  p.src = self;
  Shape kept, red;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.size(d) != 1) {
      (mask[d] ? red : kept).push_back(d);
    }
  }
  if (!in_order) {
    std::stable_sort(red.begin(), red.end(),
                     [&](int64_t a, int64_t b) { return self.stride(a) > self.stride(b); });
  }
  const int64_t m = static_cast<int64_t>(kept.size());
  const c10::ArrayRef<int64_t> k(kept);
  if (merge(self, red, p.R, p.sR)) {
    if (p.R == 1) {
      p.sR = 1;
    }
    if (p.sR == 1) {
      for (int64_t s = m; s >= 0; --s) {
        if (merge(self, k.slice(0, s), p.A, p.sA) && merge(self, k.slice(s), p.K, p.sK)) {
          p.rows = true;
          return p;
        }
      }
    } else {
      for (int64_t s = m - 1; s >= 0; --s) {
        if (merge(self, k.slice(s), p.K, p.sK) && p.sK == 1 &&
            merge(self, k.slice(0, s), p.A, p.sA)) {
          p.rows = false;
          return p;
        }
      }
    }
  }
  // Copy on the device with the kept dims first and the reduced ones last.
  Shape perm;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!mask[d]) {
      perm.push_back(d);
    }
  }
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (mask[d]) {
      perm.push_back(d);
    }
  }
  p.src = self.permute(perm).contiguous();
  p.R = reduced_count(self, mask);
  p.A = self.numel() / p.R;
  p.K = 1;
  p.sA = p.R;
  p.sR = 1;
  p.sK = 0;
  p.rows = true;
  return p;
}

// Row mode: row(o, offset) for every output o, whose row starts at element
// `offset` of p.src. Column mode: cols(o, offset, n) for chunks of n <= kCols
// consecutive outputs, whose first column starts at `offset`.
//
// The threading helpers take function_refs and are not templates: every
// kernel instantiation (dtype x op) shares one copy of at::parallel_for's code,
// which otherwise dominates this file's compile time.
void for_each_output(const Plan& p, c10::function_ref<void(int64_t, int64_t)> row,
                     c10::function_ref<void(int64_t, int64_t, int64_t)> cols) {
  if (p.rows) {
    const int64_t grain = grain_rows(p.R);
    at::parallel_for(0, p.outputs(), grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        row(o, (o / p.K) * p.sA + (o % p.K) * p.sK);
      }
    });
    return;
  }
  const int64_t chunks = (p.K + kCols - 1) / kCols;
  const int64_t grain = grain_rows(p.R * kCols);
  at::parallel_for(0, p.A * chunks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t a = i / chunks;
      const int64_t k0 = (i % chunks) * kCols;
      cols(a * p.K + k0, a * p.sA + k0, std::min(kCols, p.K - k0));
    }
  });
}

// Runs fn(c) for c in [0, chunks), one chunk per task.
void for_each_chunk(int64_t chunks, c10::function_ref<void(int64_t)> fn) {
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      fn(c);
    }
  });
}

// Reduces one long row of n elements in chunks on all threads. part(b, e)
// reduces [b, e); combine(x, y) merges y, the result of a later chunk, into x.
template <typename T, typename Part, typename Combine>
T reduce_long_row(int64_t n, const Part& part, const Combine& combine) {
  const int64_t chunks = (n + kRowChunk - 1) / kRowChunk;
  std::vector<T> partial(chunks);
  for_each_chunk(chunks, [&](int64_t c) {
    partial[c] = part(c * kRowChunk, std::min(n, (c + 1) * kRowChunk));
  });
  T acc = partial[0];
  for (int64_t c = 1; c < chunks; ++c) {
    acc = combine(acc, partial[c]);
  }
  return acc;
}

// --- sum and mean -----------------------------------------------------------------

// Column sums out[k] = sum over r of f(p[r * stride + k]), k < n <= kCols.
// Rows are added four at a time, and partial sums cascade through levels of
// kFan such groups each (CPU's cascade sum), so the rounding error grows with
// log(rows).
template <typename acc_t, typename in_t, typename F>
void column_sum(const in_t* p, int64_t rows, int64_t stride, int64_t n, const F& f, acc_t* out) {
  constexpr int kLevels = 4;
  constexpr int kFan = 16;
  acc_t level[kLevels][kCols];
  int count[kLevels] = {};
  for (int l = 0; l < kLevels; ++l) {
    std::fill_n(level[l], n, acc_t(0));
  }
  for (int64_t r = 0; r < rows; r += 4) {
    const in_t* r0 = p + r * stride;
    if (r + 4 <= rows) {
      const in_t* r1 = r0 + stride;
      const in_t* r2 = r1 + stride;
      const in_t* r3 = r2 + stride;
      for (int64_t k = 0; k < n; ++k) {
        level[0][k] += (f(r0[k]) + f(r1[k])) + (f(r2[k]) + f(r3[k]));
      }
    } else {
      for (int64_t q = r; q < rows; ++q) {
        const in_t* row = p + q * stride;
        for (int64_t k = 0; k < n; ++k) {
          level[0][k] += f(row[k]);
        }
      }
    }
    for (int l = 0; l + 1 < kLevels && ++count[l] == kFan; ++l) {
      count[l] = 0;
      for (int64_t k = 0; k < n; ++k) {
        level[l + 1][k] += level[l][k];
        level[l][k] = acc_t(0);
      }
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    acc_t s = level[0][k];
    for (int l = 1; l < kLevels; ++l) {
      s += level[l][k];
    }
    out[k] = s;
  }
}

// acc_t is float or double for floating inputs, uint64_t (wrapping, like
// int64 on CPU) for integral ones.
template <typename in_t, typename acc_t, typename out_t>
void sum_kernel(const Plan& p, out_t* out, bool mean) {
  const in_t* in = p.src.const_data_ptr<in_t>();
  const auto f = [](in_t v) { return static_cast<acc_t>(v); };
  const auto finish = [&](acc_t s) {
    if constexpr (std::is_floating_point_v<acc_t>) {
      if (mean) {
        s /= static_cast<acc_t>(p.R);
      }
    }
    return static_cast<out_t>(s);
  };
  // Float and double rows take the vectorised row sum: the same bits
  // (Note [Deterministic vector sums] in PairwiseSum.h).
  const auto row_sum = [&](const in_t* q, int64_t n) -> acc_t {
    if constexpr (std::is_same_v<in_t, acc_t> && std::is_floating_point_v<acc_t>) {
      return native::sum_row(q, n);
    } else {
      return pairwise_sum<acc_t>(q, n, f);
    }
  };
  if (p.long_row()) {
    out[0] = finish(reduce_long_row<acc_t>(
        p.R, [&](int64_t b, int64_t e) { return row_sum(in + b, e - b); },
        [](acc_t x, acc_t y) { return x + y; }));
    return;
  }
  for_each_output(
      p, [&](int64_t o, int64_t off) { out[o] = finish(row_sum(in + off, p.R)); },
      [&](int64_t o, int64_t off, int64_t n) {
        acc_t s[kCols];
        column_sum<acc_t>(in + off, p.R, p.sR, n, f, s);
        for (int64_t k = 0; k < n; ++k) {
          out[o + k] = finish(s[k]);
        }
      });
}

bool is_sum_native(ScalarType in, ScalarType out) {
  return is_native(in) && (is_floating(out) || (is_native_integral(out) && out != at::kBool));
}

// Sums (or averages) `self` over `mask` into `out`, contiguous, whose dtype is
// the result dtype.
void sum_into(const at::Tensor& out, const at::Tensor& self, const DimMask& mask, bool mean) {
  if (out.numel() == 0) {
    return;
  }
  if (self.numel() == 0) {
    out.fill_(mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return;
  }
  const ScalarType dtype = out.scalar_type();
  if (is_floating(dtype)) {
    // As on CPU: sum converts the input to the result dtype first, mean
    // straight to the dtype it computes in; 16-bit results are computed in
    // float and rounded once at the end.
    const ScalarType compute = float_compute_type(dtype);
    const at::Tensor in =
        mean ? converted(self, compute) : converted(converted(self, dtype), compute);
    const at::Tensor dst = output_buffer(out, compute);
    const Plan p = make_plan(in, mask, false);
    visit_float(compute, [&](auto tag) {
      using T = typename decltype(tag)::type;
      sum_kernel<T, T, T>(p, dst.mutable_data_ptr<T>(), mean);
    });
    finish_out(out, dst);
    return;
  }
  // Integral results: integral inputs are read as they are (an int64 sum
  // wraps the same way as one in a narrower type), floating ones converted.
  const at::Tensor in = is_native_integral(self.scalar_type()) ? self : converted(self, dtype);
  const at::Tensor dst = output_buffer(out, at::kLong);
  const Plan p = make_plan(in, mask, false);
  visit_integral(in.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    sum_kernel<T, uint64_t, int64_t>(p, dst.mutable_data_ptr<int64_t>(), false);
  });
  finish_out(out, dst);
}

ScalarType sum_dtype(const at::Tensor& self, std::optional<ScalarType> dtype) {
  if (dtype.has_value()) {
    return *dtype;
  }
  return c10::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong
                                                                       : self.scalar_type();
}

at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                   std::optional<ScalarType> dtype) {
  const ScalarType out_dtype = sum_dtype(self, dtype);
  if (beyond_mask(self) || !is_sum_native(self.scalar_type(), out_dtype)) {
    return fallback<at::_ops::sum_dim_IntList>(self, dim, keepdim, dtype);
  }
  const DimMask mask = make_mask(self, dim);
  at::Tensor out = new_output(self, reduced_shape(self, mask, keepdim), out_dtype);
  sum_into(out, self, mask, false);
  return out;
}

at::Tensor sum(const at::Tensor& self, std::optional<ScalarType> dtype) {
  const ScalarType out_dtype = sum_dtype(self, dtype);
  if (beyond_mask(self) || !is_sum_native(self.scalar_type(), out_dtype)) {
    return fallback<at::_ops::sum>(self, dtype);
  }
  const DimMask mask = make_mask(self, std::nullopt);
  at::Tensor out = new_output(self, {}, out_dtype);
  sum_into(out, self, mask, false);
  return out;
}

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<ScalarType> dtype, at::Tensor& out) {
  const ScalarType out_dtype = dtype.value_or(out.scalar_type());
  if (beyond_mask(self) || !is_sum_native(self.scalar_type(), out_dtype)) {
    return fallback<at::_ops::sum_IntList_out>(self, dim, keepdim, dtype, out);
  }
  const DimMask mask = make_mask(self, dim);
  check_out(out, out_dtype, self.device());
  const Shape shape = reduced_shape(self, mask, keepdim);
  const at::Tensor dst = writable_out(self, out, shape);
  sum_into(dst, self, mask, false);
  finish_out(out, dst);
  return out;
}

// ATen's check that mean has a floating (or complex) dtype to compute in.
void check_mean_dtype(const at::Tensor& self, std::optional<ScalarType> dtype) {
  const ScalarType in = dtype.has_value() ? *dtype
                        : c10::isIntegralType(self.scalar_type(), /*includeBool=*/true)
                            ? at::kLong
                            : self.scalar_type();
  TORCH_CHECK(c10::isFloatingType(in) || c10::isComplexType(in),
              "mean(): could not infer output dtype. ", dtype.has_value() ? "Optional" : "Input",
              " dtype must be either a floating point or complex dtype. Got: ",
              dtype.has_value() ? *dtype : self.scalar_type());
}

at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<ScalarType> dtype) {
  check_mean_dtype(self, dtype);
  const ScalarType out_dtype = dtype.value_or(self.scalar_type());
  if (beyond_mask(self) || !is_native(self.scalar_type()) || !is_floating(out_dtype)) {
    return fallback<at::_ops::mean_dim>(self, dim, keepdim, dtype);
  }
  const DimMask mask = make_mask(self, dim);
  at::Tensor out = new_output(self, reduced_shape(self, mask, keepdim), out_dtype);
  sum_into(out, self, mask, true);
  return out;
}

at::Tensor mean(const at::Tensor& self, std::optional<ScalarType> dtype) {
  check_mean_dtype(self, dtype);
  const ScalarType out_dtype = dtype.value_or(self.scalar_type());
  if (beyond_mask(self) || !is_native(self.scalar_type()) || !is_floating(out_dtype)) {
    return fallback<at::_ops::mean>(self, dtype);
  }
  at::Tensor out = new_output(self, {}, out_dtype);
  sum_into(out, self, make_mask(self, std::nullopt), true);
  return out;
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<ScalarType> dtype, at::Tensor& out) {
  check_mean_dtype(self, dtype);
  const ScalarType out_dtype = dtype.value_or(out.scalar_type());
  // An integral out= tensor fails on CPU only after the sum; let it.
  if (beyond_mask(self) || !is_native(self.scalar_type()) || !is_floating(out_dtype)) {
    return fallback<at::_ops::mean_out>(self, dim, keepdim, dtype, out);
  }
  const DimMask mask = make_mask(self, dim);
  check_out(out, out_dtype, self.device());
  const at::Tensor dst = writable_out(self, out, reduced_shape(self, mask, keepdim));
  sum_into(dst, self, mask, true);
  finish_out(out, dst);
  return out;
}

// --- amax, amin, max(), min() ------------------------------------------------------

template <bool kMax, typename T>
bool better(T v, T m) {
  return kMax ? v > m : v < m;
}

// Keeps the larger (kMax) or smaller value; a NaN wins and stays.
template <bool kMax, typename T>
T pick(T v, T m) {
  return (is_nan(v) || better<kMax>(v, m)) ? v : m;
}

// v - v: NaN for a NaN (or an infinity), 0 otherwise; see row_minmax.
template <typename T>
T nan_probe(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v - v;
  } else {
    return T(0);
  }
}

// The max (kMax) or min of n >= 1 contiguous values, or a NaN if there is one.
// The lanes keep the running max with a plain select, which vectorises (a
// NaN test in the same select does not); NaNs are caught by summing v - v,
// and confirmed by a second look at the rare row with a NaN or an infinity.
template <typename T, bool kMax>
T row_minmax(const T* q, int64_t n) {
  constexpr int kLanes = kLanesOf<T>;
  if (n < 2 * kLanes) {  // short rows (the classes of a batch): one plain pass
    T m = q[0];
    for (int64_t i = 1; i < n; ++i) {
      m = pick<kMax>(q[i], m);
    }
    return m;
  }
  T lane[kLanes];
  T probe[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    lane[j] = q[0];
    probe[j] = T(0);
  }
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const T v = q[i + j];
      lane[j] = better<kMax>(v, lane[j]) ? v : lane[j];
      probe[j] += nan_probe(v);
    }
  }
  for (; i < n; ++i) {
    lane[0] = better<kMax>(q[i], lane[0]) ? q[i] : lane[0];
    probe[0] += nan_probe(q[i]);
  }
  T m = lane[0];
  T probes = probe[0];
  for (int j = 1; j < kLanes; ++j) {
    m = better<kMax>(lane[j], m) ? lane[j] : m;
    probes += probe[j];
  }
  if (is_nan(probes)) {
    for (int64_t k = 0; k < n; ++k) {
      if (is_nan(q[k])) {
        return q[k];
      }
    }
  }
  return m;
}

// Column maxima out[k] over rows of q, k < n <= kCols; the same NaN handling.
template <typename T, bool kMax>
void column_minmax(const T* q, int64_t rows, int64_t stride, int64_t n, T* out) {
  T acc[kCols];
  T probe[kCols];
  for (int64_t k = 0; k < n; ++k) {
    acc[k] = q[k];
    probe[k] = nan_probe(q[k]);
  }
  for (int64_t r = 1; r < rows; ++r) {
    const T* row = q + r * stride;
    for (int64_t k = 0; k < n; ++k) {
      const T v = row[k];
      acc[k] = better<kMax>(v, acc[k]) ? v : acc[k];
      probe[k] += nan_probe(v);
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    if (is_nan(probe[k])) {
      for (int64_t r = 0; r < rows; ++r) {
        if (is_nan(q[r * stride + k])) {
          acc[k] = q[r * stride + k];
          break;
        }
      }
    }
    out[k] = acc[k];
  }
}

template <typename T, bool kMax>
void minmax_kernel(const Plan& p, T* out) {
  const T* in = p.src.const_data_ptr<T>();
  if (p.long_row()) {
    out[0] = reduce_long_row<T>(
        p.R, [&](int64_t b, int64_t e) { return row_minmax<T, kMax>(in + b, e - b); },
        [](T x, T y) { return pick<kMax>(y, x); });
    return;
  }
  for_each_output(
      p, [&](int64_t o, int64_t off) { out[o] = row_minmax<T, kMax>(in + off, p.R); },
      [&](int64_t o, int64_t off, int64_t n) {
        column_minmax<T, kMax>(in + off, p.R, p.sR, n, out + o);
      });
}

template <bool kMax>
void minmax_into(const at::Tensor& out, const at::Tensor& self, const DimMask& mask) {
  if (out.numel() == 0) {
    return;
  }
  const ScalarType compute = compared_type(self.scalar_type());
  const at::Tensor in = converted(self, compute);
  const at::Tensor dst = output_buffer(out, compute);
  const Plan p = make_plan(in, mask, false);
  visit_compared(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    minmax_kernel<T, kMax>(p, dst.mutable_data_ptr<T>());
  });
  finish_out(out, dst);
}

template <bool kMax>
at::Tensor amax_amin(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  if (beyond_mask(self) || !is_native(self.scalar_type())) {
    using Op = std::conditional_t<kMax, at::_ops::amax, at::_ops::amin>;
    return fallback<Op>(self, dim, keepdim);
  }
  if (self.numel() == 0) {
    check_nonempty_dims(self, dim, kMax ? "amax()" : "amin()");
  }
  const DimMask mask = make_mask(self, dim);
  at::Tensor out = new_output(self, reduced_shape(self, mask, keepdim), self.scalar_type());
  minmax_into<kMax>(out, self, mask);
  return out;
}

template <bool kMax>
at::Tensor& amax_amin_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim,
                          at::Tensor& out) {
  if (beyond_mask(self) || !is_native(self.scalar_type())) {
    using Op = std::conditional_t<kMax, at::_ops::amax_out, at::_ops::amin_out>;
    return fallback<Op>(self, dim, keepdim, out);
  }
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "Expected the dtype for input and out to match, but got ", self.scalar_type(),
              " for input's dtype and ", out.scalar_type(), " for out's dtype.");
  if (self.numel() == 0) {
    check_nonempty_dims(self, dim, kMax ? "amax()" : "amin()");
  }
  const DimMask mask = make_mask(self, dim);
  check_out(out, self.scalar_type(), self.device());
  const at::Tensor dst = writable_out(self, out, reduced_shape(self, mask, keepdim));
  minmax_into<kMax>(dst, self, mask);
  finish_out(out, dst);
  return out;
}

template <bool kMax>
at::Tensor max_min_all(const at::Tensor& self) {
  if (beyond_mask(self) || !is_native(self.scalar_type())) {
    using Op = std::conditional_t<kMax, at::_ops::max, at::_ops::min>;
    return fallback<Op>(self);
  }
  TORCH_CHECK(self.numel() > 0, kMax ? "max()" : "min()",
              ": Expected reduction dim to be specified for input.numel() == 0. Specify the "
              "reduction dim with the 'dim' argument.");
  at::Tensor out = new_output(self, {}, self.scalar_type());
  minmax_into<kMax>(out, self, make_mask(self, std::nullopt));
  return out;
}

// --- max.dim, min.dim, argmax, argmin ----------------------------------------------

// Whether v, found after best, replaces it: strictly better, or the first NaN.
template <bool kMax, typename T>
bool takes_over(T v, T best) {
  return better<kMax>(v, best) | (is_nan(v) & !is_nan(best));
}

// The value and first index of the max (kMax) or min of n >= 1 contiguous
// values, or of their first NaN: the vectorised row_minmax, then a search.
template <typename T, bool kMax>
std::pair<T, int64_t> row_arg(const T* q, int64_t n) {
  const T m = row_minmax<T, kMax>(q, n);
  int64_t i = 0;
  if (is_nan(m)) {
    while (!is_nan(q[i])) {
      ++i;
    }
  } else {
    while (q[i] != m) {
      ++i;
    }
  }
  return {q[i], i};
}

// The same for columns k < n <= kCols; `values` may be null.
template <typename T, bool kMax>
void column_arg(const T* q, int64_t rows, int64_t stride, int64_t n, T* values, int64_t* indices) {
  T best[kCols];
  int64_t index[kCols];
  for (int64_t k = 0; k < n; ++k) {
    best[k] = q[k];
    index[k] = 0;
  }
  for (int64_t r = 1; r < rows; ++r) {
    const T* row = q + r * stride;
    for (int64_t k = 0; k < n; ++k) {
      const T v = row[k];
      const bool take = takes_over<kMax>(v, best[k]);
      best[k] = take ? v : best[k];
      index[k] = take ? r : index[k];
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    if (values != nullptr) {
      values[k] = best[k];
    }
    indices[k] = index[k];
  }
}

// Writes the index of the max (kMax) or min along the reduced dims, and the
// value itself when `values` is not null.
template <typename T, bool kMax>
void arg_kernel(const Plan& p, T* values, int64_t* indices) {
  using Best = std::pair<T, int64_t>;
  const T* in = p.src.const_data_ptr<T>();
  const auto write = [&](int64_t o, const Best& b) {
    if (values != nullptr) {
      values[o] = b.first;
    }
    indices[o] = b.second;
  };
  if (p.long_row()) {
    const auto part = [&](int64_t b, int64_t e) {
      Best r = row_arg<T, kMax>(in + b, e - b);
      r.second += b;
      return r;
    };
    const auto combine = [](const Best& x, const Best& y) {
      return takes_over<kMax>(y.first, x.first) ? y : x;
    };
    write(0, reduce_long_row<Best>(p.R, part, combine));
    return;
  }
  for_each_output(
      p, [&](int64_t o, int64_t off) { write(o, row_arg<T, kMax>(in + off, p.R)); },
      [&](int64_t o, int64_t off, int64_t n) {
        column_arg<T, kMax>(in + off, p.R, p.sR, n, values == nullptr ? nullptr : values + o,
                            indices + o);
      });
}

// `values` may be undefined (argmax/argmin); both outputs are contiguous.
template <bool kMax>
void arg_into(const at::Tensor& values, const at::Tensor& indices, const at::Tensor& self,
              const DimMask& mask) {
  if (indices.numel() == 0) {
    return;
  }
  const ScalarType compute = compared_type(self.scalar_type());
  const at::Tensor in = converted(self, compute);
  const at::Tensor dst = values.defined() ? output_buffer(values, compute) : values;
  const Plan p = make_plan(in, mask, /*in_order=*/true);
  visit_compared(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    arg_kernel<T, kMax>(p, dst.defined() ? dst.mutable_data_ptr<T>() : nullptr,
                        indices.mutable_data_ptr<int64_t>());
  });
  if (values.defined()) {
    finish_out(values, dst);
  }
}

template <bool kMax>
std::tuple<at::Tensor, at::Tensor> max_min_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  if (beyond_mask(self) || !is_native(self.scalar_type())) {
    using Op = std::conditional_t<kMax, at::_ops::max_dim, at::_ops::min_dim>;
    return fallback<Op>(self, dim, keepdim);
  }
  dim = c10::maybe_wrap_dim(dim, self.dim());
  check_nonempty_dim(self, dim, kMax ? "max()" : "min()");
  const DimMask mask = single_dim_mask(self, dim);
  const Shape shape = reduced_shape(self, mask, keepdim);
  at::Tensor values = new_output(self, shape, self.scalar_type());
  at::Tensor indices = new_output(self, shape, at::kLong);
  arg_into<kMax>(values, indices, self, mask);
  return {values, indices};
}

template <bool kMax>
std::tuple<at::Tensor&, at::Tensor&> max_min_dim_out(const at::Tensor& self, int64_t dim,
                                                     bool keepdim, at::Tensor& values,
                                                     at::Tensor& indices) {
  if (beyond_mask(self) || !is_native(self.scalar_type())) {
    using Op = std::conditional_t<kMax, at::_ops::max_dim_max, at::_ops::min_dim_min>;
    return fallback<Op>(self, dim, keepdim, values, indices);
  }
  dim = c10::maybe_wrap_dim(dim, self.dim());
  check_nonempty_dim(self, dim, kMax ? "max()" : "min()");
  const DimMask mask = single_dim_mask(self, dim);
  const Shape shape = reduced_shape(self, mask, keepdim);
  check_out(values, self.scalar_type(), self.device());
  check_out(indices, at::kLong, self.device());
  const at::Tensor v = writable_out(self, values, shape);
  at::Tensor i = writable_out(self, indices, shape);
  if (at::get_overlap_status(i, v) != at::MemOverlapStatus::No) {
    i = empty(shape, indices.options());
  }
  arg_into<kMax>(v, i, self, mask);
  finish_out(values, v);
  finish_out(indices, i);
  return {values, indices};
}

// ATen's check_argmax_argmin.
void check_arg(const char* name, const at::Tensor& self, std::optional<int64_t> dim) {
  TORCH_CHECK(!self.is_complex(), name, ": does not support complex input");
  TORCH_CHECK(self.scalar_type() != at::kBool, name, ": does not support bool input");
  if (dim.has_value()) {
    check_nonempty_dim(self, c10::maybe_wrap_dim(*dim, self.dim()), name);
  } else {
    TORCH_CHECK_INDEX(self.numel() != 0, name,
                      ": Expected reduction dim to be specified for input.numel() == 0.");
  }
}

template <bool kMax>
at::Tensor argmax_argmin(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  check_arg(kMax ? "argmax()" : "argmin()", self, dim);
  if (beyond_mask(self) || !is_native(self.scalar_type())) {
    using Op = std::conditional_t<kMax, at::_ops::argmax, at::_ops::argmin>;
    return fallback<Op>(self, dim, keepdim);
  }
  const DimMask mask = single_dim_mask(self, dim);
  at::Tensor out = new_output(self, reduced_shape(self, mask, keepdim), at::kLong);
  arg_into<kMax>(at::Tensor(), out, self, mask);
  return out;
}

template <bool kMax>
at::Tensor& argmax_argmin_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                              at::Tensor& out) {
  check_arg(kMax ? "argmax()" : "argmin()", self, dim);
  if (beyond_mask(self) || !is_native(self.scalar_type())) {
    using Op = std::conditional_t<kMax, at::_ops::argmax_out, at::_ops::argmin_out>;
    return fallback<Op>(self, dim, keepdim, out);
  }
  const DimMask mask = single_dim_mask(self, dim);
  check_out(out, at::kLong, self.device());
  const at::Tensor dst = writable_out(self, out, reduced_shape(self, mask, keepdim));
  arg_into<kMax>(at::Tensor(), dst, self, mask);
  finish_out(out, dst);
  return out;
}

// --- var and std ---------------------------------------------------------------------

// Two passes in double: the mean, then the sum of squared deviations (m2).
// `means`, when not null, receives each output's mean (var_mean, std_mean).
template <typename T>
void var_kernel(const Plan& p, T* out, T* means, double correction, bool take_sqrt) {
  const T* in = p.src.const_data_ptr<T>();
  const double n = static_cast<double>(p.R);
  const double divisor = std::max(0.0, n - correction);
  const auto finish = [&](double m2) {
    const double var = m2 / divisor;
    return static_cast<T>(take_sqrt ? std::sqrt(var) : var);
  };
  const auto value = [](T v) { return static_cast<double>(v); };
  const auto add = [](double x, double y) { return x + y; };
  if (p.long_row()) {
    const double mean =
        reduce_long_row<double>(
            p.R, [&](int64_t b, int64_t e) { return pairwise_sum<double>(in + b, e - b, value); },
            add) /
        n;
    if (means != nullptr) {
      means[0] = static_cast<T>(mean);
    }
    const auto dev = [mean](T v) {
      const double d = static_cast<double>(v) - mean;
      return d * d;
    };
    out[0] = finish(reduce_long_row<double>(
        p.R, [&](int64_t b, int64_t e) { return pairwise_sum<double>(in + b, e - b, dev); }, add));
    return;
  }
  for_each_output(
      p,
      [&](int64_t o, int64_t off) {
        const T* q = in + off;
        const double mean = pairwise_sum<double>(q, p.R, value) / n;
        if (means != nullptr) {
          means[o] = static_cast<T>(mean);
        }
        out[o] = finish(pairwise_sum<double>(q, p.R, [mean](T v) {
          const double d = static_cast<double>(v) - mean;
          return d * d;
        }));
      },
      [&](int64_t o, int64_t off, int64_t cols) {
        const T* q = in + off;
        double mean[kCols];
        double m2[kCols] = {};
        column_sum<double>(q, p.R, p.sR, cols, value, mean);
        for (int64_t k = 0; k < cols; ++k) {
          mean[k] /= n;
        }
        for (int64_t r = 0; r < p.R; ++r) {
          const T* rowp = q + r * p.sR;
          for (int64_t k = 0; k < cols; ++k) {
            const double d = static_cast<double>(rowp[k]) - mean[k];
            m2[k] += d * d;
          }
        }
        for (int64_t k = 0; k < cols; ++k) {
          out[o + k] = finish(m2[k]);
          if (means != nullptr) {
            means[o + k] = static_cast<T>(mean[k]);
          }
        }
      });
}

// `name`: "std and var", "var_mean" or "std_mean", as the CPU's message says.
void check_var_dtype(const at::Tensor& self, const char* name = "std and var") {
  TORCH_CHECK(c10::isFloatingType(self.scalar_type()) || c10::isComplexType(self.scalar_type()),
              name, " only support floating point and complex dtypes");
}

// var or std of `self` into `out`, and, when `means` is defined, the mean into it.
void var_into(const char* name, const at::Tensor& out, const at::Tensor& means,
              const at::Tensor& self, const DimMask& mask,
              const std::optional<c10::Scalar>& correction, bool take_sqrt) {
  const double c = correction.has_value() ? correction->toDouble() : 1.0;
  const int64_t per_output = out.numel() == 0 ? 0 : self.numel() / out.numel();
  if (static_cast<double>(per_output) - c <= 0) {
    TORCH_WARN(name,
               "(): degrees of freedom is <= 0. Correction should be strictly less than the "
               "reduction factor (input numel divided by output numel).");
  }
  if (out.numel() == 0) {
    return;
  }
  if (self.numel() == 0) {
    out.fill_(std::numeric_limits<double>::quiet_NaN());
    if (means.defined()) {
      means.fill_(std::numeric_limits<double>::quiet_NaN());
    }
    return;
  }
  const ScalarType compute = float_compute_type(self.scalar_type());
  const at::Tensor in = converted(self, compute);
  const at::Tensor dst = output_buffer(out, compute);
  const at::Tensor mean_dst = means.defined() ? output_buffer(means, compute) : at::Tensor();
  const Plan p = make_plan(in, mask, false);
  visit_float(compute, [&](auto tag) {
    using T = typename decltype(tag)::type;
    var_kernel<T>(p, dst.mutable_data_ptr<T>(),
                  means.defined() ? mean_dst.mutable_data_ptr<T>() : nullptr, c, take_sqrt);
  });
  finish_out(out, dst);
  if (means.defined()) {
    finish_out(means, mean_dst);
  }
}

template <bool kStd>
at::Tensor var_std(const at::Tensor& self, at::OptionalIntArrayRef dim,
                   const std::optional<c10::Scalar>& correction, bool keepdim) {
  if (beyond_mask(self) || !is_floating(self.scalar_type())) {
    check_var_dtype(self);
    using Op = std::conditional_t<kStd, at::_ops::std_correction, at::_ops::var_correction>;
    return fallback<Op>(self, dim, correction, keepdim);
  }
  const DimMask mask = make_mask(self, dim);
  at::Tensor out = new_output(self, reduced_shape(self, mask, keepdim), self.scalar_type());
  var_into(kStd ? "std" : "var", out, at::Tensor(), self, mask, correction, kStd);
  return out;
}

// var_mean and std_mean: both results from one kernel, each in the input's
// dtype and the reduced shape.
template <bool kStd>
std::tuple<at::Tensor, at::Tensor> var_std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                const std::optional<c10::Scalar>& correction,
                                                bool keepdim) {
  if (beyond_mask(self) || !is_floating(self.scalar_type())) {
    check_var_dtype(self, kStd ? "std_mean" : "var_mean");
    using Op =
        std::conditional_t<kStd, at::_ops::std_mean_correction, at::_ops::var_mean_correction>;
    return fallback<Op>(self, dim, correction, keepdim);
  }
  const DimMask mask = make_mask(self, dim);
  const Shape shape = reduced_shape(self, mask, keepdim);
  at::Tensor out = new_output(self, shape, self.scalar_type());
  at::Tensor means = new_output(self, shape, self.scalar_type());
  var_into(kStd ? "std_mean" : "var_mean", out, means, self, mask, correction, kStd);
  return {out, means};
}

template <bool kStd>
at::Tensor& var_std_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                        const std::optional<c10::Scalar>& correction, bool keepdim,
                        at::Tensor& out) {
  // A result dtype other than the input's takes CPU's mixed-precision paths.
  if (beyond_mask(self) || !is_floating(self.scalar_type()) ||
      out.scalar_type() != self.scalar_type()) {
    check_var_dtype(self);
    using Op = std::conditional_t<kStd, at::_ops::std_correction_out, at::_ops::var_correction_out>;
    return fallback<Op>(self, dim, correction, keepdim, out);
  }
  const DimMask mask = make_mask(self, dim);
  check_out(out, self.scalar_type(), self.device());
  const at::Tensor dst = writable_out(self, out, reduced_shape(self, mask, keepdim));
  var_into(kStd ? "std" : "var", dst, at::Tensor(), self, mask, correction, kStd);
  finish_out(out, dst);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "sum", sum);
  OPENREG_IMPL(m, "sum.dim_IntList", sum_dim);
  OPENREG_IMPL(m, "sum.IntList_out", sum_out);
  OPENREG_IMPL(m, "mean", mean);
  OPENREG_IMPL(m, "mean.dim", mean_dim);
  OPENREG_IMPL(m, "mean.out", mean_out);
  OPENREG_IMPL(m, "amax", amax_amin<true>);
  OPENREG_IMPL(m, "amax.out", amax_amin_out<true>);
  OPENREG_IMPL(m, "amin", amax_amin<false>);
  OPENREG_IMPL(m, "amin.out", amax_amin_out<false>);
  OPENREG_IMPL(m, "max", max_min_all<true>);
  OPENREG_IMPL(m, "min", max_min_all<false>);
  OPENREG_IMPL(m, "max.dim", max_min_dim<true>);
  OPENREG_IMPL(m, "max.dim_max", max_min_dim_out<true>);
  OPENREG_IMPL(m, "min.dim", max_min_dim<false>);
  OPENREG_IMPL(m, "min.dim_min", max_min_dim_out<false>);
  OPENREG_IMPL(m, "argmax", argmax_argmin<true>);
  OPENREG_IMPL(m, "argmax.out", argmax_argmin_out<true>);
  OPENREG_IMPL(m, "argmin", argmax_argmin<false>);
  OPENREG_IMPL(m, "argmin.out", argmax_argmin_out<false>);
  OPENREG_IMPL(m, "var.correction", var_std<false>);
  OPENREG_IMPL(m, "var.correction_out", var_std_out<false>);
  OPENREG_IMPL(m, "std.correction", var_std<true>);
  OPENREG_IMPL(m, "std.correction_out", var_std_out<true>);
  OPENREG_IMPL(m, "var_mean.correction", var_std_mean<false>);
  OPENREG_IMPL(m, "std_mean.correction", var_std_mean<true>);
}

}  // namespace openreg
