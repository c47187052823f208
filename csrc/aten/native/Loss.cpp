// The negative log-likelihood loss, forward and backward: nll_loss (1-D or
// 2-D input) and nll_loss2d (4-D input, spatial targets).
//
// Both are one gather over a [B, C, H, W] view of the input (1-D input: B = 1;
// 2-D: H = W = 1), read through its strides so that no copy is made:
//   loss[b, h, w] = -weight[t] * input[b, t, h, w]   with t = target[b, h, w]
// Positions whose target is ignore_index contribute nothing. Reductions sum
// in double; "mean" divides by the total weight (the number of counted
// positions without class weights), which is also returned, as on CPU.
// Out-of-range targets raise an IndexError before anything is written.
//
// Native for float32/64 and 16-bit inputs with int64 targets and weights of
// the input's dtype; the CPU fallback handles the rest (uint8 targets, and
// the combinations CPU rejects).

#include "aten/native/Common.h"

#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/nll_loss2d_backward_ops.h>
#include <ATen/ops/nll_loss2d_forward_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>

#include <cstring>
#include <tuple>
#include <vector>

namespace openreg {
namespace {

using native::empty;
using native::into_out;
using native::is_floating;
using native::resize_output;

constexpr int64_t kNone = 0;  // at::Reduction::None
constexpr int64_t kMean = 1;  // at::Reduction::Mean; anything else sums, as on CPU

// Whether the call can run natively: `self`'s dtype, int64 targets, and the
// other floating tensors of the same dtype, all on self's device.
bool native_call(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight,
                 std::initializer_list<const at::Tensor*> same_dtype = {}) {
  if (!is_floating(self.scalar_type()) || target.scalar_type() != c10::kLong ||
      target.device() != self.device()) {
    return false;
  }
  if (weight.defined() &&
      (weight.scalar_type() != self.scalar_type() || weight.device() != self.device())) {
    return false;
  }
  for (const at::Tensor* t : same_dtype) {
    if (t->scalar_type() != self.scalar_type() || t->device() != self.device()) {
      return false;
    }
  }
  return true;
}

// The input as [B, C, H, W] with element strides; targets as [B, H, W].
struct Geometry {
  int64_t B = 1;
  int64_t C = 1;
  int64_t H = 1;
  int64_t W = 1;
  int64_t xs[4] = {0, 0, 0, 0};
  int64_t ts[3] = {0, 0, 0};

  int64_t positions() const {
    return B * H * W;
  }
};

Geometry geometry(const at::Tensor& self, const at::Tensor& target) {
  Geometry g;
  if (self.dim() == 1) {
    g.C = self.size(0);
    g.xs[1] = self.stride(0);
    return g;  // one position: target element 0
  }
  g.B = self.size(0);
  g.C = self.size(1);
  g.xs[0] = self.stride(0);
  g.xs[1] = self.stride(1);
  g.ts[0] = target.stride(0);
  if (self.dim() == 4) {
    g.H = self.size(2);
    g.W = self.size(3);
    g.xs[2] = self.stride(2);
    g.xs[3] = self.stride(3);
    g.ts[1] = target.stride(1);
    g.ts[2] = target.stride(2);
  }
  return g;
}

// Calls f(p, b, h, w, target) for every position p = (b * H + h) * W + w.
template <class F>
void for_each_position(const Geometry& g, const int64_t* target, const F& f) {
  int64_t p = 0;
  for (int64_t b = 0; b < g.B; ++b) {
    for (int64_t h = 0; h < g.H; ++h) {
      for (int64_t w = 0; w < g.W; ++w, ++p) {
        f(p, b, h, w, target[b * g.ts[0] + h * g.ts[1] + w * g.ts[2]]);
      }
    }
  }
}

void check_targets(const Geometry& g, const int64_t* target, int64_t ignore_index) {
  for_each_position(g, target, [&](int64_t, int64_t, int64_t, int64_t, int64_t t) {
    TORCH_CHECK_INDEX(t == ignore_index || (t >= 0 && t < g.C), "Target ", t, " is out of bounds.");
  });
}

// --- forward ---------------------------------------------------------------

template <typename T>
void nll_forward_kernel(const Geometry& g, const T* x, const int64_t* target, const T* weight,
                        int64_t reduction, bool elementwise, int64_t ignore_index, T* out,
                        T* total) {
  using A = at::opmath_type<T>;
  auto x_at = [&](int64_t b, int64_t t, int64_t h, int64_t w) {
    return static_cast<A>(x[b * g.xs[0] + t * g.xs[1] + h * g.xs[2] + w * g.xs[3]]);
  };
  auto w_at = [&](int64_t t) { return weight != nullptr ? static_cast<A>(weight[t]) : A(1); };
  if (elementwise) {
    *total = T(0);
    for_each_position(g, target, [&](int64_t p, int64_t b, int64_t h, int64_t w, int64_t t) {
      out[p] = t == ignore_index ? T(0) : static_cast<T>(-x_at(b, t, h, w) * w_at(t));
    });
    return;
  }
  double loss = 0;
  double weights = 0;
  for_each_position(g, target, [&](int64_t, int64_t b, int64_t h, int64_t w, int64_t t) {
    if (t != ignore_index) {
      const A wt = w_at(t);
      loss -= static_cast<double>(x_at(b, t, h, w) * wt);
      weights += static_cast<double>(wt);
    }
  });
  const T total_t = static_cast<T>(weights);
  const T loss_t = static_cast<T>(loss);
  *total = total_t;
  *out = reduction == kMean ? static_cast<T>(static_cast<A>(loss_t) / static_cast<A>(total_t))
                            : loss_t;
}

void run_forward(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight,
                 int64_t reduction, int64_t ignore_index, bool elementwise,
                 const at::Tensor& output, const at::Tensor& total_weight) {
  const Geometry g = geometry(self, target);
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const int64_t* t = target.const_data_ptr<int64_t>();
  check_targets(g, t, ignore_index);
  AT_DISPATCH_FLOATING_TYPES_AND2(c10::kHalf, c10::kBFloat16, self.scalar_type(), "nll_loss", [&] {
    nll_forward_kernel<scalar_t>(g, self.const_data_ptr<scalar_t>(), t,
                                 w.defined() ? w.const_data_ptr<scalar_t>() : nullptr, reduction,
                                 elementwise, ignore_index, output.mutable_data_ptr<scalar_t>(),
                                 total_weight.mutable_data_ptr<scalar_t>());
  });
}

// --- backward ----------------------------------------------------------------

template <typename T>
void nll_backward_kernel(const Geometry& g, const T* grad_out, const int64_t* go_strides,
                         const int64_t* target, const T* weight, int64_t reduction,
                         bool elementwise, int64_t ignore_index, T total_weight, T* grad_input) {
  using A = at::opmath_type<T>;
  const int64_t HW = g.H * g.W;
  auto w_at = [&](int64_t t) { return weight != nullptr ? static_cast<A>(weight[t]) : A(1); };
  auto gi_at = [&](int64_t b, int64_t t, int64_t h, int64_t w) -> T& {
    return grad_input[(b * g.C + t) * HW + h * g.W + w];
  };
  if (elementwise) {
    for_each_position(g, target, [&](int64_t, int64_t b, int64_t h, int64_t w, int64_t t) {
      if (t != ignore_index) {
        const A go =
            static_cast<A>(grad_out[b * go_strides[0] + h * go_strides[1] + w * go_strides[2]]);
        gi_at(b, t, h, w) = static_cast<T>(-w_at(t) * go);
      }
    });
    return;
  }
  A grad = static_cast<A>(*grad_out);
  if (reduction == kMean) {
    grad /= static_cast<A>(total_weight);
  }
  grad = -grad;
  for_each_position(g, target, [&](int64_t, int64_t b, int64_t h, int64_t w, int64_t t) {
    if (t != ignore_index) {
      gi_at(b, t, h, w) = static_cast<T>(w_at(t) * grad);
    }
  });
}

void nll_run_backward(const at::Tensor& grad_output, const at::Tensor& self,
                      const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                      int64_t ignore_index, const at::Tensor& total_weight, bool elementwise,
                      const at::Tensor& grad_input) {
  const Geometry g = geometry(self, target);
  const at::Tensor w = weight.defined() ? weight.contiguous() : weight;
  const int64_t* t = target.const_data_ptr<int64_t>();
  check_targets(g, t, ignore_index);
  if (grad_input.nbytes() > 0) {  // an empty grad_input may have no data: no memset(nullptr)
    std::memset(grad_input.mutable_data_ptr(), 0, grad_input.nbytes());
  }
  int64_t go_strides[3] = {0, 0, 0};
  if (elementwise) {
    for (int64_t d = 0; d < grad_output.dim(); ++d) {
      go_strides[d] = grad_output.stride(d);
    }
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(
      c10::kHalf, c10::kBFloat16, self.scalar_type(), "nll_loss_backward", [&] {
        nll_backward_kernel<scalar_t>(g, grad_output.const_data_ptr<scalar_t>(), go_strides, t,
                                      w.defined() ? w.const_data_ptr<scalar_t>() : nullptr,
                                      reduction, elementwise, ignore_index,
                                      *total_weight.const_data_ptr<scalar_t>(),
                                      grad_input.mutable_data_ptr<scalar_t>());
      });
}

// --- argument checks (PyTorch's messages) --------------------------------------

void check_nll_forward(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight) {
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
  TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
  if (self.dim() == 1) {
    TORCH_CHECK_VALUE(
        target.dim() == 0 || target.size(0) == 1,
        "For 1D input, 1D target must have size 1, but got target size: ", target.size(0));
  } else {
    TORCH_CHECK(self.size(0) == target.size(0), "size mismatch (got input: ", self.sizes(),
                ", target: ", target.sizes(), ")");
  }
  const int64_t n_classes = self.size(-1);
  TORCH_CHECK(!weight.defined() || (weight.dim() == 1 && weight.numel() == n_classes),
              "weight tensor should be defined either for all ", n_classes,
              " classes or no classes but got weight tensor of shape: ", weight.sizes());
}

void check_nll_backward(const at::Tensor& grad_output, const at::Tensor& self,
                        const at::Tensor& target, const at::Tensor& weight, int64_t reduction,
                        const at::Tensor& total_weight) {
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
  TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
  const bool no_batch_dim = self.dim() == 1 && target.dim() == 0;
  TORCH_CHECK(no_batch_dim || self.size(0) == target.size(0),
              "size mismatch (got input: ", self.sizes(), ", target: ", target.sizes(), ")");
  TORCH_CHECK(target.numel() > 0 || self.dim() == 2,
              "nll_loss_backward: expected a target element for a 1D input");
  TORCH_CHECK(total_weight.numel() == 1,
              "expected total_weight to be a  single element tensor, got: ", total_weight.sizes(),
              " (", total_weight.numel(), " elements)");
  TORCH_CHECK(!weight.defined() || weight.numel() == self.size(-1),
              "weight tensor should be defined either for all or no classes");
  if (reduction == kNone && self.dim() == 2) {
    TORCH_CHECK(grad_output.dim() == 1 && grad_output.size(0) == self.size(0),
                "Expected a tensor of dimension 1 and tensor.size[0] == ", self.size(0),
                " but got: dimension ", grad_output.dim(),
                " and tensor.size[0] = ", grad_output.dim() > 0 ? grad_output.size(0) : 1);
  } else {
    TORCH_CHECK(grad_output.dim() <= 1 && grad_output.numel() == 1,
                "Expected a single element grad_output tensor, but got: ", grad_output.sizes());
  }
}

void check_nll2d(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight) {
  TORCH_CHECK(target.dim() == 3,
              "only batches of spatial targets supported (3D tensors) but got targets of "
              "dimension: ",
              target.dim());
  TORCH_CHECK(self.dim() == 4,
              "only batches of spatial inputs supported (4D tensors), but got input of "
              "dimension: ",
              self.dim());
  TORCH_CHECK(!weight.defined() || weight.numel() == self.size(1),
              "weight tensor should be defined either for all or no classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) &&
                  self.size(3) == target.size(2),
              "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes());
}

void check_nll2d_backward(const at::Tensor& grad_output, const at::Tensor& target,
                          int64_t reduction, const at::Tensor& total_weight) {
  TORCH_CHECK(total_weight.numel() == 1,
              "expected total_weight to be a single element tensor, got: ", total_weight.sizes(),
              " (", total_weight.numel(), " elements)");
  if (reduction == kNone) {
    TORCH_CHECK(grad_output.dim() == 3,
                "grad_output must have same dimension as target (3) but got dimension: ",
                grad_output.sizes());
    TORCH_CHECK(grad_output.sizes() == target.sizes(),
                "size mismatch (got grad_output: ", grad_output.sizes(),
                " target: ", target.sizes());
  } else {
    TORCH_CHECK(grad_output.dim() <= 1 && grad_output.numel() == 1,
                "Expected a single element grad_output tensor, but got: ", grad_output.sizes());
  }
}

// ATen's out= checks: self's dtype and device; then resized to `sizes`.
void nll_check_out(const at::Tensor& out, const at::Tensor& self, c10::IntArrayRef sizes) {
  native::check_out(out, self.scalar_type(), self.device());
  resize_output(out, sizes);
}

// --- the registered kernels: nll_loss ------------------------------------------

bool elementwise_nll(const at::Tensor& self, int64_t reduction) {
  return reduction == kNone && self.dim() == 2;
}

std::vector<int64_t> loss_shape(const at::Tensor& self, bool elementwise) {
  if (elementwise) {
    return {self.size(0)};
  }
  return {};
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_out(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight_opt,
    int64_t reduction, int64_t ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  if (!native_call(self, target, weight)) {
    return fallback<at::_ops::nll_loss_forward_output>(self, target, weight_opt, reduction,
                                                       ignore_index, output, total_weight);
  }
  check_nll_forward(self, target, weight);
  const bool elementwise = elementwise_nll(self, reduction);
  nll_check_out(output, self, loss_shape(self, elementwise));
  nll_check_out(total_weight, self, {});
  into_out(output, [&](const at::Tensor& out) {
    run_forward(self, target, weight, reduction, ignore_index, elementwise, out, total_weight);
  });
  return {output, total_weight};
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self,
                                                    const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight_opt,
                                                    int64_t reduction, int64_t ignore_index) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  if (!native_call(self, target, weight)) {
    return fallback<at::_ops::nll_loss_forward>(self, target, weight_opt, reduction, ignore_index);
  }
  check_nll_forward(self, target, weight);
  const bool elementwise = elementwise_nll(self, reduction);
  at::Tensor output = empty(loss_shape(self, elementwise), self.options());
  at::Tensor total_weight = empty({}, self.options());
  run_forward(self, target, weight, reduction, ignore_index, elementwise, output, total_weight);
  return {std::move(output), std::move(total_weight)};
}

at::Tensor& nll_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                  const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight_opt, int64_t reduction,
                                  int64_t ignore_index, const at::Tensor& total_weight,
                                  at::Tensor& grad_input) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  if (!native_call(self, target, weight, {&grad_output, &total_weight})) {
    return fallback<at::_ops::nll_loss_backward_grad_input>(
        grad_output, self, target, weight_opt, reduction, ignore_index, total_weight, grad_input);
  }
  check_nll_backward(grad_output, self, target, weight, reduction, total_weight);
  nll_check_out(grad_input, self, self.sizes());
  into_out(grad_input, [&](const at::Tensor& gi) {
    nll_run_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight,
                     elementwise_nll(self, reduction), gi);
  });
  return grad_input;
}

at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Tensor& target, const std::optional<at::Tensor>& weight_opt,
                             int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  if (!native_call(self, target, weight, {&grad_output, &total_weight})) {
    return fallback<at::_ops::nll_loss_backward>(grad_output, self, target, weight_opt, reduction,
                                                 ignore_index, total_weight);
  }
  check_nll_backward(grad_output, self, target, weight, reduction, total_weight);
  at::Tensor grad_input = empty(self.sizes(), self.options());
  nll_run_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight,
                   elementwise_nll(self, reduction), grad_input);
  return grad_input;
}

// --- the registered kernels: nll_loss2d ----------------------------------------

std::vector<int64_t> loss2d_shape(const at::Tensor& self, int64_t reduction) {
  if (reduction == kNone) {
    return {self.size(0), self.size(2), self.size(3)};
  }
  return {};
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss2d_forward_out(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight_opt,
    int64_t reduction, int64_t ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  if (!native_call(self, target, weight)) {
    return fallback<at::_ops::nll_loss2d_forward_output>(self, target, weight_opt, reduction,
                                                         ignore_index, output, total_weight);
  }
  check_nll2d(self, target, weight);
  nll_check_out(output, self, loss2d_shape(self, reduction));
  nll_check_out(total_weight, self, {});
  into_out(output, [&](const at::Tensor& out) {
    run_forward(self, target, weight, reduction, ignore_index, reduction == kNone, out,
                total_weight);
  });
  return {output, total_weight};
}

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self,
                                                      const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight_opt,
                                                      int64_t reduction, int64_t ignore_index) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  if (!native_call(self, target, weight)) {
    return fallback<at::_ops::nll_loss2d_forward>(self, target, weight_opt, reduction,
                                                  ignore_index);
  }
  check_nll2d(self, target, weight);
  at::Tensor output = empty(loss2d_shape(self, reduction), self.options());
  at::Tensor total_weight = empty({}, self.options());
  run_forward(self, target, weight, reduction, ignore_index, reduction == kNone, output,
              total_weight);
  return {std::move(output), std::move(total_weight)};
}

at::Tensor& nll_loss2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                    const at::Tensor& target,
                                    const std::optional<at::Tensor>& weight_opt, int64_t reduction,
                                    int64_t ignore_index, const at::Tensor& total_weight,
                                    at::Tensor& grad_input) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  if (!native_call(self, target, weight, {&grad_output, &total_weight})) {
    return fallback<at::_ops::nll_loss2d_backward_grad_input>(
        grad_output, self, target, weight_opt, reduction, ignore_index, total_weight, grad_input);
  }
  check_nll2d(self, target, weight);
  check_nll2d_backward(grad_output, target, reduction, total_weight);
  nll_check_out(grad_input, self, self.sizes());
  into_out(grad_input, [&](const at::Tensor& gi) {
    nll_run_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight,
                     reduction == kNone, gi);
  });
  return grad_input;
}

at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                               const at::Tensor& target,
                               const std::optional<at::Tensor>& weight_opt, int64_t reduction,
                               int64_t ignore_index, const at::Tensor& total_weight) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  if (!native_call(self, target, weight, {&grad_output, &total_weight})) {
    return fallback<at::_ops::nll_loss2d_backward>(grad_output, self, target, weight_opt, reduction,
                                                   ignore_index, total_weight);
  }
  check_nll2d(self, target, weight);
  check_nll2d_backward(grad_output, target, reduction, total_weight);
  at::Tensor grad_input = empty(self.sizes(), self.options());
  nll_run_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight,
                   reduction == kNone, grad_input);
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "nll_loss_forward", nll_loss_forward);
  OPENREG_IMPL(m, "nll_loss_forward.output", nll_loss_forward_out);
  OPENREG_IMPL(m, "nll_loss_backward", nll_loss_backward);
  OPENREG_IMPL(m, "nll_loss_backward.grad_input", nll_loss_backward_out);
  OPENREG_IMPL(m, "nll_loss2d_forward", nll_loss2d_forward);
  OPENREG_IMPL(m, "nll_loss2d_forward.output", nll_loss2d_forward_out);
  OPENREG_IMPL(m, "nll_loss2d_backward", nll_loss2d_backward);
  OPENREG_IMPL(m, "nll_loss2d_backward.grad_input", nll_loss2d_backward_out);
}

}  // namespace openreg
