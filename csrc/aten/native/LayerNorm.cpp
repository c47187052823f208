// Layer normalization, forward and backward.
//
// The input is viewed as M rows of N = prod(normalized_shape) contiguous
// elements. Each row is normalized with its own mean and variance (two
// passes, computed in double for float and double inputs, in float for
// 16-bit ones), then scaled by weight and shifted by bias.
//
// dtypes, as on CPU: the input, weight and bias share one floating dtype, or
// (mixed) the input is float16/bfloat16 and weight and bias are float. mean
// and rstd have the parameters' dtype (the input's without parameters) and
// the shape input.shape[:axis] + [1] * len(normalized_shape). Anything else
// goes to the CPU fallback.

#include "aten/Fallback.h"
#include "aten/Registration.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <c10/util/accumulate.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

namespace openreg {
namespace {

// Elements per parallel task, as ATen's at::internal::GRAIN_SIZE.
constexpr int64_t kGrainSize = 32768;

bool is_native_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kHalf || t == c10::kBFloat16;
}

bool is_reduced(c10::ScalarType t) {
  return t == c10::kHalf || t == c10::kBFloat16;
}

// The dtype of weight, bias, mean and rstd for `input`, or nullopt when the
// combination is not native (the CPU fallback then decides).
std::optional<c10::ScalarType> param_dtype(const at::Tensor& input, const at::Tensor& weight,
                                           const at::Tensor& bias) {
  const auto t = input.scalar_type();
  if (!is_native_dtype(t)) {
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

void check_same_device(const at::Tensor& input, std::initializer_list<const at::Tensor*> others) {
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

// Sum of f(j) for j in [0, n), in eight independent lanes (vectorizable,
// and more accurate than one running sum).
template <typename A, class F>
A lane_sum(int64_t n, const F& f) {
  constexpr int64_t kLanes = 8;
  A acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      acc[k] += f(j + k);
    }
  }
  for (; j < n; ++j) {
    acc[0] += f(j);
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// The type layer norm computes in: double for float and double inputs (the
// statistics of a row with a large common offset stay exact), float for
// 16-bit ones (at::opmath_type).
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, float>, double, at::opmath_type<T>>;

int64_t grain_rows(int64_t n) {
  return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, n));
}

// --- forward ---------------------------------------------------------------

// T: input dtype; P: weight, bias, mean and rstd dtype (T, or float if mixed).
template <typename T, typename P>
void forward_kernel(const T* x, const P* w, const P* b, T* y, P* mean_out, P* rstd_out, int64_t M,
                    int64_t N, double eps) {
  using A = acc_t<T>;
  at::parallel_for(0, M, grain_rows(N), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* xr = x + i * N;
      T* yr = y + i * N;
      if (N == 0) {  // as CPU: mean 0, rstd nan
        mean_out[i] = P(0);
        rstd_out[i] = std::numeric_limits<P>::quiet_NaN();
        continue;
      }
      const A mean = lane_sum<A>(N, [&](int64_t j) { return static_cast<A>(xr[j]); }) / N;
      const A var = lane_sum<A>(N,
                                [&](int64_t j) {
                                  const A d = static_cast<A>(xr[j]) - mean;
                                  return d * d;
                                }) /
                    N;
      const A rstd = A(1) / std::sqrt(std::max(var, A(0)) + static_cast<A>(eps));
      mean_out[i] = static_cast<P>(mean);
      rstd_out[i] = static_cast<P>(rstd);
      if (w != nullptr && b != nullptr) {
        for (int64_t j = 0; j < N; ++j) {
          yr[j] =
              (static_cast<A>(xr[j]) - mean) * rstd * static_cast<A>(w[j]) + static_cast<A>(b[j]);
        }
      } else if (w != nullptr) {
        for (int64_t j = 0; j < N; ++j) {
          yr[j] = (static_cast<A>(xr[j]) - mean) * rstd * static_cast<A>(w[j]);
        }
      } else if (b != nullptr) {
        for (int64_t j = 0; j < N; ++j) {
          yr[j] = (static_cast<A>(xr[j]) - mean) * rstd + static_cast<A>(b[j]);
        }
      } else {
        for (int64_t j = 0; j < N; ++j) {
          yr[j] = (static_cast<A>(xr[j]) - mean) * rstd;
        }
      }
    }
  });
}

template <typename P>
const P* data_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<P>() : nullptr;
}

// Calls f.template operator()<T, P>() for the input dtype T and parameter
// dtype P (P is T, or float for mixed 16-bit inputs).
template <class F>
void dispatch_types(c10::ScalarType input, c10::ScalarType param, const F& f) {
  AT_DISPATCH_FLOATING_TYPES_AND2(c10::kHalf, c10::kBFloat16, input, "layer_norm", [&] {
    if constexpr (std::is_same_v<scalar_t, c10::Half> || std::is_same_v<scalar_t, c10::BFloat16>) {
      if (param == c10::kFloat) {
        f.template operator()<scalar_t, float>();
        return;
      }
    }
    f.template operator()<scalar_t, scalar_t>();
  });
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
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const at::Tensor b = bias.defined() ? bias.contiguous() : bias;

  at::Tensor y = at::empty(x.sizes(), x.options());
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().end());
  for (size_t d = stat_shape.size() - normalized_shape.size(); d < stat_shape.size(); ++d) {
    stat_shape[d] = 1;
  }
  at::Tensor mean = at::empty(stat_shape, x.options().dtype(*pdtype));
  at::Tensor rstd = at::empty(stat_shape, x.options().dtype(*pdtype));
  dispatch_types(x.scalar_type(), *pdtype, [&]<typename T, typename P>() {
    forward_kernel<T, P>(x.const_data_ptr<T>(), data_or_null<P>(w), data_or_null<P>(b),
                         y.mutable_data_ptr<T>(), mean.mutable_data_ptr<P>(),
                         rstd.mutable_data_ptr<P>(), M, N, eps);
  });
  return {std::move(y), std::move(mean), std::move(rstd)};
}

// --- backward ----------------------------------------------------------------
// With xhat = (x - mean) * rstd and g = dy * weight (dy without weight):
//   dx     = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
//   dgamma = sum over rows of dy * xhat
//   dbeta  = sum over rows of dy

template <typename T, typename P>
void backward_kernel(const T* dy, const T* x, const P* mean, const P* rstd, const P* w, T* dx,
                     P* dgamma, P* dbeta, int64_t M, int64_t N) {
  using A = acc_t<T>;
  const bool param_grads = dgamma != nullptr || dbeta != nullptr;
  // dgamma and dbeta: one partial sum per chunk of rows, added in chunk order.
  const int64_t chunks =
      param_grads
          ? std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), M * N / kGrainSize))
          : 1;
  std::vector<A> partial(param_grads ? chunks * 2 * N : 0, A(0));
  const int64_t rows_per_chunk = (M + chunks - 1) / chunks;
  at::parallel_for(0, chunks, 1, [&](int64_t cbegin, int64_t cend) {
    std::vector<A> g(w != nullptr ? N : 0);
    for (int64_t c = cbegin; c < cend; ++c) {
      A* pg = param_grads ? partial.data() + c * 2 * N : nullptr;
      A* pb = param_grads ? pg + N : nullptr;
      const int64_t end = std::min(M, (c + 1) * rows_per_chunk);
      for (int64_t i = c * rows_per_chunk; i < end; ++i) {
        const T* dyr = dy + i * N;
        const T* xr = x + i * N;
        const A mu = static_cast<A>(mean[i]);
        const A rs = static_cast<A>(rstd[i]);
        if (pg != nullptr) {
          for (int64_t j = 0; j < N; ++j) {
            const A d = static_cast<A>(dyr[j]);
            pg[j] += d * (static_cast<A>(xr[j]) - mu) * rs;
            pb[j] += d;
          }
        }
        if (dx == nullptr) {
          continue;
        }
        T* dxr = dx + i * N;
        A sum_g;
        A sum_gx;
        if (w != nullptr) {
          for (int64_t j = 0; j < N; ++j) {
            g[j] = static_cast<A>(dyr[j]) * static_cast<A>(w[j]);
          }
          sum_g = lane_sum<A>(N, [&](int64_t j) { return g[j]; });
          sum_gx =
              lane_sum<A>(N, [&](int64_t j) { return g[j] * (static_cast<A>(xr[j]) - mu) * rs; });
          const A a = sum_g / N;
          const A bb = sum_gx / N;
          for (int64_t j = 0; j < N; ++j) {
            dxr[j] = rs * (g[j] - a - (static_cast<A>(xr[j]) - mu) * rs * bb);
          }
        } else {
          sum_g = lane_sum<A>(N, [&](int64_t j) { return static_cast<A>(dyr[j]); });
          sum_gx = lane_sum<A>(N, [&](int64_t j) {
            return static_cast<A>(dyr[j]) * (static_cast<A>(xr[j]) - mu) * rs;
          });
          const A a = sum_g / N;
          const A bb = sum_gx / N;
          for (int64_t j = 0; j < N; ++j) {
            dxr[j] = rs * (static_cast<A>(dyr[j]) - a - (static_cast<A>(xr[j]) - mu) * rs * bb);
          }
        }
      }
    }
  });
  if (!param_grads) {
    return;
  }
  for (int64_t j = 0; j < N; ++j) {
    A sg = 0;
    A sb = 0;
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
  check_same_device(input, {&grad_out, &mean, &rstd});
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
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const at::Tensor mu = mean.to(*pdtype).contiguous();
  const at::Tensor rs = rstd.to(*pdtype).contiguous();
  at::Tensor dx;
  at::Tensor dgamma;
  at::Tensor dbeta;
  if (output_mask[0]) {
    dx = at::empty(x.sizes(), x.options());
  }
  if (output_mask[1]) {
    dgamma = at::empty(weight.sizes(), weight.options());
  }
  if (output_mask[2]) {
    dbeta = at::empty(bias.sizes(), bias.options());
  }
  if (!dx.defined() && !dgamma.defined() && !dbeta.defined()) {
    return {dx, dgamma, dbeta};
  }
  dispatch_types(x.scalar_type(), *pdtype, [&]<typename T, typename P>() {
    backward_kernel<T, P>(dy.const_data_ptr<T>(), x.const_data_ptr<T>(), mu.const_data_ptr<P>(),
                          rs.const_data_ptr<P>(), data_or_null<P>(w),
                          dx.defined() ? dx.mutable_data_ptr<T>() : nullptr,
                          dgamma.defined() ? dgamma.mutable_data_ptr<P>() : nullptr,
                          dbeta.defined() ? dbeta.mutable_data_ptr<P>() : nullptr, M, N);
  });
  return {std::move(dx), std::move(dgamma), std::move(dbeta)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "native_layer_norm", layer_norm);
  OPENREG_IMPL(m, "native_layer_norm_backward", layer_norm_backward);
}

}  // namespace openreg
