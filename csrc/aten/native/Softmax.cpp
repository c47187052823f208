// Softmax and log-softmax along one dimension, forward and backward.
//
// The input is viewed as [outer, n, inner] around the softmax dimension (n
// elements). Two loop shapes cover every case:
//   - inner == 1 (the last dimension, the common case): one contiguous row of
//     n elements at a time;
//   - inner > 1: a block of up to kBlock columns at a time, walking the n
//     rows of the block so that every memory access is contiguous.
// 16-bit types accumulate in float (at::opmath_type), as on CPU. Results are
// contiguous, like CPU's. Other dtypes go to the CPU fallback.

#include "aten/Fallback.h"
#include "aten/Registration.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/empty.h>
#include <c10/core/WrapDimMinimal.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace openreg {
namespace {

// Elements per parallel task, as ATen's at::internal::GRAIN_SIZE.
constexpr int64_t kGrainSize = 32768;

bool is_native_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kHalf || t == c10::kBFloat16;
}

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

// Rows per parallel task: about GRAIN_SIZE elements each.
int64_t grain_rows(int64_t row_len) {
  return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, row_len));
}

constexpr int64_t kBlock = 64;

// --- forward ---------------------------------------------------------------

template <typename T, bool Log>
void forward_lastdim(const T* in, T* out, int64_t rows, int64_t n) {
  using acc_t = at::opmath_type<T>;
  constexpr bool kSame = std::is_same_v<T, acc_t>;
  at::parallel_for(0, rows, grain_rows(n), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> buf(kSame || Log ? 0 : n);
    for (int64_t r = begin; r < end; ++r) {
      const T* x = in + r * n;
      T* y = out + r * n;
      acc_t max = -std::numeric_limits<acc_t>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        max = std::max(max, static_cast<acc_t>(x[j]));
      }
      acc_t sum = 0;
      if constexpr (Log) {
        for (int64_t j = 0; j < n; ++j) {
          sum += std::exp(static_cast<acc_t>(x[j]) - max);
        }
        const acc_t log_sum = std::log(sum);
        for (int64_t j = 0; j < n; ++j) {
          y[j] = static_cast<acc_t>(x[j]) - max - log_sum;
        }
      } else if constexpr (kSame) {
        for (int64_t j = 0; j < n; ++j) {
          const acc_t e = std::exp(x[j] - max);
          y[j] = e;
          sum += e;
        }
        const acc_t inv = acc_t(1) / sum;
        for (int64_t j = 0; j < n; ++j) {
          y[j] *= inv;
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          const acc_t e = std::exp(static_cast<acc_t>(x[j]) - max);
          buf[j] = e;
          sum += e;
        }
        const acc_t inv = acc_t(1) / sum;
        for (int64_t j = 0; j < n; ++j) {
          y[j] = buf[j] * inv;
        }
      }
    }
  });
}

template <typename T, bool Log>
void forward_inner(const T* in, T* out, const Split& s) {
  using acc_t = at::opmath_type<T>;
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  at::parallel_for(0, s.outer * blocks, grain_rows(s.n * kBlock), [&](int64_t begin, int64_t end) {
    acc_t max[kBlock];
    acc_t sum[kBlock];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / blocks;
      const int64_t i0 = (task % blocks) * kBlock;
      const int64_t len = std::min(kBlock, s.inner - i0);
      const T* x = in + o * s.n * s.inner + i0;
      T* y = out + o * s.n * s.inner + i0;
      for (int64_t i = 0; i < len; ++i) {
        max[i] = -std::numeric_limits<acc_t>::infinity();
        sum[i] = 0;
      }
      for (int64_t d = 0; d < s.n; ++d) {
        const T* xr = x + d * s.inner;
        for (int64_t i = 0; i < len; ++i) {
          max[i] = std::max(max[i], static_cast<acc_t>(xr[i]));
        }
      }
      for (int64_t d = 0; d < s.n; ++d) {
        const T* xr = x + d * s.inner;
        for (int64_t i = 0; i < len; ++i) {
          sum[i] += std::exp(static_cast<acc_t>(xr[i]) - max[i]);
        }
      }
      for (int64_t i = 0; i < len; ++i) {
        sum[i] = Log ? max[i] + std::log(sum[i]) : acc_t(1) / sum[i];
      }
      for (int64_t d = 0; d < s.n; ++d) {
        const T* xr = x + d * s.inner;
        T* yr = y + d * s.inner;
        for (int64_t i = 0; i < len; ++i) {
          const acc_t v = static_cast<acc_t>(xr[i]);
          if constexpr (Log) {
            yr[i] = v - sum[i];
          } else {
            yr[i] = std::exp(v - max[i]) * sum[i];
          }
        }
      }
    }
  });
}

// Writes softmax (or log-softmax) of the contiguous `input` into the
// contiguous `out` of the same shape and dtype.
template <bool Log>
void forward_kernel(const at::Tensor& input, int64_t dim, const at::Tensor& out) {
  if (input.numel() == 0) {
    return;
  }
  const Split s = split_at(input, dim);
  AT_DISPATCH_FLOATING_TYPES_AND2(c10::kHalf, c10::kBFloat16, input.scalar_type(), "softmax", [&] {
    const scalar_t* in = input.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    if (s.inner == 1) {
      forward_lastdim<scalar_t, Log>(in, o, s.outer, s.n);
    } else {
      forward_inner<scalar_t, Log>(in, o, s);
    }
  });
}

// --- backward ----------------------------------------------------------------
// softmax:     grad_input = y * (g - sum(g * y))
// log_softmax: grad_input = g - exp(y) * sum(g)

template <typename T, bool Log>
void backward_lastdim(const T* g, const T* y, T* gi, int64_t rows, int64_t n) {
  using acc_t = at::opmath_type<T>;
  at::parallel_for(0, rows, grain_rows(n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* gr = g + r * n;
      const T* yr = y + r * n;
      T* out = gi + r * n;
      acc_t sum = 0;
      if constexpr (Log) {
        for (int64_t j = 0; j < n; ++j) {
          sum += static_cast<acc_t>(gr[j]);
        }
        for (int64_t j = 0; j < n; ++j) {
          out[j] = static_cast<acc_t>(gr[j]) - std::exp(static_cast<acc_t>(yr[j])) * sum;
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          sum += static_cast<acc_t>(gr[j]) * static_cast<acc_t>(yr[j]);
        }
        for (int64_t j = 0; j < n; ++j) {
          out[j] = static_cast<acc_t>(yr[j]) * (static_cast<acc_t>(gr[j]) - sum);
        }
      }
    }
  });
}

template <typename T, bool Log>
void backward_inner(const T* g, const T* y, T* gi, const Split& s) {
  using acc_t = at::opmath_type<T>;
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  at::parallel_for(0, s.outer * blocks, grain_rows(s.n * kBlock), [&](int64_t begin, int64_t end) {
    acc_t sum[kBlock];
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
            sum[i] += static_cast<acc_t>(gr[i]);
          } else {
            sum[i] += static_cast<acc_t>(gr[i]) * static_cast<acc_t>(yr[i]);
          }
        }
      }
      for (int64_t d = 0; d < s.n; ++d) {
        const T* gr = g + base + d * s.inner;
        const T* yr = y + base + d * s.inner;
        T* out = gi + base + d * s.inner;
        for (int64_t i = 0; i < len; ++i) {
          const acc_t gv = static_cast<acc_t>(gr[i]);
          const acc_t yv = static_cast<acc_t>(yr[i]);
          if constexpr (Log) {
            out[i] = gv - std::exp(yv) * sum[i];
          } else {
            out[i] = yv * (gv - sum[i]);
          }
        }
      }
    }
  });
}

template <bool Log>
void backward_kernel(const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                     const at::Tensor& grad_input) {
  if (grad.numel() == 0) {
    return;
  }
  const Split s = split_at(grad, dim);
  AT_DISPATCH_FLOATING_TYPES_AND2(c10::kHalf, c10::kBFloat16, grad.scalar_type(),
                                  "softmax_backward", [&] {
                                    const scalar_t* g = grad.const_data_ptr<scalar_t>();
                                    const scalar_t* y = output.const_data_ptr<scalar_t>();
                                    scalar_t* gi = grad_input.mutable_data_ptr<scalar_t>();
                                    if (s.inner == 1) {
                                      backward_lastdim<scalar_t, Log>(g, y, gi, s.outer, s.n);
                                    } else {
                                      backward_inner<scalar_t, Log>(g, y, gi, s);
                                    }
                                  });
}

// --- argument checks and out= handling -----------------------------------------

void check_out(const at::Tensor& out, const at::Tensor& like) {
  TORCH_CHECK(out.scalar_type() == like.scalar_type(), "Expected out tensor to have dtype ",
              like.dtype(), ", but got ", out.dtype(), " instead");
  TORCH_CHECK(out.device() == like.device(), "Expected out tensor to have device ", like.device(),
              ", but got ", out.device(), " instead");
  at::native::resize_output(out, like.sizes());
}

// Runs `kernel(dst)` on `out` directly when it is contiguous, else on a
// contiguous temporary that is then copied into `out`.
template <class Kernel>
void into_out(at::Tensor& out, const Kernel& kernel) {
  if (out.is_contiguous()) {
    kernel(out);
  } else {
    at::Tensor tmp = at::empty(out.sizes(), out.options());
    kernel(tmp);
    out.copy_(tmp);
  }
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
  return is_native_dtype(t) && output.scalar_type() == t &&
         !(t == c10::kFloat && input_dtype == c10::kHalf) && grad.device() == output.device();
}

void check_backward(const at::Tensor& grad, const at::Tensor& output, const char* name) {
  at::checkSameSize(name, {grad, "grad", 1}, {output, "output", 2});
}

// --- the registered kernels --------------------------------------------------

template <bool Log>
at::Tensor forward(const at::Tensor& self, int64_t dim, bool half_to_float) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  check_half_to_float(half_to_float);
  const at::Tensor input = self.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options());
  forward_kernel<Log>(input, dim, out);
  return out;
}

at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  if (!is_native_dtype(self.scalar_type())) {
    return fallback<at::_ops::_softmax>(self, dim, half_to_float);
  }
  return forward<false>(self, dim, half_to_float);
}

at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  if (!is_native_dtype(self.scalar_type())) {
    return fallback<at::_ops::_log_softmax>(self, dim, half_to_float);
  }
  return forward<true>(self, dim, half_to_float);
}

template <bool Log>
at::Tensor& forward_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  check_half_to_float(half_to_float);
  check_out(out, self);
  const at::Tensor input = self.contiguous();
  into_out(out, [&](const at::Tensor& dst) { forward_kernel<Log>(input, dim, dst); });
  return out;
}

at::Tensor& softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  if (!is_native_dtype(self.scalar_type())) {
    return fallback<at::_ops::_softmax_out>(self, dim, half_to_float, out);
  }
  return forward_out<false>(self, dim, half_to_float, out);
}

at::Tensor& log_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float,
                            at::Tensor& out) {
  if (!is_native_dtype(self.scalar_type())) {
    return fallback<at::_ops::_log_softmax_out>(self, dim, half_to_float, out);
  }
  return forward_out<true>(self, dim, half_to_float, out);
}

template <bool Log>
at::Tensor backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim) {
  check_backward(grad_output, output, Log ? "log_softmax_backward" : "softmax_backward");
  dim = c10::maybe_wrap_dim(dim, grad_output.dim());
  const at::Tensor grad = grad_output.contiguous();
  const at::Tensor out = output.contiguous();
  at::Tensor grad_input = at::empty(grad.sizes(), grad.options());
  backward_kernel<Log>(grad, out, dim, grad_input);
  return grad_input;
}

at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            c10::ScalarType input_dtype) {
  if (!native_backward(grad_output, output, input_dtype)) {
    return fallback<at::_ops::_softmax_backward_data>(grad_output, output, dim, input_dtype);
  }
  return backward<false>(grad_output, output, dim);
}

at::Tensor log_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                int64_t dim, c10::ScalarType input_dtype) {
  if (!native_backward(grad_output, output, input_dtype)) {
    return fallback<at::_ops::_log_softmax_backward_data>(grad_output, output, dim, input_dtype);
  }
  return backward<true>(grad_output, output, dim);
}

template <bool Log>
at::Tensor& backward_out(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                         at::Tensor& grad_input) {
  check_backward(grad_output, output, Log ? "log_softmax_backward" : "softmax_backward");
  dim = c10::maybe_wrap_dim(dim, grad_output.dim());
  check_out(grad_input, grad_output);
  const at::Tensor grad = grad_output.contiguous();
  const at::Tensor out = output.contiguous();
  into_out(grad_input, [&](const at::Tensor& dst) { backward_kernel<Log>(grad, out, dim, dst); });
  return grad_input;
}

at::Tensor& softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                 int64_t dim, c10::ScalarType input_dtype, at::Tensor& grad_input) {
  if (!native_backward(grad_output, output, input_dtype) ||
      grad_input.scalar_type() != grad_output.scalar_type()) {
    return fallback<at::_ops::_softmax_backward_data_out>(grad_output, output, dim, input_dtype,
                                                          grad_input);
  }
  return backward_out<false>(grad_output, output, dim, grad_input);
}

at::Tensor& log_softmax_backward_out(const at::Tensor& grad_output, const at::Tensor& output,
                                     int64_t dim, c10::ScalarType input_dtype, at::Tensor& out) {
  if (!native_backward(grad_output, output, input_dtype) ||
      out.scalar_type() != grad_output.scalar_type()) {
    return fallback<at::_ops::_log_softmax_backward_data_out>(grad_output, output, dim, input_dtype,
                                                              out);
  }
  return backward_out<true>(grad_output, output, dim, out);
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
