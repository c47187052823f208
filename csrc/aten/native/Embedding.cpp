// The gradient of an embedding lookup (embedding_dense_backward).
//
// grad_weight[k] = sum over positions i with indices[i] == k of grad[i],
// scaled by 1 / count(k) with scale_grad_by_freq, with the padding_idx row
// left at zero. The forward `embedding` is composite: it reaches
// index_select (Indexing.cpp) and views.
//
// Rows of grad_weight are split between threads; each thread scans all
// indices and adds the rows it owns, in index order, so the result does not
// depend on the number of threads. 16-bit gradients accumulate in float and
// are rounded once at the end.

#include "aten/native/Common.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/TensorUtils.h>
#include <ATen/ops/embedding_dense_backward_ops.h>

#include <type_traits>
#include <vector>

namespace openreg {
namespace {

using native::empty;
using native::grain_rows;
using native::is_floating;

template <typename T, typename I>
void accumulate_rows(const T* grad, const I* indices, T* out, int64_t numel, int64_t num_weights,
                     int64_t dim, int64_t padding_idx, bool scale_grad_by_freq) {
  using A = at::opmath_type<T>;
  constexpr bool kSame = std::is_same_v<T, A>;
  std::vector<int64_t> counts(scale_grad_by_freq ? num_weights : 0, 0);
  if (scale_grad_by_freq) {
    for (int64_t i = 0; i < numel; ++i) {
      ++counts[indices[i]];
    }
  }
  const int64_t grain = grain_rows(dim);
  at::parallel_for(0, num_weights, grain, [&](int64_t begin, int64_t end) {
    // 16-bit: accumulate the owned rows in float.
    std::vector<A> acc(kSame ? 0 : (end - begin) * dim, A(0));
    A* base = nullptr;
    if constexpr (kSame) {
      base = out + begin * dim;
      std::fill(base, base + (end - begin) * dim, A(0));
    } else {
      base = acc.data();
    }
    for (int64_t i = 0; i < numel; ++i) {
      const int64_t k = indices[i];
      if (k < begin || k >= end || k == padding_idx) {
        continue;
      }
      A* row = base + (k - begin) * dim;
      const T* g = grad + i * dim;
      if (scale_grad_by_freq) {
        const A scale = A(1) / static_cast<A>(counts[k]);
        for (int64_t j = 0; j < dim; ++j) {
          row[j] += static_cast<A>(g[j]) * scale;
        }
      } else {
        for (int64_t j = 0; j < dim; ++j) {
          row[j] += static_cast<A>(g[j]);
        }
      }
    }
    if constexpr (!kSame) {
      T* o = out + begin * dim;
      for (int64_t j = 0; j < (end - begin) * dim; ++j) {
        o[j] = static_cast<T>(acc[j]);
      }
    }
  });
}

template <typename I>
void check_index_range(const I* indices, int64_t numel, int64_t num_weights) {
  for (int64_t i = 0; i < numel; ++i) {
    TORCH_CHECK_INDEX(indices[i] >= 0 && indices[i] < num_weights,
                      "embedding_dense_backward: index ", static_cast<int64_t>(indices[i]),
                      " is out of range for ", num_weights,
                      " embeddings (index out of range in self)");
  }
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                    int64_t num_weights, int64_t padding_idx,
                                    bool scale_grad_by_freq) {
  at::checkScalarTypes("embedding_backward", {indices, "indices", 2}, {c10::kLong, c10::kInt});
  // CPU indices are allowed, as in the fallback (Note [Fallback device rules]).
  if (!is_floating(grad_output.scalar_type()) ||
      (indices.device() != grad_output.device() && !indices.is_cpu())) {
    return fallback<at::_ops::embedding_dense_backward>(grad_output, indices, num_weights,
                                                        padding_idx, scale_grad_by_freq);
  }
  TORCH_CHECK(num_weights >= 0, "embedding_dense_backward: num_weights must be non-negative, got ",
              num_weights);
  const int64_t dim = grad_output.size(-1);
  const int64_t numel = indices.numel();
  TORCH_CHECK(grad_output.numel() == numel * dim, "shape '[", numel, ", ", dim,
              "]' is invalid for input of size ", grad_output.numel());
  const at::Tensor grad = grad_output.contiguous();
  const at::Tensor idx = indices.contiguous();
  at::Tensor grad_weight = empty({num_weights, dim}, grad.options());
  AT_DISPATCH_INDEX_TYPES(idx.scalar_type(), "embedding_dense_backward", [&] {
    const index_t* ip = idx.const_data_ptr<index_t>();
    check_index_range(ip, numel, num_weights);
    AT_DISPATCH_FLOATING_TYPES_AND2(
        c10::kHalf, c10::kBFloat16, grad.scalar_type(), "embedding_dense_backward", [&] {
          accumulate_rows(grad.const_data_ptr<scalar_t>(), ip,
                          grad_weight.mutable_data_ptr<scalar_t>(), numel, num_weights, dim,
                          padding_idx, scale_grad_by_freq);
        });
  });
  return grad_weight;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "embedding_dense_backward", embedding_dense_backward);
}

}  // namespace openreg
