// Softmax and log-softmax along one dimension, forward and backward.
//
// The input is viewed as [outer, n, inner] around the softmax dimension (n
// elements). Two loop shapes cover every case:
//   - inner == 1 (the last dimension, the common case): one contiguous row of
//     n elements at a time;
//   - inner > 1: a block of up to kBlock columns at a time, walking the n
//     rows of the block so that every memory access is contiguous.
// 16-bit types compute in float (at::opmath_type), as on CPU. Results are
// contiguous, like CPU's. Other dtypes go to the CPU fallback.
//
// Speed: the float loops are written so that the compiler vectorizes them
// (branch-free inline helpers, independent accumulators), and are compiled
// for AVX-512, AVX2 and baseline x86-64, picked when the library loads
// (OPENREG_SIMD_CLONES): CPU's own kernels use AVX-512 on such machines.

#include "aten/native/Common.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorUtils.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/macros/Macros.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace openreg {
namespace {

using native::empty;
using native::grain_rows;
using native::into_out;
using native::is_floating;
using native::resize_output;

// Sizes of the [outer, n, inner] view of `t` around `dim` (a 0-dim tensor is
// one element).
struct Split {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
};

Split split_at(const at::Tensor& t, int64_t dim) {
  Split s;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim) {
      s.outer *= t.size(d);
    } else if (d == dim) {
      s.n = t.size(d);
    } else {
      s.inner *= t.size(d);
    }
  }
  return s;
}

constexpr int64_t kBlock = 64;

// --- vectorizable building blocks ------------------------------------------------
// Always inlined (a call inside a loop stops vectorization) and branch-free:
// GCC does not vectorize these loops with a ?: select in them, so selects are
// bit masks or std::max on integers (floats through their bit patterns).

// c ? a : b without a branch.
C10_ALWAYS_INLINE int32_t select(bool c, int32_t a, int32_t b) {
  const int32_t mask = -static_cast<int32_t>(c);
  return (mask & a) | (~mask & b);
}

// A float's bits as an int32 that orders like the float (for non-NaN values),
// and back (the map is its own inverse).
C10_ALWAYS_INLINE int32_t order_key(float v) {
  int32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b ^ ((b >> 31) & 0x7fffffff);
}

C10_ALWAYS_INLINE float from_order_key(int32_t k) {
  const int32_t b = k ^ ((k >> 31) & 0x7fffffff);
  float v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

C10_ALWAYS_INLINE float vmax(float a, float b) {
  return from_order_key(std::max(order_key(a), order_key(b)));
}

C10_ALWAYS_INLINE double vmax(double a, double b) {
  return b > a ? b : a;
}

// exp(x) for float within about 1.2 ulp, and exact at the edges: exp(-inf) = 0,
// exp(+inf) = inf, exp(nan) = nan, denormal results below exp(-87.3).
// x = n ln2 + r with |r| <= ln2/2; exp(r) by a degree-7 polynomial; 2^n
// applied as two normal powers of two so that no step under- or overflows
// early.
C10_ALWAYS_INLINE float vexp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln2 = kLn2Hi + kLn2Lo, kLn2Hi exact in 9 bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Clamp x to [-104, 89] (exp(-104) rounds to 0, exp(89) overflows), NaN
  // passing through, on the bits: |x| as an int orders like |x|.
  int32_t b;
  std::memcpy(&b, &x, sizeof(b));
  const int32_t mag = b & 0x7fffffff;
  const bool finite_or_inf = mag <= 0x7f800000;
  const int32_t minus_104 = static_cast<int32_t>(0xc2d00000);
  const int32_t plus_89 = 0x42b20000;
  b = select((b < 0) & (mag > 0x42d00000) & finite_or_inf, minus_104, b);
  b = select((b >= 0) & (mag > plus_89) & finite_or_inf, plus_89, b);
  std::memcpy(&x, &b, sizeof(x));
  const float t = x * kLog2e + kRound;
  const float n = t - kRound;
  int32_t ni;
  std::memcpy(&ni, &t, sizeof(ni));
  ni -= 0x4B400000;  // the bits of kRound: ni == n
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t n1 = ni >> 1;
  const int32_t bits1 = (n1 + 127) << 23;
  const int32_t bits2 = (ni - n1 + 127) << 23;
  float scale1;
  float scale2;
  std::memcpy(&scale1, &bits1, sizeof(scale1));
  std::memcpy(&scale2, &bits2, sizeof(scale2));
  return y * scale1 * scale2;
}

C10_ALWAYS_INLINE double vexp(double x) {
  return std::exp(x);
}

C10_ALWAYS_INLINE int32_t bits_of(float v) {
  int32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

C10_ALWAYS_INLINE float float_of(int32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

// log(x) for positive normal floats (and NaN) within about 0.75 ulp:
// x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a polynomial in m - 1.
C10_ALWAYS_INLINE float vlog(float x) {
  const int32_t b = bits_of(x);
  const int32_t m_bits = (b & 0x007fffff) | 0x3f000000;  // x = m 2^e, m in [0.5, 1)
  const bool small = m_bits < 0x3f3504f3;                // m < sqrt(1/2): use 2m, e - 1
  const int32_t e = ((b >> 23) & 0xff) - 126 - static_cast<int32_t>(small);
  const float m = float_of(m_bits);
  const float f = float_of(select(small, bits_of(m + m - 1.0f), bits_of(m - 1.0f)));
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  const float fe = static_cast<float>(e);
  float y = p * f * z;
  y += -2.12194440e-4f * fe;  // ln2 = 0.693359375 - 2.12194440e-4, as in vexp
  y += -0.5f * z;
  const float r = (f + y) + 0.693359375f * fe;
  const bool nan = (b & 0x7fffffff) > 0x7f800000;
  return float_of(select(nan, b, bits_of(r)));
}

C10_ALWAYS_INLINE double vlog(double x) {
  return std::log(x);
}

constexpr int64_t kLanes = 16;  // independent accumulators: vectorizable reductions

// Combines kLanes accumulators pairwise in log2(kLanes) vector steps.
template <typename A, class Op>
C10_ALWAYS_INLINE A tree_reduce(A* acc, const Op& op) {
  static_assert(kLanes == 16);
  for (int64_t k = 0; k < 8; ++k) {
    acc[k] = op(acc[k], acc[k + 8]);
  }
  for (int64_t k = 0; k < 4; ++k) {
    acc[k] = op(acc[k], acc[k + 4]);
  }
  for (int64_t k = 0; k < 2; ++k) {
    acc[k] = op(acc[k], acc[k + 2]);
  }
  return op(acc[0], acc[1]);
}

// Reduces f(j) for j in [0, n), n >= 1, with `op`.
template <typename A, class F, class Op>
C10_ALWAYS_INLINE A lane_reduce(int64_t n, A init, const F& f, const Op& op) {
  A acc[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) {
    acc[k] = init;
  }
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      acc[k] = op(acc[k], f(j + k));
    }
  }
  for (; j < n; ++j) {
    acc[0] = op(acc[0], f(j));
  }
  return tree_reduce(acc, op);
}

// NaN needs no care in maxima: it reaches every output through the sum of
// exponentials. Float maxima compare order keys: GCC vectorizes std::max on
// integers.
C10_ALWAYS_INLINE float row_max(const float* x, int64_t n) {
  int32_t acc[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) {
    acc[k] = order_key(x[0]);
  }
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      acc[k] = std::max(acc[k], order_key(x[j + k]));
    }
  }
  for (; j < n; ++j) {
    acc[0] = std::max(acc[0], order_key(x[j]));
  }
  return from_order_key(tree_reduce(acc, [](int32_t a, int32_t b) { return std::max(a, b); }));
}

C10_ALWAYS_INLINE double row_max(const double* x, int64_t n) {
  return lane_reduce(
      n, x[0], [&](int64_t j) { return x[j]; }, [](double a, double b) { return vmax(a, b); });
}

template <typename A, class F>
C10_ALWAYS_INLINE A row_sum(int64_t n, const F& f) {
  return lane_reduce(n, A(0), f, [](A a, A b) { return a + b; });
}

template <typename T, typename A>
void convert(const T* from, A* to, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    to[j] = static_cast<A>(from[j]);
  }
}

// A scratch buffer of n elements, on the stack when small.
template <typename A>
class Scratch {
 public:
  explicit Scratch(int64_t n) {
    if (n > kStack) {
      heap_.resize(n);
    }
  }
  A* data() {
    return heap_.empty() ? stack_ : heap_.data();
  }

 private:
  static constexpr int64_t kStack = 512;
  A stack_[kStack];
  std::vector<A> heap_;
};

// --- forward ---------------------------------------------------------------

// out[j] = exp(x[j] - shift) for j in [0, n), the last n % kLanes padded to
// kLanes so that the tail is vectorized too. out may be x. The body is one
// plain loop, which GCC vectorizes as a loop, with vexp's constants
// broadcast once before it; written kLanes at a time, it was vectorized
// block by block, broadcasting every constant again for each block.
C10_ALWAYS_INLINE void exp_shifted(const float* x, float shift, float* out, int64_t n) {
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; ++i) {
    out[i] = vexp(x[i] - shift);
  }
  const int64_t j = body;
  if (j < n) {
    float tail[kLanes] = {};
    std::memcpy(tail, x + j, (n - j) * sizeof(float));
    for (int64_t k = 0; k < kLanes; ++k) {
      tail[k] = vexp(tail[k] - shift);
    }
    std::memcpy(out + j, tail, (n - j) * sizeof(float));
  }
}

C10_ALWAYS_INLINE void exp_shifted(const double* x, double shift, double* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    out[j] = vexp(x[j] - shift);
  }
}

// Rows of n >= 1 elements, a block of kRows at a time so that the per-row
// log (or reciprocal) is one vectorized loop over the block. `out` may be
// `in`; `scratch` holds n elements.
constexpr int64_t kRows = 16;

template <typename A, bool Log>
C10_ALWAYS_INLINE void softmax_forward_rows(const A* in, A* out, A* scratch, int64_t rows,
                                            int64_t n) {
  A max[kRows];
  A sum[kRows];
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
    const int64_t count = std::min(kRows, rows - r0);
    for (int64_t r = 0; r < count; ++r) {
      const A* x = in + (r0 + r) * n;
      A* e = Log ? scratch : out + (r0 + r) * n;  // log-softmax still needs x
      const A m = row_max(x, n);
      max[r] = m;
      exp_shifted(x, m, e, n);
      sum[r] = row_sum<A>(n, [&](int64_t j) { return e[j]; });
    }
    for (int64_t r = 0; r < count; ++r) {
      sum[r] = Log ? vlog(sum[r]) : A(1) / sum[r];
    }
    for (int64_t r = 0; r < count; ++r) {
      const A* x = in + (r0 + r) * n;
      A* y = out + (r0 + r) * n;
      const A m = max[r];
      const A s = sum[r];
      for (int64_t j = 0; j < n; ++j) {
        if constexpr (Log) {
          y[j] = x[j] - m - s;
        } else {
          y[j] *= s;
        }
      }
    }
  }
}

OPENREG_SIMD_CLONES void softmax_forward_rows_f32(const float* in, float* out, float* scratch,
                                                  int64_t rows, int64_t n, bool log) {
  if (log) {
    softmax_forward_rows<float, true>(in, out, scratch, rows, n);
  } else {
    softmax_forward_rows<float, false>(in, out, scratch, rows, n);
  }
}

// Rows [begin, end) of n elements.
template <typename T, bool Log>
void forward_rows_any(const T* in, T* out, int64_t begin, int64_t end, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    Scratch<float> scratch(n);
    softmax_forward_rows_f32(in + begin * n, out + begin * n, scratch.data(), end - begin, n, Log);
  } else if constexpr (std::is_same_v<T, double>) {
    Scratch<double> scratch(n);
    softmax_forward_rows<double, Log>(in + begin * n, out + begin * n, scratch.data(), end - begin,
                                      n);
  } else {  // 16-bit: through float rows, a block at a time
    Scratch<float> buf((kRows + 1) * n);
    float* rows_f = buf.data() + n;
    for (int64_t r0 = begin; r0 < end; r0 += kRows) {
      const int64_t count = std::min(kRows, end - r0);
      convert(in + r0 * n, rows_f, count * n);
      softmax_forward_rows_f32(rows_f, rows_f, buf.data(), count, n, Log);
      convert(rows_f, out + r0 * n, count * n);
    }
  }
}

// Column blocks: tasks [begin, end) of outer * ceil(inner / kBlock).
template <typename T, bool Log>
C10_ALWAYS_INLINE void forward_blocks(const T* in, T* out, const Split& s, int64_t begin,
                                      int64_t end) {
  using A = at::opmath_type<T>;
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  A max[kBlock];
  A sum[kBlock];
  for (int64_t task = begin; task < end; ++task) {
    const int64_t o = task / blocks;
    const int64_t i0 = (task % blocks) * kBlock;
    const int64_t len = std::min(kBlock, s.inner - i0);
    const T* x = in + o * s.n * s.inner + i0;
    T* y = out + o * s.n * s.inner + i0;
    for (int64_t i = 0; i < len; ++i) {
      max[i] = static_cast<A>(x[i]);
      sum[i] = 0;
    }
    for (int64_t d = 1; d < s.n; ++d) {
      const T* xr = x + d * s.inner;
      for (int64_t i = 0; i < len; ++i) {
        max[i] = vmax(max[i], static_cast<A>(xr[i]));
      }
    }
    for (int64_t d = 0; d < s.n; ++d) {
      const T* xr = x + d * s.inner;
      for (int64_t i = 0; i < len; ++i) {
        sum[i] += vexp(static_cast<A>(xr[i]) - max[i]);
      }
    }
    for (int64_t i = 0; i < len; ++i) {
      sum[i] = Log ? std::log(sum[i]) : A(1) / sum[i];
    }
    for (int64_t d = 0; d < s.n; ++d) {
      const T* xr = x + d * s.inner;
      T* yr = y + d * s.inner;
      for (int64_t i = 0; i < len; ++i) {
        const A v = static_cast<A>(xr[i]) - max[i];
        if constexpr (Log) {
          yr[i] = v - sum[i];
        } else {
          yr[i] = vexp(v) * sum[i];
        }
      }
    }
  }
}

OPENREG_SIMD_CLONES void forward_blocks_f32(const float* in, float* out, const Split& s,
                                            int64_t begin, int64_t end, bool log) {
  if (log) {
    forward_blocks<float, true>(in, out, s, begin, end);
  } else {
    forward_blocks<float, false>(in, out, s, begin, end);
  }
}

template <typename T, bool Log>
void forward_blocks_any(const T* in, T* out, const Split& s, int64_t begin, int64_t end) {
  if constexpr (std::is_same_v<T, float>) {
    forward_blocks_f32(in, out, s, begin, end, Log);
  } else {
    forward_blocks<T, Log>(in, out, s, begin, end);
  }
}

// Writes softmax (or log-softmax) of the contiguous `input` into the
// contiguous `out` of the same shape and dtype.
template <bool Log>
void softmax_forward_kernel(const at::Tensor& input, int64_t dim, const at::Tensor& out) {
  if (input.numel() == 0) {
    return;
  }
  const Split s = split_at(input, dim);
  AT_DISPATCH_FLOATING_TYPES_AND2(c10::kHalf, c10::kBFloat16, input.scalar_type(), "softmax", [&] {
    const scalar_t* in = input.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    if (s.inner == 1) {
      at::parallel_for(0, s.outer, grain_rows(s.n), [&](int64_t begin, int64_t end) {
        forward_rows_any<scalar_t, Log>(in, o, begin, end, s.n);
      });
      return;
    }
    const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
    at::parallel_for(0, s.outer * blocks, grain_rows(s.n * kBlock),
                     [&](int64_t begin, int64_t end) {
                       forward_blocks_any<scalar_t, Log>(in, o, s, begin, end);
                     });
  });
}

// --- backward ----------------------------------------------------------------
// softmax:     grad_input = y * (g - sum(g * y))
// log_softmax: grad_input = g - exp(y) * sum(g)

// gi[j] = g[j] - exp(y[j]) * s, kLanes at a time with a padded tail. gi may be g.
C10_ALWAYS_INLINE void log_softmax_grad(const float* g, const float* y, float s, float* gi,
                                        int64_t n) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      gi[j + k] = g[j + k] - vexp(y[j + k]) * s;
    }
  }
  if (j < n) {
    float gt[kLanes] = {};
    float yt[kLanes] = {};
    std::memcpy(gt, g + j, (n - j) * sizeof(float));
    std::memcpy(yt, y + j, (n - j) * sizeof(float));
    for (int64_t k = 0; k < kLanes; ++k) {
      gt[k] = gt[k] - vexp(yt[k]) * s;
    }
    std::memcpy(gi + j, gt, (n - j) * sizeof(float));
  }
}

C10_ALWAYS_INLINE void log_softmax_grad(const double* g, const double* y, double s, double* gi,
                                        int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    gi[j] = g[j] - vexp(y[j]) * s;
  }
}

template <typename A, bool Log>
C10_ALWAYS_INLINE void row_backward(const A* g, const A* y, A* gi, int64_t n) {
  if constexpr (Log) {
    log_softmax_grad(g, y, row_sum<A>(n, [&](int64_t j) { return g[j]; }), gi, n);
  } else {
    const A dot = row_sum<A>(n, [&](int64_t j) { return g[j] * y[j]; });
    for (int64_t j = 0; j < n; ++j) {
      gi[j] = y[j] * (g[j] - dot);
    }
  }
}

template <typename A, bool Log>
C10_ALWAYS_INLINE void softmax_backward_rows(const A* g, const A* y, A* gi, int64_t rows,
                                             int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    row_backward<A, Log>(g + r * n, y + r * n, gi + r * n, n);
  }
}

OPENREG_SIMD_CLONES void softmax_backward_rows_f32(const float* g, const float* y, float* gi,
                                                   int64_t rows, int64_t n, bool log) {
  if (log) {
    softmax_backward_rows<float, true>(g, y, gi, rows, n);
  } else {
    softmax_backward_rows<float, false>(g, y, gi, rows, n);
  }
}

// Rows [begin, end) of n elements.
template <typename T, bool Log>
void backward_rows_any(const T* g, const T* y, T* gi, int64_t begin, int64_t end, int64_t n) {
  const int64_t off = begin * n;
  if constexpr (std::is_same_v<T, float>) {
    softmax_backward_rows_f32(g + off, y + off, gi + off, end - begin, n, Log);
  } else if constexpr (std::is_same_v<T, double>) {
    softmax_backward_rows<double, Log>(g + off, y + off, gi + off, end - begin, n);
  } else {  // 16-bit: through float rows, a block at a time
    Scratch<float> buf(2 * kRows * n);
    float* gf = buf.data();
    float* yf = gf + kRows * n;
    for (int64_t r0 = begin; r0 < end; r0 += kRows) {
      const int64_t count = std::min(kRows, end - r0);
      convert(g + r0 * n, gf, count * n);
      convert(y + r0 * n, yf, count * n);
      softmax_backward_rows_f32(gf, yf, gf, count, n, Log);
      convert(gf, gi + r0 * n, count * n);
    }
  }
}

template <typename T, bool Log>
C10_ALWAYS_INLINE void backward_blocks(const T* g, const T* y, T* gi, const Split& s, int64_t begin,
                                       int64_t end) {
  using A = at::opmath_type<T>;
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  A sum[kBlock];
  for (int64_t task = begin; task < end; ++task) {
    const int64_t o = task / blocks;
    const int64_t i0 = (task % blocks) * kBlock;
    const int64_t len = std::min(kBlock, s.inner - i0);
    const int64_t base = o * s.n * s.inner + i0;
    for (int64_t i = 0; i < len; ++i) {
      sum[i] = 0;
    }
    for (int64_t d = 0; d < s.n; ++d) {
      const T* gr = g + base + d * s.inner;
      const T* yr = y + base + d * s.inner;
      for (int64_t i = 0; i < len; ++i) {
        if constexpr (Log) {
          sum[i] += static_cast<A>(gr[i]);
        } else {
          sum[i] += static_cast<A>(gr[i]) * static_cast<A>(yr[i]);
        }
      }
    }
    for (int64_t d = 0; d < s.n; ++d) {
      const T* gr = g + base + d * s.inner;
      const T* yr = y + base + d * s.inner;
      T* out = gi + base + d * s.inner;
      for (int64_t i = 0; i < len; ++i) {
        const A gv = static_cast<A>(gr[i]);
        const A yv = static_cast<A>(yr[i]);
        if constexpr (Log) {
          out[i] = gv - vexp(yv) * sum[i];
        } else {
          out[i] = yv * (gv - sum[i]);
        }
      }
    }
  }
}

OPENREG_SIMD_CLONES void backward_blocks_f32(const float* g, const float* y, float* gi,
                                             const Split& s, int64_t begin, int64_t end, bool log) {
  if (log) {
    backward_blocks<float, true>(g, y, gi, s, begin, end);
  } else {
    backward_blocks<float, false>(g, y, gi, s, begin, end);
  }
}

template <typename T, bool Log>
void backward_blocks_any(const T* g, const T* y, T* gi, const Split& s, int64_t begin,
                         int64_t end) {
  if constexpr (std::is_same_v<T, float>) {
    backward_blocks_f32(g, y, gi, s, begin, end, Log);
  } else {
    backward_blocks<T, Log>(g, y, gi, s, begin, end);
  }
}

template <bool Log>
void softmax_backward_kernel(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                             const at::Tensor& grad_input) {
  if (grad.numel() == 0) {
    return;
  }
  const Split s = split_at(grad, dim);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      c10::kHalf, c10::kBFloat16, grad.scalar_type(), "softmax_backward", [&] {
        const scalar_t* g = grad.const_data_ptr<scalar_t>();
        const scalar_t* y = output.const_data_ptr<scalar_t>();
        scalar_t* gi = grad_input.mutable_data_ptr<scalar_t>();
        if (s.inner == 1) {
          at::parallel_for(0, s.outer, grain_rows(s.n), [&](int64_t begin, int64_t end) {
            backward_rows_any<scalar_t, Log>(g, y, gi, begin, end, s.n);
          });
          return;
        }
        const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
        at::parallel_for(0, s.outer * blocks, grain_rows(s.n * kBlock),
                         [&](int64_t begin, int64_t end) {
                           backward_blocks_any<scalar_t, Log>(g, y, gi, s, begin, end);
                         });
      });
}

// --- argument checks and out= handling -----------------------------------------

// ATen's out= checks: like's dtype and device; then resized to like's shape.
void softmax_check_out(const at::Tensor& out, const at::Tensor& like) {
  native::check_out(out, like.scalar_type(), like.device());
  resize_output(out, like.sizes());
}

void check_half_to_float(bool half_to_float) {
  // CPU has no half-to-float softmax either (CUDA does; at::softmax only asks
  // for it on CUDA tensors).
  TORCH_CHECK(!half_to_float, "softmax with half to float conversion is not supported on openreg");
}

// Backward dtypes handled natively: grad, output and the result share one
// native dtype. CPU raises or converts in the other cases; the fallback
// reproduces that.
bool native_backward(const at::Tensor& grad, const at::Tensor& output,
                     c10::ScalarType input_dtype) {
  const auto t = grad.scalar_type();
  return is_floating(t) && output.scalar_type() == t &&
         !(t == c10::kFloat && input_dtype == c10::kHalf) && grad.device() == output.device();
}

void check_backward(const at::Tensor& grad, const at::Tensor& output, const char* name) {
  at::checkSameSize(name, {grad, "grad", 1}, {output, "output", 2});
}

// --- the registered kernels --------------------------------------------------

template <bool Log>
at::Tensor softmax_forward(const at::Tensor& self, int64_t dim, bool half_to_float) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  check_half_to_float(half_to_float);
  const at::Tensor input = self.contiguous();
  at::Tensor out = empty(input.sizes(), input.options());
  softmax_forward_kernel<Log>(input, dim, out);
  return out;
}

at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  if (!is_floating(self.scalar_type())) {
    return fallback<at::_ops::_softmax>(self, dim, half_to_float);
  }
  return softmax_forward<false>(self, dim, half_to_float);
}

at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  if (!is_floating(self.scalar_type())) {
    return fallback<at::_ops::_log_softmax>(self, dim, half_to_float);
  }
  return softmax_forward<true>(self, dim, half_to_float);
}

template <bool Log>
at::Tensor& softmax_forward_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                                at::Tensor& out) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  check_half_to_float(half_to_float);
  softmax_check_out(out, self);
  const at::Tensor input = self.contiguous();
  into_out(out, [&](const at::Tensor& dst) { softmax_forward_kernel<Log>(input, dim, dst); });
  return out;
}

at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  if (!is_floating(self.scalar_type())) {
    return fallback<at::_ops::_softmax_out>(self, dim, half_to_float, out);
  }
  return softmax_forward_out<false>(self, dim, half_to_float, out);
}

at::Tensor& log_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                            at::Tensor& out) {
  if (!is_floating(self.scalar_type())) {
    return fallback<at::_ops::_log_softmax_out>(self, dim, half_to_float, out);
  }
  return softmax_forward_out<true>(self, dim, half_to_float, out);
}

template <bool Log>
at::Tensor softmax_grad(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim) {
  check_backward(grad_output, output, Log ? "log_softmax_backward" : "softmax_backward");
  dim = c10::maybe_wrap_dim(dim, grad_output.dim());
  const at::Tensor grad = grad_output.contiguous();
  const at::Tensor out = output.contiguous();
  at::Tensor grad_input = empty(grad.sizes(), grad.options());
  softmax_backward_kernel<Log>(grad, out, dim, grad_input);
  return grad_input;
}

at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            c10::ScalarType input_dtype) {
  if (!native_backward(grad_output, output, input_dtype)) {
    return fallback<at::_ops::_softmax_backward_data>(grad_output, output, dim, input_dtype);
  }
  return softmax_grad<false>(grad_output, output, dim);
}

at::Tensor log_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                int64_t dim, c10::ScalarType input_dtype) {
  if (!native_backward(grad_output, output, input_dtype)) {
    return fallback<at::_ops::_log_softmax_backward_data>(grad_output, output, dim, input_dtype);
  }
  return softmax_grad<true>(grad_output, output, dim);
}

template <bool Log>
at::Tensor& softmax_grad_out(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                             at::Tensor& grad_input) {
  check_backward(grad_output, output, Log ? "log_softmax_backward" : "softmax_backward");
  dim = c10::maybe_wrap_dim(dim, grad_output.dim());
  softmax_check_out(grad_input, grad_output);
  const at::Tensor grad = grad_output.contiguous();
  const at::Tensor out = output.contiguous();
  into_out(grad_input,
           [&](const at::Tensor& dst) { softmax_backward_kernel<Log>(grad, out, dim, dst); });
  return grad_input;
}

at::Tensor& softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                 int64_t dim, c10::ScalarType input_dtype, at::Tensor& grad_input) {
  if (!native_backward(grad_output, output, input_dtype) ||
      grad_input.scalar_type() != grad_output.scalar_type()) {
    return fallback<at::_ops::_softmax_backward_data_out>(grad_output, output, dim, input_dtype,
                                                          grad_input);
  }
  return softmax_grad_out<false>(grad_output, output, dim, grad_input);
}

at::Tensor& log_softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                     int64_t dim, c10::ScalarType input_dtype, at::Tensor& out) {
  if (!native_backward(grad_output, output, input_dtype) ||
      out.scalar_type() != grad_output.scalar_type()) {
    return fallback<at::_ops::_log_softmax_backward_data_out>(grad_output, output, dim, input_dtype,
                                                              out);
  }
  return softmax_grad_out<true>(grad_output, output, dim, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "_softmax", softmax);
  OPENREG_IMPL(m, "_softmax.out", softmax_out);
  OPENREG_IMPL(m, "_log_softmax", log_softmax);
  OPENREG_IMPL(m, "_log_softmax.out", log_softmax_out);
  OPENREG_IMPL(m, "_softmax_backward_data", softmax_backward);
  OPENREG_IMPL(m, "_softmax_backward_data.out", softmax_backward_out);
  OPENREG_IMPL(m, "_log_softmax_backward_data", log_softmax_backward);
  OPENREG_IMPL(m, "_log_softmax_backward_data.out", log_softmax_backward_out);
}

}  // namespace openreg
