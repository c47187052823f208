// Layer normalization, forward and backward.
//
// The input is viewed as M rows of N = prod(normalized_shape) contiguous
// elements. Each row is normalized with its own mean and variance (two
// passes over the row shifted by its first element, in at::opmath_type with
// block totals in double: see block_sum, comp_t), then scaled by weight and
// shifted by bias. The float kernels are vectorizable and compiled for
// AVX-512, AVX2 and baseline x86-64 (OPENREG_SIMD_CLONES).
//
// dtypes, as on CPU: the input, weight and bias share one floating dtype, or
// (mixed) the input is float16/bfloat16 and weight and bias are float. mean
// and rstd have the parameters' dtype (the input's without parameters) and
// the shape input.shape[:axis] + [1] * len(normalized_shape). Anything else
// goes to the CPU fallback.

#include "aten/native/Common.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <c10/macros/Macros.h>
#include <c10/util/accumulate.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

namespace openreg {
namespace {

using native::empty;
using native::grain_rows;
using native::is_floating;
using native::kGrainSize;

bool is_reduced(c10::ScalarType t) {
  return t == c10::kHalf || t == c10::kBFloat16;
}

// The dtype of weight, bias, mean and rstd for `input`, or nullopt when the
// combination is not native (the CPU fallback then decides).
std::optional<c10::ScalarType> param_dtype(const at::Tensor& input, const at::Tensor& weight,
                                           const at::Tensor& bias) {
  const auto t = input.scalar_type();
  if (!is_floating(t)) {
    return std::nullopt;
  }
  std::optional<c10::ScalarType> p;
  for (const at::Tensor* param : {&weight, &bias}) {
    if (!param->defined()) {
      continue;
    }
    const auto pt = param->scalar_type();
    if (p.has_value() && *p != pt) {
      return std::nullopt;
    }
    p = pt;
  }
  if (!p.has_value() || *p == t) {
    return t;
  }
  if (is_reduced(t) && *p == c10::kFloat) {
    return c10::kFloat;
  }
  return std::nullopt;
}

bool same_device(const at::Tensor& input, std::initializer_list<const at::Tensor*> others) {
  for (const at::Tensor* t : others) {
    if (t->defined() && t->device() != input.device()) {
      return false;
    }
  }
  return true;
}

void layer_norm_check_same_device(const at::Tensor& input,
                                  std::initializer_list<const at::Tensor*> others) {
  for (const at::Tensor* t : others) {
    TORCH_CHECK(!t->defined() || t->device() == input.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                input.device(), " and ", t->device(), "!");
  }
}

// PyTorch's layer norm argument checks; returns {M, N}.
std::pair<int64_t, int64_t> check_inputs(const at::Tensor& input, c10::IntArrayRef shape,
                                         const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(!shape.empty(),
              "Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
              "least one element, but got normalized_shape = ",
              shape);
  TORCH_CHECK(!weight.defined() || weight.sizes().equals(shape),
              "Expected weight to be of same shape as normalized_shape, but got weight of shape ",
              weight.sizes(), " and normalized_shape = ", shape);
  TORCH_CHECK(!bias.defined() || bias.sizes().equals(shape),
              "Expected bias to be of same shape as normalized_shape, but got bias of shape ",
              bias.sizes(), " and normalized_shape = ", shape);
  const auto sizes = input.sizes();
  const int64_t ndim = input.dim();
  const int64_t norm_ndim = static_cast<int64_t>(shape.size());
  if (ndim < norm_ndim || !sizes.slice(ndim - norm_ndim).equals(shape)) {
    std::ostringstream ss;
    ss << "Given normalized_shape=" << shape << ", expected input with shape [*";
    for (int64_t s : shape) {
      ss << ", " << s;
    }
    ss << "], but got input of size" << sizes;
    TORCH_CHECK(false, ss.str());
  }
  const int64_t axis = ndim - norm_ndim;
  return {c10::multiply_integers(sizes.begin(), sizes.begin() + axis),
          c10::multiply_integers(sizes.begin() + axis, sizes.end())};
}

// Sum of f(j) for j in [0, n), in independent lanes (vectorizable, and more
// accurate than one running sum).
template <typename C, class F>
C10_ALWAYS_INLINE C lane_sum(int64_t n, const F& f) {
  constexpr int64_t kLanes = 16;
  C acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      acc[k] += f(j + k);
    }
  }
  for (; j < n; ++j) {
    acc[0] += f(j);
  }
  for (int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (int64_t k = 0; k < width; ++k) {
      acc[k] += acc[k + width];
    }
  }
  return acc[0];
}

// Sum of f(j) for j in [0, n): lane sums over blocks of kSumBlock elements,
// added up in double. In float this stays accurate for long rows.
constexpr int64_t kSumBlock = 256;

template <typename C, class F>
C10_ALWAYS_INLINE double block_sum(int64_t n, const F& f) {
  double total = 0;
  for (int64_t j0 = 0; j0 < n; j0 += kSumBlock) {
    total += lane_sum<C>(std::min(kSumBlock, n - j0), [&](int64_t j) { return f(j0 + j); });
  }
  return total;
}

// The computation type C is at::opmath_type (float for float and 16-bit
// inputs, double for double). Rows are shifted by their first element before
// summing, so that a large common offset costs no precision: mean = x0 + m,
// and x - mean = (x - x0) - m with both parts small.
template <typename T>
using comp_t = at::opmath_type<T>;

// --- forward ---------------------------------------------------------------

// T: input dtype; P: the weight, bias, mean and rstd type (kernel_param_t).
// Rows [begin, end).
template <typename T, typename P>
C10_ALWAYS_INLINE void layer_norm_forward_rows(const T* x, const P* w, const P* b, T* y,
                                               P* mean_out, P* rstd_out, int64_t begin, int64_t end,
                                               int64_t N, double eps) {
  using C = comp_t<T>;
  for (int64_t i = begin; i < end; ++i) {
    const T* xr = x + i * N;
    T* yr = y + i * N;
    if (N == 0) {  // as CPU: mean 0, rstd nan
      mean_out[i] = P(0);
      rstd_out[i] = std::numeric_limits<P>::quiet_NaN();
      continue;
    }
    const C x0 = static_cast<C>(xr[0]);
    const double shifted_mean =
        block_sum<C>(N, [&](int64_t j) { return static_cast<C>(xr[j]) - x0; }) / N;
    const C m = static_cast<C>(shifted_mean);
    const double var = block_sum<C>(N,
                                    [&](int64_t j) {
                                      const C d = (static_cast<C>(xr[j]) - x0) - m;
                                      return d * d;
                                    }) /
                       N;
    const double rstd_d = 1.0 / std::sqrt(std::max(var, 0.0) + eps);
    mean_out[i] = static_cast<P>(static_cast<double>(x0) + shifted_mean);
    rstd_out[i] = static_cast<P>(rstd_d);
    const C rstd = static_cast<C>(rstd_d);
    auto xhat = [&](int64_t j) { return ((static_cast<C>(xr[j]) - x0) - m) * rstd; };
    if (w != nullptr && b != nullptr) {
      for (int64_t j = 0; j < N; ++j) {
        yr[j] = xhat(j) * static_cast<C>(w[j]) + static_cast<C>(b[j]);
      }
    } else if (w != nullptr) {
      for (int64_t j = 0; j < N; ++j) {
        yr[j] = xhat(j) * static_cast<C>(w[j]);
      }
    } else if (b != nullptr) {
      for (int64_t j = 0; j < N; ++j) {
        yr[j] = xhat(j) + static_cast<C>(b[j]);
      }
    } else {
      for (int64_t j = 0; j < N; ++j) {
        yr[j] = xhat(j);
      }
    }
  }
}

OPENREG_SIMD_CLONES void layer_norm_forward_rows_f32(const float* x, const float* w, const float* b,
                                                     float* y, float* mean_out, float* rstd_out,
                                                     int64_t begin, int64_t end, int64_t N,
                                                     double eps) {
  layer_norm_forward_rows<float, float>(x, w, b, y, mean_out, rstd_out, begin, end, N, eps);
}

template <typename T, typename P>
void layer_norm_forward_kernel(const T* x, const P* w, const P* b, T* y, P* mean_out, P* rstd_out,
                               int64_t M, int64_t N, double eps) {
  at::parallel_for(0, M, grain_rows(N), [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      layer_norm_forward_rows_f32(x, w, b, y, mean_out, rstd_out, begin, end, N, eps);
    } else {
      layer_norm_forward_rows<T, P>(x, w, b, y, mean_out, rstd_out, begin, end, N, eps);
    }
  });
}

template <typename P>
const P* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<P>() : nullptr;
}

// The kernels' parameter type for input type T: float for 16-bit inputs
// (their 16-bit weights, biases and statistics are converted on the way in
// and out, which halves the instantiations), T otherwise.
template <typename T>
using kernel_param_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

c10::ScalarType kernel_param_dtype(c10::ScalarType input) {
  return input == c10::kDouble ? c10::kDouble : c10::kFloat;
}

// Calls f.template operator()<T, kernel_param_t<T>>() for the input dtype T.
template <class F>
void dispatch_types(c10::ScalarType input, const F& f) {
  AT_DISPATCH_FLOATING_TYPES_AND2(c10::kHalf, c10::kBFloat16, input, "layer_norm", [&] {
    f.template operator()<scalar_t, kernel_param_t<scalar_t>>();
  });
}

// t as a contiguous tensor of `dtype` (no dispatcher call when it already is).
at::Tensor to_dtype(const at::Tensor& t, c10::ScalarType dtype) {
  if (!t.defined() || (t.scalar_type() == dtype && t.is_contiguous())) {
    return t;
  }
  return t.to(dtype).contiguous();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(
    const at::Tensor& input, c10::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
    double eps) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const auto pdtype = param_dtype(input, weight, bias);
  if (!pdtype.has_value() || !same_device(input, {&weight, &bias})) {
    return fallback<at::_ops::native_layer_norm>(input, normalized_shape, weight_opt, bias_opt,
                                                 eps);
  }
  const auto [M, N] = check_inputs(input, normalized_shape, weight, bias);
  const at::Tensor x = input.contiguous();
  const c10::ScalarType kdtype = kernel_param_dtype(x.scalar_type());
  const at::Tensor w = to_dtype(weight, kdtype);
  const at::Tensor b = to_dtype(bias, kdtype);

  at::Tensor y = empty(x.sizes(), x.options());
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().end());
  for (size_t d = stat_shape.size() - normalized_shape.size(); d < stat_shape.size(); ++d) {
    stat_shape[d] = 1;
  }
  at::Tensor mean = empty(stat_shape, x.options().dtype(kdtype));
  at::Tensor rstd = empty(stat_shape, x.options().dtype(kdtype));
  dispatch_types(x.scalar_type(), [&]<typename T, typename P>() {
    layer_norm_forward_kernel<T, P>(x.const_data_ptr<T>(), data_or_null<P>(w), data_or_null<P>(b),
                                    y.mutable_data_ptr<T>(), mean.mutable_data_ptr<P>(),
                                    rstd.mutable_data_ptr<P>(), M, N, eps);
  });
  return {std::move(y), to_dtype(mean, *pdtype), to_dtype(rstd, *pdtype)};
}

// --- backward ----------------------------------------------------------------
// With xhat = (x - mean) * rstd and g = dy * weight (dy without weight):
//   dx     = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
//   dgamma = sum over rows of dy * xhat
//   dbeta  = sum over rows of dy

// Rows [begin, end): dx (when dx is not null), and the rows' dgamma and
// dbeta terms added to the double sums pg and pb (when not null), through
// float partial sums over kSumBlock rows at a time. scratch: 3 N elements.
template <typename T, typename P>
C10_ALWAYS_INLINE void layer_norm_backward_rows(const T* dy, const T* x, const P* mean,
                                                const P* rstd, const P* w, T* dx, double* pg,
                                                double* pb, comp_t<T>* scratch, int64_t begin,
                                                int64_t end, int64_t N) {
  using C = comp_t<T>;
  C* g = scratch;
  C* fg = scratch + N;
  C* fb = scratch + 2 * N;
  auto flush = [&] {
    for (int64_t j = 0; j < N; ++j) {
      pg[j] += fg[j];
      pb[j] += fb[j];
      fg[j] = 0;
      fb[j] = 0;
    }
  };
  if (pg != nullptr) {
    std::fill(fg, fg + 2 * N, C(0));
  }
  for (int64_t i = begin; i < end; ++i) {
    const T* dyr = dy + i * N;
    const T* xr = x + i * N;
    const C mu = static_cast<C>(mean[i]);
    const C rs = static_cast<C>(rstd[i]);
    if (pg != nullptr) {
      for (int64_t j = 0; j < N; ++j) {
        const C d = static_cast<C>(dyr[j]);
        fg[j] += d * ((static_cast<C>(xr[j]) - mu) * rs);
        fb[j] += d;
      }
      if ((i - begin) % kSumBlock == kSumBlock - 1) {
        flush();
      }
    }
    if (dx == nullptr) {
      continue;
    }
    T* dxr = dx + i * N;
    if (w != nullptr) {
      for (int64_t j = 0; j < N; ++j) {
        g[j] = static_cast<C>(dyr[j]) * static_cast<C>(w[j]);
      }
    } else {
      for (int64_t j = 0; j < N; ++j) {
        g[j] = static_cast<C>(dyr[j]);
      }
    }
    const C a = static_cast<C>(block_sum<C>(N, [&](int64_t j) { return g[j]; }) / N);
    const C bb = static_cast<C>(
        block_sum<C>(N, [&](int64_t j) { return g[j] * ((static_cast<C>(xr[j]) - mu) * rs); }) / N);
    for (int64_t j = 0; j < N; ++j) {
      dxr[j] = rs * (g[j] - a - ((static_cast<C>(xr[j]) - mu) * rs) * bb);
    }
  }
  if (pg != nullptr) {
    flush();
  }
}

OPENREG_SIMD_CLONES void layer_norm_backward_rows_f32(const float* dy, const float* x,
                                                      const float* mean, const float* rstd,
                                                      const float* w, float* dx, double* pg,
                                                      double* pb, float* scratch, int64_t begin,
                                                      int64_t end, int64_t N) {
  layer_norm_backward_rows<float, float>(dy, x, mean, rstd, w, dx, pg, pb, scratch, begin, end, N);
}

template <typename T, typename P>
void layer_norm_backward_kernel(const T* dy, const T* x, const P* mean, const P* rstd, const P* w,
                                T* dx, P* dgamma, P* dbeta, int64_t M, int64_t N) {
  const bool param_grads = dgamma != nullptr || dbeta != nullptr;
  // dgamma and dbeta: one partial sum per chunk of rows, added in chunk order.
  const int64_t chunks =
      param_grads
          ? std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), M * N / kGrainSize))
          : 1;
  std::vector<double> partial(param_grads ? chunks * 2 * N : 0, 0.0);
  const int64_t rows_per_chunk = (M + chunks - 1) / chunks;
  at::parallel_for(0, chunks, 1, [&](int64_t cbegin, int64_t cend) {
    std::vector<comp_t<T>> scratch(3 * N);
    for (int64_t c = cbegin; c < cend; ++c) {
      double* pg = param_grads ? partial.data() + c * 2 * N : nullptr;
      double* pb = param_grads ? pg + N : nullptr;
      const int64_t begin = std::min(M, c * rows_per_chunk);
      const int64_t end = std::min(M, (c + 1) * rows_per_chunk);
      if constexpr (std::is_same_v<T, float>) {
        layer_norm_backward_rows_f32(dy, x, mean, rstd, w, dx, pg, pb, scratch.data(), begin, end,
                                     N);
      } else {
        layer_norm_backward_rows<T, P>(dy, x, mean, rstd, w, dx, pg, pb, scratch.data(), begin, end,
                                       N);
      }
    }
  });
  if (!param_grads) {
    return;
  }
  for (int64_t j = 0; j < N; ++j) {
    double sg = 0;
    double sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += partial[c * 2 * N + j];
      sb += partial[c * 2 * N + N + j];
    }
    if (dgamma != nullptr) {
      dgamma[j] = static_cast<P>(sg);
    }
    if (dbeta != nullptr) {
      dbeta[j] = static_cast<P>(sb);
    }
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::IntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, std::array<bool, 3> output_mask) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const auto pdtype = param_dtype(input, weight, bias);
  if (!pdtype.has_value() || grad_out.scalar_type() != input.scalar_type() ||
      !same_device(input, {&weight, &bias})) {
    return fallback<at::_ops::native_layer_norm_backward>(grad_out, input, normalized_shape, mean,
                                                          rstd, weight_opt, bias_opt, output_mask);
  }
  layer_norm_check_same_device(input, {&grad_out, &mean, &rstd});
  const auto [M, N] = check_inputs(input, normalized_shape, weight, bias);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "native_layer_norm_backward: grad_out of shape ",
              grad_out.sizes(), " does not match input of shape ", input.sizes());
  TORCH_CHECK(mean.numel() == M && rstd.numel() == M,
              "native_layer_norm_backward: expected mean and rstd with ", M,
              " elements, but got mean of shape ", mean.sizes(), " and rstd of shape ",
              rstd.sizes());
  TORCH_CHECK(!output_mask[1] || weight.defined(),
              "native_layer_norm_backward: the weight gradient (output_mask[1]) needs a weight");
  TORCH_CHECK(!output_mask[2] || bias.defined(),
              "native_layer_norm_backward: the bias gradient (output_mask[2]) needs a bias");

  const at::Tensor dy = grad_out.contiguous();
  const at::Tensor x = input.contiguous();
  const c10::ScalarType kdtype = kernel_param_dtype(x.scalar_type());
  const at::Tensor w = to_dtype(weight, kdtype);
  const at::Tensor mu = to_dtype(mean, kdtype);
  const at::Tensor rs = to_dtype(rstd, kdtype);
  at::Tensor dx;
  at::Tensor dgamma;
  at::Tensor dbeta;
  if (output_mask[0]) {
    dx = empty(x.sizes(), x.options());
  }
  if (output_mask[1]) {
    dgamma = empty(weight.sizes(), weight.options().dtype(kdtype));
  }
  if (output_mask[2]) {
    dbeta = empty(bias.sizes(), bias.options().dtype(kdtype));
  }
  if (!dx.defined() && !dgamma.defined() && !dbeta.defined()) {
    return {dx, dgamma, dbeta};
  }
  dispatch_types(x.scalar_type(), [&]<typename T, typename P>() {
    layer_norm_backward_kernel<T, P>(dy.const_data_ptr<T>(), x.const_data_ptr<T>(),
                                     mu.const_data_ptr<P>(), rs.const_data_ptr<P>(),
                                     data_or_null<P>(w),
                                     dx.defined() ? dx.mutable_data_ptr<T>() : nullptr,
                                     dgamma.defined() ? dgamma.mutable_data_ptr<P>() : nullptr,
                                     dbeta.defined() ? dbeta.mutable_data_ptr<P>() : nullptr, M, N);
  });
  return {std::move(dx), to_dtype(dgamma, *pdtype), to_dtype(dbeta, *pdtype)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "native_layer_norm", layer_norm);
  OPENREG_IMPL(m, "native_layer_norm_backward", layer_norm_backward);
}

}  // namespace openreg
