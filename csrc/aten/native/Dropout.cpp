// Dropout as nn.Dropout and every Hugging Face model reach it in training:
// native_dropout (a kept-element mask and the scaled output) and
// native_dropout_backward (the gradient through that mask).
//
// Note [Dropout with openreg's generator]
// The mask is drawn by the CPU's bernoulli_ on the mask's device memory (Note
// [Device memory is host memory]) with the CPU engine of openreg's default
// generator (runtime/Generator.h), exactly as the CPU kernel draws it: a bool
// tensor laid out like the input, filled with bernoulli(1 - p). Seeding is
// therefore the CPU's: after torch.manual_seed(s) (which seeds openreg too),
// openreg draws the mask the CPU draws after the same seed. The output is
// input * mask * (1 / (1 - p)), rounded as the CPU rounds it: each product
// is rounded to the input's dtype from its opmath type, and the forward
// rounds the scale (0 when p is 1) to that dtype first (its in-place mul_ by
// a C++ Scalar does: bfloat16 keeps 8 bits of 1 / 0.9), while the backward,
// grad * mask * scale, keeps it in the opmath type.

#include "aten/HostView.h"
#include "aten/KernelScopes.h"
#include "aten/Registration.h"
#include "aten/fallback/Fallback.h"
#include "aten/native/Loops.h"
#include "runtime/Generator.h"

#include <ATen/ops/clone_ops.h>
#include <ATen/ops/empty_like_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_dropout_ops.h>
#include <ATen/ops/ones_like_ops.h>

#include <tuple>

namespace openreg {
namespace {

using at::Tensor;
using loops::Loop;
using loops::Mode;

// round(round(x * m) * scale) in T, the products in T's opmath type, the
// scale rounded to T first when `round_scale` (Note [Dropout with openreg's
// generator]).
Tensor masked_scale(const Tensor& x, const Tensor& mask, double scale, bool round_scale) {
  const c10::ScalarType dtype = x.scalar_type();
  return loops::run_elementwise(
      Tensor(), Mode::Functional, dtype, dtype, {x, mask}, [&](const Loop& loop) {
        loops::dispatch_floating(dtype, [&](auto tag) {
          using T = OPENREG_TYPE_OF(tag);
          using acc = loops::opmath_t<T>;
          const acc s =
              round_scale ? static_cast<acc>(static_cast<T>(scale)) : static_cast<acc>(scale);
          loop.run<T, T, bool>([s](T v, bool m) -> T {
            const T kept = static_cast<T>(static_cast<acc>(v) * acc(m));
            return static_cast<T>(static_cast<acc>(kept) * s);
          });
        });
      });
}

Tensor bool_like(const Tensor& input) {
  return at::_ops::empty_like::call(input, c10::kBool, std::nullopt, std::nullopt, std::nullopt,
                                    std::nullopt);
}

std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p,
                                          std::optional<bool> train) {
  if (!native::is_floating(input.scalar_type())) {
    return fallback<at::_ops::native_dropout>(input, p, train);  // the CPU's answer (an error)
  }
  if (input.numel() == 0) {
    return {input, at::_ops::empty_like::call(input, std::nullopt, std::nullopt, std::nullopt,
                                              std::nullopt, std::nullopt)};
  }
  if (train.has_value() && !*train) {
    Tensor mask = at::_ops::ones_like::call(input, c10::kBool, std::nullopt, std::nullopt,
                                            std::nullopt, std::nullopt);
    return {at::_ops::clone::call(input, std::nullopt), mask};
  }
  const double kept = 1. - p;
  const double scale = kept == 0 ? 0. : 1. / kept;  // as on CPU: no 0 * inf
  Tensor mask = bool_like(input);
  {
    // Note [Dropout with openreg's generator]
    at::Tensor host = host_view(mask);
    InternalScope internal;  // Note [The backend's own dispatcher calls]
    host.bernoulli_(kept, engine_for(std::nullopt, input.device().index()));
  }
  return {masked_scale(input, mask, scale, /*round_scale=*/true), mask};
}

Tensor native_dropout_backward(const Tensor& grad, const Tensor& mask, double scale) {
  if (!native::is_floating(grad.scalar_type()) || mask.scalar_type() != c10::kBool) {
    return fallback<at::_ops::native_dropout_backward>(grad, mask, scale);
  }
  return masked_scale(grad, mask, scale, /*round_scale=*/false);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OPENREG_IMPL(m, "native_dropout", native_dropout);
  OPENREG_IMPL(m, "native_dropout_backward", native_dropout_backward);
}

}  // namespace openreg
